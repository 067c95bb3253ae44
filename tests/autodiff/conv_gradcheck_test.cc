// conv2d, pooling, batch norm and pad: forward values against naive float64
// references written here, gradients by finite differences — over strides,
// 'same'/'valid' padding, dilation and groups (depthwise included).
#include <gtest/gtest.h>

#include <random>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

struct Geometry {
  std::int64_t out, before;
};
Geometry geometry(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dilation,
                  bool same) {
  const std::int64_t eff = (k - 1) * dilation + 1;
  if (!same) return {(in - eff) / stride + 1, 0};
  const std::int64_t out = (in + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * stride + eff - in, 0);
  return {out, total / 2};
}

// Naive grouped, dilated, strided convolution: NHWC input, [kh, kw, c/g, oc] kernel.
Ref ref_conv(const Ref& x, const Ref& k, std::int64_t stride, std::int64_t dilation, bool same,
             std::int64_t groups) {
  const std::int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], c = x.dims[3];
  const std::int64_t kh = k.dims[0], kw = k.dims[1], icg = k.dims[2], oc = k.dims[3],
                     ocg = oc / groups;
  const Geometry gh = geometry(h, kh, stride, dilation, same),
                 gw = geometry(w, kw, stride, dilation, same);
  Ref y({n, gh.out, gw.out, oc});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oy = 0; oy < gh.out; ++oy)
      for (std::int64_t ox = 0; ox < gw.out; ++ox)
        for (std::int64_t o = 0; o < oc; ++o) {
          const std::int64_t g = o / ocg;
          double acc = 0;
          for (std::int64_t ky = 0; ky < kh; ++ky)
            for (std::int64_t kx = 0; kx < kw; ++kx) {
              const std::int64_t iy = oy * stride + ky * dilation - gh.before,
                                 ix = ox * stride + kx * dilation - gw.before;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              for (std::int64_t i = 0; i < icg; ++i) {
                acc += x[((b * h + iy) * w + ix) * c + g * icg + i] *
                       k[((ky * kw + kx) * icg + i) * oc + o];
              }
            }
          y[((b * gh.out + oy) * gw.out + ox) * oc + o] = acc;
        }
  return y;
}

Ref ref_pool(const Ref& x, std::int64_t size, std::int64_t stride, bool same, bool max) {
  const std::int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], c = x.dims[3];
  const Geometry gh = geometry(h, size, stride, 1, same), gw = geometry(w, size, stride, 1, same);
  Ref y({n, gh.out, gw.out, c});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t oy = 0; oy < gh.out; ++oy)
      for (std::int64_t ox = 0; ox < gw.out; ++ox)
        for (std::int64_t ch = 0; ch < c; ++ch) {
          double acc = max ? -INFINITY : 0.0;
          int count = 0;
          for (std::int64_t ky = 0; ky < size; ++ky)
            for (std::int64_t kx = 0; kx < size; ++kx) {
              const std::int64_t iy = oy * stride + ky - gh.before,
                                 ix = ox * stride + kx - gw.before;
              if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
              const double v = x[((b * h + iy) * w + ix) * c + ch];
              acc = max ? std::max(acc, v) : acc + v;
              ++count;
            }
          y[((b * gh.out + oy) * gw.out + ox) * c + ch] = max ? acc : acc / count;
        }
  return y;
}

struct ConvCase {
  Dims x, k;
  std::int64_t stride, dilation;
  bool same;
  std::int64_t groups;
};

