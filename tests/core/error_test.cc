// The error hierarchy and LOCKSTEP_CHECK.
#include "lockstep/core/error.h"

#include <gtest/gtest.h>

#include "lockstep/core/dtype.h"
#include "lockstep/core/nearest_name.h"

namespace lockstep {
namespace {

TEST(Error, HierarchyLetsCallersCatchByKind) {
  EXPECT_THROW(throw ShapeError("s"), ValueError);
  EXPECT_THROW(throw IndexError("i"), ValueError);
  EXPECT_THROW(throw TimeoutError("t"), DistributedError);
  EXPECT_THROW(throw IOError("io"), Error);
  EXPECT_THROW(throw InternalError("x"), Error);
}

TEST(Error, CheckThrowsWithStreamedMessage) {
  try {
    const int got = 28;
    LOCKSTEP_CHECK_AS(ShapeError, got == 784, "Dense 'dense_1': expected 784, got ", got);
    FAIL() << "no exception";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "Dense 'dense_1': expected 784, got 28");
  }
}

TEST(Error, CheckEvaluatesMessageOnlyOnFailure) {
  int evaluated = 0;
  auto expensive = [&] { return ++evaluated; };
  LOCKSTEP_CHECK(true, "never ", expensive());
  EXPECT_EQ(evaluated, 0);
  EXPECT_THROW(LOCKSTEP_CHECK(false, "now ", expensive()), ValueError);
  EXPECT_EQ(evaluated, 1);
}

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kUInt8), 1u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_name(DType::kInt32), "int32");
  EXPECT_EQ(dtype_from_name("bool"), DType::kBool);
  try {
    dtype_from_name("float64");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("float32, int32"), std::string::npos);
  }
}

// "did you mean": the nearest known name by edits, the first of equals.
TEST(NearestName, PicksTheFewestEditsAndTheFirstOfEquals) {
  EXPECT_EQ(edit_distance("relux", "relu"), 1u);
  EXPECT_EQ(edit_distance("", "elu"), 3u);
  EXPECT_EQ(edit_distance("gelu", "gelu"), 0u);
  EXPECT_EQ(nearest_name("relux", {"elu", "relu", "selu"}), "relu");
  EXPECT_EQ(nearest_name("xelu", {"elu", "selu"}), "elu") << "both 1 edit away: the first";
  EXPECT_EQ(nearest_name("anything", {}), "");
}

}  // namespace
}  // namespace lockstep
