// The core Keras layers: Dense, Activation, ReLU, Softmax, Dropout, Flatten,
// Reshape, Add, Concatenate, Rescaling, Normalization, Embedding.
#include "lockstep/nn/layers.h"

#include <algorithm>
#include <cmath>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "nn/config_helpers.h"
#include "nn/masks.h"

namespace lockstep {

namespace layers {

using nn_detail::put_initializer;
using nn_detail::put_kernel_layer_options;
using nn_detail::put_regularizer;

// ---- Dense ------------------------------------------------------------------

DenseImpl::DenseImpl(std::int64_t units, DenseOptions options)
    : SingleInputLayerImpl("Dense", options.name),
      units_(units),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  LOCKSTEP_CHECK(units > 0, "Dense: units must be > 0, got ", units);
  if (!options_.dtype.empty()) set_dtype_policy(options_.dtype);
}

void DenseImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() >= 2, "Dense '", name(),
                    "': expected input of rank >= 2 (batch, features), got shape ", s);
  kernel_ = add_weight({.name = "kernel",
                        .shape = {s[s.rank() - 1], units_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {units_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer});
  }
}

Tensor DenseImpl::call(const Tensor& x, const CallContext&) {
  const std::int64_t in = kernel_.shape()[0];
  if (x.rank() < 2 || x.shape()[x.rank() - 1] != in) {
    detail::throw_error<ShapeError>("Dense '", name(), "': expected input of last dimension ", in,
                                    ", got ", x.rank() ? x.shape()[x.rank() - 1] : 0, " (shape ",
                                    x.shape(), ").",
                                    x.rank() > 2 ? " Hint: add a Flatten layer." : "");
  }
  // Dense acts on the last axis: fold the others into the batch.
  const Tensor flat = x.rank() == 2 ? x : reshape(x, {-1, in});
  // "relu" runs inside the matmul's kernel (MatmulOptions::relu).
  const bool fused_relu = options_.activation == "relu";
  const MatmulOptions o{.relu = fused_relu};
  Tensor y = options_.use_bias ? matmul(flat, autocast(kernel_), autocast(bias_), o)
                               : matmul(flat, autocast(kernel_), o);
  if (x.rank() != 2) {
    std::vector<std::int64_t> shape = x.shape().to_vector();
    shape.back() = units_;
    y = reshape(y, shape);
  }
  return fused_relu ? y : activation_(y);
}

LayerConfig DenseImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("units", units_);
  put_kernel_layer_options(c, options_.activation, options_.use_bias, options_.kernel_initializer,
                           options_.bias_initializer, options_.kernel_regularizer,
                           options_.bias_regularizer);
  return c;
}

Dense::Dense(std::int64_t units, DenseOptions options)
    : Layer(std::make_shared<DenseImpl>(units, std::move(options))) {}

// ---- Activation, ReLU, Softmax ---------------------------------------------------

ActivationImpl::ActivationImpl(const std::string& activation, std::string name)
    : SingleInputLayerImpl("Activation", std::move(name)),
      activation_(activation),
      fn_(get_activation(activation)) {}
Tensor ActivationImpl::call(const Tensor& x, const CallContext&) { return fn_(x); }
std::optional<ReluOptions> ActivationImpl::plain_relu() const {
  return plain_relu_activation(activation_);
}
LayerConfig ActivationImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("activation", activation_);
  return c;
}
Activation::Activation(const std::string& activation, std::string name)
    : Layer(std::make_shared<ActivationImpl>(activation, std::move(name))) {}

ReLUImpl::ReLUImpl(ReLUOptions options)
    : SingleInputLayerImpl("ReLU", options.name), options_(std::move(options)) {
  // Keras's own checks, in its words.
  LOCKSTEP_CHECK(!options_.max_value || *options_.max_value >= 0.0f,
                 "max_value of a ReLU layer cannot be a negative value. Received: max_value=",
                 options_.max_value.value_or(0.0f));
  LOCKSTEP_CHECK(options_.negative_slope >= 0.0f,
                 "negative_slope of a ReLU layer cannot be a negative value. Received: "
                 "negative_slope=",
                 options_.negative_slope);
  LOCKSTEP_CHECK(options_.threshold >= 0.0f,
                 "threshold of a ReLU layer cannot be a negative value. Received: threshold=",
                 options_.threshold);
}
Tensor ReLUImpl::call(const Tensor& x, const CallContext&) {
  return relu(x, {.negative_slope = options_.negative_slope,
                  .max_value = options_.max_value,
                  .threshold = options_.threshold});
}
std::optional<ReluOptions> ReLUImpl::plain_relu() const {
  if (options_.negative_slope != 0.0f || options_.threshold != 0.0f) return std::nullopt;
  return ReluOptions{.max_value = options_.max_value};
}
LayerConfig ReLUImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  if (options_.max_value) c.set("max_value", static_cast<double>(*options_.max_value));
  c.set("negative_slope", static_cast<double>(options_.negative_slope));
  c.set("threshold", static_cast<double>(options_.threshold));
  return c;
}
ReLU::ReLU(ReLUOptions options) : Layer(std::make_shared<ReLUImpl>(std::move(options))) {}