TEST(ConvGradCheck, Conv2DOverStridesPaddingDilationGroups) {
  std::mt19937 rng(101);
  const ConvCase cases[] = {
      {{2, 5, 6, 3}, {3, 3, 3, 4}, 1, 1, false, 1},  // valid
      {{1, 5, 5, 2}, {3, 3, 2, 3}, 1, 1, true, 1},   // same
      {{2, 7, 6, 2}, {3, 2, 2, 2}, 2, 1, true, 1},   // strided, asymmetric padding
      {{1, 7, 7, 2}, {3, 3, 2, 2}, 1, 2, true, 1},   // dilated
      {{1, 5, 5, 4}, {3, 3, 2, 6}, 1, 1, true, 2},   // grouped
      {{2, 6, 6, 3}, {3, 3, 1, 6}, 2, 1, true, 3},   // depthwise, multiplier 2
      {{1, 4, 4, 3}, {1, 1, 3, 5}, 1, 1, false, 1},  // pointwise
  };
  for (const ConvCase& cc : cases) {
    const std::string name = "conv2d x" + Shape(cc.x).to_string() + " k" + Shape(cc.k).to_string() +
                             " s" + std::to_string(cc.stride) + " d" + std::to_string(cc.dilation) +
                             (cc.same ? " same" : " valid") + " g" + std::to_string(cc.groups);
    const Conv2DOptions o{.strides = {cc.stride, cc.stride},
                          .padding = cc.same ? Padding::kSame : Padding::kValid,
                          .dilation_rate = {cc.dilation, cc.dilation},
                          .groups = cc.groups};
    check_gradients(
        name, [o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
        [cc](const std::vector<Ref>& in) {
          return ref_binary(ref_conv(in[0], in[1], cc.stride, cc.dilation, cc.same, cc.groups),
                            in[2], [](double a, double b) { return a + b; });
        },
        {random_ref(cc.x, rng), random_ref(cc.k, rng), random_ref({cc.k[3]}, rng)});
  }
}

// Zeros {{top, bottom}, {left, right}} around the spatial dimensions.
Ref ref_zero_pad(const Ref& x, std::int64_t top, std::int64_t bottom, std::int64_t left,
                 std::int64_t right) {
  Ref y({x.dims[0], x.dims[1] + top + bottom, x.dims[2] + left + right, x.dims[3]});
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const Dims p = unravel(i, x.dims);
    y[((p[0] * y.dims[1] + p[1] + top) * y.dims[2] + p[2] + left) * y.dims[3] + p[3]] = x[i];
  }
  return y;
}

// Explicit padding (what a functional graph folds a ZeroPadding2D into):
// a valid convolution of the zero-padded input, asymmetric and strided as
// MobileNetV2's stride-2 depthwise blocks pad, dilated, and plain.
TEST(ConvGradCheck, Conv2DWithExplicitPadding) {
  std::mt19937 rng(106);
  struct ExplicitCase {
    ConvCase conv;
    std::array<std::array<std::int64_t, 2>, 2> pad;
  };
  const ExplicitCase cases[] = {
      {{{2, 6, 6, 3}, {3, 3, 1, 3}, 2, 1, false, 3}, {{{0, 1}, {0, 1}}}},  // MobileNetV2's
      {{{1, 5, 4, 2}, {3, 2, 2, 3}, 1, 1, false, 1}, {{{2, 0}, {1, 3}}}},
      {{{1, 5, 5, 2}, {3, 3, 2, 2}, 1, 2, false, 1}, {{{1, 1}, {0, 2}}}},  // dilated
  };
  for (const ExplicitCase& ec : cases) {
    const ConvCase& cc = ec.conv;
    const auto [pad_h, pad_w] = ec.pad;
    const std::string name = "conv2d explicit padding x" + Shape(cc.x).to_string() + " k" +
                             Shape(cc.k).to_string() + " {{" + std::to_string(pad_h[0]) + ", " +
                             std::to_string(pad_h[1]) + "}, {" + std::to_string(pad_w[0]) + ", " +
                             std::to_string(pad_w[1]) + "}}";
    const Conv2DOptions o{.strides = {cc.stride, cc.stride},
                          .padding = Padding::kExplicit,
                          .dilation_rate = {cc.dilation, cc.dilation},
                          .groups = cc.groups,
                          .explicit_padding = ec.pad};
    check_gradients(
        name, [o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
        [&](const std::vector<Ref>& in) {
          const Ref padded = ref_zero_pad(in[0], pad_h[0], pad_h[1], pad_w[0], pad_w[1]);
          return ref_binary(ref_conv(padded, in[1], cc.stride, cc.dilation, false, cc.groups),
                            in[2], [](double a, double b) { return a + b; });
        },
        {random_ref(cc.x, rng), random_ref(cc.k, rng), random_ref({cc.k[3]}, rng)});
  }
}

TEST(ConvGradCheck, Conv2DWithoutBias) {
  std::mt19937 rng(102);
  check_gradients(
      "conv2d no bias",
      [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], Tensor()); },
      [](const std::vector<Ref>& in) { return ref_conv(in[0], in[1], 1, 1, false, 1); },
      {random_ref({1, 4, 4, 2}, rng), random_ref({2, 2, 2, 3}, rng)});
}

