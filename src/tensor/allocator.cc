// CachingAllocator: size-class free lists over aligned system allocations.
#include "lockstep/tensor/allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>

#include "lockstep/core/error.h"
#include "lockstep/core/huge_pages.h"

namespace lockstep {
namespace {
constexpr std::size_t kAlignment = 64;
// Requests this large may take an idle buffer of up to twice their class
// (see the header); smaller ones come from the system allocator's heap
// without page faults, and waste matters more than misses.
constexpr std::size_t kLargerClassMinimum = std::size_t{1} << 20;
constexpr std::size_t kLargerClassFactor = 2;
// Buffers this large sit on 2 MiB boundaries on transparent huge pages
// (core/huge_pages.h): one TLB entry and one page fault per 2 MiB instead
// of 512 — a dataset's random rows, a convnet's activations, a table
// encoded for training (issue #38: 6 MiB took 3.5–4.5 ms to fault in on
// 4 KiB pages). Their size classes are multiples of 1 MiB (a quarter of
// 4 MiB), so at most the last MiB of one is on small pages.
constexpr std::size_t kHugePageMinimum = std::size_t{4} << 20;

void* system_allocate(std::size_t size) {
  return lockstep::system_allocate(size, kAlignment, kHugePageMinimum);
}
}  // namespace

CachingAllocator::~CachingAllocator() { empty_cache(); }

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= 4096) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // Four classes per power of two: 2^k * {1, 1.25, 1.5, 1.75}.
  const std::size_t power = std::bit_floor(bytes);
  const std::size_t quarter = power / 4;
  return (bytes + quarter - 1) / quarter * quarter;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  // Past 2^56 bytes (64 PiB) no system has the memory, and rounding to a
  // size class could wrap: refuse before either.
  if (bytes > (std::size_t{1} << 56))
    detail::throw_error<Error>("out of memory: could not allocate ", bytes,
                               " bytes for a tensor buffer");
  const std::size_t size = round_size(bytes);
  {
    std::lock_guard lock(mutex_);
    ++stats_.allocations;
    const std::size_t largest = size >= kLargerClassMinimum ? size * kLargerClassFactor : size;
    for (auto it = free_lists_.lower_bound(size); it != free_lists_.end() && it->first <= largest;
         ++it) {
      if (it->second.empty()) continue;
      void* ptr = it->second.back();
      const std::size_t granted = it->first;
      if (granted != size) larger_.emplace(ptr, granted);  // may throw: before the pop
      it->second.pop_back();
      ++stats_.cache_hits;
      if (granted != size) ++stats_.larger_class_hits;
      stats_.bytes_cached -= granted;
      stats_.bytes_in_use += granted;
      note_in_use();
      return ptr;
    }
    ++stats_.system_allocations;
    stats_.bytes_in_use += size;
    note_in_use();
  }
  void* ptr = system_allocate(size);
  if (ptr == nullptr) {
    // Give the cache back and try once more before failing.
    empty_cache();
    ptr = system_allocate(size);
  }
  if (ptr == nullptr) {
    std::lock_guard lock(mutex_);
    stats_.bytes_in_use -= size;
    detail::throw_error<Error>("out of memory: could not allocate ", size,
                               " bytes for a tensor buffer");
  }
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  std::size_t size = round_size(bytes);
  bool release = false;
  {
    std::lock_guard lock(mutex_);
    if (!larger_.empty()) {
      if (auto it = larger_.find(ptr); it != larger_.end()) {
        size = it->second;
        larger_.erase(it);
      }
    }
    stats_.bytes_in_use -= size;
    if (stats_.bytes_cached + size > std::max(cache_limit_, most_in_use_ + most_in_use_ / 2)) {
      release = true;
      ++stats_.system_frees;
    } else {
      try {
        free_lists_[size].push_back(ptr);
        stats_.bytes_cached += size;
      } catch (...) {  // the free list could not grow: give the buffer back instead
        release = true;
        ++stats_.system_frees;
      }
    }
  }
  if (release) std::free(ptr);
}

void CachingAllocator::note_in_use() {
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  most_in_use_ = std::max(most_in_use_, stats_.bytes_in_use);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes_in_use = stats_.bytes_in_use;
}

void CachingAllocator::empty_cache() {
  std::map<std::size_t, std::vector<void*>> lists;
  {
    std::lock_guard lock(mutex_);
    lists.swap(free_lists_);
    for (const auto& [size, ptrs] : lists) stats_.system_frees += ptrs.size();
    stats_.bytes_cached = 0;
  }
  for (auto& [size, ptrs] : lists) {
    for (void* p : ptrs) std::free(p);
  }
}

}  // namespace lockstep
