// Checked sizes from outside (issue #41): shapes whose element count would
// wrap, the per-file allocation budget, and JSON nested past its bound.
#include "lockstep/core/checked.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"
#include "support/errors.h"

namespace lockstep {
namespace {

using testing_support::expect_error_containing;

TEST(Checked, ProductsAndSumsThatDoNotFitAreNone) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(checked_mul<std::int64_t>(3, 4), 12);
  EXPECT_EQ(checked_mul<std::int64_t>(kMax, 1), kMax);
  EXPECT_FALSE(checked_mul<std::int64_t>(kMax, 2).has_value());
  EXPECT_FALSE(checked_mul<std::int64_t>(std::int64_t{1} << 32, std::int64_t{1} << 31).has_value());
  EXPECT_FALSE(checked_mul<std::uint64_t>(std::uint64_t{1} << 32, std::uint64_t{1} << 32));
  EXPECT_EQ(checked_add<std::uint64_t>(1, 2), 3u);
  EXPECT_FALSE(checked_add<std::uint64_t>(std::numeric_limits<std::uint64_t>::max(), 1));
}

// The defect: Dense units 2^63 - 1 or an input dimension of 2^62 in a model
// file made numel() wrap, and malloc got an invalid size (SIGABRT/SIGSEGV).
TEST(Checked, AShapeWhoseElementCountWouldWrapIsAShapeError) {
  const Shape units({784, std::numeric_limits<std::int64_t>::max()});
  expect_error_containing<ShapeError>([&] { (void)units.numel(); },
                                      "holds more than 2^63 - 1 elements");
  const Shape input({std::int64_t{1} << 62, 4, 1});
  expect_error_containing<ShapeError>([&] { (void)input.numel(); }, "[4611686018427387904, 4, 1]");
  expect_error_containing<ShapeError>([&] { (void)input.strides(); }, "holds more than");
  // Large but representable, and a zero dimension anywhere, are fine.
  EXPECT_EQ((Shape{std::int64_t{1} << 31, std::int64_t{1} << 31}).numel(), std::int64_t{1} << 62);
  EXPECT_EQ((Shape{0, std::numeric_limits<std::int64_t>::max()}).numel(), 0);
}

TEST(Checked, AFileBudgetIsTheFloorPlus64TimesTheFileAndNamesTheFileWhenPassed) {
  FileBudget budget("m.keras", 1000);
  EXPECT_EQ(budget.limit(), kFileBudgetFloor + 64000);
  budget.take(kFileBudgetFloor, "member 'a'");
  budget.take(64000, "member 'b'");
  EXPECT_EQ(budget.taken(), budget.limit());
  expect_error_containing<IOError>([&] { budget.take(1, "member 'c'"); },
                                   "m.keras: member 'c' needs 1 bytes");
  // A claim that would wrap the running total is refused, not added.
  FileBudget other("w.h5", 10);
  expect_error_containing<IOError>(
      [&] { other.take(std::numeric_limits<std::uint64_t>::max(), "dataset 'x'"); }, "w.h5");
  EXPECT_EQ(other.taken(), 0u);
}

TEST(Checked, JsonNestedPastTheBoundIsNamedWithItsOffset) {
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  check_json_nesting(ok, "ok.json");
  const std::string deep = std::string(100000, '[');
  expect_error_containing<IOError>([&] { check_json_nesting(deep, "deep.json"); },
                                   "deep.json: byte 128: JSON nested more than 128 levels");
  // Brackets inside strings, escaped quotes included, do not count.
  const std::string quoted =
      "{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}";
  check_json_nesting(quoted, "quoted.json");
}

}  // namespace
}  // namespace lockstep
