// Shape: inline dims, numel, strides, negative axes, errors.
#include "lockstep/core/shape.h"

#include <gtest/gtest.h>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

TEST(Shape, BasicProperties) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.dim(-1), 4);
  EXPECT_EQ(s.to_string(), "[2, 3, 4]");
  const auto st = s.strides();
  EXPECT_EQ(st[0], 12);
  EXPECT_EQ(st[1], 4);
  EXPECT_EQ(st[2], 1);
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar holds one element
  EXPECT_EQ((Shape{5, 0}).numel(), 0);
  EXPECT_EQ(s.with_dim(0, 7), (Shape{7, 3, 4}));
  EXPECT_NE(s, (Shape{2, 3}));
}

TEST(Shape, RejectsBadDimsAndAxes) {
  EXPECT_THROW((Shape{2, -1}), ShapeError);
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), ShapeError);
  try {
    normalize_axis(3, 3, "sum");
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_STREQ(e.what(), "sum: axis 3 is out of range for a tensor of rank 3 (valid: -3 to 2)");
  }
  EXPECT_EQ(normalize_axis(-3, 3, "sum"), 0);
}

}  // namespace
}  // namespace lockstep
