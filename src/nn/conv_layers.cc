// Convolutional, pooling and normalisation layers over the tensor ops.
#include "lockstep/nn/conv_layers.h"

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/image_ops.h"
#include "nn/config_helpers.h"

namespace lockstep::layers {

using nn_detail::put_initializer;
using nn_detail::put_kernel_layer_options;
using nn_detail::put_regularizer;

namespace {
std::vector<std::int64_t> vec2(const Size2& s) { return {s[0], s[1]}; }
}  // namespace

Padding parse_padding(const std::string& padding, const char* layer) {
  if (padding == "valid") return Padding::kValid;
  if (padding == "same") return Padding::kSame;
  detail::throw_error<ValueError>(layer, ": unknown padding '", padding,
                                  "'; valid values: valid, same");
}

namespace {
// A convolution's options with the zeros of a ZeroPadding2D that the graph
// folded into it (CallContext::zero_padding); unchanged otherwise.
lockstep::Conv2DOptions with_folded_padding(lockstep::Conv2DOptions op, const CallContext& ctx) {
  if (ctx.zero_padding == nullptr) return op;
  LOCKSTEP_CHECK_AS(InternalError, op.padding == Padding::kValid,
                    "a ZeroPadding2D was folded into a convolution without 'valid' padding");
  op.padding = Padding::kExplicit;
  op.explicit_padding = *ctx.zero_padding;
  return op;
}

void check_image_input(const Shape& s, const LayerImpl& layer) {
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() == 4, layer.class_name(), " '", layer.name(),
                    "': expected input of shape [batch, height, width, channels], got ", s,
                    s.rank() == 2 ? ". Hint: add a Reshape layer, e.g. Reshape({28, 28, 1})" : "");
}
}  // namespace

// ---- Conv2D ---------------------------------------------------------------------

Conv2DImpl::Conv2DImpl(std::int64_t filters, Size2 kernel_size, Conv2DOptions options)
    : SingleInputLayerImpl("Conv2D", options.name),
      filters_(filters),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(filters > 0 && kernel_size[0] > 0 && kernel_size[1] > 0,
                 "Conv2D: filters and kernel_size must be > 0");
  // build() divides the input channels by it (a zero from a model file was a SIGFPE).
  LOCKSTEP_CHECK(options_.groups > 0, "Conv2D '", name(), "': groups must be > 0, got ",
                 options_.groups);
  op_ = {.strides = options_.strides,
         .padding = parse_padding(options_.padding, "Conv2D"),
         .dilation_rate = options_.dilation_rate,
         .groups = options_.groups};
}

