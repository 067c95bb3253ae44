// Allocator: the interface of a device's memory pool (host memory for CPUs
// and the fake accelerator, a stream-ordered pool on GPUs), with the same
// statistics everywhere; and CachingAllocator, the host's pool behind every
// CPU tensor buffer.
//
// A training loop creates and frees the same buffer sizes every step; after
// the first steps every request is served from the cache, so the steady
// state makes no system allocation. Sizes are rounded to size classes
// (64-byte multiples up to 4 KiB, then four classes per power of two, at
// most 25% waste) and buffers are 64-byte aligned for vector loads.
//
// A request of 1 MiB or more whose class has no idle buffer takes the
// smallest idle one of up to twice its class before asking the system.
//
// Thread-safe (one mutex; a tensor may be freed on another thread than the
// one that made it). Not copyable or movable: tensors hold a reference to it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lockstep {

struct AllocatorStats {
  std::uint64_t allocations = 0;         // requests served
  std::uint64_t cache_hits = 0;          // requests served from the cache
  std::uint64_t larger_class_hits = 0;   // of those, by a buffer of a larger class
  std::uint64_t system_allocations = 0;  // requests that reached the system (or driver) allocator
  std::uint64_t system_frees = 0;
  std::size_t bytes_in_use = 0;  // rounded bytes held by live buffers
  std::size_t peak_bytes_in_use = 0;
  std::size_t bytes_cached = 0;  // rounded bytes idle in the cache
};

// A device's memory pool. Thread-safe; a buffer may be freed on another
// thread than the one that asked for it.
class Allocator {
 public:
  using Stats = AllocatorStats;
  virtual ~Allocator() = default;
  // A buffer of at least `bytes` (never null). Running out throws
  // lockstep::Error naming the size asked and what is free.
  virtual void* allocate(std::size_t bytes) = 0;
  // `bytes` must be the value passed to allocate.
  virtual void deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  virtual Stats stats() const = 0;
  // Starts a new peak from the bytes in use now (PyTorch's
  // reset_peak_memory_stats), to measure the peak of what follows.
  virtual void reset_peak_stats() = 0;
  // Returns every idle buffer to the system.
  virtual void empty_cache() = 0;
};

class CachingAllocator final : public Allocator {
 public:
  // Bytes idle in the cache beyond which freed buffers go back to the
  // system — or 1.5 × the most ever in use, if larger. A training step that
  // needed its buffers needs them again, and its resident peak held them
  // already: in use at its peak, plus the idle buffers of the classes it
  // was not asking for then. Bounded by the peak in use alone, MobileNetV2
  // at 224 × 224, batch 32 (2.0 GB in use at the peak, ~0.45 GB idle in
  // other classes beside it) gave back and faulted in 461 MB every step, a
  // fifth of the step in the kernel; with 2 GiB alone, ~1 GB (issue #19).
  static constexpr std::size_t kDefaultCacheLimit = std::size_t{2} << 30;

  // `cache_limit`: the first bound above (tests set a small one).
  explicit CachingAllocator(std::size_t cache_limit = kDefaultCacheLimit)
      : cache_limit_(cache_limit) {}
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The size class that a request of `bytes` occupies.
  static std::size_t round_size(std::size_t bytes);

  // Returns a 64-byte aligned buffer of at least `bytes` (never null; throws
  // lockstep::Error when the system is out of memory).
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) noexcept override;
  Stats stats() const override;
  void reset_peak_stats() override;
  void empty_cache() override;

 private:
  void note_in_use();  // under mutex_: updates the peaks

  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_lists_;  // by class, ascending
  // Live buffers handed out for a request of a smaller class: their class.
  std::unordered_map<void*, std::size_t> larger_;
  Stats stats_;
  std::size_t cache_limit_;
  std::size_t most_in_use_ = 0;  // the peak that reset_peak_stats does not reset
};

}  // namespace lockstep
