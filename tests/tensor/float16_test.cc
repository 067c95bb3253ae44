// float16 tensors (IEEE binary16, mixed_float16's compute type): the
// rounding of float32 to float16 against a reference that rounds by exact
// arithmetic on float16's grid (normal and subnormal), overflow to infinity
// past 65504, the exact widening, the vectorised casts bitwise as the scalar
// rules, and the ops mixed precision runs on float16 operands — each within
// one float16 rounding of the float64 value of the same float16 inputs,
// float16 out (float32 for softmax), an overflow an infinity as on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

constexpr double kLargestFloat16 = 65504.0;

// The float16 nearest to v, as a double, by exact arithmetic: v's binade
// (never below float16's smallest normal one, 2^-14, whose spacing the
// subnormals share) has 2^10 steps of 2^(e-10); v over that step is exact in
// a double, and rounds to the nearer whole step, ties to the even one.
// Infinity from 65520 on (the midpoint past 65504).
double reference_round(float v) {
  const double a = std::abs(static_cast<double>(v));
  double r;
  if (a >= 65520.0) {
    r = std::numeric_limits<double>::infinity();
  } else if (a == 0.0) {
    r = 0.0;
  } else {
    const int e = std::max(std::ilogb(a), -14);
    const double step = std::ldexp(1.0, e - 10);
    const double q = a / step, whole = std::floor(q), frac = q - whole;
    const double n = frac > 0.5   ? whole + 1
                     : frac < 0.5 ? whole
                                  : (std::fmod(whole, 2.0) == 0 ? whole : whole + 1);
    r = n * step;
  }
  return std::signbit(v) ? -r : r;
}

bool is_nan_bits(std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }

// What bits mean, written out from the format (sign, 5 exponent bits biased
// by 15, 10 mantissa bits; exponent 0: subnormal), not from the code under test.
double value_of_bits(std::uint16_t b) {
  const int exponent = (b >> 10) & 0x1f, mantissa = b & 0x3ff;
  const double sign = (b & 0x8000u) ? -1.0 : 1.0;
  if (exponent == 0x1f)
    return mantissa ? std::numeric_limits<double>::quiet_NaN()
                    : sign * std::numeric_limits<double>::infinity();
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

TEST(Float16, RoundsToNearestTiesToEvenThroughSubnormalsAndOverflowsToInfinity) {
  EXPECT_EQ(float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float16(1.0f + 0x1p-11f).bits, 0x3c00);      // tie: to even (down)
  EXPECT_EQ(float16(1.0f + 3 * 0x1p-11f).bits, 0x3c02);  // tie: to even (up)
  EXPECT_EQ(float16(1.0f + 0x1p-11f + 0x1p-20f).bits, 0x3c01);
  EXPECT_EQ(float16(65504.0f).bits, 0x7bff);    // the largest finite
  EXPECT_EQ(float16(65519.996f).bits, 0x7bff);  // below the midpoint
  EXPECT_EQ(float16(65520.0f).bits, 0x7c00);    // the midpoint: to even, which is infinity
  EXPECT_EQ(float16(1e9f).bits, 0x7c00);
  EXPECT_EQ(float16(-std::numeric_limits<float>::infinity()).bits, 0xfc00);
  EXPECT_EQ(float16(0x1p-24f).bits, 0x0001);             // the smallest subnormal
  EXPECT_EQ(float16(0x1p-25f).bits, 0x0000);             // half of it: a tie, to even (zero)
  EXPECT_EQ(float16(3 * 0x1p-25f).bits, 0x0002);         // a tie between 1 and 2: to 2
  EXPECT_EQ(float16(0x1p-14f - 0x1p-25f).bits, 0x0400);  // rounds up into the normals
  EXPECT_EQ(float16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(is_nan_bits(float16(std::numeric_limits<float>::quiet_NaN()).bits));
  EXPECT_TRUE(is_nan_bits(float16(std::bit_cast<float>(0x7f800001u)).bits));  // low payload
  EXPECT_EQ(static_cast<float>(float16(-2.5f)), -2.5f);
}

TEST(Float16, WideningIsExactForEveryOneOfThe65536Values) {
  std::vector<float16> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b].bits = static_cast<std::uint16_t>(b);
  Tensor t = Tensor::empty({65536}, DType::kFloat16);
  std::memcpy(t.raw_data(), all.data(), 65536 * 2);
  const std::vector<float> widened = cast(t, DType::kFloat32).to_vector<float>();  // vector loop
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const double want = value_of_bits(static_cast<std::uint16_t>(b));
    const float scalar = all[b];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(widened[b]) && std::isnan(scalar)) << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(widened[b]), want) << "bits 0x" << std::hex << b;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(scalar), std::bit_cast<std::uint32_t>(widened[b]))
        << "bits 0x" << std::hex << b;
  }
}