void Conv2DImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  check_image_input(s, *this);
  const std::int64_t c = s[3];
  LOCKSTEP_CHECK_AS(ShapeError, c % options_.groups == 0 && filters_ % options_.groups == 0,
                    "Conv2D '", name(), "': input channels (", c, ") and filters (", filters_,
                    ") must be divisible by groups (", options_.groups, ")");
  kernel_ = add_weight({.name = "kernel",
                        .shape = {kernel_size_[0], kernel_size_[1], c / options_.groups, filters_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor Conv2DImpl::call(const Tensor& x, const CallContext& ctx) {
  check_image_input(x.shape(), *this);
  const Tensor y = conv2d(x, autocast(kernel_), autocast(bias_), with_folded_padding(op_, ctx));
  return ctx.skip_own_relu ? y : activation_(y);
}

bool Conv2DImpl::absorbs_zero_padding() const { return op_.padding == Padding::kValid; }
std::optional<ReluOptions> Conv2DImpl::own_relu() const {
  return plain_relu_activation(options_.activation);
}

LayerConfig Conv2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("filters", filters_);
  c.set("kernel_size", vec2(kernel_size_));
  c.set("strides", vec2(options_.strides));
  c.set("padding", options_.padding);
  c.set("dilation_rate", vec2(options_.dilation_rate));
  c.set("groups", options_.groups);
  put_kernel_layer_options(c, options_.activation, options_.use_bias, options_.kernel_initializer,
                           options_.bias_initializer, options_.kernel_regularizer,
                           options_.bias_regularizer);
  return c;
}

Conv2D::Conv2D(std::int64_t filters, Size2 kernel_size, Conv2DOptions options)
    : Layer(std::make_shared<Conv2DImpl>(filters, kernel_size, std::move(options))) {}

// ---- Conv2DTranspose -------------------------------------------------------------------

Conv2DTransposeImpl::Conv2DTransposeImpl(std::int64_t filters, Size2 kernel_size,
                                         Conv2DOptions options)
    : SingleInputLayerImpl("Conv2DTranspose", options.name),
      filters_(filters),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(filters_ >= 1, "Conv2DTranspose: filters must be >= 1, got ", filters_);
  LOCKSTEP_CHECK(options_.groups == 1, "Conv2DTranspose: groups must be 1 (Keras has none), got ",
                 options_.groups);
  op_ = {.strides = options_.strides,
         .padding = parse_padding(options_.padding, "Conv2DTranspose"),
         .dilation_rate = options_.dilation_rate};
}

void Conv2DTransposeImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  check_image_input(s, *this);
  kernel_ = add_weight({.name = "kernel",
                        .shape = {kernel_size_[0], kernel_size_[1], filters_, s[3]},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor Conv2DTransposeImpl::call(const Tensor& x, const CallContext&) {
  check_image_input(x.shape(), *this);
  return activation_(conv2d_transpose(x, autocast(kernel_), autocast(bias_), op_));
}

LayerConfig Conv2DTransposeImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("filters", filters_);
  c.set("kernel_size", vec2(kernel_size_));
  c.set("strides", vec2(options_.strides));
  c.set("padding", options_.padding);
  c.set("dilation_rate", vec2(options_.dilation_rate));
  put_kernel_layer_options(c, options_.activation, options_.use_bias, options_.kernel_initializer,
                           options_.bias_initializer, options_.kernel_regularizer,
                           options_.bias_regularizer);
  return c;
}

Conv2DTranspose::Conv2DTranspose(std::int64_t filters, Size2 kernel_size, Conv2DOptions options)
    : Layer(std::make_shared<Conv2DTransposeImpl>(filters, kernel_size, std::move(options))) {}

// ---- DepthwiseConv2D ---------------------------------------------------------------

DepthwiseConv2DImpl::DepthwiseConv2DImpl(Size2 kernel_size, DepthwiseConv2DOptions options)
    : SingleInputLayerImpl("DepthwiseConv2D", options.name),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(options_.depth_multiplier >= 1, "DepthwiseConv2D: depth_multiplier must be >= 1");
  (void)parse_padding(options_.padding, "DepthwiseConv2D");
}

void DepthwiseConv2DImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  check_image_input(s, *this);
  channels_ = s[3];
  kernel_ =
      add_weight({.name = "kernel",
                  .shape = {kernel_size_[0], kernel_size_[1], channels_, options_.depth_multiplier},
                  .initializer = options_.depthwise_initializer,
                  .regularizer = options_.depthwise_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {channels_ * options_.depth_multiplier},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor DepthwiseConv2DImpl::call(const Tensor& x, const CallContext& ctx) {
  check_image_input(x.shape(), *this);
  // [kh, kw, c, m] is, byte for byte, a grouped kernel [kh, kw, 1, c·m].
  const Tensor kernel = reshape(autocast(kernel_), {kernel_size_[0], kernel_size_[1], 1,
                                                    channels_ * options_.depth_multiplier});
  const lockstep::Conv2DOptions op{.strides = options_.strides,
                                   .padding = parse_padding(options_.padding, "DepthwiseConv2D"),
                                   .dilation_rate = options_.dilation_rate,
                                   .groups = channels_};
  const Tensor y = conv2d(x, kernel, autocast(bias_), with_folded_padding(op, ctx));
  return ctx.skip_own_relu ? y : activation_(y);
}

std::optional<ReluOptions> DepthwiseConv2DImpl::own_relu() const {
  return plain_relu_activation(options_.activation);
}

bool DepthwiseConv2DImpl::absorbs_zero_padding() const {
  return parse_padding(options_.padding, "DepthwiseConv2D") == Padding::kValid;
}

namespace {

// The keys DepthwiseConv2D and SeparableConv2D share, as Keras writes them.
template <typename Options>
void put_depthwise_config(LayerConfig& c, Size2 kernel_size, const Options& o) {
  c.set("kernel_size", vec2(kernel_size));
  c.set("strides", vec2(o.strides));
  c.set("padding", o.padding);
  c.set("depth_multiplier", o.depth_multiplier);
  c.set("dilation_rate", vec2(o.dilation_rate));
  c.set("activation", o.activation.empty() ? std::string("linear") : o.activation);
  c.set("use_bias", o.use_bias);
}

}  // namespace

LayerConfig DepthwiseConv2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  put_depthwise_config(c, kernel_size_, options_);
  put_regularizer(c, "depthwise_regularizer", options_.depthwise_regularizer);
  put_regularizer(c, "bias_regularizer", options_.bias_regularizer);
  return c;
}

DepthwiseConv2D::DepthwiseConv2D(Size2 kernel_size, DepthwiseConv2DOptions options)
    : Layer(std::make_shared<DepthwiseConv2DImpl>(kernel_size, std::move(options))) {}

// ---- SeparableConv2D -------------------------------------------------------------------

SeparableConv2DImpl::SeparableConv2DImpl(std::int64_t filters, Size2 kernel_size,
                                         SeparableConv2DOptions options)
    : SingleInputLayerImpl("SeparableConv2D", options.name),
      filters_(filters),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(filters_ >= 1, "SeparableConv2D: filters must be >= 1, got ", filters_);
  LOCKSTEP_CHECK(options_.depth_multiplier >= 1, "SeparableConv2D: depth_multiplier must be >= 1");
  (void)parse_padding(options_.padding, "SeparableConv2D");
}

void SeparableConv2DImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  check_image_input(s, *this);
  channels_ = s[3];
  const std::int64_t m = options_.depth_multiplier;
  depthwise_ = add_weight({.name = "depthwise_kernel",
                           .shape = {kernel_size_[0], kernel_size_[1], channels_, m},
                           .initializer = options_.depthwise_initializer,
                           .regularizer = options_.depthwise_regularizer});
  pointwise_ = add_weight({.name = "pointwise_kernel",
                           .shape = {1, 1, channels_ * m, filters_},
                           .initializer = options_.pointwise_initializer,
                           .regularizer = options_.pointwise_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor SeparableConv2DImpl::call(const Tensor& x, const CallContext&) {
  check_image_input(x.shape(), *this);
  // As TensorFlow's separable_conv2d: the depthwise step takes the strides,
  // padding and dilation; the pointwise one is a 1×1 'valid' convolution.
  const Tensor depthwise = reshape(autocast(depthwise_), {kernel_size_[0], kernel_size_[1], 1,
                                                          channels_ * options_.depth_multiplier});
  const Tensor h = conv2d(x, depthwise, Tensor(),
                          {.strides = options_.strides,
                           .padding = parse_padding(options_.padding, "SeparableConv2D"),
                           .dilation_rate = options_.dilation_rate,
                           .groups = channels_});
  return activation_(conv2d(h, autocast(pointwise_), autocast(bias_)));
}

LayerConfig SeparableConv2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("filters", filters_);
  put_depthwise_config(c, kernel_size_, options_);
  put_initializer(c, "depthwise_initializer", options_.depthwise_initializer);
  put_initializer(c, "pointwise_initializer", options_.pointwise_initializer);
  put_initializer(c, "bias_initializer", options_.bias_initializer);
  put_regularizer(c, "depthwise_regularizer", options_.depthwise_regularizer);
  put_regularizer(c, "pointwise_regularizer", options_.pointwise_regularizer);
  put_regularizer(c, "bias_regularizer", options_.bias_regularizer);
  return c;
}

SeparableConv2D::SeparableConv2D(std::int64_t filters, Size2 kernel_size,
                                 SeparableConv2DOptions options)
    : Layer(std::make_shared<SeparableConv2DImpl>(filters, kernel_size, std::move(options))) {}

// ---- pooling ------------------------------------------------------------------------

Pooling2DImpl::Pooling2DImpl(bool max, Size2 pool_size, Pooling2DOptions options)
    : SingleInputLayerImpl(max ? "MaxPooling2D" : "AveragePooling2D", options.name),
      max_(max),
      padding_name_(options.padding) {
  op_ = {.pool_size = pool_size,
         .strides = options.strides,
         .padding = parse_padding(options.padding, max ? "MaxPooling2D" : "AveragePooling2D")};
}

Tensor Pooling2DImpl::call(const Tensor& x, const CallContext& ctx) {
  check_image_input(x.shape(), *this);
  if (!max_) return avg_pool2d(x, op_);
  const Tensor y = max_pool2d(x, op_);
  return ctx.relu ? relu(y, *ctx.relu) : y;
}

LayerConfig Pooling2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("pool_size", vec2(op_.pool_size));
  c.set("strides", vec2({op_.strides[0] > 0 ? op_.strides[0] : op_.pool_size[0],
                         op_.strides[1] > 0 ? op_.strides[1] : op_.pool_size[1]}));
  c.set("padding", padding_name_);
  return c;
}

MaxPooling2D::MaxPooling2D(Size2 pool_size, Pooling2DOptions options)
    : Layer(std::make_shared<Pooling2DImpl>(true, pool_size, std::move(options))) {}
AveragePooling2D::AveragePooling2D(Size2 pool_size, Pooling2DOptions options)
    : Layer(std::make_shared<Pooling2DImpl>(false, pool_size, std::move(options))) {}

GlobalPooling2DImpl::GlobalPooling2DImpl(bool max, GlobalPoolingOptions options)
    : SingleInputLayerImpl(max ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D", options.name),
      max_(max),
      options_(std::move(options)) {}

Tensor GlobalPooling2DImpl::call(const Tensor& x, const CallContext&) {
  check_image_input(x.shape(), *this);
  const ReduceOptions over_positions{.axes = {1, 2}, .keepdims = options_.keepdims};
  return max_ ? max(x, over_positions) : mean(x, over_positions);
}

LayerConfig GlobalPooling2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("keepdims", options_.keepdims);
  return c;
}

GlobalAveragePooling2D::GlobalAveragePooling2D(GlobalPoolingOptions options)
    : Layer(std::make_shared<GlobalPooling2DImpl>(false, std::move(options))) {}
GlobalMaxPooling2D::GlobalMaxPooling2D(GlobalPoolingOptions options)
    : Layer(std::make_shared<GlobalPooling2DImpl>(true, std::move(options))) {}

ZeroPadding2DImpl::ZeroPadding2DImpl(std::array<Size2, 2> padding, std::string name)
    : SingleInputLayerImpl("ZeroPadding2D", std::move(name)), padding_(padding) {}

Tensor ZeroPadding2DImpl::call(const Tensor& x, const CallContext&) {
  check_image_input(x.shape(), *this);
  return pad(x,
             {{0, 0}, {padding_[0][0], padding_[0][1]}, {padding_[1][0], padding_[1][1]}, {0, 0}});
}

LayerConfig ZeroPadding2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("padding",
        std::vector<std::int64_t>{padding_[0][0], padding_[0][1], padding_[1][0], padding_[1][1]});
  return c;
}