LeakyReLUImpl::LeakyReLUImpl(LeakyReLUOptions options)
    : SingleInputLayerImpl("LeakyReLU", options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.negative_slope >= 0.0f,
                 "The negative_slope value of a Leaky ReLU layer cannot be None or negative "
                 "value. Expected a float. Received: negative_slope=",
                 options_.negative_slope);
}
Tensor LeakyReLUImpl::call(const Tensor& x, const CallContext&) {
  return activations::leaky_relu(x, options_.negative_slope);
}
LayerConfig LeakyReLUImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("negative_slope", static_cast<double>(options_.negative_slope));
  return c;
}
LeakyReLU::LeakyReLU(LeakyReLUOptions options)
    : Layer(std::make_shared<LeakyReLUImpl>(std::move(options))) {}

ELUImpl::ELUImpl(ELUOptions options)
    : SingleInputLayerImpl("ELU", options.name), options_(std::move(options)) {}
Tensor ELUImpl::call(const Tensor& x, const CallContext&) {
  return activations::elu(x, options_.alpha);
}
LayerConfig ELUImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("alpha", static_cast<double>(options_.alpha));
  return c;
}
ELU::ELU(ELUOptions options) : Layer(std::make_shared<ELUImpl>(std::move(options))) {}

PReLUImpl::PReLUImpl(PReLUOptions options)
    : SingleInputLayerImpl("PReLU", options.name), options_(std::move(options)) {}
void PReLUImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() >= 2, "PReLU '", name(),
                    "': expected input of rank >= 2 (batch, ...), got shape ", s);
  std::vector<std::int64_t> shape(s.dims().begin() + 1, s.dims().end());
  for (std::int64_t axis : options_.shared_axes) {
    LOCKSTEP_CHECK_AS(ShapeError, axis >= 1 && axis < s.rank(), "PReLU '", name(),
                      "': shared axis ", axis, " is not an axis of inputs of shape ", s,
                      " (1 is the first after the batch)");
    shape[static_cast<std::size_t>(axis - 1)] = 1;
  }
  alpha_ = add_weight({.name = "alpha",
                       .shape = Shape(shape),
                       .initializer = options_.alpha_initializer,
                       .regularizer = options_.alpha_regularizer});
}
Tensor PReLUImpl::call(const Tensor& x, const CallContext&) {
  const Tensor zero = zeros_like(x);
  Tensor a = alpha_.value();
  if (a.dtype() != x.dtype()) a = cast(a, x.dtype());
  return maximum(x, zero) + a * minimum(x, zero);
}
LayerConfig PReLUImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  put_initializer(c, "alpha_initializer", options_.alpha_initializer);
  put_regularizer(c, "alpha_regularizer", options_.alpha_regularizer);
  if (!options_.shared_axes.empty()) c.set("shared_axes", options_.shared_axes);
  return c;
}
PReLU::PReLU(PReLUOptions options) : Layer(std::make_shared<PReLUImpl>(std::move(options))) {}

SoftmaxImpl::SoftmaxImpl(int axis, std::string name)
    : SingleInputLayerImpl("Softmax", std::move(name)), axis_(axis) {}
Tensor SoftmaxImpl::call(const Tensor& x, const CallContext&) { return softmax(x, axis_); }

