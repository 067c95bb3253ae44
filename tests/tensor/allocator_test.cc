// CachingAllocator: size classes, reuse, counters.
#include "lockstep/tensor/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace lockstep {
namespace {

TEST(CachingAllocator, SizeClassesBoundWaste) {
  EXPECT_EQ(CachingAllocator::round_size(1), 64u);
  EXPECT_EQ(CachingAllocator::round_size(64), 64u);
  EXPECT_EQ(CachingAllocator::round_size(65), 128u);
  EXPECT_EQ(CachingAllocator::round_size(4096), 4096u);
  EXPECT_EQ(CachingAllocator::round_size(4097), 5120u);  // 4096 * 1.25
  for (std::size_t bytes = 1; bytes < (1u << 26); bytes = bytes * 3 / 2 + 7) {
    const std::size_t r = CachingAllocator::round_size(bytes);
    EXPECT_GE(r, bytes);
    EXPECT_LE(r, bytes + bytes / 4 + 64) << bytes;
  }
}

TEST(CachingAllocator, ReusesFreedBuffersWithoutSystemCalls) {
  CachingAllocator alloc;
  void* a = alloc.allocate(1000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 64, 0u);
  alloc.deallocate(a, 1000);
  void* b = alloc.allocate(1000);
  EXPECT_EQ(a, b);  // same size class: the cached buffer comes back
  auto s = alloc.stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.system_allocations, 1u);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  void* c = alloc.allocate(1000);  // the first is still live: a new buffer
  EXPECT_NE(c, b);
  EXPECT_EQ(alloc.stats().system_allocations, 2u);
  alloc.deallocate(b, 1000);
  alloc.deallocate(c, 1000);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 2048u);
  EXPECT_EQ(s.peak_bytes_in_use, 2048u);
  void* d = alloc.allocate(1000);
  alloc.reset_peak_stats();  // a new peak starts from what is in use now
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 1024u);
  alloc.deallocate(d, 1000);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 1024u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  EXPECT_EQ(alloc.stats().system_frees, 2u);
}

}  // namespace
}  // namespace lockstep