TEST(ConvGradCheck, MaxAndAveragePooling) {
  std::mt19937 rng(103);
  for (bool max : {true, false}) {
    for (auto [size, stride, same] :
         {std::tuple<std::int64_t, std::int64_t, bool>{2, 2, false}, {3, 2, true}, {3, 1, true}}) {
      const Pool2DOptions o{.pool_size = {size, size},
                            .strides = {stride, stride},
                            .padding = same ? Padding::kSame : Padding::kValid};
      check_gradients(
          std::string(max ? "max" : "avg") + "_pool2d k" + std::to_string(size) + " s" +
              std::to_string(stride) + (same ? " same" : " valid"),
          [o, max](const std::vector<Tensor>& in) {
            return max ? max_pool2d(in[0], o) : avg_pool2d(in[0], o);
          },
          [=](const std::vector<Ref>& in) { return ref_pool(in[0], size, stride, same, max); },
          {random_ref({2, 5, 6, 3}, rng)});
    }
  }
}

TEST(ConvGradCheck, BatchNormTrainingAndInference) {
  std::mt19937 rng(104);
  const float eps = 1e-3f;
  auto ref_bn = [eps](const Ref& x, const Ref& gamma, const Ref& beta) {
    const std::int64_t c = x.dims.back(), rows = x.size() / c;
    Ref y(x.dims);
    for (std::int64_t ch = 0; ch < c; ++ch) {
      double m = 0, v = 0;
      for (std::int64_t r = 0; r < rows; ++r) m += x[r * c + ch];
      m /= static_cast<double>(rows);
      for (std::int64_t r = 0; r < rows; ++r) v += (x[r * c + ch] - m) * (x[r * c + ch] - m);
      v /= static_cast<double>(rows);  // biased, as Keras 3
      for (std::int64_t r = 0; r < rows; ++r)
        y[r * c + ch] = gamma[ch] * (x[r * c + ch] - m) / std::sqrt(v + eps) + beta[ch];
    }
    return y;
  };
  // The last shape runs oneDNN's JIT kernel over whole vectors of channels
  // and a tail (19 = 2 × 8 + 3) with several positions per example.
  for (const Dims& d : {Dims{6, 3}, Dims{2, 3, 3, 4}, Dims{3, 4, 5, 19}}) {
    const std::int64_t c = d.back();
    check_gradients(
        "batch_norm training " + Shape(d).to_string(),
        [eps](const std::vector<Tensor>& in) {
          return batch_norm_training(in[0], in[1], in[2], eps).y;
        },
        [&](const std::vector<Ref>& in) { return ref_bn(in[0], in[1], in[2]); },
        {random_ref(d, rng, -2, 2), random_ref({c}, rng, 0.5, 1.5), random_ref({c}, rng)}, 7, 5e-4,
        5e-3);
  }
  // Batch statistics come back for the moving averages.
  const Tensor x = Tensor::from_vector<float>({1, 10, 3, 20}, {2, 2});
  const auto r = batch_norm_training(x, Tensor::ones({2}), Tensor::zeros({2}), eps);
  EXPECT_EQ(r.mean.to_vector<float>(), (std::vector<float>{2, 15}));
  EXPECT_EQ(r.variance.to_vector<float>(), (std::vector<float>{1, 25}));
  const Tensor mean = Tensor::from_vector<float>({0.5f, -1}),
               var = Tensor::from_vector<float>({2, 0.5f});
  check_gradients(
      "batch_norm inference",
      [&](const std::vector<Tensor>& in) {
        return batch_norm_inference(in[0], in[1], in[2], mean, var, eps);
      },
      [&](const std::vector<Ref>& in) {
        Ref y(in[0].dims);
        const double m[2] = {0.5, -1}, v[2] = {2, 0.5};
        for (std::int64_t i = 0; i < y.size(); ++i) {
          const std::int64_t ch = i % 2;
          y[i] = in[1][ch] * (in[0][i] - m[ch]) / std::sqrt(v[ch] + eps) + in[2][ch];
        }
        return y;
      },
      {random_ref({4, 2}, rng), random_ref({2}, rng), random_ref({2}, rng)});
}