std::vector<Tensor> SoftmaxImpl::call_masked(const std::vector<Tensor>& inputs,
                                             const std::vector<Tensor>& masks,
                                             const CallContext& ctx) {
  const Tensor& x = inputs.at(0);
  const Tensor& mask = masks.at(0);
  if (!mask.defined()) return {call(x, ctx)};
  bool broadcasts = mask.rank() <= x.rank();
  for (int i = 1; broadcasts && i <= mask.rank(); ++i) {
    const std::int64_t m = mask.shape()[mask.rank() - i], d = x.shape()[x.rank() - i];
    broadcasts = m == 1 || m == d;
  }
  LOCKSTEP_CHECK_AS(ShapeError, broadcasts, "Softmax '", name(), "': the mask ", mask.shape(),
                    " must broadcast to the input ", x.shape(),
                    " (each of its dimensions, from the right, 1 or the input's)");
  // Keras's: masked positions at -1e9 before, zeroed after (an all-masked
  // row gives zeros, not a uniform distribution).
  const Tensor keep = nn_detail::as_mask(mask);
  const Tensor p = softmax(where(keep, x, Tensor::full({}, -1e9, x.dtype())), axis_);
  return {where(keep, p, Tensor::zeros({}, p.dtype()))};
}
LayerConfig SoftmaxImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("axis", std::int64_t{axis_});
  return c;
}
Softmax::Softmax(int axis, std::string name)
    : Layer(std::make_shared<SoftmaxImpl>(axis, std::move(name))) {}

// ---- Dropout -----------------------------------------------------------------------

DropoutImpl::DropoutImpl(float rate, DropoutOptions options)
    : SingleInputLayerImpl("Dropout", options.name), rate_(rate) {
  LOCKSTEP_CHECK(rate >= 0.0f && rate < 1.0f, "Dropout: rate must be in [0, 1), got ", rate);
  // Each call draws a new stream; an unseeded layer takes its own block of
  // streams from the global sequence.
  explicit_seed_ = options.seed;
  if (options.seed) {
    seed_ = *options.seed;
  } else {
    const auto [seed, stream] = detail::next_global_random_key();
    seed_ = seed;
    next_stream_.reset(stream << 32);
  }
}

Tensor DropoutImpl::call(const Tensor& x, const CallContext& ctx) {
  if (!ctx.training || rate_ == 0.0f) return x;
  const Tensor u = random::uniform_next(x.shape(), seed_, next_stream_.of(current_mirrored_copy()));
  const Tensor keep = cast(greater_equal(u, Tensor::scalar(rate_)), x.dtype());
  return mul(x, mul(keep, Tensor::scalar(1.0f / (1.0f - rate_))));
}

LayerConfig DropoutImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("rate", static_cast<double>(rate_));
  if (explicit_seed_) c.set("seed", static_cast<std::int64_t>(*explicit_seed_));
  return c;
}

Dropout::Dropout(float rate, DropoutOptions options)
    : Layer(std::make_shared<DropoutImpl>(rate, std::move(options))) {}

// ---- Flatten, Reshape ------------------------------------------------------------------

FlattenImpl::FlattenImpl(std::string name) : SingleInputLayerImpl("Flatten", std::move(name)) {}
Tensor FlattenImpl::call(const Tensor& x, const CallContext&) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 1, "Flatten '", name(),
                    "': expected a batch, got a scalar");
  return reshape(x, {x.shape()[0], x.shape()[0] == 0 ? 0 : x.numel() / x.shape()[0]});
}
Flatten::Flatten(std::string name) : Layer(std::make_shared<FlattenImpl>(std::move(name))) {}

ReshapeImpl::ReshapeImpl(std::vector<std::int64_t> target_shape, std::string name)
    : SingleInputLayerImpl("Reshape", std::move(name)), target_(std::move(target_shape)) {}
Tensor ReshapeImpl::call(const Tensor& x, const CallContext&) {
  std::vector<std::int64_t> shape{x.shape()[0]};
  shape.insert(shape.end(), target_.begin(), target_.end());
  return reshape(x, shape);
}
LayerConfig ReshapeImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("target_shape", target_);
  return c;
}
Reshape::Reshape(std::vector<std::int64_t> target_shape, std::string name)
    : Layer(std::make_shared<ReshapeImpl>(std::move(target_shape), std::move(name))) {}

// ---- Add, Concatenate ------------------------------------------------------------------

