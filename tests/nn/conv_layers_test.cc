// Convolutional layers: shapes, weights as Keras lays them out, the
// training/inference split of BatchNormalization, and errors.
#include <gtest/gtest.h>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

TEST(ConvLayers, Conv2DShapesAndKerasKernelLayout) {
  layers::Conv2D conv(8, {3, 3}, {.strides = {2, 2}, .padding = "same"});
  const Tensor y = conv(Tensor::zeros({2, 9, 10, 3}));
  EXPECT_EQ(y.shape(), (Shape{2, 5, 5, 8}));
  EXPECT_EQ(conv->kernel().shape(), (Shape{3, 3, 3, 8}));
  EXPECT_EQ(conv->bias().shape(), (Shape{8}));
  // A 1x1 convolution is a Dense layer over channels: check against matmul.
  layers::Conv2D pointwise(4, {1, 1});
  const Tensor x = random::normal({2, 3, 3, 5}, {.seed = 1});
  const Tensor out = pointwise(x);
  const Tensor want =
      matmul(reshape(x, {-1, 5}), reshape(pointwise->kernel(), {5, 4}), pointwise->bias());
  const auto a = out.to_vector<float>(), b = want.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
}

TEST(ConvLayers, DepthwiseMatchesPerChannelConvolution) {
  layers::DepthwiseConv2D dw({3, 3}, {.padding = "same", .depth_multiplier = 2});
  const Tensor x = random::normal({1, 4, 4, 3}, {.seed = 2});
  const Tensor y = dw(x);
  ASSERT_EQ(y.shape(), (Shape{1, 4, 4, 6}));
  ASSERT_EQ(dw->depthwise_kernel().shape(), (Shape{3, 3, 3, 2}));
  // Output channel c·2 + m is channel c convolved with kernel[..., c, m].
  const auto k = dw->depthwise_kernel().value().to_vector<float>();
  for (int c = 0; c < 3; ++c) {
    for (int m = 0; m < 2; ++m) {
      std::vector<float> single(9);
      for (int i = 0; i < 9; ++i)
        single[static_cast<std::size_t>(i)] = k[static_cast<std::size_t>(i * 6 + c * 2 + m)];
      const Tensor xc = slice(x, {0, 0, 0, c}, {1, 4, 4, 1});
      const Tensor yc = conv2d(xc, Tensor::from_vector(single, {3, 3, 1, 1}), Tensor(),
                               {.padding = Padding::kSame});
      const auto got = slice(y, {0, 0, 0, c * 2 + m}, {1, 4, 4, 1}).to_vector<float>();
      const auto want = yc.to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
    }
  }
}

