// The sequence layers (nn/sequence_layers.h) and LayerNormalization against
// naive loops in double precision, with finite-difference gradients: Conv1D
// with valid, same and causal padding, strides, dilation and groups; the
// 1-D pools; the global pools; LayerNormalization, plain and rms_scaling.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

// x [b, steps, c], kernel [k, c / groups, f], bias [f]; `left` zeros before
// the first step, output length `out_steps`.
Ref ref_conv1d(const Ref& x, const Ref& kernel, const Ref& bias, std::int64_t stride,
               std::int64_t dilation, std::int64_t groups, std::int64_t left,
               std::int64_t out_steps) {
  const std::int64_t b = x.dims[0], steps = x.dims[1], c = x.dims[2];
  const std::int64_t k = kernel.dims[0], cg = kernel.dims[1], f = kernel.dims[2];
  const std::int64_t fg = f / groups;
  Ref y({b, out_steps, f});
  for (std::int64_t n = 0; n < b; ++n) {
    for (std::int64_t t = 0; t < out_steps; ++t) {
      for (std::int64_t o = 0; o < f; ++o) {
        const std::int64_t g = o / fg;
        double s = bias[o];
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t at = t * stride + j * dilation - left;
          if (at < 0 || at >= steps) continue;
          for (std::int64_t i = 0; i < cg; ++i)
            s += x[(n * steps + at) * c + g * cg + i] * kernel[(j * cg + i) * f + o];
        }
        y[(n * out_steps + t) * f + o] = s;
      }
    }
  }
  return y;
}

