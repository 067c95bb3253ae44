// Huge-page buffers: where they sit, and that they hold what is written.
#include "lockstep/core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace lockstep {
namespace {

TEST(HugePages, LargeBuffersSitOnHugePageBoundariesAndSmallOnesAreAligned) {
  HugePageVector<double> large(kHugePage / sizeof(double) + 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % kHugePage, 0u);
  std::iota(large.begin(), large.end(), 0.0);
  EXPECT_EQ(large.back(), static_cast<double>(large.size() - 1));
  HugePageVector<char> small(100);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.data()) % 64, 0u);
  void* odd = system_allocate(3 * kHugePage + 5, 64, kHugePage);
  ASSERT_NE(odd, nullptr) << "no rule that the size be a multiple of the alignment";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(odd) % kHugePage, 0u);
  free_system_allocation(odd);
}

}  // namespace
}  // namespace lockstep
