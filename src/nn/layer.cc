// LayerImpl bookkeeping (names, weights, sublayers), the Layer handle's
// calls, and symbolic calls that build functional graphs.
#include "lockstep/nn/layer.h"

#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <unordered_set>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/log.h"
#include "lockstep/nn/functional.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// Automatic layer names, as Keras: one counter per base name.
struct NameRegistry {
  std::mutex mutex;
  std::map<std::string, int> counts;
};

NameRegistry& names() {
  static NameRegistry* r = new NameRegistry();
  return *r;
}

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// Keras's to_snake_case — re.sub("(.)([A-Z][a-z0-9]+)", r"\1_\2"), then
// re.sub("([a-z])([A-Z])", r"\1_\2"), lowercased — with the regexes'
// leftmost, non-overlapping matching done by hand:
// "BatchNormalization" -> "batch_normalization", "Conv2D" -> "conv2d",
// "ReLU" -> "re_lu".
std::string snake_case(const std::string& name) {
  std::string first;
  for (std::size_t i = 0; i < name.size();) {
    if (i + 2 < name.size() && is_upper(name[i + 1]) && is_lower_or_digit(name[i + 2])) {
      std::size_t end = i + 3;
      while (end < name.size() && is_lower_or_digit(name[end])) ++end;
      first += name[i];
      first += '_';
      first += name.substr(i + 1, end - i - 1);
      i = end;
    } else {
      first += name[i++];
    }
  }
  std::string second;
  for (std::size_t i = 0; i < first.size();) {
    if (i + 1 < first.size() && first[i] >= 'a' && first[i] <= 'z' && is_upper(first[i + 1])) {
      second += first[i];
      second += '_';
      second += first[i + 1];
      i += 2;
    } else {
      second += first[i++];
    }
  }
  for (char& c : second) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return second;
}

std::string unique_name(const std::string& base) {
  NameRegistry& r = names();
  std::lock_guard lock(r.mutex);
  const int n = r.counts[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

}  // namespace

void clear_session() {
  NameRegistry& r = names();
  std::lock_guard lock(r.mutex);
  r.counts.clear();
}

LayerImpl::LayerImpl(std::string class_name, std::string name)
    : class_name_(std::move(class_name)),
      name_(name.empty() ? unique_name(snake_case(class_name_)) : std::move(name)) {}

void LayerImpl::set_trainable(bool trainable) {
  trainable_ = trainable;
  for (auto& sub : sublayers_) sub->set_trainable(trainable);
}

void LayerImpl::build(const std::vector<Shape>&) {}

LayerConfig LayerImpl::get_config() const {
  LayerConfig c;
  c.set("name", name_);
  c.set("trainable", trainable_);
  return c;
}

void LayerImpl::set_dtype_policy(const DTypePolicy& policy) {
  dtype_policy_ = DTypePolicy::from_name(policy.name);
}

Tensor LayerImpl::autocast(const Variable& v) const {
  if (!v.defined()) return Tensor();
  const Tensor value = v.value();
  return value.dtype() == compute_dtype() || !is_floating(value.dtype())
             ? value
             : cast(value, compute_dtype());
}

namespace {

// The first layer that computes in bfloat16 on a CPU without bfloat16
// instructions says once that it is emulated, and slower than float32.
void warn_if_bfloat16_is_emulated() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!native_bfloat16()) {
      log(LogLevel::kWarning, "lockstep: mixed_bfloat16 is " + bfloat16_kernels() +
                                  " (docs/models.md, \"Mixed precision\")\n");
    }
  });
}

// The first layer that computes in float16 says once what runs: every CPU
// emulates it.
void warn_that_float16_is_emulated() {
  static std::once_flag once;
  std::call_once(once, [] {
    log(LogLevel::kWarning,
        "lockstep: mixed_float16 is emulated: each float16 op runs its float32 kernel and rounds "
        "its result to float16, so training has float16's range and precision (hence loss "
        "scaling) and is slower than float32 (docs/models.md, \"Mixed precision\")\n");
  });
}

}  // namespace

