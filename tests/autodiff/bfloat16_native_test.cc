// Native bfloat16 kernels against float32 (issue #36). On a CPU with
// bfloat16 instructions, matmul, convolution (depthwise too) and pooling run
// oneDNN's bfloat16 primitives, and batch normalisation (with its ReLU) our
// loops on bfloat16 data: each op's output and input gradients must agree
// with the float32 op on the same (bfloat16-representable) values within
// one bfloat16 rounding, plus float32 accumulation's share. These skip, and
// say why, on CPUs without the instructions (the emulated path is the
// float32 op by construction: tests/tensor/bfloat16_test.cc).
//
// The elementwise ops run on bfloat16 data on every CPU; they must equal
// the float32 op on the widened operands rounded once, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

#define SKIP_WITHOUT_NATIVE_BFLOAT16()                                                        \
  if (!native_bfloat16())                                                                     \
  GTEST_SKIP() << "this CPU (as oneDNN sees it) has no bfloat16 instructions, so the native " \
                  "kernels cannot run here: "                                                 \
               << bfloat16_kernels()

// float32 values that bfloat16 holds exactly, uniform in [lo, hi).
Tensor bf16_values(const Shape& shape, std::uint32_t seed, float lo = -2, float hi = 2) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (float& x : v) x = static_cast<float>(bfloat16(u(rng)));
  return Tensor::from_vector(v, shape);
}

Tensor b16(const Tensor& t) { return cast(t, DType::kBFloat16); }

struct Traced {
  Tensor y;                       // float32
  std::vector<Tensor> grads;      // of sum(y · weights), one per input, float32
  DType dtype = DType::kFloat32;  // of the op's output
};

// y = f(inputs); the gradients of sum(y · weights) with respect to each
// input. `weights` are bfloat16 values, so the upstream gradient is exact
// in either precision.
Traced run(const std::vector<Tensor>& inputs, const std::function<Tensor(std::vector<Tensor>)>& f,
           std::uint32_t seed) {
  GradientTape tape;
  for (const Tensor& t : inputs) tape.watch(t);
  const Tensor out = f(inputs);
  Traced r;
  r.dtype = out.dtype();
  r.y = out.dtype() == DType::kFloat32 ? out : cast(out, DType::kFloat32);
  const Tensor weights = bf16_values(r.y.shape(), seed);
  r.grads = tape.gradient(sum(mul(r.y, weights)), inputs);
  return r;
}

// |got − want| <= |want| · 2^-8 (one bfloat16 rounding) + max|want| · 2^-12
// (float32 sums in another order, cancellation in them).
void expect_within_bf16_rounding(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double largest = 0;
  for (float v : w) largest = std::max(largest, std::abs(static_cast<double>(v)));
  int bad = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tolerance = std::abs(static_cast<double>(w[i])) * 0x1p-8 + largest * 0x1p-12;
    if (std::abs(static_cast<double>(g[i]) - w[i]) > tolerance && ++bad <= 5)
      ADD_FAILURE() << what << " element " << i << ": " << g[i] << " against float32's " << w[i];
  }
  EXPECT_EQ(bad, 0) << what << ": elements off by more than bfloat16 rounding";
}

// The native run (the op given bfloat16 operands) against the float32 one.
void expect_agrees(const std::vector<Tensor>& inputs,
                   const std::function<Tensor(std::vector<Tensor>)>& native,
                   const std::function<Tensor(std::vector<Tensor>)>& reference,
                   const std::string& what) {
  const Traced n = run(inputs, native, 99), r = run(inputs, reference, 99);
  EXPECT_EQ(n.dtype, DType::kBFloat16) << what << ": the native op's output is not bfloat16";
  expect_within_bf16_rounding(n.y, r.y, what + " output");
  ASSERT_EQ(n.grads.size(), r.grads.size());
  for (std::size_t i = 0; i < n.grads.size(); ++i)
    expect_within_bf16_rounding(n.grads[i], r.grads[i],
                                what + " gradient of input " + std::to_string(i));
}

