// Conv1D and the 1-D pooling layers (sequence_layers.h), as their 2-D
// counterparts on [batch, 1, steps, features].
#include "lockstep/nn/sequence_layers.h"

#include "lockstep/nn/activations.h"
#include "lockstep/tensor/ops.h"
#include "nn/config_helpers.h"
#include "nn/masks.h"

namespace lockstep::layers {

using nn_detail::put_kernel_layer_options;

namespace {

void check_sequence_input(const Shape& s, const LayerImpl& layer) {
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() == 3, layer.class_name(), " '", layer.name(),
                    "': expected input of shape [batch, steps, features], got ", s);
}

// [b, steps, c] <-> [b, 1, steps, c].
Tensor as_image(const Tensor& x) { return reshape(x, {x.dim(0), 1, x.dim(1), x.dim(2)}); }
Tensor as_sequence(const Tensor& y) { return reshape(y, {y.dim(0), y.dim(2), y.dim(3)}); }

Padding padding_of(const std::string& padding, const LayerImpl& layer, bool causal_allowed) {
  if (padding == "valid") return Padding::kValid;
  if (padding == "same") return Padding::kSame;
  LOCKSTEP_CHECK(causal_allowed && padding == "causal", layer.class_name(), " '", layer.name(),
                 "': unknown padding '", padding, "'; valid values: valid, same",
                 causal_allowed ? ", causal" : "");
  return Padding::kExplicit;
}

}  // namespace

// ---- Conv1D ------------------------------------------------------------------

Conv1DImpl::Conv1DImpl(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options)
    : SingleInputLayerImpl("Conv1D", options.name),
      filters_(filters),
      kernel_size_(kernel_size),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(filters > 0 && kernel_size > 0 && options_.strides > 0 &&
                     options_.dilation_rate > 0 && options_.groups > 0,
                 "Conv1D '", name(),
                 "': filters, kernel_size, strides, dilation_rate and groups must be > 0");
  padding_of(options_.padding, *this, true);
  LOCKSTEP_CHECK(
      options_.padding != "causal" || options_.strides == 1 || options_.dilation_rate == 1,
      "Conv1D '", name(), "': causal padding with both strides and dilation_rate > 1");
}

