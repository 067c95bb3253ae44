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