TEST(NativeBFloat16, MatmulAndItsGradientsAgreeWithFloat32) {
  SKIP_WITHOUT_NATIVE_BFLOAT16();
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
      const Shape sa = ta ? Shape{96, 40} : Shape{40, 96}, sb = tb ? Shape{24, 96} : Shape{96, 24};
      const std::string what =
          std::string("matmul ta=") + (ta ? "1" : "0") + " tb=" + (tb ? "1" : "0");
      expect_agrees(
          {bf16_values(sa, 1), bf16_values(sb, 2), bf16_values({24}, 3)},
          [&](std::vector<Tensor> in) { return matmul(b16(in[0]), b16(in[1]), b16(in[2]), o); },
          [&](std::vector<Tensor> in) { return matmul(in[0], in[1], in[2], o); }, what);
    }
  }
  // With the relu fused in (Dense's "relu": a oneDNN post-op).
  expect_agrees(
      {bf16_values({40, 96}, 8), bf16_values({96, 24}, 9), bf16_values({24}, 10)},
      [](std::vector<Tensor> in) {
        return matmul(b16(in[0]), b16(in[1]), b16(in[2]), {.relu = true});
      },
      [](std::vector<Tensor> in) { return relu(matmul(in[0], in[1], in[2])); }, "matmul with relu");
  // Batched, and batched against one shared b (attention's and Dense's on
  // sequences).
  expect_agrees(
      {bf16_values({3, 17, 33}, 4), bf16_values({3, 33, 9}, 5)},
      [](std::vector<Tensor> in) { return matmul(b16(in[0]), b16(in[1])); },
      [](std::vector<Tensor> in) { return matmul(in[0], in[1]); }, "batched matmul");
  expect_agrees(
      {bf16_values({3, 17, 33}, 6), bf16_values({33, 9}, 7)},
      [](std::vector<Tensor> in) { return matmul(b16(in[0]), b16(in[1])); },
      [](std::vector<Tensor> in) { return matmul(in[0], in[1]); }, "matmul with a shared b");
}

TEST(NativeBFloat16, ConvolutionsAndTheirGradientsAgreeWithFloat32) {
  SKIP_WITHOUT_NATIVE_BFLOAT16();
  struct Case {
    const char* what;
    Shape x, kernel;
    Conv2DOptions o;
  };
  const Case cases[] = {
      {"3x3 stride 2 same",
       {2, 9, 11, 8},
       {3, 3, 8, 16},
       {.strides = {2, 2}, .padding = Padding::kSame}},
      {"depthwise 3x3 same",
       {2, 10, 10, 16},
       {3, 3, 1, 16},
       {.padding = Padding::kSame, .groups = 16}},
      {"1x1 pointwise", {4, 6, 6, 24}, {1, 1, 24, 32}, {}},
      {"dilated 3x3 valid", {1, 12, 12, 4}, {3, 3, 4, 8}, {.dilation_rate = {2, 2}}},
  };
  for (const Case& c : cases) {
    const std::int64_t oc = c.kernel[3];
    expect_agrees(
        {bf16_values(c.x, 11), bf16_values(c.kernel, 12, -0.5f, 0.5f), bf16_values({oc}, 13)},
        [&](std::vector<Tensor> in) { return conv2d(b16(in[0]), b16(in[1]), b16(in[2]), c.o); },
        [&](std::vector<Tensor> in) { return conv2d(in[0], in[1], in[2], c.o); }, c.what);
  }
}