AddImpl::AddImpl(std::string name) : LayerImpl("Add", std::move(name)) {}
std::vector<Tensor> AddImpl::call(const std::vector<Tensor>& inputs, const CallContext&) {
  LOCKSTEP_CHECK(inputs.size() >= 2, "Add '", this->name(), "': expected at least 2 inputs, got ",
                 inputs.size());
  Tensor out = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    LOCKSTEP_CHECK_AS(ShapeError, inputs[i].shape() == inputs[0].shape(), "Add '", this->name(),
                      "': input ", i, " has shape ", inputs[i].shape(), ", input 0 has ",
                      inputs[0].shape());
    out = add(out, inputs[i]);
  }
  return {out};
}
Add::Add(std::string name) : Layer(std::make_shared<AddImpl>(std::move(name))) {}

namespace {
const char* merge_class(ElementwiseMergeImpl::Kind kind) {
  using Kind = ElementwiseMergeImpl::Kind;
  switch (kind) {
    case Kind::kMultiply:
      return "Multiply";
    case Kind::kSubtract:
      return "Subtract";
    case Kind::kAverage:
      return "Average";
    case Kind::kMaximum:
      return "Maximum";
    case Kind::kMinimum:
      break;
  }
  return "Minimum";
}
}  // namespace

ElementwiseMergeImpl::ElementwiseMergeImpl(Kind kind, std::string name)
    : LayerImpl(merge_class(kind), std::move(name)), kind_(kind) {}
namespace {

// Keras's merge layers: the union of the masks when every input has one.
std::vector<Tensor> merged_mask(const std::vector<Tensor>& masks) {
  if (masks.empty()) return {Tensor()};
  Tensor out = masks[0];
  for (std::size_t i = 1; i < masks.size() && out.defined(); ++i)
    out = masks[i].defined() ? nn_detail::mask_or(out, masks[i]) : Tensor();
  return {out};
}

}  // namespace

std::vector<Tensor> AddImpl::compute_mask(const std::vector<Tensor>&,
                                          const std::vector<Tensor>& masks) const {
  return merged_mask(masks);
}

std::vector<Tensor> ElementwiseMergeImpl::compute_mask(const std::vector<Tensor>&,
                                                       const std::vector<Tensor>& masks) const {
  return merged_mask(masks);
}

std::vector<Tensor> ElementwiseMergeImpl::call_masked(const std::vector<Tensor>& inputs,
                                                      const std::vector<Tensor>& masks,
                                                      const CallContext& ctx) {
  if (kind_ != Kind::kMaximum && kind_ != Kind::kMinimum) return call(inputs, ctx);
  // Keras's Maximum and Minimum: where an input is masked it takes the
  // running result's value, and where the result is masked the input's, so
  // a masked position never wins the comparison (when the other is real).
  call(inputs, ctx);  // the checks
  auto expanded = [&](const Tensor& m, const Tensor& x) {
    std::vector<std::int64_t> dims = m.shape().to_vector();
    while (static_cast<int>(dims.size()) < x.rank()) dims.push_back(1);
    return reshape(nn_detail::as_mask(m), dims);
  };
  Tensor out = inputs[0];
  Tensor out_mask = masks[0].defined() ? expanded(masks[0], out) : Tensor();
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    Tensor x = inputs[i];
    const Tensor m = masks[i].defined() ? expanded(masks[i], x) : Tensor();
    if (m.defined()) x = where(m, x, out);
    if (out_mask.defined()) out = where(out_mask, out, x);
    out_mask = m.defined() && out_mask.defined() ? nn_detail::mask_or(out_mask, m) : Tensor();
    out = kind_ == Kind::kMaximum ? maximum(out, x) : minimum(out, x);
  }
  return {out};
}

std::vector<Tensor> ElementwiseMergeImpl::call(const std::vector<Tensor>& inputs,
                                               const CallContext&) {
  if (kind_ == Kind::kSubtract) {
    LOCKSTEP_CHECK(inputs.size() == 2, "Subtract '", name(), "': expected exactly 2 inputs, got ",
                   inputs.size());
  } else {
    LOCKSTEP_CHECK(inputs.size() >= 2, class_name(), " '", name(),
                   "': expected at least 2 inputs, got ", inputs.size());
  }
  Tensor out = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    LOCKSTEP_CHECK_AS(ShapeError, inputs[i].shape() == inputs[0].shape(), class_name(), " '",
                      name(), "': input ", i, " has shape ", inputs[i].shape(), ", input 0 has ",
                      inputs[0].shape());
    switch (kind_) {
      case Kind::kMultiply:
        out = mul(out, inputs[i]);
        break;
      case Kind::kSubtract:
        out = sub(out, inputs[i]);
        break;
      case Kind::kAverage:
        out = add(out, inputs[i]);
        break;
      case Kind::kMaximum:
        out = maximum(out, inputs[i]);
        break;
      case Kind::kMinimum:
        out = minimum(out, inputs[i]);
        break;
    }
  }
  if (kind_ == Kind::kAverage) out = out / static_cast<float>(inputs.size());
  return {out};
}
Multiply::Multiply(std::string name)
    : Layer(std::make_shared<ElementwiseMergeImpl>(ElementwiseMergeImpl::Kind::kMultiply,
                                                   std::move(name))) {}