TEST(SequenceLayers, Conv1DIsTheNaiveConvolutionWithItsGradients) {
  struct Case {
    std::string padding;
    std::int64_t kernel, stride, dilation, groups, left, out_steps;
  };
  // 9 steps, 4 features, 6 filters.
  for (const Case& c : {Case{"valid", 3, 1, 1, 1, 0, 7}, Case{"same", 3, 2, 1, 1, 1, 5},
                        Case{"causal", 3, 1, 2, 1, 4, 9}, Case{"valid", 2, 3, 1, 2, 0, 3},
                        Case{"same", 2, 1, 2, 1, 1, 9}}) {
    SCOPED_TRACE(c.padding + " k" + std::to_string(c.kernel) + " s" + std::to_string(c.stride) +
                 " d" + std::to_string(c.dilation) + " g" + std::to_string(c.groups));
    std::mt19937 rng(4);
    layers::Conv1D conv(6, c.kernel,
                        {.strides = c.stride,
                         .padding = c.padding,
                         .dilation_rate = c.dilation,
                         .groups = c.groups,
                         .bias_initializer = initializers::RandomNormal(0.0f, 0.5f)});
    const Ref x = random_ref({2, 9, 4}, rng);
    (void)conv(to_tensor(x));  // builds the kernel
    const Ref kernel = to_ref(conv->kernel().value());
    const Ref bias = to_ref(conv.weights()[1].value());
    auto reference = [&](const Ref& input, const Ref& k) {
      return ref_conv1d(input, k, bias, c.stride, c.dilation, c.groups, c.left, c.out_steps);
    };
    check_gradients(
        "conv1d", [&](const std::vector<Tensor>& in) { return conv(in[0]); },
        [&](const std::vector<Ref>& in) { return reference(in[0], kernel); }, {x});
    // The kernel's gradient: the tape's against central differences of the
    // reference, for sum(y · w).
    const Ref w = random_ref({2, c.out_steps, 6}, rng, 0.5, 1.5);
    GradientTape tape;
    const Tensor loss = sum(conv(to_tensor(x)) * to_tensor(w));
    const std::vector<float> g =
        tape.gradient(loss, std::vector<Variable>{conv->kernel()})[0].to_vector<float>();
    auto weighted = [&](const Ref& k) {
      const Ref y = reference(x, k);
      double s = 0;
      for (std::int64_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
      return s;
    };
    for (std::int64_t i = 0; i < kernel.size(); ++i) {
      Ref up = kernel, down = kernel;
      up[i] += 1e-6;
      down[i] -= 1e-6;
      EXPECT_NEAR(g[static_cast<std::size_t>(i)], (weighted(up) - weighted(down)) / 2e-6, 2e-3)
          << "kernel " << i;
    }
  }
  EXPECT_THROW(layers::Conv1D(2, 3, {.padding = "full"}), ValueError);
  EXPECT_THROW(layers::Conv1D(2, 3)(Tensor::zeros({2, 3, 4, 5})), ShapeError);
}

TEST(SequenceLayers, PoolsAreTheNaiveOnesWithTheirGradients) {
  std::mt19937 rng(6);
  const Ref x = random_ref({2, 7, 3}, rng);
  // MaxPooling1D(2), valid: steps 0-1, 2-3, 4-5.
  layers::MaxPooling1D max_pool(2);
  layers::AveragePooling1D avg_pool(3, {.strides = 2, .padding = "same"});
  check_gradients(
      "max_pool1d", [&](const std::vector<Tensor>& in) { return max_pool(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({2, 3, 3});
        for (std::int64_t n = 0; n < 2; ++n)
          for (std::int64_t t = 0; t < 3; ++t)
            for (std::int64_t f = 0; f < 3; ++f)
              y[(n * 3 + t) * 3 + f] =
                  std::max(in[0][(n * 7 + 2 * t) * 3 + f], in[0][(n * 7 + 2 * t + 1) * 3 + f]);
        return y;
      },
      {x});
  // "same" with pool 3, stride 2 over 7 steps: 4 outputs; TensorFlow pads
  // max((4 - 1) * 2 + 3 - 7, 0) = 2 positions, 1 before: windows [-1, 1],
  // [1, 3], [3, 5], [5, 7], each the average of the steps inside.
  check_gradients(
      "avg_pool1d", [&](const std::vector<Tensor>& in) { return avg_pool(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({2, 4, 3});
        for (std::int64_t n = 0; n < 2; ++n)
          for (std::int64_t t = 0; t < 4; ++t)
            for (std::int64_t f = 0; f < 3; ++f) {
              double s = 0;
              int count = 0;
              for (std::int64_t at = 2 * t - 1; at <= 2 * t + 1; ++at) {
                if (at < 0 || at >= 7) continue;
                s += in[0][(n * 7 + at) * 3 + f];
                ++count;
              }
              y[(n * 4 + t) * 3 + f] = s / count;
            }
        return y;
      },
      {x});
  layers::GlobalAveragePooling1D global_avg;
  layers::GlobalMaxPooling1D global_max({.keepdims = true});
  check_gradients(
      "global_avg_pool1d", [&](const std::vector<Tensor>& in) { return global_avg(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y = ref_reduce(
            in[0], {1}, false, [](double a, double b) { return a + b; }, 0.0);
        for (double& v : y.v) v /= 7.0;
        return y;
      },
      {x});
  EXPECT_EQ(global_max(to_tensor(x)).shape(), Shape({2, 1, 3}));
}

TEST(SequenceLayers, LayerNormalizationIsKerasFormulaWithItsGradients) {
  std::mt19937 rng(8);
  const Ref x = random_ref({3, 4, 5}, rng, -2.0, 3.0);
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms_scaling" : "centred");
    layers::LayerNormalization norm(
        {.epsilon = 1e-3f,
         .rms_scaling = rms,
         .beta_initializer = initializers::RandomNormal(0.0f, 1.0f, 2),
         .gamma_initializer = initializers::RandomNormal(1.0f, 0.5f, 3)});
    (void)norm(to_tensor(x));
    const Ref gamma = to_ref(norm.weights()[0].value());
    const Ref beta = rms ? Ref({5}) : to_ref(norm.weights()[1].value());
    check_gradients(
        "layer_normalization", [&](const std::vector<Tensor>& in) { return norm(in[0]); },
        [&](const std::vector<Ref>& in) {
          Ref y(in[0].dims);
          for (std::int64_t row = 0; row < 12; ++row) {
            double mu = 0, var = 0;
            for (std::int64_t f = 0; f < 5; ++f) mu += in[0][row * 5 + f] / 5;
            for (std::int64_t f = 0; f < 5; ++f)
              var += (in[0][row * 5 + f] - mu) * (in[0][row * 5 + f] - mu) / 5;
            for (std::int64_t f = 0; f < 5; ++f) {
              const double inv = gamma[f] / std::sqrt(var + 1e-3);
              y[row * 5 + f] =
                  rms ? in[0][row * 5 + f] * inv : (in[0][row * 5 + f] - mu) * inv + beta[f];
            }
          }
          return y;
        },
        {x});
  }
}

// The op under LayerNormalization (oneDNN's primitive here) with the
// gradients of gamma and beta too, with and without each.
TEST(SequenceLayers, LayerNormalizationOpHasItsGradientsForEveryInput) {
  std::mt19937 rng(12);
  const Ref x = random_ref({3, 2, 6}, rng, -2.0, 3.0), gamma = random_ref({6}, rng, 0.5, 1.5),
            beta = random_ref({6}, rng);
  auto reference = [](const Ref& in, const Ref* g, const Ref* b) {
    Ref y(in.dims);
    for (std::int64_t row = 0; row < 6; ++row) {
      double mu = 0, var = 0;
      for (std::int64_t f = 0; f < 6; ++f) mu += in[row * 6 + f] / 6;
      for (std::int64_t f = 0; f < 6; ++f)
        var += (in[row * 6 + f] - mu) * (in[row * 6 + f] - mu) / 6;
      for (std::int64_t f = 0; f < 6; ++f)
        y[row * 6 + f] = (in[row * 6 + f] - mu) / std::sqrt(var + 1e-3) * (g ? (*g)[f] : 1.0) +
                         (b ? (*b)[f] : 0.0);
    }
    return y;
  };
  check_gradients(
      "layer_normalization",
      [](const std::vector<Tensor>& in) { return layer_normalization(in[0], in[1], in[2], 1e-3f); },
      [&](const std::vector<Ref>& in) { return reference(in[0], &in[1], &in[2]); },
      {x, gamma, beta});
  check_gradients(
      "layer_normalization, gamma only",
      [](const std::vector<Tensor>& in) {
        return layer_normalization(in[0], in[1], Tensor(), 1e-3f);
      },
      [&](const std::vector<Ref>& in) { return reference(in[0], &in[1], nullptr); }, {x, gamma});
  check_gradients(
      "layer_normalization, neither",
      [](const std::vector<Tensor>& in) {
        return layer_normalization(in[0], Tensor(), Tensor(), 1e-3f);
      },
      [&](const std::vector<Ref>& in) { return reference(in[0], nullptr, nullptr); }, {x});
  // bfloat16 (and accelerators) take the formula composed of ops, in float32.
  const Tensor t = to_tensor(x), g = to_tensor(gamma), b = to_tensor(beta);
  const std::vector<float> want = layer_normalization(t, g, b, 1e-3f).to_vector<float>();
  const std::vector<float> got = layer_normalization(cast(t, DType::kBFloat16), g, b, 1e-3f)
                                     .to(DType::kFloat32)
                                     .to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 0.02 * std::max(1.0f, std::abs(want[i]))) << i;
}

}  // namespace
}  // namespace lockstep::testing