std::vector<Tensor> LayerImpl::compute_mask(const std::vector<Tensor>& inputs,
                                            const std::vector<Tensor>& masks) const {
  (void)inputs;
  if (!supports_masking() || masks.empty()) return {Tensor()};
  return {masks[0]};
}

std::vector<Tensor> LayerImpl::apply(const std::vector<Tensor>& inputs, const CallContext& ctx) {
  return apply(inputs, {}, ctx);
}

std::vector<Tensor> LayerImpl::apply(const std::vector<Tensor>& inputs,
                                     const std::vector<Tensor>& masks, const CallContext& ctx) {
  LOCKSTEP_CHECK(!inputs.empty(), class_name_, " '", name_, "': called with no inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    LOCKSTEP_CHECK(inputs[i].defined(), class_name_, " '", name_, "': input ", i, " is undefined");
  }
  if (!built_) {
    std::vector<Shape> shapes;
    for (const Tensor& t : inputs) shapes.push_back(t.shape());
    ensure_built(shapes);
  }
  // Floating inputs in another dtype than the policy computes in are cast
  // (Keras's input autocast); integer inputs (ids, labels) pass as they are.
  const DType compute = compute_dtype();
  bool cast_any = false;
  if (autocast_inputs_) {
    for (const Tensor& t : inputs) cast_any |= is_floating(t.dtype()) && t.dtype() != compute;
  }
  if (compute == DType::kBFloat16) warn_if_bfloat16_is_emulated();
  if (compute == DType::kFloat16) warn_that_float16_is_emulated();
  bool masked = false;
  for (const Tensor& m : masks) masked |= m.defined();
  LOCKSTEP_CHECK(!masked || masks.size() == inputs.size(), class_name_, " '", name_,
                 "': ", masks.size(), " masks for ", inputs.size(), " inputs");
  auto run = [&](const std::vector<Tensor>& x) {
    return masked ? call_masked(x, masks, ctx) : call(x, ctx);
  };
  if (!cast_any) return run(inputs);
  std::vector<Tensor> cast_inputs;
  cast_inputs.reserve(inputs.size());
  for (const Tensor& t : inputs)
    cast_inputs.push_back(is_floating(t.dtype()) && t.dtype() != compute ? cast(t, compute) : t);
  return run(cast_inputs);
}

void LayerImpl::ensure_built(const std::vector<Shape>& input_shapes) {
  if (built_) return;
  build(input_shapes);
  built_ = true;
}

Variable LayerImpl::add_weight(const WeightOptions& o) {
  Tensor initial;
  {
    NoGradGuard no_grad;
    initial = o.initializer(o.shape);
  }
  LOCKSTEP_CHECK_AS(InternalError, initial.shape() == o.shape, "initializer '",
                    o.initializer.name(), "' returned shape ", initial.shape(),
                    " for weight of shape ", o.shape);
  Variable v = create_variable(
      initial,
      {.name = name_ + "/" + o.name, .trainable = o.trainable, .aggregation = o.aggregation});
  own_weights_.push_back({v, o.regularizer});
  return v;
}

void LayerImpl::track_impl(const std::shared_ptr<LayerImpl>& layer, std::string keras_attribute) {
  LOCKSTEP_CHECK(layer != nullptr, class_name_, " '", name_, "': cannot track an undefined layer");
  for (const auto& s : sublayers_) {
    if (s == layer) return;
  }
  sublayers_.push_back(layer);
  sublayer_attributes_.push_back(std::move(keras_attribute));
}

void LayerImpl::collect(std::vector<const LayerImpl*>& out) const {
  for (const LayerImpl* seen : out) {
    if (seen == this) return;  // shared layers count once
  }
  out.push_back(this);
  for (const auto& s : sublayers_) s->collect(out);
}