Subtract::Subtract(std::string name)
    : Layer(std::make_shared<ElementwiseMergeImpl>(ElementwiseMergeImpl::Kind::kSubtract,
                                                   std::move(name))) {}
Average::Average(std::string name)
    : Layer(std::make_shared<ElementwiseMergeImpl>(ElementwiseMergeImpl::Kind::kAverage,
                                                   std::move(name))) {}
Maximum::Maximum(std::string name)
    : Layer(std::make_shared<ElementwiseMergeImpl>(ElementwiseMergeImpl::Kind::kMaximum,
                                                   std::move(name))) {}
Minimum::Minimum(std::string name)
    : Layer(std::make_shared<ElementwiseMergeImpl>(ElementwiseMergeImpl::Kind::kMinimum,
                                                   std::move(name))) {}

ConcatenateImpl::ConcatenateImpl(int axis, std::string name)
    : LayerImpl("Concatenate", std::move(name)), axis_(axis) {}
std::vector<Tensor> ConcatenateImpl::compute_mask(const std::vector<Tensor>& inputs,
                                                  const std::vector<Tensor>& masks) const {
  bool any = false;
  for (const Tensor& m : masks) any |= m.defined();
  if (!any) return {Tensor()};
  // Keras's: each input's mask over its whole shape (all true without one,
  // a step mask repeated over the features), joined along the axis, then
  // true where any of the last axis is.
  std::vector<Tensor> full;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    Tensor m = masks[i].defined() ? nn_detail::mask_values(masks[i]) : Tensor::ones(x.shape());
    if (m.rank() < x.rank()) {
      std::vector<std::int64_t> dims = m.shape().to_vector();
      while (static_cast<int>(dims.size()) < x.rank()) dims.push_back(1);
      m = reshape(m, dims) * Tensor::ones(x.shape());
    }
    full.push_back(m);
  }
  return {nn_detail::mask_any(concat(full, axis_), -1)};
}

std::vector<Tensor> ConcatenateImpl::call(const std::vector<Tensor>& inputs, const CallContext&) {
  LOCKSTEP_CHECK(inputs.size() >= 2, "Concatenate '", this->name(),
                 "': expected at least 2 inputs, got ", inputs.size());
  return {concat(inputs, axis_)};
}
LayerConfig ConcatenateImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("axis", std::int64_t{axis_});
  return c;
}
Concatenate::Concatenate(int axis, std::string name)
    : Layer(std::make_shared<ConcatenateImpl>(axis, std::move(name))) {}

// ---- Rescaling --------------------------------------------------------------------------

RescalingImpl::RescalingImpl(float scale, RescalingOptions options)
    : SingleInputLayerImpl("Rescaling", options.name),
      scale_(scale),
      options_(std::move(options)) {}
Tensor RescalingImpl::call(const Tensor& x, const CallContext&) {
  const Tensor f = x.dtype() == DType::kFloat32 ? x : cast(x, DType::kFloat32);
  Tensor y = mul(f, Tensor::scalar(scale_));
  return options_.offset == 0.0f ? y : add(y, Tensor::scalar(options_.offset));
}
LayerConfig RescalingImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("scale", static_cast<double>(scale_));
  c.set("offset", static_cast<double>(options_.offset));
  return c;
}
Rescaling::Rescaling(float scale, RescalingOptions options)
    : Layer(std::make_shared<RescalingImpl>(scale, std::move(options))) {}

// ---- Normalization -----------------------------------------------------------------