// Batch norm and a ReLU in one op (our own loops, not oneDNN's): against a
// float64 batch norm then min(max(·, 0), max_value), a cap that clips some
// outputs (1) and none. The last shape has more rows than one float32 chunk
// of the channel sums (64) and a channel tail.
TEST(ConvGradCheck, BatchNormReluTraining) {
  std::mt19937 rng(106);
  const float eps = 1e-3f;
  for (const std::optional<float> max_value :
       {std::optional<float>(1.0f), std::optional<float>()}) {
    for (const Dims& d : {Dims{6, 3}, Dims{3, 4, 5, 19}, Dims{2, 9, 8, 5}}) {
      const std::int64_t c = d.back();
      const double top = max_value ? *max_value : std::numeric_limits<double>::infinity();
      check_gradients(
          "batch_norm_relu training " + Shape(d).to_string() +
              (max_value ? " max_value 1" : " unbounded"),
          [eps, max_value](const std::vector<Tensor>& in) {
            return batch_norm_relu_training(in[0], in[1], in[2], eps, max_value).y;
          },
          [&](const std::vector<Ref>& in) {
            const Ref& x = in[0];
            const std::int64_t rows = x.size() / c;
            Ref y(x.dims);
            for (std::int64_t ch = 0; ch < c; ++ch) {
              double m = 0, v = 0;
              for (std::int64_t r = 0; r < rows; ++r) m += x[r * c + ch];
              m /= static_cast<double>(rows);
              for (std::int64_t r = 0; r < rows; ++r)
                v += (x[r * c + ch] - m) * (x[r * c + ch] - m);
              v /= static_cast<double>(rows);
              for (std::int64_t r = 0; r < rows; ++r) {
                const double n = in[1][ch] * (x[r * c + ch] - m) / std::sqrt(v + eps) + in[2][ch];
                y[r * c + ch] = std::min(std::max(n, 0.0), top);
              }
            }
            return y;
          },
          {random_ref(d, rng, -2, 2), random_ref({c}, rng, 0.5, 1.5),
           random_ref({c}, rng, -0.5, 0.5)},
          7, 5e-4, 5e-3);
    }
  }
}

// The fused op against what it replaces, oneDNN's batch norm then relu, at
// float32: the same outputs, statistics and gradients. 8 × 16 × 16 = 2,048
// rows fill all 32 blocks of the channel sums with whole 64-row chunks.
TEST(ConvGradCheck, BatchNormReluEqualsBatchNormThenRelu) {
  std::mt19937 rng(107);
  const float eps = 1e-3f;
  const Tensor x = to_tensor(random_ref({8, 16, 16, 19}, rng, -3, 3)),
               gamma = to_tensor(random_ref({19}, rng, 0.5, 4)),
               beta = to_tensor(random_ref({19}, rng, -1, 3)),
               w = to_tensor(random_ref({8, 16, 16, 19}, rng, -1, 1));
  std::vector<Tensor> fused, plain;
  BatchNormResult f, p;
  Tensor y_plain;
  {
    GradientTape tape;
    for (const Tensor* t : {&x, &gamma, &beta}) tape.watch(*t);
    f = batch_norm_relu_training(x, gamma, beta, eps, 6.0f);
    fused = tape.gradient(sum(mul(f.y, w)), {x, gamma, beta});
  }
  {
    GradientTape tape;
    for (const Tensor* t : {&x, &gamma, &beta}) tape.watch(*t);
    p = batch_norm_training(x, gamma, beta, eps);
    y_plain = relu(p.y, {.max_value = 6.0f});
    plain = tape.gradient(sum(mul(y_plain, w)), {x, gamma, beta});
  }
  EXPECT_EQ(f.mean.to_vector<float>(), p.mean.to_vector<float>());
  EXPECT_EQ(f.variance.to_vector<float>(), p.variance.to_vector<float>());
  const auto zf = f.y.to_vector<float>(), zp = y_plain.to_vector<float>();
  int clipped_low = 0, clipped_high = 0;
  for (std::size_t i = 0; i < zf.size(); ++i) {
    ASSERT_NEAR(zf[i], zp[i], 2e-6) << "output " << i;
    clipped_low += zp[i] == 0.0f;
    clipped_high += zp[i] == 6.0f;
  }
  EXPECT_GT(clipped_low, 1000);  // both sides of the ReLU6 are exercised
  EXPECT_GT(clipped_high, 1000);
  // Outputs within rounding of a clip boundary may take the other side in
  // one of the two; their dx differs by a whole dz there, so compare where
  // both outputs lie clearly inside or outside (0, 6).
  const auto dxf = fused[0].to_vector<float>(), dxp = plain[0].to_vector<float>();
  int compared = 0;
  for (std::size_t i = 0; i < dxf.size(); ++i) {
    if (std::abs(zp[i]) < 1e-4f || std::abs(zp[i] - 6.0f) < 1e-4f) {
      if (zp[i] != 0.0f && zp[i] != 6.0f) continue;
    }
    ASSERT_NEAR(dxf[i], dxp[i], 1e-5 + 1e-4 * std::abs(dxp[i])) << "dx " << i;
    ++compared;
  }
  EXPECT_GT(compared, 38000);
  expect_close(to_ref(plain[1]), fused[1], 1e-3, 1e-5, "dgamma");
  expect_close(to_ref(plain[2]), fused[2], 1e-3, 1e-5, "dbeta");
}

