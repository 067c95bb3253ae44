// Convolutional and image layers (channels-last), as keras.layers: Conv2D,
// Conv2DTranspose, DepthwiseConv2D, SeparableConv2D, MaxPooling2D, AveragePooling2D,
// GlobalAveragePooling2D, GlobalMaxPooling2D, ZeroPadding2D, Resizing, BatchNormalization.
//
//   auto x = ls::layers::Conv2D(32, {3, 3}, {.activation = "relu"})(inputs);
//   x = ls::layers::MaxPooling2D()(x);
#pragma once

#include <array>
#include <string>

#include "lockstep/nn/layers.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::layers {

using Size2 = std::array<std::int64_t, 2>;

// "valid" or "same", as Keras spells them.
Padding parse_padding(const std::string& padding, const char* layer);

struct Conv2DOptions {
  Size2 strides{1, 1};
  std::string padding = "valid";
  Size2 dilation_rate{1, 1};
  std::int64_t groups = 1;
  std::string activation{};
  bool use_bias = true;
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
};

class Conv2DImpl : public SingleInputLayerImpl {
 public:
  Conv2DImpl(std::int64_t filters, Size2 kernel_size, Conv2DOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  bool absorbs_zero_padding() const override;
  std::optional<ReluOptions> own_relu() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  std::int64_t filters_;
  Size2 kernel_size_;
  Conv2DOptions options_;
  lockstep::Conv2DOptions op_;
  ActivationFn activation_;
  Variable kernel_, bias_;
};
class Conv2D : public Layer {
 public:
  Conv2D(std::int64_t filters, Size2 kernel_size, Conv2DOptions options = {});
  Conv2DImpl* operator->() const { return static_cast<Conv2DImpl*>(impl_.get()); }
};

// keras.layers.Conv2DTranspose: the transposed convolution
// (lockstep::conv2d_transpose), kernel [kh, kw, filters, in_channels] as
// Keras; Conv2D's options, with groups 1 and Keras's output lengths
// (output_padding None).
class Conv2DTransposeImpl : public SingleInputLayerImpl {
 public:
  Conv2DTransposeImpl(std::int64_t filters, Size2 kernel_size, Conv2DOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  std::int64_t filters_;
  Size2 kernel_size_;
  Conv2DOptions options_;
  lockstep::Conv2DOptions op_;
  ActivationFn activation_;
  Variable kernel_, bias_;
};
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(std::int64_t filters, Size2 kernel_size, Conv2DOptions options = {});
  Conv2DTransposeImpl* operator->() const { return static_cast<Conv2DTransposeImpl*>(impl_.get()); }
};

struct DepthwiseConv2DOptions {
  Size2 strides{1, 1};
  std::string padding = "valid";
  std::int64_t depth_multiplier = 1;
  Size2 dilation_rate{1, 1};
  std::string activation{};
  bool use_bias = true;
  Initializer depthwise_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer depthwise_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
};
// One filter per input channel (times depth_multiplier); kernel
// [kh, kw, in_channels, depth_multiplier] as Keras.
class DepthwiseConv2DImpl : public SingleInputLayerImpl {
 public:
  DepthwiseConv2DImpl(Size2 kernel_size, DepthwiseConv2DOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  bool absorbs_zero_padding() const override;
  std::optional<ReluOptions> own_relu() const override;
  const Variable& depthwise_kernel() const { return kernel_; }

 private:
  Size2 kernel_size_;
  DepthwiseConv2DOptions options_;
  ActivationFn activation_;
  Variable kernel_, bias_;
  std::int64_t channels_ = 0;
};
class DepthwiseConv2D : public Layer {
 public:
  explicit DepthwiseConv2D(Size2 kernel_size, DepthwiseConv2DOptions options = {});
  DepthwiseConv2DImpl* operator->() const { return static_cast<DepthwiseConv2DImpl*>(impl_.get()); }
};

struct SeparableConv2DOptions {
  Size2 strides{1, 1};
  std::string padding = "valid";
  std::int64_t depth_multiplier = 1;
  Size2 dilation_rate{1, 1};
  std::string activation{};
  bool use_bias = true;
  Initializer depthwise_initializer = initializers::GlorotUniform();
  Initializer pointwise_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer depthwise_regularizer{};
  Regularizer pointwise_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
};
// keras.layers.SeparableConv2D: a depthwise convolution (depth_multiplier
// filters per input channel, with the strides, padding and dilation), then
// a 1×1 convolution to `filters` channels, the bias and the activation.
// Weights as Keras: depthwise_kernel [kh, kw, in, depth_multiplier],
// pointwise_kernel [1, 1, in·depth_multiplier, filters], bias [filters].
class SeparableConv2DImpl : public SingleInputLayerImpl {
 public:
  SeparableConv2DImpl(std::int64_t filters, Size2 kernel_size, SeparableConv2DOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const Variable& depthwise_kernel() const { return depthwise_; }
  const Variable& pointwise_kernel() const { return pointwise_; }

 private:
  std::int64_t filters_;
  Size2 kernel_size_;
  SeparableConv2DOptions options_;
  ActivationFn activation_;
  Variable depthwise_, pointwise_, bias_;
  std::int64_t channels_ = 0;
};
class SeparableConv2D : public Layer {
 public:
  SeparableConv2D(std::int64_t filters, Size2 kernel_size, SeparableConv2DOptions options = {});
  SeparableConv2DImpl* operator->() const { return static_cast<SeparableConv2DImpl*>(impl_.get()); }
};

struct Pooling2DOptions {
  Size2 strides{0, 0};  // 0: the pool size
  std::string padding = "valid";
  std::string name{};
};
class Pooling2DImpl : public SingleInputLayerImpl {
 public:
  Pooling2DImpl(bool max, Size2 pool_size, Pooling2DOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  // Max pooling takes a ReLU after it (CallContext::relu) in place of one
  // before it; average pooling does not commute with a ReLU.
  bool absorbs_relu() const override { return max_; }
  bool commutes_with_relu() const override { return max_; }

 private:
  bool max_;
  Pool2DOptions op_;
  std::string padding_name_;
};
class MaxPooling2D : public Layer {
 public:
  explicit MaxPooling2D(Size2 pool_size = {2, 2}, Pooling2DOptions options = {});
};
class AveragePooling2D : public Layer {
 public:
  explicit AveragePooling2D(Size2 pool_size = {2, 2}, Pooling2DOptions options = {});
};

struct GlobalPoolingOptions {
  bool keepdims = false;  // [batch, 1, 1, channels] instead of [batch, channels]
  std::string name{};
};
// The mean or the maximum over each channel's positions
// (GlobalAveragePooling2D, GlobalMaxPooling2D).
class GlobalPooling2DImpl : public SingleInputLayerImpl {
 public:
  GlobalPooling2DImpl(bool max, GlobalPoolingOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  bool max_;
  GlobalPoolingOptions options_;
};
class GlobalAveragePooling2D : public Layer {
 public:
  explicit GlobalAveragePooling2D(GlobalPoolingOptions options = {});
};
class GlobalMaxPooling2D : public Layer {
 public:
  explicit GlobalMaxPooling2D(GlobalPoolingOptions options = {});
};

// Zeros around the spatial dimensions: ((top, bottom), (left, right)).
class ZeroPadding2DImpl : public SingleInputLayerImpl {
 public:
  ZeroPadding2DImpl(std::array<Size2, 2> padding, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const std::array<Size2, 2>& padding() const { return padding_; }

 private:
  std::array<Size2, 2> padding_;
};
class ZeroPadding2D : public Layer {
 public:
  explicit ZeroPadding2D(std::array<Size2, 2> padding = {{{1, 1}, {1, 1}}}, std::string name = "");
};

struct ResizingOptions {
  std::string interpolation = "bilinear";  // the one Lockstep has
  bool crop_to_aspect_ratio = false;       // true is not implemented
  bool pad_to_aspect_ratio = false;        // true is not implemented
  std::string fill_mode = "constant";      // used only with pad_to_aspect_ratio
  float fill_value = 0.0f;                 // used only with pad_to_aspect_ratio
  bool antialias = false;                  // true is not implemented
  std::string name{};
};
// Resizes images ([batch, h, w, c], or one image [h, w, c]) to height ×
// width as tf.image.resize does (bilinear, half-pixel centres); the output
// is float32 whatever the input's dtype (keras.layers.Resizing).
class ResizingImpl : public SingleInputLayerImpl {
 public:
  ResizingImpl(std::int64_t height, std::int64_t width, ResizingOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::int64_t height_, width_;
  ResizingOptions options_;
};
class Resizing : public Layer {
 public:
  Resizing(std::int64_t height, std::int64_t width, ResizingOptions options = {});
};

struct BatchNormalizationOptions {
  float momentum = 0.99f;
  float epsilon = 1e-3f;
  bool center = true;
  bool scale = true;
  Initializer beta_initializer = initializers::Zeros();
  Initializer gamma_initializer = initializers::Ones();
  Initializer moving_mean_initializer = initializers::Zeros();
  Initializer moving_variance_initializer = initializers::Ones();
  std::string name{};
};
// Normalises the last axis. In training (and trainable) it uses the batch's
// statistics and updates the moving averages; in inference — or when frozen,
// as Keras 3 does for fine-tuning — it uses the moving averages.
class BatchNormalizationImpl : public SingleInputLayerImpl {
 public:
  explicit BatchNormalizationImpl(BatchNormalizationOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  bool absorbs_relu() const override { return true; }
  const Variable& gamma() const { return gamma_; }
  const Variable& beta() const { return beta_; }
  const Variable& moving_mean() const { return moving_mean_; }
  const Variable& moving_variance() const { return moving_variance_; }
  // Keras's `layer.momentum = 0.9`: the moving averages' momentum from the
  // next training call on, and in get_config (a ValueError outside [0, 1]).
  // Not while a step runs.
  float momentum() const { return options_.momentum; }
  void set_momentum(float momentum);

 private:
  BatchNormalizationOptions options_;
  Variable gamma_, beta_, moving_mean_, moving_variance_;
  Tensor ones_, zeros_;  // stand-ins when scale / center are off
};
class BatchNormalization : public Layer {
 public:
  explicit BatchNormalization(BatchNormalizationOptions options = {});
  BatchNormalizationImpl* operator->() const {
    return static_cast<BatchNormalizationImpl*>(impl_.get());
  }
};

}  // namespace lockstep::layers