// SeparableConv2D against loops written from Keras's definition (a
// depthwise convolution with the strides and TensorFlow's "same" padding,
// then a 1×1 convolution, the bias and the activation), forward and by
// finite differences through the input.
TEST(ConvLayers, SeparableConv2DIsDepthwiseThenPointwiseWithItsGradients) {
  std::mt19937 rng(4);
  const Ref x = random_ref({2, 5, 6, 3}, rng);
  layers::SeparableConv2D sep(4, {3, 3},
                              {.strides = {2, 2},
                               .padding = "same",
                               .depth_multiplier = 2,
                               .activation = "tanh",
                               .bias_initializer = initializers::RandomNormal(0.0f, 1.0f, 9)});
  const Tensor y = sep(to_tensor(x));
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3, 4}));
  const Ref dk = to_ref(sep->depthwise_kernel().value()),
            pk = to_ref(sep->pointwise_kernel().value());
  ASSERT_EQ(dk.dims, (Dims{3, 3, 3, 2}));
  ASSERT_EQ(pk.dims, (Dims{1, 1, 6, 4}));
  const Ref bias = to_ref(sep->weights()[2].value());
  auto reference = [&](const Ref& in) {
    // "same", stride 2 on 5 rows / 6 columns: 3 × 3 outputs, padding
    // (1 before, 1 after) rows and (0, 1) columns, as TensorFlow splits it.
    const std::int64_t n = in.dims[0], h = in.dims[1], w = in.dims[2], c = in.dims[3];
    const std::int64_t pad_t = 1, pad_l = 0;
    Ref out({n, 3, 3, 4});
    for (std::int64_t b = 0; b < n; ++b) {
      for (std::int64_t i = 0; i < 3; ++i) {
        for (std::int64_t j = 0; j < 3; ++j) {
          std::vector<double> mid(static_cast<std::size_t>(c * 2), 0.0);
          for (std::int64_t ch = 0; ch < c; ++ch) {
            for (std::int64_t m = 0; m < 2; ++m) {
              double acc = 0;
              for (std::int64_t ki = 0; ki < 3; ++ki) {
                for (std::int64_t kj = 0; kj < 3; ++kj) {
                  const std::int64_t r = i * 2 + ki - pad_t, col = j * 2 + kj - pad_l;
                  if (r < 0 || r >= h || col < 0 || col >= w) continue;
                  acc += in.v[static_cast<std::size_t>(((b * h + r) * w + col) * c + ch)] *
                         dk.v[static_cast<std::size_t>(((ki * 3 + kj) * c + ch) * 2 + m)];
                }
              }
              mid[static_cast<std::size_t>(ch * 2 + m)] = acc;
            }
          }
          for (std::int64_t f = 0; f < 4; ++f) {
            double acc = bias.v[static_cast<std::size_t>(f)];
            for (std::int64_t k = 0; k < c * 2; ++k)
              acc += mid[static_cast<std::size_t>(k)] * pk.v[static_cast<std::size_t>(k * 4 + f)];
            out.v[static_cast<std::size_t>(((b * 3 + i) * 3 + j) * 4 + f)] = std::tanh(acc);
          }
        }
      }
    }
    return out;
  };
  check_gradients(
      "separable_conv2d", [&](const std::vector<Tensor>& in) { return sep(in[0]); },
      [&](const std::vector<Ref>& in) { return reference(in[0]); }, {x});
  EXPECT_EQ(sep->get_config().get<std::int64_t>("filters"), 4);
}

// conv2d_transpose against its definition (every input pixel spreads its
// channels through the kernel onto the output, offset by TensorFlow's
// padding of the convolution it inverts), through input and kernel by
// finite differences; Keras's output lengths for "same" and "valid", a
// window smaller than the stride included.
TEST(ConvLayers, Conv2DTransposeIsTheConvolutionsInputGradient) {
  std::mt19937 rng(6);
  struct Case {
    Padding padding;
    std::int64_t k, stride, oh, ow, pad_t, pad_l;
  };
  // x [2, 3, 4, c 2] → [2, oh, ow, 3]; pad_t/pad_l: the inverted conv's
  // leading padding ("same": (k − s) / 2 of max(k − s, 0)).
  for (const Case c :
       {Case{Padding::kSame, 3, 2, 6, 8, 0, 0}, Case{Padding::kValid, 3, 2, 7, 9, 0, 0},
        Case{Padding::kSame, 4, 1, 3, 4, 1, 1}, Case{Padding::kValid, 1, 2, 6, 8, 0, 0}}) {
    SCOPED_TRACE("k " + std::to_string(c.k) + " stride " + std::to_string(c.stride));
    const Ref x = random_ref({2, 3, 4, 2}, rng), kernel = random_ref({c.k, c.k, 3, 2}, rng);
    const Conv2DOptions o{.strides = {c.stride, c.stride}, .padding = c.padding};
    auto reference = [&](const std::vector<Ref>& in) {
      Ref y({2, c.oh, c.ow, 3});
      for (std::int64_t b = 0; b < 2; ++b)
        for (std::int64_t i = 0; i < 3; ++i)
          for (std::int64_t j = 0; j < 4; ++j)
            for (std::int64_t ki = 0; ki < c.k; ++ki)
              for (std::int64_t kj = 0; kj < c.k; ++kj) {
                const std::int64_t r = i * c.stride + ki - c.pad_t,
                                   col = j * c.stride + kj - c.pad_l;
                if (r < 0 || r >= c.oh || col < 0 || col >= c.ow) continue;
                for (std::int64_t f = 0; f < 3; ++f)
                  for (std::int64_t ch = 0; ch < 2; ++ch)
                    y.v[static_cast<std::size_t>(((b * c.oh + r) * c.ow + col) * 3 + f)] +=
                        in[0].v[static_cast<std::size_t>(((b * 3 + i) * 4 + j) * 2 + ch)] *
                        in[1].v[static_cast<std::size_t>(((ki * c.k + kj) * 3 + f) * 2 + ch)];
              }
      return y;
    };
    check_gradients(
        "conv2d_transpose",
        [&](const std::vector<Tensor>& in) { return conv2d_transpose(in[0], in[1], Tensor(), o); },
        reference, {x, kernel});
  }
  layers::Conv2DTranspose up(5, {3, 3}, {.strides = {2, 2}, .padding = "same"});
  const Tensor y = up(Tensor::zeros({1, 4, 5, 2}));
  EXPECT_EQ(y.shape(), (Shape{1, 8, 10, 5}));
  EXPECT_EQ(up->kernel().shape(), (Shape{3, 3, 5, 2}));  // Keras's [kh, kw, filters, in]
}