bool LayerImpl::stateful() const {
  for (const auto& l : sublayers_) {
    if (l->stateful()) return true;
  }
  return false;
}

void LayerImpl::reset_states() {
  for (const auto& l : sublayers_) l->reset_states();
}

std::vector<Variable> LayerImpl::weights() const {
  std::vector<const LayerImpl*> layers;
  collect(layers);
  std::vector<Variable> out;
  for (const LayerImpl* l : layers) {
    for (const auto& w : l->own_weights_) out.push_back(w.variable);
  }
  return out;
}

std::vector<Variable> LayerImpl::own_variables() const {
  std::vector<Variable> out;
  for (const auto& w : own_weights_) {
    if (w.variable.trainable()) out.push_back(w.variable);
  }
  for (const auto& w : own_weights_) {
    if (!w.variable.trainable()) out.push_back(w.variable);
  }
  return out;
}

std::vector<Variable> LayerImpl::weights_that_train(bool train, const CallContext& ctx) const {
  std::vector<const LayerImpl*> layers;
  collect(layers);
  std::vector<Variable> out;
  for (const LayerImpl* l : layers) {
    const bool layer_trains = l->trainable(ctx);
    for (const auto& w : l->own_weights_) {
      if ((layer_trains && w.variable.trainable()) == train) out.push_back(w.variable);
    }
  }
  return out;
}

std::vector<Variable> LayerImpl::trainable_weights() const { return weights_that_train(true, {}); }
std::vector<Variable> LayerImpl::non_trainable_weights() const {
  return weights_that_train(false, {});
}
std::vector<Variable> LayerImpl::trainable_weights(const CallContext& ctx) const {
  return weights_that_train(true, ctx);
}
std::vector<Variable> LayerImpl::non_trainable_weights(const CallContext& ctx) const {
  return weights_that_train(false, ctx);
}

std::int64_t LayerImpl::count_params() const {
  std::int64_t n = 0;
  for (const Variable& v : weights()) n += v.shape().numel();
  return n;
}

std::vector<Tensor> LayerImpl::regularization_losses() const {
  std::vector<const LayerImpl*> layers;
  collect(layers);
  std::vector<Tensor> out;
  for (const LayerImpl* l : layers) {
    for (const auto& w : l->own_weights_) {
      if (w.regularizer && l->trainable_) out.push_back(w.regularizer(w.variable.value()));
    }
  }
  return out;
}

std::vector<Tensor> SingleInputLayerImpl::call(const std::vector<Tensor>& inputs,
                                               const CallContext& ctx) {
  LOCKSTEP_CHECK(inputs.size() == 1, class_name(), " '", name(), "': expected 1 input, got ",
                 inputs.size());
  return {call(inputs[0], ctx)};
}

// ---- KerasTensor and symbolic calls -----------------------------------------

std::string KerasTensor::shape_string() const {
  std::ostringstream os;
  os << "(None";
  for (std::int64_t d : sample_shape_.dims()) os << ", " << d;
  os << ")";
  return os.str();
}

Tensor Layer::operator()(const Tensor& input, const CallContext& ctx) const {
  LOCKSTEP_CHECK(defined(), "calling an undefined layer");
  auto outs = impl_->apply({input}, ctx);
  LOCKSTEP_CHECK(outs.size() == 1, impl_->class_name(), " '", impl_->name(), "' returned ",
                 outs.size(), " outputs; call it with a list of inputs to get them all");
  return outs[0];
}

std::vector<Tensor> Layer::operator()(const std::vector<Tensor>& inputs,
                                      const CallContext& ctx) const {
  LOCKSTEP_CHECK(defined(), "calling an undefined layer");
  return impl_->apply(inputs, ctx);
}

KerasTensor Layer::operator()(const KerasTensor& input) const {
  return (*this)(std::vector<KerasTensor>{input});
}

