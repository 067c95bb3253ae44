// Gradients through bfloat16 and float16: a float32 weight read as
// bfloat16 or float16 (mixed precision's autocast) gets a float32 gradient,
// the rounding to that type of the exact gradient of the computation in it.
#include <gtest/gtest.h>

#include <random>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// A float32 weight read as bfloat16 or float16 (mixed precision's autocast)
// gets a float32 gradient: the exact gradient of the computation in that
// type, rounded to it where the backward's matmul produced it.
template <typename Half>
void expect_gradient_through_casts() {
  constexpr DType kHalf = kDTypeOf<Half>;
  const std::int64_t m = 8, k = 16, n = 4;
  // x in multiples of 2^-6: the float32 sums below are exact.
  std::vector<float> x(m * k);
  std::mt19937 xr(11);
  for (float& v : x) v = static_cast<float>(static_cast<int>(xr() % 257) - 128) / 64.0f;
  // Weights that bfloat16 cannot hold exactly (the master copy's precision).
  std::vector<float> w_values(k * n);
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : w_values) v = u(rng);
  const Tensor w = Tensor::from_vector(w_values, Shape({k, n}));
  const Tensor xb = cast(Tensor::from_vector(x, Shape({m, k})), kHalf);
  GradientTape tape;
  tape.watch(w);
  const Tensor y = matmul(xb, cast(w, kHalf));  // [m, n] in the reduced type
  const Tensor loss = sum(cast(y, DType::kFloat32));
  const Tensor dw = tape.gradient(loss, w);
  ASSERT_EQ(dw.dtype(), DType::kFloat32);
  // d loss / dW = Xᵀ · ones: column sums of X, rounded to the type once.
  const std::vector<float> got = dw.to_vector<float>();
  for (std::int64_t p = 0; p < k; ++p) {
    double col = 0;
    for (std::int64_t i = 0; i < m; ++i) col += x[i * k + p];
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(got[p * n + j], static_cast<float>(Half(static_cast<float>(col))))
          << "dW[" << p << "," << j << "]";
    }
  }
}

TEST(BFloat16Gradients, GradientsThroughCastsReturnInTheWeightsDtype) {
  expect_gradient_through_casts<bfloat16>();
}

TEST(Float16Gradients, GradientsThroughCastsReturnInTheWeightsDtype) {
  expect_gradient_through_casts<float16>();
}

}  // namespace
}  // namespace lockstep