ZeroPadding2D::ZeroPadding2D(std::array<Size2, 2> padding, std::string name)
    : Layer(std::make_shared<ZeroPadding2DImpl>(padding, std::move(name))) {}

// ---- Resizing ---------------------------------------------------------------------------

ResizingImpl::ResizingImpl(std::int64_t height, std::int64_t width, ResizingOptions options)
    : SingleInputLayerImpl("Resizing", options.name),
      height_(height),
      width_(width),
      options_(std::move(options)) {
  LOCKSTEP_CHECK(height > 0 && width > 0, "Resizing: height and width must be > 0, got ", height,
                 " and ", width);
  LOCKSTEP_CHECK(options_.interpolation == "bilinear", "Resizing: interpolation '",
                 options_.interpolation,
                 "' is not implemented; Lockstep has 'bilinear' (tf.image.resize's default)");
  LOCKSTEP_CHECK(
      !options_.crop_to_aspect_ratio && !options_.pad_to_aspect_ratio && !options_.antialias,
      "Resizing: crop_to_aspect_ratio, pad_to_aspect_ratio and antialias are not "
      "implemented (got ",
      options_.crop_to_aspect_ratio, ", ", options_.pad_to_aspect_ratio, ", ", options_.antialias,
      "). Hint: resize without them, or crop with a Cropping step "
      "in the input pipeline");
}