KerasTensor Layer::operator()(const std::vector<KerasTensor>& inputs) const {
  std::vector<KerasTensor> outs = call_all(inputs);
  LOCKSTEP_CHECK(outs.size() == 1, impl_->class_name(), " '", impl_->name(), "' returns ",
                 outs.size(), " outputs; Hint: take them all with call_all(inputs)");
  return outs[0];
}

std::vector<KerasTensor> Layer::call_all(const std::vector<KerasTensor>& inputs) const {
  LOCKSTEP_CHECK(defined(), "calling an undefined layer");
  // Build the layer and learn its output shapes by running it on one
  // example of zeros: the layer's own code is the only shape logic there
  // is. Inputs that carry a mask get one of all steps real.
  std::vector<Tensor> probes, masks;
  bool masked = false;
  for (const KerasTensor& k : inputs) {
    LOCKSTEP_CHECK(k.defined(), impl_->class_name(), " '", impl_->name(),
                   "': a symbolic input is undefined");
    Shape s{1};
    for (std::int64_t d : k.sample_shape().dims()) s.push_back(d);
    probes.push_back(Tensor::zeros(s, k.dtype()));
    masks.push_back(k.has_mask() && s.rank() >= 2 ? Tensor::ones({1, s[1]}, DType::kBool)
                                                  : Tensor());
    masked |= k.has_mask();
  }
  if (masked && !impl_->supports_masking()) {
    log(LogLevel::kWarning, "lockstep: layer '" + impl_->name() + "' (of type " +
                                impl_->class_name() +
                                ") was passed an input with a mask attached to it. However, "
                                "this layer does not support masking and will therefore destroy "
                                "the mask information. Downstream layers will not see the "
                                "mask.\n");
  }
  std::vector<Tensor> outs, out_masks;
  auto probe = [&] {
    NoGradGuard no_grad;
    outs = impl_->apply(probes, masks, {.training = false, .shape_probe = true});
    out_masks = impl_->compute_mask(probes, masks);
  };
  try {
    probe();
  } catch (const DeviceError&) {
    // Built under a strategy whose replicas are on accelerators: the new
    // weights live there, so the probe runs there too (on the host it may
    // not read them).
    Device* on = nullptr;
    for (const Variable& v : impl_->weights()) {
      if (!v.value().device().host_accessible()) on = &v.value().device();
    }
    if (on == nullptr) throw;
    DeviceScope scope(*on, {.pin_thread = false});
    probe();
  }
  LOCKSTEP_CHECK(!outs.empty(), impl_->class_name(), " '", impl_->name(), "' returned no output");
  auto node = std::make_shared<KerasTensor::Node>();
  node->layer = impl_;
  node->inputs = inputs;
  std::vector<KerasTensor> result;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const Tensor& out = outs[i];
    LOCKSTEP_CHECK_AS(ShapeError, out.rank() >= 1 && out.shape()[0] == 1, impl_->class_name(), " '",
                      impl_->name(), "' changed the batch dimension (output ", i, " of shape ",
                      out.shape(), " for a batch of 1)");
    Shape sample;
    for (int d = 1; d < out.rank(); ++d) sample.push_back(out.shape()[d]);
    const bool has_mask = i < out_masks.size() && out_masks[i].defined();
    node->output_shapes.push_back(sample);
    result.emplace_back(node, static_cast<int>(i), sample, out.dtype(), has_mask);
  }
  return result;
}

KerasTensor Input(const Shape& sample_shape, DType dtype, std::string name,
                  std::int64_t batch_size) {
  LOCKSTEP_CHECK(batch_size >= 0, "Input '", name,
                 "': batch_size must be positive (or 0: any), got ", batch_size);
  auto node = std::make_shared<KerasTensor::Node>();
  node->input_name = name.empty() ? unique_name("input_layer") : std::move(name);
  node->input_batch_size = batch_size;
  node->input_layer = std::make_shared<InputLayerImpl>(node->input_name);
  return KerasTensor(node, 0, sample_shape, dtype);
}

}  // namespace lockstep
