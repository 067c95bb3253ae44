// CachingAllocator: the per-device memory pool behind every tensor buffer.
//
// A training loop creates and frees the same buffer sizes every step; after
// the first step every request is served from the cache, so the steady state
// makes no system allocation. Sizes are rounded to size classes (64-byte
// multiples up to 4 KiB, then four classes per power of two, at most 25%
// waste) and buffers are 64-byte aligned for vector loads.
//
// Thread-safe (one mutex; a tensor may be freed on another thread than the
// one that made it). Not copyable or movable: tensors hold a reference to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lockstep {

class CachingAllocator {
 public:
  struct Stats {
    std::uint64_t allocations = 0;         // requests served
    std::uint64_t cache_hits = 0;          // requests served from the cache
    std::uint64_t system_allocations = 0;  // requests that reached the system allocator
    std::uint64_t system_frees = 0;
    std::size_t bytes_in_use = 0;  // rounded bytes held by live buffers
    std::size_t peak_bytes_in_use = 0;
    std::size_t bytes_cached = 0;  // rounded bytes idle in the cache
  };

  // Bytes idle in the cache beyond which freed buffers go back to the
  // system — or the peak in use, if larger: the process's resident peak is
  // that already, and a training step that needed it needs it again (with
  // 2 GiB alone, MobileNetV2 at 224 × 224, batch 32 — 2.9 GB of
  // activations — gave back and faulted in ~1 GB every step: a third of
  // the step in the kernel; issue #19).
  static constexpr std::size_t kDefaultCacheLimit = std::size_t{2} << 30;

  CachingAllocator() = default;
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class that a request of `bytes` occupies.
  static std::size_t round_size(std::size_t bytes);

  // Returns a 64-byte aligned buffer of at least `bytes` (never null; throws
  // lockstep::Error when the system is out of memory).
  void* allocate(std::size_t bytes);
  // `bytes` must be the value passed to allocate.
  void deallocate(void* ptr, std::size_t bytes) noexcept;

  Stats stats() const;
  // Starts a new peak from the bytes in use now (PyTorch's
  // reset_peak_memory_stats), to measure the peak of what follows.
  void reset_peak_stats();
  // Returns every idle buffer to the system.
  void empty_cache();

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_lists_;
  Stats stats_;
};

}  // namespace lockstep