Tensor ResizingImpl::call(const Tensor& x, const CallContext&) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 3 || x.rank() == 4, "Resizing '", name(),
                    "': expected images [batch, height, width, channels] or one image [height, "
                    "width, channels], got shape ",
                    x.shape());
  const Tensor f = x.dtype() == DType::kFloat32 ? x : cast(x, DType::kFloat32);
  return image::resize(f, {height_, width_});
}

LayerConfig ResizingImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("height", height_);
  c.set("width", width_);
  c.set("interpolation", options_.interpolation);
  c.set("crop_to_aspect_ratio", options_.crop_to_aspect_ratio);
  c.set("pad_to_aspect_ratio", options_.pad_to_aspect_ratio);
  c.set("fill_mode", options_.fill_mode);
  c.set("fill_value", static_cast<double>(options_.fill_value));
  c.set("antialias", options_.antialias);
  return c;
}

Resizing::Resizing(std::int64_t height, std::int64_t width, ResizingOptions options)
    : Layer(std::make_shared<ResizingImpl>(height, width, std::move(options))) {}

// ---- BatchNormalization ----------------------------------------------------------------

BatchNormalizationImpl::BatchNormalizationImpl(BatchNormalizationOptions options)
    : SingleInputLayerImpl("BatchNormalization", options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.momentum >= 0 && options_.momentum <= 1,
                 "BatchNormalization: momentum must be in [0, 1]");
  LOCKSTEP_CHECK(options_.epsilon > 0, "BatchNormalization: epsilon must be > 0");
}

void BatchNormalizationImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() >= 2, "BatchNormalization '", name(),
                    "': expected input of rank >= 2, got ", s);
  const std::int64_t c = s[s.rank() - 1];
  if (options_.scale)
    gamma_ = add_weight({.name = "gamma", .shape = {c}, .initializer = options_.gamma_initializer});
  if (options_.center)
    beta_ = add_weight({.name = "beta", .shape = {c}, .initializer = options_.beta_initializer});
  moving_mean_ = add_weight({.name = "moving_mean",
                             .shape = {c},
                             .initializer = options_.moving_mean_initializer,
                             .trainable = false,
                             .aggregation = VariableAggregation::kMean});
  moving_variance_ = add_weight({.name = "moving_variance",
                                 .shape = {c},
                                 .initializer = options_.moving_variance_initializer,
                                 .trainable = false,
                                 .aggregation = VariableAggregation::kMean});
  ones_ = Tensor::ones({c});
  zeros_ = Tensor::zeros({c});
}

Tensor BatchNormalizationImpl::call(const Tensor& input, const CallContext& ctx) {
  // Statistics and normalisation in float32 whatever the policy computes in
  // (Keras's rule for mixed precision); the output in the compute dtype. The
  // ops take bfloat16 data as it is and compute in float32 inside (no
  // float32 copy of the activations: tensor/ops/batch_norm_ops.cc).
  const Tensor x = input.dtype() == DType::kFloat32 || input.dtype() == DType::kBFloat16
                       ? input
                       : cast(input, DType::kFloat32);
  const auto out = [&](const Tensor& y) {
    return y.dtype() == compute_dtype() ? y : cast(y, compute_dtype());
  };
  const Tensor gamma = options_.scale ? gamma_.value() : ones_;
  const Tensor beta = options_.center ? beta_.value() : zeros_;
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 2 && x.shape()[x.rank() - 1] == moving_mean_.shape()[0],
                    "BatchNormalization '", name(), "': expected input with ",
                    moving_mean_.shape()[0], " channels in the last axis, got shape ", x.shape());
  // A ReLU folded into this call (CallContext::relu) is applied before the
  // cast to the compute dtype: rounding to bfloat16 is monotonic, so the
  // values equal those of the ReLU layer run on the cast output (a graph
  // folds only when the two layers compute in the same dtype).
  if (!ctx.training || !trainable(ctx)) {
    const Tensor y = batch_norm_inference(x, gamma, beta, moving_mean_.value(),
                                          moving_variance_.value(), options_.epsilon);
    return out(ctx.relu ? relu(y, *ctx.relu) : y);
  }
  BatchNormResult r =
      ctx.relu ? batch_norm_relu_training(x, gamma, beta, options_.epsilon, ctx.relu->max_value)
               : batch_norm_training(x, gamma, beta, options_.epsilon);
  // The cast to the compute dtype is recorded (outside the guard below):
  // under mixed_bfloat16 the gradient goes back through it.
  Tensor y = out(r.y);
  NoGradGuard no_grad;
  // moving = moving · momentum + batch · (1 − momentum)
  moving_mean_.assign(moving_average(moving_mean_.value(), r.mean, options_.momentum));
  moving_variance_.assign(moving_average(moving_variance_.value(), r.variance, options_.momentum));
  return y;
}

void BatchNormalizationImpl::set_momentum(float momentum) {
  LOCKSTEP_CHECK(momentum >= 0 && momentum <= 1, "BatchNormalization '", name(),
                 "': momentum must be in [0, 1], got ", momentum);
  options_.momentum = momentum;
}

LayerConfig BatchNormalizationImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("momentum", static_cast<double>(options_.momentum));
  c.set("epsilon", static_cast<double>(options_.epsilon));
  c.set("center", options_.center);
  c.set("scale", options_.scale);
  return c;
}

BatchNormalization::BatchNormalization(BatchNormalizationOptions options)
    : Layer(std::make_shared<BatchNormalizationImpl>(std::move(options))) {}

}  // namespace lockstep::layers