TEST(ConvLayers, PoolingAndPaddingLayers) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 2, 2, 1});
  EXPECT_EQ(layers::MaxPooling2D()(x).to_vector<float>(), (std::vector<float>{4}));
  EXPECT_EQ(layers::AveragePooling2D()(x).to_vector<float>(), (std::vector<float>{2.5f}));
  EXPECT_EQ(layers::GlobalAveragePooling2D()(x).shape(), (Shape{1, 1}));
  EXPECT_EQ(layers::GlobalAveragePooling2D({.keepdims = true})(x).shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(layers::ZeroPadding2D({{{1, 0}, {0, 2}}})(x).shape(), (Shape{1, 3, 4, 1}));
  // 'same' average pooling divides by the valid positions only.
  EXPECT_EQ(layers::AveragePooling2D({3, 3}, {.strides = {1, 1}, .padding = "same"})(x)
                .to_vector<float>(),
            (std::vector<float>{2.5f, 2.5f, 2.5f, 2.5f}));
}

TEST(ConvLayers, BatchNormalizationTrainingInferenceAndFreezing) {
  layers::BatchNormalization bn({.momentum = 0.5f});
  const Tensor x =
      Tensor::from_vector<float>({1, 10, 3, 20, 5, 30}, {3, 2});  // channel means 3 and 20
  const Tensor y = bn(x, {.training = true});
  // Batch statistics: each channel normalised to mean 0.
  const auto v = y.to_vector<float>();
  EXPECT_NEAR(v[0] + v[2] + v[4], 0.0, 1e-5);
  EXPECT_NEAR(v[1] + v[3] + v[5], 0.0, 1e-5);
  // Moving averages moved halfway (momentum 0.5) from (0, 1) to the batch's.
  const auto mm = bn->moving_mean().value().to_vector<float>();
  const auto mv = bn->moving_variance().value().to_vector<float>();
  EXPECT_NEAR(mm[0], 1.5, 1e-6);
  EXPECT_NEAR(mm[1], 10.0, 1e-5);
  EXPECT_NEAR(mv[0], 0.5 + 0.5 * (8.0 / 3), 1e-5);  // biased variance of {1, 3, 5}
  // Inference uses the moving statistics and does not update them.
  const Tensor yi = bn(x);
  EXPECT_NEAR(yi.to_vector<float>()[0], (1 - 1.5) / std::sqrt(mv[0] + 1e-3), 1e-5);
  EXPECT_EQ(bn->moving_mean().value().to_vector<float>(), mm);
  // Frozen (fine-tuning): inference mode even when training, as Keras 3.
  bn.set_trainable(false);
  (void)bn(x, {.training = true});
  EXPECT_EQ(bn->moving_mean().value().to_vector<float>(), mm);
  EXPECT_EQ(bn.trainable_weights().size(), 0u);
  EXPECT_EQ(bn.non_trainable_weights().size(), 4u);
}

TEST(ConvLayers, ErrorsNameTheLayer) {
  clear_session();
  layers::Conv2D conv(4, {3, 3});
  try {
    conv(Tensor::zeros({2, 784}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(
        e.what(),
        "Conv2D 'conv2d': expected input of shape [batch, height, width, channels], got [2, 784]. "
        "Hint: add a Reshape layer, e.g. Reshape({28, 28, 1})");
  }
  EXPECT_THROW(layers::Conv2D(4, {3, 3}, {.padding = "full"}), ValueError);
  EXPECT_THROW(layers::Conv2D(5, {3, 3}, {.groups = 2})(Tensor::zeros({1, 4, 4, 4})), ShapeError);
}

}  // namespace
}  // namespace lockstep::testing
