// bfloat16 tensors: the rounding of float32 to bfloat16 (nearest, ties to
// even, against a reference that picks the nearer of the two neighbours by
// exact arithmetic), and the ops mixed precision runs on bfloat16 operands —
// each result within one bfloat16 rounding of the float64 value of the same
// bfloat16 inputs (what a native kernel with float32 accumulation gives),
// bfloat16 out, float32 for softmax (gradients: tests/autodiff/bfloat16_grad_test.cc).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// The bfloat16 nearest to v by exact comparison of the two candidates (ties
// to the even one), written without the bit trick under test. For |v| up to
// the largest finite bfloat16 (overflow is checked on its own).
std::uint16_t reference_round(float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const auto down = static_cast<std::uint16_t>(u >> 16);
  const auto up = static_cast<std::uint16_t>(down + 1);  // one step away from zero
  if ((u & 0xffffu) == 0) return down;
  const auto magnitude = [](std::uint16_t b) {
    return std::abs(static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16)));
  };
  const double dv = std::abs(static_cast<double>(v)), to_down = dv - magnitude(down),
               to_up = magnitude(up) - dv;
  if (to_down != to_up) return to_down < to_up ? down : up;
  return (down & 1u) ? up : down;
}
constexpr float kLargestBFloat16 = 0x1.fep127f;  // 0x7f7f

bool is_nan_bits(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(BFloat16, RoundsToNearestTiesToEvenAndKeepsNaNAndInfinity) {
  EXPECT_EQ(bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bfloat16(1.0f + 0x1p-8f).bits, 0x3f80);             // tie: to even (down)
  EXPECT_EQ(bfloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);         // tie: to even (up)
  EXPECT_EQ(bfloat16(1.0f + 0x1p-8f + 0x1p-20f).bits, 0x3f81);  // above the tie
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(bfloat16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // overflows to inf
  EXPECT_TRUE(is_nan_bits(bfloat16(std::numeric_limits<float>::quiet_NaN()).bits));
  // A signalling NaN whose payload sits in the low 16 bits stays a NaN.
  EXPECT_TRUE(is_nan_bits(bfloat16(std::bit_cast<float>(0x7f800001u)).bits));
  EXPECT_EQ(static_cast<float>(bfloat16(-2.5f)), -2.5f);  // exact values round-trip
}

TEST(BFloat16, CastRoundsEveryValueAsTheReference) {
  std::mt19937 rng(3);
  std::vector<float> values;
  for (int i = 0; i < 200000; ++i)
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (float v : {0.0f, -0.0f, 1e-40f, -1e-45f, 3.0e38f, 65504.0f}) values.push_back(v);
  const Tensor x = Tensor::from_vector(values, Shape({static_cast<std::int64_t>(values.size())}));
  const Tensor b = cast(x, DType::kBFloat16);
  ASSERT_EQ(b.dtype(), DType::kBFloat16);
  const bfloat16* pb = b.data<bfloat16>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (std::isnan(v)) {
      EXPECT_TRUE(is_nan_bits(pb[i].bits)) << i;
      continue;
    }
    if (std::abs(v) > kLargestBFloat16) continue;  // overflow: checked above
    ASSERT_EQ(pb[i].bits, reference_round(v))
        << "value " << v << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(v) << ")";
  }
  // And back: bfloat16 -> float32 is exact.
  const std::vector<float> back = cast(b, DType::kFloat32).to_vector<float>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(values[i])) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(back[i]), static_cast<std::uint32_t>(pb[i].bits)
                                                           << 16);
    }
  }
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(bfloat16(u(rng)));  // bfloat16 values
  return v;
}

// |got − want| within one bfloat16 rounding of want (half a bfloat16 ulp,
// 2^-8 relative), plus float32 accumulation's tiny share.
void expect_bf16_close(const Tensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.dtype(), DType::kBFloat16) << what;
  const std::vector<float> g = cast(got, DType::kFloat32).to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], want[i], std::abs(want[i]) * 0x1p-8 + 1e-6) << what << " element " << i;
  }
}

TEST(BFloat16, MatmulIsWithinOneRoundingOfTheExactProductOfItsInputs) {
  const std::int64_t m = 13, k = 300, n = 7;
  const auto a = random_values(m * k, 1), b = random_values(k * n, 2);
  std::vector<double> want(m * n, 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        want[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
  const Tensor ta = cast(Tensor::from_vector(a, Shape({m, k})), DType::kBFloat16);
  const Tensor tb = cast(Tensor::from_vector(b, Shape({k, n})), DType::kBFloat16);
  expect_bf16_close(matmul(ta, tb), want, "matmul");
}

TEST(BFloat16, ElementwiseReductionsAndConvolutionComputeOnBFloat16) {
  const auto a = random_values(24, 5), b = random_values(24, 6);
  const Tensor ta = cast(Tensor::from_vector(a, Shape({2, 3, 4})), DType::kBFloat16);
  const Tensor tb = cast(Tensor::from_vector(b, Shape({2, 3, 4})), DType::kBFloat16);
  std::vector<double> sum_ab, prod, relu_a, exp_a;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sum_ab.push_back(static_cast<double>(a[i]) + b[i]);
    prod.push_back(static_cast<double>(a[i]) * b[i]);
    relu_a.push_back(std::max(0.0, static_cast<double>(a[i])));
    exp_a.push_back(std::exp(static_cast<double>(a[i])));
  }
  expect_bf16_close(add(ta, tb), sum_ab, "add");
  expect_bf16_close(mul(ta, tb), prod, "mul");
  expect_bf16_close(relu(ta), relu_a, "relu");
  // Capped, as ReLU6 (MobileNetV2's), and leaky: relu with options.
  std::vector<double> capped_a;
  for (float v : a) capped_a.push_back(v > 0 ? std::min(0.5, double(v)) : 0.25 * v);
  expect_bf16_close(relu(ta, {.negative_slope = 0.25f, .max_value = 0.5f}), capped_a,
                    "relu with max_value");
  expect_bf16_close(exp(ta), exp_a, "exp");
  expect_bf16_close(ta * 1.0f, std::vector<double>(a.begin(), a.end()), "scalar multiply");
  std::vector<double> row_sums(6, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) row_sums[i / 4] += a[i];
  expect_bf16_close(sum(ta, {.axes = {-1}}), row_sums, "sum");
  // A 1x1 convolution is a matmul over channels.
  const auto w = random_values(4 * 5, 7);
  const Tensor tw = cast(Tensor::from_vector(w, Shape({1, 1, 4, 5})), DType::kBFloat16);
  std::vector<double> conv(2 * 3 * 5, 0.0);
  for (int p = 0; p < 6; ++p)
    for (int o = 0; o < 5; ++o)
      for (int c = 0; c < 4; ++c)
        conv[p * 5 + o] += static_cast<double>(a[p * 4 + c]) * w[c * 5 + o];
  expect_bf16_close(conv2d(reshape(ta, {2, 3, 1, 4}), tw, Tensor{}), conv, "conv2d");
  // Softmax stays float32 (mixed precision's rule for the output layer).
  EXPECT_EQ(softmax(ta).dtype(), DType::kFloat32);
  EXPECT_EQ(equal(ta, ta).to_vector<bool>(), std::vector<bool>(24, true));
}

}  // namespace
}  // namespace lockstep
