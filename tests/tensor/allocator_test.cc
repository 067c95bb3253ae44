// CachingAllocator: size classes, reuse, counters.
#include "lockstep/tensor/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

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

// Linux's "THPeligible" for the mapping that holds `p` (/proc/self/smaps):
// 1 where the kernel may back it with transparent huge pages.
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(12));
    }
  }
  return -1;
}

// What the system's THP mode is: the bracketed word of "always [madvise] never".
std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto open = all.find('['), close = all.find(']');
  return open == std::string::npos ? "" : all.substr(open + 1, close - open - 1);
}

// Buffers of 4 MiB or more sit on 2 MiB boundaries and are advised for
// transparent huge pages, so that the kernel may back them so under its
// default "madvise" mode; smaller ones are left to the heap.
TEST(CachingAllocator, BuffersOf4MiBOrMoreAreAdvisedForHugePages) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  CachingAllocator alloc;
  void* large = alloc.allocate(5 * mib);
  void* small = alloc.allocate(3 * mib);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large) % (2 * mib), 0u);
  const std::string mode = thp_mode();
  if (mode == "madvise") {
    EXPECT_EQ(thp_eligible(large), 1);
    EXPECT_EQ(thp_eligible(small), 0);
  } else if (mode == "always") {
    EXPECT_EQ(thp_eligible(large), 1);
  } else if (mode == "never") {
    EXPECT_EQ(thp_eligible(large), 0);  // advice the system does not take
  }  // a kernel without THP: the alignment is all there is to check
  alloc.deallocate(large, 5 * mib);
  alloc.deallocate(small, 3 * mib);
}

// A large request whose class has no idle buffer takes the smallest idle
// one of up to twice its class, and the buffer goes back to its own class
// when freed; small requests, and larger buffers than that, do not.
TEST(CachingAllocator, ALargeRequestTakesAnIdleBufferOfUpToTwiceItsClass) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  CachingAllocator alloc;
  void* three = alloc.allocate(3 * mib);
  alloc.deallocate(three, 3 * mib);
  void* two = alloc.allocate(2 * mib);  // no 2 MiB buffer idle: the 3 MiB one
  EXPECT_EQ(two, three);
  auto s = alloc.stats();
  EXPECT_EQ(s.system_allocations, 1u);
  EXPECT_EQ(s.larger_class_hits, 1u);
  EXPECT_EQ(s.bytes_in_use, 3 * mib);  // what it holds, not what was asked
  EXPECT_EQ(s.bytes_cached, 0u);
  alloc.deallocate(two, 2 * mib);
  s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 3 * mib);
  void* again = alloc.allocate(3 * mib);  // back in its own class
  EXPECT_EQ(again, three);
  EXPECT_EQ(alloc.stats().larger_class_hits, 1u);
  alloc.deallocate(again, 3 * mib);
  void* one = alloc.allocate(mib);  // 3 MiB is more than twice 1 MiB: the system's
  EXPECT_NE(one, three);
  EXPECT_EQ(alloc.stats().system_allocations, 2u);
  alloc.deallocate(one, mib);
  void* small = alloc.allocate(1000);  // class 1024
  alloc.deallocate(small, 1000);
  void* smaller = alloc.allocate(600);  // class 640: small requests take their own class only
  EXPECT_NE(smaller, small);
  EXPECT_EQ(alloc.stats().system_allocations, 4u);
  alloc.deallocate(smaller, 600);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
}

// A step whose resident peak holds more than its peak in use (idle buffers
// of one class beside the live ones of another) keeps its buffers: from
// the second step on, nothing goes back to the system and nothing comes
// from it. Bounded by the peak in use, each step gave back a buffer at its
// end and took a new one (fresh, zeroed pages) in the next.
TEST(CachingAllocator, AStepThatHoldsMoreThanItsPeakInUseKeepsItsBuffers) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  CachingAllocator alloc(/*cache_limit=*/0);  // only the in-use bound applies
  auto step = [&] {
    void* a = alloc.allocate(4 * mib);  // the forward pass's size, freed
    alloc.deallocate(a, 4 * mib);
    void* b = alloc.allocate(8 * mib);  // the backward pass's: 4 MiB cannot serve it
    void* c = alloc.allocate(8 * mib);
    alloc.deallocate(b, 8 * mib);
    alloc.deallocate(c, 8 * mib);
  };
  step();
  const auto first = alloc.stats();
  EXPECT_EQ(first.peak_bytes_in_use, 16 * mib);
  EXPECT_EQ(first.bytes_cached, 20 * mib);  // 4 MiB idle beside the 16 in use
  for (int i = 0; i < 10; ++i) step();
  const auto later = alloc.stats();
  EXPECT_EQ(later.system_allocations, first.system_allocations);
  EXPECT_EQ(later.system_frees, first.system_frees);
  EXPECT_EQ(later.bytes_cached, 20 * mib);
}

}  // namespace
}  // namespace lockstep