void Conv1DImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  check_sequence_input(s, *this);
  const std::int64_t c = s[2];
  LOCKSTEP_CHECK_AS(ShapeError, c % options_.groups == 0 && filters_ % options_.groups == 0,
                    "Conv1D '", name(), "': input features (", c, ") and filters (", filters_,
                    ") must be divisible by groups (", options_.groups, ")");
  kernel_ = add_weight({.name = "kernel",
                        .shape = {kernel_size_, c / options_.groups, filters_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor Conv1DImpl::call(const Tensor& x, const CallContext&) {
  check_sequence_input(x.shape(), *this);
  Conv2DOptions op{.strides = {1, options_.strides},
                   .padding = padding_of(options_.padding, *this, true),
                   .dilation_rate = {1, options_.dilation_rate},
                   .groups = options_.groups};
  // Causal: (kernel_size - 1) * dilation zeros before the first step.
  if (op.padding == Padding::kExplicit)
    op.explicit_padding = {{{0, 0}, {(kernel_size_ - 1) * options_.dilation_rate, 0}}};
  const Tensor k = autocast(kernel_);
  const Tensor kernel = reshape(k, {1, k.dim(0), k.dim(1), k.dim(2)});
  return activation_(as_sequence(conv2d(as_image(x), kernel, autocast(bias_), op)));
}

LayerConfig Conv1DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("filters", filters_);
  c.set("kernel_size", std::vector<std::int64_t>{kernel_size_});
  c.set("strides", std::vector<std::int64_t>{options_.strides});
  c.set("padding", options_.padding);
  c.set("dilation_rate", std::vector<std::int64_t>{options_.dilation_rate});
  c.set("groups", options_.groups);
  put_kernel_layer_options(c, options_.activation, options_.use_bias, options_.kernel_initializer,
                           options_.bias_initializer, options_.kernel_regularizer,
                           options_.bias_regularizer);
  return c;
}

Conv1D::Conv1D(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options)
    : Layer(std::make_shared<Conv1DImpl>(filters, kernel_size, std::move(options))) {}

// ---- MaxPooling1D, AveragePooling1D ---------------------------------------------

Pooling1DImpl::Pooling1DImpl(bool max, std::int64_t pool_size, Pooling1DOptions options)
    : SingleInputLayerImpl(max ? "MaxPooling1D" : "AveragePooling1D", options.name),
      max_(max),
      pool_size_(pool_size),
      options_(std::move(options)) {
  LOCKSTEP_CHECK(pool_size > 0 && options_.strides >= 0, class_name(), " '", name(),
                 "': pool_size must be > 0 and strides >= 0");
  padding_of(options_.padding, *this, false);
}

Tensor Pooling1DImpl::call(const Tensor& x, const CallContext&) {
  check_sequence_input(x.shape(), *this);
  const Pool2DOptions op{.pool_size = {1, pool_size_},
                         .strides = {1, options_.strides > 0 ? options_.strides : pool_size_},
                         .padding = padding_of(options_.padding, *this, false)};
  return as_sequence(max_ ? max_pool2d(as_image(x), op) : avg_pool2d(as_image(x), op));
}

LayerConfig Pooling1DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("pool_size", std::vector<std::int64_t>{pool_size_});
  c.set("strides", std::vector<std::int64_t>{options_.strides > 0 ? options_.strides : pool_size_});
  c.set("padding", options_.padding);
  return c;
}

MaxPooling1D::MaxPooling1D(std::int64_t pool_size, Pooling1DOptions options)
    : Layer(std::make_shared<Pooling1DImpl>(true, pool_size, std::move(options))) {}
AveragePooling1D::AveragePooling1D(std::int64_t pool_size, Pooling1DOptions options)
    : Layer(std::make_shared<Pooling1DImpl>(false, pool_size, std::move(options))) {}

// ---- GlobalAveragePooling1D, GlobalMaxPooling1D -----------------------------------

GlobalPooling1DImpl::GlobalPooling1DImpl(bool max, GlobalPooling1DOptions options)
    : SingleInputLayerImpl(max ? "GlobalMaxPooling1D" : "GlobalAveragePooling1D", options.name),
      max_(max),
      options_(std::move(options)) {}

Tensor GlobalPooling1DImpl::call(const Tensor& x, const CallContext&) {
  check_sequence_input(x.shape(), *this);
  const ReduceOptions over_steps{.axes = {1}, .keepdims = options_.keepdims};
  return max_ ? max(x, over_steps) : mean(x, over_steps);
}

std::vector<Tensor> GlobalPooling1DImpl::call_masked(const std::vector<Tensor>& inputs,
                                                     const std::vector<Tensor>& masks,
                                                     const CallContext& ctx) {
  const Tensor& x = inputs.at(0);
  if (max_ || !masks.at(0).defined()) return {call(x, ctx)};
  check_sequence_input(x.shape(), *this);
  // Keras's: the sum of the real steps over their count.
  const Shape& s = x.shape();
  const Tensor keep = reshape(nn_detail::as_mask(masks[0]), {s[0], s[1], 1});
  const ReduceOptions over_steps{.axes = {1}, .keepdims = options_.keepdims};
  const Tensor total = sum(where(keep, x, Tensor::zeros({}, x.dtype())), over_steps);
  return {total / sum(nn_detail::mask_values(keep, x.dtype()), over_steps)};
}

LayerConfig GlobalPooling1DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("keepdims", options_.keepdims);
  return c;
}

GlobalAveragePooling1D::GlobalAveragePooling1D(GlobalPooling1DOptions options)
    : Layer(std::make_shared<GlobalPooling1DImpl>(false, std::move(options))) {}
GlobalMaxPooling1D::GlobalMaxPooling1D(GlobalPooling1DOptions options)
    : Layer(std::make_shared<GlobalPooling1DImpl>(true, std::move(options))) {}

// ---- TimeDistributed --------------------------------------------------------------

TimeDistributedImpl::TimeDistributedImpl(const Layer& layer, std::string name)
    : SingleInputLayerImpl("TimeDistributed", std::move(name)), layer_(layer) {
  LOCKSTEP_CHECK(layer_.defined(), "TimeDistributed '", this->name(), "': the layer is undefined");
  track(layer_, "layer");
}

namespace {
// [batch, steps, rest...] -> [batch · steps, rest...]
Shape merged_steps(const Shape& s, const LayerImpl& layer) {
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() >= 3, "TimeDistributed '", layer.name(),
                    "': expected [batch, steps, ...] with at least one dimension per step, got ",
                    s);
  std::vector<std::int64_t> dims{s[0] * s[1]};
  for (int i = 2; i < s.rank(); ++i) dims.push_back(s[i]);
  return Shape(dims);
}
}  // namespace

void TimeDistributedImpl::build(const std::vector<Shape>& input_shapes) {
  layer_->ensure_built({merged_steps(input_shapes.at(0), *this)});
}

Tensor TimeDistributedImpl::call(const Tensor& x, const CallContext& ctx) {
  const Shape merged = merged_steps(x.shape(), *this);
  const Tensor y = layer_(reshape(x, merged.to_vector()), ctx);
  std::vector<std::int64_t> dims{x.shape()[0], x.shape()[1]};
  for (int i = 1; i < y.rank(); ++i) dims.push_back(y.shape()[i]);
  return reshape(y, dims);
}

TimeDistributed::TimeDistributed(const Layer& layer, std::string name)
    : Layer(std::make_shared<TimeDistributedImpl>(layer, std::move(name))) {}

}  // namespace lockstep::layers