NormalizationImpl::NormalizationImpl(NormalizationOptions options)
    : SingleInputLayerImpl("Normalization", options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.mean.size() == options_.variance.size(), "Normalization",
                 options_.name.empty() ? "" : " '" + options_.name + "'",
                 ": mean and variance must have the same shape; got ", options_.mean.size(),
                 " and ", options_.variance.size(), " values");
  for (double v : options_.variance)
    LOCKSTEP_CHECK(v >= 0 && std::isfinite(v), "Normalization: a variance of ", v,
                   " (variances are finite and >= 0)");
}

void NormalizationImpl::build(const std::vector<Shape>& input_shapes) {
  if (!options_.mean.empty()) return;  // the statistics are in the config
  const Shape& s = input_shapes.at(0);
  const std::int64_t features = s.rank() >= 2 ? s[s.rank() - 1] : 1;
  mean_ = add_weight({.name = "mean",
                      .shape = {features},
                      .initializer = initializers::Zeros(),
                      .trainable = false});
  variance_ = add_weight({.name = "variance",
                          .shape = {features},
                          .initializer = initializers::Ones(),
                          .trainable = false});
  count_ = add_weight(
      {.name = "count",
       .shape = {},
       .initializer = Initializer(
           "zeros", [](const Shape& shape) { return Tensor::zeros(shape, DType::kInt64); }),
       .trainable = false});
}

std::vector<double> NormalizationImpl::mean() const {
  return mean_.defined() ? mean_.value().to_vector<double>() : options_.mean;
}

std::vector<double> NormalizationImpl::variance() const {
  return variance_.defined() ? variance_.value().to_vector<double>() : options_.variance;
}

Tensor NormalizationImpl::call(const Tensor& x, const CallContext&) {
  LOCKSTEP_CHECK(mean_.defined() || !options_.mean.empty(), "Normalization '", name(),
                 "': no mean and variance; give them, or adapt() the layer to data first");
  const std::vector<double> means = mean(), variances = variance();
  const std::int64_t features = x.rank() == 0 ? 1 : x.dim(x.rank() - 1);
  const auto n = static_cast<std::int64_t>(means.size());
  LOCKSTEP_CHECK_AS(ShapeError, n == 1 || n == features, "Normalization '", name(), "': ", n,
                    " means for inputs of shape ", x.shape(), " (", features,
                    " features on the last axis)");
  std::vector<float> mean(static_cast<std::size_t>(n)), scale(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < mean.size(); ++i) {
    mean[i] = static_cast<float>(means[i]);
    // Keras's: the standard deviation, at least its epsilon (1e-7).
    scale[i] = std::max(std::sqrt(static_cast<float>(variances[i])), 1e-7f);
  }
  const Tensor f = x.dtype() == DType::kFloat32 ? x : cast(x, DType::kFloat32);
  const Tensor m = Tensor::from_vector(mean), sd = Tensor::from_vector(scale);
  return options_.invert ? add(mul(f, sd), m) : div(sub(f, m), sd);
}