TEST(Float16, CastRoundsEveryValueAsTheReferenceAndAsTheScalarRule) {
  std::mt19937 rng(11);
  std::vector<float> values;
  for (int i = 0; i < 100000; ++i)  // every float32 bit pattern is as likely
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  std::uniform_real_distribution<float> exponent(-27.0f, 17.0f);
  for (int i = 0; i < 100000; ++i) {  // float16's range, subnormals and overflow included
    const float v = std::exp2(exponent(rng)) * (rng() & 1 ? 1.0f : -1.0f);
    values.push_back(v);
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65520.0f, 65519.996f, 0x1p-25f, 0x1p-24f, 6.1e-5f})
    values.push_back(v);
  const Tensor x = Tensor::from_vector(values, Shape({static_cast<std::int64_t>(values.size())}));
  const Tensor h = cast(x, DType::kFloat16);
  ASSERT_EQ(h.dtype(), DType::kFloat16);
  const float16* ph = h.data<float16>();
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    ASSERT_EQ(ph[i].bits, float16(v).bits) << "vector and scalar rules differ at " << v;
    if (std::isnan(v)) {
      EXPECT_TRUE(is_nan_bits(ph[i].bits)) << i;
      continue;
    }
    const double want = reference_round(v);
    ASSERT_EQ(value_of_bits(ph[i].bits), want)
        << "value " << v << " (bits 0x" << std::hex << std::bit_cast<std::uint32_t>(v) << ")";
  }
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(float16(u(rng)));  // float16 values
  return v;
}

// |got − want| within one float16 rounding of want (half an ulp, 2^-11
// relative), plus float32 accumulation's tiny share.
void expect_f16_close(const Tensor& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.dtype(), DType::kFloat16) << what;
  const std::vector<float> g = cast(got, DType::kFloat32).to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], std::abs(want[i]) * 0x1p-11 + 1e-6) << what << " element " << i;
}

