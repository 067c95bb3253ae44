// Gradients through bfloat16: a float32 weight read as bfloat16 (mixed
// precision's autocast) gets a float32 gradient, the bfloat16 rounding of
// the exact gradient of the bfloat16 computation.
#include <gtest/gtest.h>

#include <random>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// A float32 weight read as bfloat16 (mixed precision's autocast) gets a
// float32 gradient: the exact gradient of the bfloat16 computation, rounded
// to bfloat16 where the backward's matmul produced it.
TEST(BFloat16Gradients, GradientsThroughCastsReturnInTheWeightsDtype) {
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
  const Tensor xb = cast(Tensor::from_vector(x, Shape({m, k})), DType::kBFloat16);
  GradientTape tape;
  tape.watch(w);
  const Tensor y = matmul(xb, cast(w, DType::kBFloat16));  // [m, n] bfloat16
  const Tensor loss = sum(cast(y, DType::kFloat32));
  const Tensor dw = tape.gradient(loss, w);
  ASSERT_EQ(dw.dtype(), DType::kFloat32);
  // d loss / dW = Xᵀ · ones: column sums of X, rounded to bfloat16 once.
  const std::vector<float> got = dw.to_vector<float>();
  for (std::int64_t p = 0; p < k; ++p) {
    double col = 0;
    for (std::int64_t i = 0; i < m; ++i) col += x[i * k + p];
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(got[p * n + j], static_cast<float>(bfloat16(static_cast<float>(col))))
          << "dW[" << p << "," << j << "]";
    }
  }
}

}  // namespace
}  // namespace lockstep