TEST(ConvGradCheck, BatchNormReluRejectsANegativeCapAnEmptyBatchAndWrongShapes) {
  const Tensor gamma = Tensor::ones({2}), beta = Tensor::zeros({2});
  const auto message = [&](const Tensor& x, std::optional<float> max_value) -> std::string {
    try {
      batch_norm_relu_training(x, gamma, beta, 1e-3f, max_value);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  const auto expect_message = [](const std::string& got, const std::string& want) {
    EXPECT_NE(got.find(want), std::string::npos) << got;
  };
  expect_message(message(Tensor::ones({3, 2}), -1.0f),
                 "batch_norm_relu: expected max_value >= 0 or none, got -1");
  expect_message(message(Tensor::ones({0, 2}), 6.0f),
                 "batch_norm_relu: cannot compute batch statistics of an empty batch");
  expect_message(message(Tensor::ones({3, 4}), 6.0f),
                 "batch_norm_relu: expected gamma and beta of shape [4], got [2]");
}

TEST(ConvGradCheck, Pad) {
  std::mt19937 rng(105);
  check_gradients(
      "pad",
      [](const std::vector<Tensor>& in) {
        return pad(in[0], {{0, 0}, {1, 2}, {2, 0}, {0, 0}});
      },
      [](const std::vector<Ref>& in) {
        const Ref& x = in[0];
        Ref y({x.dims[0], x.dims[1] + 3, x.dims[2] + 2, x.dims[3]});
        for (std::int64_t i = 0; i < x.size(); ++i) {
          const Dims p = unravel(i, x.dims);
          y[((p[0] * y.dims[1] + p[1] + 1) * y.dims[2] + p[2] + 2) * y.dims[3] + p[3]] = x[i];
        }
        return y;
      },
      {random_ref({2, 3, 2, 2}, rng)});
  EXPECT_EQ(pad(Tensor::ones({1}), {{1, 1}}, 5.0f).to_vector<float>(),
            (std::vector<float>{5, 1, 5}));
}

TEST(ConvBadInput, ShapesAreNamed) {
  try {
    conv2d(Tensor::zeros({2, 28, 28}), Tensor::zeros({3, 3, 1, 8}), Tensor());
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "conv2d: expected input of shape [batch, height, width, channels], got [2, 28, 28]"),
        std::string::npos)
        << e.what();
  }
  EXPECT_THROW(conv2d(Tensor::zeros({1, 5, 5, 3}), Tensor::zeros({3, 3, 2, 4}), Tensor()),
               ShapeError);
  EXPECT_THROW(conv2d(Tensor::zeros({1, 2, 2, 1}), Tensor::zeros({3, 3, 1, 1}), Tensor()),
               ShapeError);  // valid, too small
  EXPECT_THROW(max_pool2d(Tensor::zeros({4, 4})), ShapeError);
  try {
    conv2d(Tensor::zeros({1, 5, 5, 1}), Tensor::zeros({3, 3, 1, 1}), Tensor(),
           {.padding = Padding::kExplicit, .explicit_padding = {{{1, -1}, {0, 0}}}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "conv2d: explicit padding must be >= 0, got {1, -1}");
  }
  EXPECT_THROW(conv2d(Tensor::zeros({1, 1, 1, 1}), Tensor::zeros({3, 3, 1, 1}), Tensor(),
                      {.padding = Padding::kExplicit, .explicit_padding = {{{1, 0}, {1, 1}}}}),
               ShapeError);  // 1 + 1 + 0 rows for a window of 3
  try {
    max_pool2d(Tensor::zeros({1, 4, 4, 1}), {.padding = Padding::kExplicit});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("explicit padding is for convolutions"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
