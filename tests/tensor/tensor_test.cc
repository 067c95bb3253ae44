// Tensor handles: creation, zero-copy views, copy/to, item, printing.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

TEST(Tensor, FactoriesFillValues) {
  EXPECT_EQ(Tensor::zeros({2, 3}).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(Tensor::ones({2}, DType::kInt64).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(Tensor::full({3}, 2.5).to_vector<float>(), (std::vector<float>{2.5f, 2.5f, 2.5f}));
  EXPECT_FLOAT_EQ(Tensor::scalar(4.0f).item<float>(), 4.0f);
  EXPECT_EQ(Tensor::scalar(1.0f).rank(), 0);
  const Tensor t = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), (Shape{2, 3}));
  EXPECT_EQ(t.dtype(), DType::kInt32);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ViewRowsSharesTheBufferAndCostsNoCopy) {
  Tensor batch = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  const auto before = current_device().allocator().stats().allocations;
  Tensor rows = batch.view_rows(1, 3);
  EXPECT_EQ(current_device().allocator().stats().allocations, before);  // no buffer made
  EXPECT_EQ(rows.shape(), (Shape{2, 2}));
  EXPECT_EQ(rows.raw_data(), batch.data<float>() + 2);
  EXPECT_EQ(rows.to_vector<float>(), (std::vector<float>{2, 3, 4, 5}));
  rows.data<float>()[0] = 42.0f;  // writes are visible through the parent
  EXPECT_EQ(batch.data<float>()[2], 42.0f);
  EXPECT_NE(rows.id(), batch.id());
  // Empty views are allowed (a replica can get zero examples).
  EXPECT_EQ(batch.view_rows(4, 4).shape(), (Shape{0, 2}));
}

TEST(Tensor, CopyAndToMakeIndependentBuffers) {
  Tensor a = Tensor::from_vector<float>({1.5f, -2.5f, 3.0f});
  Tensor b = a.copy();
  b.data<float>()[0] = 9.0f;
  EXPECT_EQ(a.data<float>()[0], 1.5f);
  const Tensor i = a.to(DType::kInt32);
  EXPECT_EQ(i.to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, -2, 3}));
  const Tensor flags = a.to(DType::kBool);
  EXPECT_EQ(flags.to_vector<int>(), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(Tensor::from_vector<std::uint8_t>({255, 0}).to(DType::kFloat32).to_vector<float>(),
            (std::vector<float>{255.0f, 0.0f}));
}

TEST(Tensor, AccessErrorsNameWhatWasExpected) {
  const Tensor t = Tensor::zeros({2, 2});
  try {
    (void)t.data<std::int64_t>();
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Tensor::data: tensor has dtype float32, requested int64 (shape [2, 2])");
  }
  EXPECT_THROW((void)t.item<float>(), ValueError);
  EXPECT_THROW(t.view_rows(1, 3), IndexError);
  EXPECT_THROW(t.view_as({3}), ShapeError);
  EXPECT_THROW(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), ShapeError);
  EXPECT_THROW((void)Tensor::empty({2}, DType::kBFloat16).data<float>(), ValueError);
  EXPECT_THROW((void)Tensor().device(), ValueError);
}

TEST(Tensor, ToStringShowsShapeDtypeAndValues) {
  EXPECT_EQ(Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).to_string(),
            "Tensor(shape=[2, 2], dtype=float32, values=[1, 2, 3, 4])");
  EXPECT_EQ(Tensor::zeros({20}).to_string(3),
            "Tensor(shape=[20], dtype=float32, values=[0, 0, 0, ...])");
}

}  // namespace
}  // namespace lockstep