void NormalizationImpl::adapt(const Tensor& data) {
  LOCKSTEP_CHECK_AS(ShapeError, data.rank() >= 1 && data.numel() > 0,
                    "Normalization.adapt: ", "expected data of shape [n, ..., features], got ",
                    data.shape());
  const std::int64_t features = data.rank() == 1 ? 1 : data.dim(data.rank() - 1);
  // In blocks of whole rows along dim 0, each read once into a buffer that
  // stays in cache (one copy of a 40,000 x 27 table was 8.6 MB of fresh
  // memory, 5 ms of page faults: issue #38); each block's mean and squared
  // deviations by two passes over it, the blocks merged by Chan et al.'s
  // pairwise rule — as stable as two passes over the whole.
  const std::int64_t rows_per_item = data.numel() / data.dim(0) / features;
  const std::int64_t items_per_block = std::max<std::int64_t>(
      1, (std::int64_t{1} << 15) / std::max<std::int64_t>(1, rows_per_item * features));
  std::vector<double> mean(static_cast<std::size_t>(features), 0.0),
      var(static_cast<std::size_t>(features), 0.0);  // the sum of squared deviations until the end
  std::vector<double> block_mean(mean.size()), block_m2(mean.size());
  std::int64_t rows = 0;
  const std::int64_t items = data.dim(0);
  for (std::int64_t first = 0; first < items; first += items_per_block) {
    const std::int64_t last = std::min(items, first + items_per_block);
    const std::vector<double> values =  // copies from a device, too
        data.view_rows(first, last).to_vector<double>();
    const double* p = values.data();
    const auto n = static_cast<std::int64_t>(values.size()) / features;
    std::fill(block_mean.begin(), block_mean.end(), 0.0);
    std::fill(block_m2.begin(), block_m2.end(), 0.0);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < features; ++j)
        block_mean[static_cast<std::size_t>(j)] += p[r * features + j];
    }
    for (double& m : block_mean) m /= static_cast<double>(n);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t j = 0; j < features; ++j) {
        const double d = p[r * features + j] - block_mean[static_cast<std::size_t>(j)];
        block_m2[static_cast<std::size_t>(j)] += d * d;
      }
    }
    const auto before = static_cast<double>(rows), added = static_cast<double>(n);
    for (std::size_t j = 0; j < mean.size(); ++j) {
      const double delta = block_mean[j] - mean[j];
      mean[j] += delta * added / (before + added);
      var[j] += block_m2[j] + delta * delta * before * added / (before + added);
    }
    rows += n;
  }
  for (double& v : var) v /= static_cast<double>(rows);
  if (mean_.defined()) {
    LOCKSTEP_CHECK_AS(ShapeError, mean_.shape()[0] == features, "Normalization '", name(),
                      "'.adapt: the layer was built for ", mean_.shape()[0],
                      " features; the data has ", features);
    NoGradGuard no_grad;
    mean_.assign(Tensor::from_vector(std::vector<float>(mean.begin(), mean.end())));
    variance_.assign(Tensor::from_vector(std::vector<float>(var.begin(), var.end())));
    count_.assign(Tensor::from_vector(std::vector<std::int64_t>{rows}, Shape{}));
    return;
  }
  options_.mean = std::move(mean);
  options_.variance = std::move(var);
}

LayerConfig NormalizationImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("axis", std::vector<std::int64_t>{-1});
  c.set("invert", options_.invert);
  if (!mean_.defined()) {  // else Keras's null: the weights hold them
    c.set("mean", options_.mean);
    c.set("variance", options_.variance);
  }
  return c;
}

Normalization::Normalization(NormalizationOptions options)
    : Layer(std::make_shared<NormalizationImpl>(std::move(options))) {}

// ---- LayerNormalization ------------------------------------------------------------

LayerNormalizationImpl::LayerNormalizationImpl(LayerNormalizationOptions options)
    : SingleInputLayerImpl("LayerNormalization", options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.epsilon >= 0.0f, "LayerNormalization '", name(),
                 "': epsilon must be >= 0, got ", options_.epsilon);
}

void LayerNormalizationImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() >= 2, "LayerNormalization '", name(),
                    "': expected input of rank >= 2 (batch, ..., features), got ", s);
  const std::int64_t features = s[s.rank() - 1];
  // Keras's order: gamma, then beta.
  if (options_.scale || options_.rms_scaling)
    gamma_ = add_weight({.name = "gamma",
                         .shape = {features},
                         .initializer = options_.gamma_initializer,
                         .regularizer = options_.gamma_regularizer});
  if (options_.center && !options_.rms_scaling)
    beta_ = add_weight({.name = "beta",
                        .shape = {features},
                        .initializer = options_.beta_initializer,
                        .regularizer = options_.beta_regularizer});
}

Tensor LayerNormalizationImpl::call(const Tensor& x_in, const CallContext&) {
  if (!options_.rms_scaling) {
    return layer_normalization(x_in, gamma_.defined() ? gamma_.value() : Tensor(),
                               beta_.defined() ? beta_.value() : Tensor(), options_.epsilon);
  }
  // Keras 3's rms_scaling: x · gamma / sqrt(mean(x − mean)² + epsilon), no beta.
  const Tensor x = x_in.dtype() == DType::kFloat32 ? x_in : cast(x_in, DType::kFloat32);
  const ReduceOptions last{.axes = {-1}, .keepdims = true};
  const Tensor mu = mean(x, last);
  const Tensor variance = mean(square(x - mu), last);
  Tensor inv = Tensor::scalar(1.0f) / sqrt(variance + options_.epsilon);
  if (gamma_.defined()) inv = inv * gamma_.value();
  const Tensor y = x * inv;
  return y.dtype() == x_in.dtype() ? y : cast(y, x_in.dtype());
}