TEST(Float16, OpsComputeOnFloat16WithinOneRoundingOfTheExactResult) {
  const std::int64_t m = 9, k = 200, n = 5;
  const auto a = random_values(m * k, 1), b = random_values(k * n, 2);
  std::vector<double> product(m * n, 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t p = 0; p < k; ++p)
        product[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
  const Tensor ta = cast(Tensor::from_vector(a, Shape({m, k})), DType::kFloat16);
  const Tensor tb = cast(Tensor::from_vector(b, Shape({k, n})), DType::kFloat16);
  expect_f16_close(matmul(ta, tb), product, "matmul");

  const auto x = random_values(24, 5), y = random_values(24, 6);
  const Tensor tx = cast(Tensor::from_vector(x, Shape({2, 3, 4})), DType::kFloat16);
  const Tensor ty = cast(Tensor::from_vector(y, Shape({2, 3, 4})), DType::kFloat16);
  std::vector<double> sum_xy, prod, relu_x, exp_x, capped;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sum_xy.push_back(static_cast<double>(x[i]) + y[i]);
    prod.push_back(static_cast<double>(x[i]) * y[i]);
    relu_x.push_back(std::max(0.0, static_cast<double>(x[i])));
    exp_x.push_back(std::exp(static_cast<double>(x[i])));
    capped.push_back(x[i] > 0 ? std::min(0.5, double(x[i])) : 0.25 * x[i]);
  }
  expect_f16_close(add(tx, ty), sum_xy, "add");
  expect_f16_close(mul(tx, ty), prod, "mul");
  expect_f16_close(relu(tx), relu_x, "relu");
  expect_f16_close(relu(tx, {.negative_slope = 0.25f, .max_value = 0.5f}), capped,
                   "relu with max_value");
  expect_f16_close(exp(tx), exp_x, "exp");
  // A float32 operand beside a float16 one: computed in float32, rounded to float16.
  expect_f16_close(add(tx, cast(ty, DType::kFloat32)), sum_xy, "add of float16 and float32");
  std::vector<double> row_sums(6, 0.0);
  for (std::size_t i = 0; i < x.size(); ++i) row_sums[i / 4] += x[i];
  expect_f16_close(sum(tx, {.axes = {-1}}), row_sums, "sum");
  // A 1x1 convolution is a matmul over channels.
  const auto w = random_values(4 * 5, 7);
  const Tensor tw = cast(Tensor::from_vector(w, Shape({1, 1, 4, 5})), DType::kFloat16);
  std::vector<double> conv(2 * 3 * 5, 0.0);
  for (int p = 0; p < 6; ++p)
    for (int o = 0; o < 5; ++o)
      for (int c = 0; c < 4; ++c)
        conv[p * 5 + o] += static_cast<double>(x[p * 4 + c]) * w[c * 5 + o];
  expect_f16_close(conv2d(reshape(tx, {2, 3, 1, 4}), tw, Tensor{}), conv, "conv2d");
  // Batch normalisation: statistics in float32, its output float16.
  const BatchNormResult bn =
      batch_norm_training(reshape(tx, {6, 4}), Tensor::ones({4}), Tensor::zeros({4}), 1e-3f);
  EXPECT_EQ(bn.y.dtype(), DType::kFloat16);
  EXPECT_EQ(bn.mean.dtype(), DType::kFloat32);
  // Softmax stays float32 (mixed precision's rule for the output layer).
  EXPECT_EQ(softmax(tx).dtype(), DType::kFloat32);
  EXPECT_EQ(equal(tx, tx).to_vector<bool>(), std::vector<bool>(24, true));
  // bfloat16 and float16 do not meet in one op.
  EXPECT_THROW(add(tx, cast(ty, DType::kBFloat16)), ValueError);
}

// float16's range is what loss scaling exists for: past 65504 an op's
// result is infinity, as a GPU's float16 kernel gives.
TEST(Float16, AResultPastTheLargestFiniteValueIsInfinity) {
  const Tensor big =
      cast(Tensor::from_vector(std::vector<float>{40000.0f, -40000.0f, 1.0f}), DType::kFloat16);
  const std::vector<float> doubled = cast(add(big, big), DType::kFloat32).to_vector<float>();
  EXPECT_EQ(doubled[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(doubled[1], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(doubled[2], 2.0f);
  // And the smallest values flush to zero below 2^-25 (what loss scaling lifts).
  const Tensor tiny = cast(Tensor::from_vector(std::vector<float>{1e-8f, 1e-7f}), DType::kFloat16);
  const std::vector<float> back = cast(tiny, DType::kFloat32).to_vector<float>();
  EXPECT_EQ(back[0], 0.0f);
  EXPECT_EQ(back[1], 0x1p-23f);  // 1e-7 is 1.68 · 2^-24: nearest 2 · 2^-24
  EXPECT_EQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_EQ(dtype_from_name("float16"), DType::kFloat16);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
}

}  // namespace
}  // namespace lockstep