TEST(NativeBFloat16, PoolingAndItsGradientsAgreeWithFloat32) {
  SKIP_WITHOUT_NATIVE_BFLOAT16();
  // Max pooling's input has no ties in a window (which of two equal maxima
  // gets the gradient is the kernel's choice): each plane a permutation of
  // 0..80, in steps of 2^-5 (exact in bfloat16).
  std::vector<float> distinct;
  std::mt19937 rng(21);
  for (int plane = 0; plane < 2 * 8; ++plane) {
    std::vector<float> p(81);
    for (int i = 0; i < 81; ++i) p[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0x1p-5f;
    std::shuffle(p.begin(), p.end(), rng);
    distinct.insert(distinct.end(), p.begin(), p.end());
  }
  // Planes are [n, c]; the tensor is [n, h, w, c].
  const Tensor planes = Tensor::from_vector(distinct, Shape({2, 8, 9, 9}));
  const Tensor x = transpose(planes, {0, 2, 3, 1}).copy();
  // Keras's default (windows that do not overlap: native) and overlapping
  // windows (emulated, conv_ops.cc says why).
  for (const Pool2DOptions& o :
       {Pool2DOptions{.pool_size = {2, 2}, .padding = Padding::kSame},
        Pool2DOptions{.pool_size = {3, 3}, .strides = {2, 2}, .padding = Padding::kSame}}) {
    const std::string size = std::to_string(o.pool_size[0]);
    expect_agrees(
        {x}, [&](std::vector<Tensor> in) { return max_pool2d(b16(in[0]), o); },
        [&](std::vector<Tensor> in) { return max_pool2d(in[0], o); }, "max_pool2d " + size);
    expect_agrees(
        {bf16_values({2, 9, 9, 8}, 22)},
        [&](std::vector<Tensor> in) { return avg_pool2d(b16(in[0]), o); },
        [&](std::vector<Tensor> in) { return avg_pool2d(in[0], o); }, "avg_pool2d " + size);
  }
}

// Batch norm reads and writes bfloat16 on every CPU (our loops), but it is
// what a native MobileNetV2 step runs between its convolutions: its
// reference is Keras's, batch norm in float32, its output rounded to
// bfloat16, then ReLU6 on that (so the ReLU's mask sees the rounded value,
// as a separate Keras ReLU layer does).
TEST(BFloat16Data, BatchNormalisationWithAndWithoutReluAgreesWithFloat32) {
  const std::vector<Tensor> in{bf16_values({4, 5, 5, 24}, 31, -1.0f, 3.0f),
                               bf16_values({24}, 32, 0.5f, 2.0f), bf16_values({24}, 33)};
  const auto round_trip = [](const Tensor& t) { return cast(b16(t), DType::kFloat32); };
  expect_agrees(
      in,
      [](std::vector<Tensor> v) {
        return batch_norm_relu_training(b16(v[0]), v[1], v[2], 1e-3f, 6.0f).y;
      },
      [&](std::vector<Tensor> v) {
        return relu(round_trip(batch_norm_training(v[0], v[1], v[2], 1e-3f).y),
                    {.max_value = 6.0f});
      },
      "batch_norm_relu (ReLU6)");
  expect_agrees(
      in, [](std::vector<Tensor> v) { return batch_norm_training(b16(v[0]), v[1], v[2], 1e-3f).y; },
      [](std::vector<Tensor> v) { return batch_norm_training(v[0], v[1], v[2], 1e-3f).y; },
      "batch_norm");
}

// Bit for bit: the op on bfloat16 operands against the float32 op on the
// widened operands, rounded once — forward, and the gradient rules that
// run on bfloat16 data (relu's from its output).
TEST(BFloat16Data, ElementwiseOpsAreTheFloat32OpRoundedOnce) {
  const Tensor a = bf16_values({6, 1, 40}, 41), b = bf16_values({6, 7, 40}, 42, 0.25f, 2.0f);
  using Binary = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Binary> binary[] = {{"add", add},         {"sub", sub},
                                                   {"mul", mul},         {"div", div},
                                                   {"maximum", maximum}, {"minimum", minimum}};
  const auto bits = [](const Tensor& t) {
    std::vector<std::uint16_t> out;
    for (const bfloat16& v :
         std::vector<bfloat16>(t.data<bfloat16>(), t.data<bfloat16>() + t.numel()))
      out.push_back(v.bits);
    return out;
  };
  for (const auto& [name, op] : binary) {
    const Tensor got = op(b16(a), b16(b));
    ASSERT_EQ(got.dtype(), DType::kBFloat16) << name;
    EXPECT_EQ(bits(got), bits(b16(op(a, b)))) << name << " (with broadcasting)";
  }
  using Unary = std::function<Tensor(const Tensor&)>;
  const std::pair<const char*, Unary> unary[] = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"square", [](const Tensor& x) { return square(x); }},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"leaky capped relu",
       [](const Tensor& x) { return relu(x, {.negative_slope = 0.3f, .max_value = 1.5f}); }},
      {"clip", [](const Tensor& x) { return clip(x, -0.7f, 0.9f); }},
  };
  for (const auto& [name, op] : unary) {
    EXPECT_EQ(bits(op(b16(b * a))), bits(b16(op(cast(b16(b * a), DType::kFloat32))))) << name;
  }
  // where on bfloat16 operands passes its gradient on (it once recorded
  // none for them: the gradient stopped there, silently).
  {
    const Tensor x = a * 2.0f;
    const auto pick = [](const Tensor& v) { return where(greater(v, zeros_like(v)), v, v * 0.5f); };
    const Traced n = run(
        {x}, [&](std::vector<Tensor> in) { return pick(b16(in[0])); }, 44);
    const Traced r = run(
        {x}, [&](std::vector<Tensor> in) { return pick(in[0]); }, 44);
    ASSERT_TRUE(n.grads[0].defined()) << "no gradient through where on bfloat16";
    EXPECT_EQ(n.grads[0].to_vector<float>(), r.grads[0].to_vector<float>());
  }
  // relu's gradient, from its output, on bfloat16 data.
  for (const ReluOptions& o :
       {ReluOptions{}, ReluOptions{.negative_slope = 0.3f, .max_value = 1.5f}}) {
    const Tensor x = a * 2.0f;
    const Traced n = run(
        {x}, [&](std::vector<Tensor> in) { return relu(b16(in[0]), o); }, 43);
    const Traced r = run(
        {x}, [&](std::vector<Tensor> in) { return relu(in[0], o); }, 43);
    EXPECT_EQ(n.dtype, DType::kBFloat16);
    EXPECT_EQ(cast(b16(n.grads[0]), DType::kFloat32).to_vector<float>(),
              cast(b16(r.grads[0]), DType::kFloat32).to_vector<float>());
  }
}

}  // namespace
}  // namespace lockstep