LayerConfig LayerNormalizationImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("axis", std::vector<std::int64_t>{-1});  // Keras 3 writes the list
  c.set("epsilon", static_cast<double>(options_.epsilon));
  c.set("center", options_.center);
  c.set("scale", options_.scale);
  c.set("rms_scaling", options_.rms_scaling);
  put_initializer(c, "beta_initializer", options_.beta_initializer);
  put_initializer(c, "gamma_initializer", options_.gamma_initializer);
  put_regularizer(c, "beta_regularizer", options_.beta_regularizer);
  put_regularizer(c, "gamma_regularizer", options_.gamma_regularizer);
  return c;
}

LayerNormalization::LayerNormalization(LayerNormalizationOptions options)
    : Layer(std::make_shared<LayerNormalizationImpl>(std::move(options))) {}

// ---- Embedding -------------------------------------------------------------------------

EmbeddingImpl::EmbeddingImpl(std::int64_t input_dim, std::int64_t output_dim,
                             EmbeddingOptions options)
    : SingleInputLayerImpl("Embedding", options.name),
      input_dim_(input_dim),
      output_dim_(output_dim),
      options_(std::move(options)) {
  LOCKSTEP_CHECK(input_dim > 0 && output_dim > 0,
                 "Embedding: input_dim and output_dim must be > 0, got ", input_dim, " and ",
                 output_dim);
}

void EmbeddingImpl::build(const std::vector<Shape>&) {
  embeddings_ = add_weight({.name = "embeddings",
                            .shape = {input_dim_, output_dim_},
                            .initializer = options_.embeddings_initializer,
                            .regularizer = options_.embeddings_regularizer});
}

Tensor EmbeddingImpl::call(const Tensor& ids, const CallContext&) {
  LOCKSTEP_CHECK(ids.dtype() == DType::kInt32 || ids.dtype() == DType::kInt64, "Embedding '",
                 name(), "': expected int32 or int64 ids, got dtype ", ids.dtype());
  try {
    const Tensor rows = gather(embeddings_, ids, 0);
    return rows.dtype() == compute_dtype() ? rows : cast(rows, compute_dtype());
  } catch (const IndexError& e) {
    detail::throw_error<IndexError>("Embedding '", name(), "' (input_dim ", input_dim_,
                                    "): ", e.what());
  }
}

std::vector<Tensor> EmbeddingImpl::compute_mask(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>&) const {
  if (!options_.mask_zero) return {Tensor()};
  const Tensor& ids = inputs.at(0);
  return {not_equal(ids, Tensor::zeros({}, ids.dtype()))};
}

LayerConfig EmbeddingImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("input_dim", input_dim_);
  c.set("output_dim", output_dim_);
  put_regularizer(c, "embeddings_regularizer", options_.embeddings_regularizer);
  c.set("mask_zero", options_.mask_zero);
  return c;
}

Embedding::Embedding(std::int64_t input_dim, std::int64_t output_dim, EmbeddingOptions options)
    : Layer(std::make_shared<EmbeddingImpl>(input_dim, output_dim, std::move(options))) {}

// ---- Masking ---------------------------------------------------------------------------

MaskingImpl::MaskingImpl(double mask_value, std::string name)
    : SingleInputLayerImpl("Masking", std::move(name)), mask_value_(mask_value) {}

namespace {

// [batch, steps, 1]: true where some feature differs from `value`.
Tensor real_steps(const Tensor& x, double value, const std::string& name) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 3, "Masking '", name,
                    "': expected sequences [batch, steps, features], got ", x.shape());
  const Tensor differs = not_equal(x, Tensor::full({}, value, x.dtype()));
  return nn_detail::as_mask(
      max(nn_detail::mask_values(differs), {.axes = {x.rank() - 1}, .keepdims = true}));
}

}  // namespace

Tensor MaskingImpl::call(const Tensor& x, const CallContext&) {
  return where(real_steps(x, mask_value_, name()), x, Tensor::zeros({}, x.dtype()));
}

std::vector<Tensor> MaskingImpl::compute_mask(const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>&) const {
  const Tensor& x = inputs.at(0);
  std::vector<std::int64_t> dims = x.shape().to_vector();
  dims.pop_back();
  return {reshape(real_steps(x, mask_value_, name()), dims)};
}

LayerConfig MaskingImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("mask_value", mask_value_);
  return c;
}

Masking::Masking(double mask_value, std::string name)
    : Layer(std::make_shared<MaskingImpl>(mask_value, std::move(name))) {}

}  // namespace layers
}  // namespace lockstep
