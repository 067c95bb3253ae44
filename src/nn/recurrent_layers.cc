// SimpleRNN, LSTM, GRU and Bidirectional (nn/recurrent_layers.h).
#include "lockstep/nn/recurrent_layers.h"

#include <algorithm>
#include <utility>

#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "nn/config_helpers.h"

namespace lockstep::layers {

using nn_detail::put_initializer;
using nn_detail::put_regularizer;

RecurrentActivation recurrent_activation(const std::string& name, const std::string& where) {
  static const std::vector<std::pair<std::string, RecurrentActivation>> table = {
      {"tanh", RecurrentActivation::kTanh},
      {"sigmoid", RecurrentActivation::kSigmoid},
      {"hard_sigmoid", RecurrentActivation::kHardSigmoid},
      {"relu", RecurrentActivation::kRelu},
      {"linear", RecurrentActivation::kLinear},
      {"", RecurrentActivation::kLinear}};
  std::vector<std::string> names;
  for (const auto& [n, a] : table) {
    if (n == name) return a;
    if (!n.empty()) names.push_back(n);
  }
  detail::throw_error<ValueError>(where, ": the activation '", name,
                                  "' is not one a recurrent layer takes here (did you mean '",
                                  nearest_name(name, names),
                                  "'?); it takes tanh, sigmoid, hard_sigmoid, relu and linear");
}

// ---- SimpleRNN, LSTM, GRU ----------------------------------------------------------

RecurrentImpl::RecurrentImpl(std::string class_name, std::int64_t units,
                             RecurrentLayerOptions options)
    : LayerImpl(std::move(class_name), options.name), units_(units), options_(std::move(options)) {
  const std::string where = class_name_text();
  LOCKSTEP_CHECK(units > 0, where, ": units must be positive, got ", units);
  LOCKSTEP_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, where,
                 ": dropout must be in [0, 1), got ", options_.dropout);
  LOCKSTEP_CHECK(options_.recurrent_dropout >= 0.0f && options_.recurrent_dropout < 1.0f, where,
                 ": recurrent_dropout must be in [0, 1), got ", options_.recurrent_dropout);
  recurrent_activation(options_.activation, where);  // refuses an activation the op lacks
  recurrent_activation(options_.recurrent_activation, where);
  if (options_.seed) {
    seed_ = *options_.seed;
  } else {
    const auto [seed, stream] = detail::next_global_random_key();
    seed_ = seed;
    next_stream_.reset(stream << 32);
  }
}

std::string RecurrentImpl::class_name_text() const { return class_name() + " '" + name() + "'"; }

std::int64_t RecurrentImpl::gates() const {
  if (class_name() == "LSTM") return 4;
  if (class_name() == "GRU") return 3;
  return 1;
}

void RecurrentImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  LOCKSTEP_CHECK_AS(ShapeError, s.rank() == 3, class_name_text(),
                    ": expected sequences [batch, steps, features], got ", s);
  const std::int64_t width = gates() * units_;
  // Keras's order: kernel, recurrent_kernel, bias.
  kernel_ = add_weight({.name = "kernel",
                        .shape = {s[2], width},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  recurrent_kernel_ = add_weight({.name = "recurrent_kernel",
                                  .shape = {units_, width},
                                  .initializer = options_.recurrent_initializer,
                                  .regularizer = options_.recurrent_regularizer});
  if (!options_.use_bias) return;
  Initializer bias_init = options_.bias_initializer;
  if (class_name() == "LSTM" && options_.unit_forget_bias) {
    // Keras: bias_initializer's values with the forget gate's block at 1.
    const Initializer inner = options_.bias_initializer;
    const std::int64_t u = units_;
    bias_init = Initializer(inner.name(), [inner, u](const Shape&) {
      return concat({inner(Shape{u}), Tensor::ones({u}), inner(Shape{2 * u})}, 0);
    });
  }
  const bool two_biases = class_name() == "GRU" && options_.reset_after;
  bias_ = add_weight({.name = "bias",
                      .shape = two_biases ? Shape{2, width} : Shape{width},
                      .initializer = bias_init,
                      .regularizer = options_.bias_regularizer});
}

Tensor RecurrentImpl::mask(const Shape& shape, float rate) {
  const Tensor u = random::uniform_next(shape, seed_, next_stream_.of(current_mirrored_copy()));
  return cast(greater_equal(u, Tensor::scalar(rate)), DType::kFloat32) * (1.0f / (1.0f - rate));
}

std::vector<Tensor> RecurrentImpl::call(const std::vector<Tensor>& inputs, const CallContext& ctx) {
  return run(inputs, Tensor(), ctx);
}

std::vector<Tensor> RecurrentImpl::call_masked(const std::vector<Tensor>& inputs,
                                               const std::vector<Tensor>& masks,
                                               const CallContext& ctx) {
  // As Keras: a layer called with initial states gets no mask (Keras fills
  // a call's `mask` argument only when it passes one tensor), though its
  // output carries the sequences' mask on (compute_mask).
  return run(inputs, inputs.size() > 1 ? Tensor() : masks.at(0), ctx);
}

std::vector<Tensor> RecurrentImpl::compute_mask(const std::vector<Tensor>&,
                                                const std::vector<Tensor>& masks) const {
  // Keras's: the output keeps the mask with return_sequences; states have none.
  std::vector<Tensor> out(options_.return_state ? (gates() == 4 ? 3 : 2) : 1);
  if (options_.return_sequences && !masks.empty()) out[0] = masks[0];
  return out;
}

RecurrentImpl::Held& RecurrentImpl::held() {
  std::lock_guard lock(held_mu_);
  return held_[std::max(0, current_mirrored_copy())];  // a map's entries stay put
}

void RecurrentImpl::reset_states() {
  std::lock_guard lock(held_mu_);
  held_.clear();
}

std::vector<Tensor> RecurrentImpl::states() const {
  std::lock_guard lock(held_mu_);
  const auto it = held_.find(std::max(0, current_mirrored_copy()));
  return it == held_.end() ? std::vector<Tensor>{} : it->second.states;
}

std::vector<Tensor> RecurrentImpl::run(const std::vector<Tensor>& inputs,
                                       const Tensor& sequence_mask, const CallContext& ctx) {
  // Keras's initial_state: {sequences, h} or LSTM's {sequences, h, c}.
  const std::size_t states = gates() == 4 ? 2 : 1;
  LOCKSTEP_CHECK(inputs.size() == 1 || inputs.size() == 1 + states, class_name_text(),
                 ": expected the sequences, or the sequences and ", states, " initial state",
                 states > 1 ? "s (h, c)" : " (h)", ", got ", inputs.size(), " inputs");
  const Tensor& x_in = inputs[0];
  LOCKSTEP_CHECK_AS(ShapeError, x_in.rank() == 3, class_name_text(),
                    ": expected sequences [batch, steps, features], got ", x_in.shape());
  const std::int64_t batch = x_in.shape()[0], steps = x_in.shape()[1], features = x_in.shape()[2];
  const std::int64_t g = gates(), width = g * units_;
  Held* kept = nullptr;  // a stateful layer's states, outside shape probes
  if (options_.stateful && !ctx.shape_probe) {
    kept = &held();
    LOCKSTEP_CHECK(kept->batch == 0 || kept->batch == batch, class_name_text(),
                   " is stateful: its states hold a batch of ", kept->batch,
                   current_mirrored_copy() >= 0 ? " (this replica's part)" : "",
                   ", these sequences a batch of ", batch,
                   "; every batch must have the same size (batch the data so that the last batch "
                   "is whole, or call reset_states() before changing it)");
    kept->batch = batch;
  }
  const Tensor kernel = autocast(kernel_);
  Tensor input_bias, recurrent_bias;
  if (bias_.defined()) {
    const Tensor b = autocast(bias_);
    if (b.rank() == 2) {  // GRU with reset_after: [input; recurrent]
      input_bias = reshape(slice(b, {0, 0}, {1, width}), {width});
      recurrent_bias = reshape(slice(b, {1, 0}, {1, width}), {width});
    } else {
      input_bias = b;
    }
  }
  const bool dropping = ctx.training && options_.dropout > 0.0f;
  const bool recurrent_dropping = ctx.training && options_.recurrent_dropout > 0.0f;
  // x·kernel + bias of every step in one product. With recurrent dropout
  // Keras (implementation 1) drops the inputs with one mask per gate.
  Tensor projected;
  const Tensor flat = reshape(x_in, {batch * steps, features});
  if (dropping && recurrent_dropping && g > 1) {
    std::vector<Tensor> parts;
    for (std::int64_t k = 0; k < g; ++k) {
      const Tensor m = reshape(mask({batch, features}, options_.dropout), {batch, 1, features});
      const Tensor xk = reshape(x_in * cast(m, x_in.dtype()), {batch * steps, features});
      const Tensor kk = slice(kernel, {0, k * units_}, {features, units_});
      parts.push_back(input_bias.defined()
                          ? matmul(xk, kk, slice(input_bias, {k * units_}, {units_}))
                          : matmul(xk, kk));
    }
    projected = concat(parts, 1);
  } else {
    Tensor xs = flat;
    if (dropping) {
      const Tensor m = reshape(mask({batch, features}, options_.dropout), {batch, 1, features});
      xs = reshape(x_in * cast(m, x_in.dtype()), {batch * steps, features});
    }
    projected = input_bias.defined() ? matmul(xs, kernel, input_bias) : matmul(xs, kernel);
  }
  projected = reshape(projected, {batch, steps, width});
  lockstep::RecurrentOptions o{
      .activation = recurrent_activation(options_.activation, class_name_text()),
      .recurrent_activation =
          recurrent_activation(options_.recurrent_activation, class_name_text()),
      .go_backwards = options_.go_backwards,
      .mask = sequence_mask,
      .zero_output_for_mask = options_.zero_output_for_mask,
      .return_states = options_.return_state || kept != nullptr};
  if (inputs.size() > 1) {
    o.initial_h = inputs[1];
    if (inputs.size() > 2) o.initial_c = inputs[2];
  } else if (kept != nullptr && !kept->states.empty()) {
    // Keras: the states given by initial_state win; else the held ones.
    o.initial_h = kept->states[0];
    if (kept->states.size() > 1) o.initial_c = kept->states[1];
  }
  if (recurrent_dropping) {
    std::vector<Tensor> masks;
    for (std::int64_t k = 0; k < g; ++k)
      masks.push_back(
          reshape(mask({batch, units_}, options_.recurrent_dropout), {1, batch, units_}));
    o.recurrent_masks = concat(masks, 0);
  }
  const Tensor recurrent = autocast(recurrent_kernel_);
  Tensor seq;
  if (class_name() == "LSTM") {
    seq = lstm(projected, recurrent, o);
  } else if (class_name() == "GRU") {
    seq = gru(projected, recurrent, recurrent_bias, options_.reset_after, o);
  } else {
    seq = simple_rnn(projected, recurrent, o);
  }
  // Row r of seq, [batch, units].
  auto row = [&](std::int64_t r) {
    return reshape(slice(seq, {0, r, 0}, {batch, 1, units_}), {batch, units_});
  };
  // With the states asked for, seq holds them after the steps' outputs.
  const Tensor outputs = !options_.return_sequences ? row(steps - 1)
                         : o.return_states          ? slice(seq, {0, 0, 0}, {batch, steps, units_})
                                                    : seq;
  if (kept != nullptr) {
    // The next batch starts here; no gradient reaches back into this one.
    kept->states = {stop_gradient(row(steps))};
    if (g == 4) kept->states.push_back(stop_gradient(row(steps + 1)));
  }
  if (!options_.return_state) return {outputs};
  std::vector<Tensor> out{outputs, row(steps)};  // the outputs, h
  if (g == 4) out.push_back(row(steps + 1));     // LSTM's c
  return out;
}

LayerConfig RecurrentImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("return_sequences", options_.return_sequences);
  c.set("return_state", options_.return_state);
  c.set("go_backwards", options_.go_backwards);
  c.set("stateful", options_.stateful);
  c.set("unroll", options_.unroll);
  c.set("zero_output_for_mask", options_.zero_output_for_mask);
  c.set("units", units_);
  c.set("activation", options_.activation.empty() ? std::string("linear") : options_.activation);
  if (class_name() != "SimpleRNN") c.set("recurrent_activation", options_.recurrent_activation);
  c.set("use_bias", options_.use_bias);
  put_initializer(c, "kernel_initializer", options_.kernel_initializer);
  put_initializer(c, "recurrent_initializer", options_.recurrent_initializer);
  put_initializer(c, "bias_initializer", options_.bias_initializer);
  if (class_name() == "LSTM") c.set("unit_forget_bias", options_.unit_forget_bias);
  put_regularizer(c, "kernel_regularizer", options_.kernel_regularizer);
  put_regularizer(c, "recurrent_regularizer", options_.recurrent_regularizer);
  put_regularizer(c, "bias_regularizer", options_.bias_regularizer);
  c.set("dropout", static_cast<double>(options_.dropout));
  c.set("recurrent_dropout", static_cast<double>(options_.recurrent_dropout));
  if (options_.seed) c.set("seed", static_cast<std::int64_t>(*options_.seed));
  if (class_name() == "GRU") c.set("reset_after", options_.reset_after);
  return c;
}

SimpleRNN::SimpleRNN(std::int64_t units, RecurrentLayerOptions options)
    : Layer(std::make_shared<RecurrentImpl>("SimpleRNN", units, std::move(options))) {}
LSTM::LSTM(std::int64_t units, RecurrentLayerOptions options)
    : Layer(std::make_shared<RecurrentImpl>("LSTM", units, std::move(options))) {}
GRU::GRU(std::int64_t units, RecurrentLayerOptions options)
    : Layer(std::make_shared<RecurrentImpl>("GRU", units, std::move(options))) {}

// ---- Bidirectional -----------------------------------------------------------------

namespace {

std::string without_prefix(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

const RecurrentImpl& recurrent_of(const Layer& layer, const char* what) {
  const auto* r = dynamic_cast<const RecurrentImpl*>(layer.impl().get());
  LOCKSTEP_CHECK(r != nullptr, "Bidirectional: the ", what,
                 " must be a SimpleRNN, LSTM or GRU, got ",
                 layer.defined() ? layer->class_name() : std::string("an undefined layer"));
  return *r;
}

// A fresh layer of `r`'s class and settings (new weights), renamed.
std::shared_ptr<RecurrentImpl> copy_of(const RecurrentImpl& r, std::string name,
                                       bool go_backwards) {
  RecurrentLayerOptions o = r.options();
  o.name = std::move(name);
  o.go_backwards = go_backwards;
  auto copy = std::make_shared<RecurrentImpl>(r.class_name(), r.units(), o);
  copy->set_dtype_policy(r.dtype_policy());
  return copy;
}

}  // namespace

BidirectionalImpl::BidirectionalImpl(const Layer& layer, BidirectionalOptions options,
                                     std::optional<Layer> backward_layer)
    : LayerImpl("Bidirectional", options.name), options_(std::move(options)) {
  const std::string& m = options_.merge_mode;
  LOCKSTEP_CHECK(m == "concat" || m == "sum" || m == "mul" || m == "ave", "Bidirectional '", name(),
                 "': merge_mode must be concat, sum, mul or ave, got '", m,
                 "' (Keras's None, two outputs, is not supported yet)");
  const RecurrentImpl& f = recurrent_of(layer, "layer");
  // As Keras: the forward layer is a copy named forward_<name>; the
  // backward one the given backward_layer, or a copy going backwards.
  forward_ =
      copy_of(f, "forward_" + without_prefix(f.name(), "forward_"), f.options().go_backwards);
  if (backward_layer) {
    const RecurrentImpl& b = recurrent_of(*backward_layer, "backward_layer");
    backward_ = std::static_pointer_cast<RecurrentImpl>(backward_layer->impl());
    LOCKSTEP_CHECK(b.options().return_sequences == f.options().return_sequences &&
                       b.options().return_state == f.options().return_state,
                   "Bidirectional '", name(),
                   "': the forward and backward layers must agree on return_sequences and "
                   "return_state");
  } else {
    backward_ = copy_of(f, "backward_" + without_prefix(f.name(), "backward_"), true);
  }
  LOCKSTEP_CHECK(forward_->options().go_backwards != backward_->options().go_backwards,
                 "Bidirectional '", name(),
                 "': the forward and backward layers must differ in go_backwards");
  // As Keras: under a mask, both return zeros at masked steps when they
  // return sequences.
  forward_->set_zero_output_for_mask(forward_->options().return_sequences);
  backward_->set_zero_output_for_mask(backward_->options().return_sequences);
  track_impl(forward_, "forward_layer");
  track_impl(backward_, "backward_layer");
}

std::vector<Tensor> BidirectionalImpl::call(const std::vector<Tensor>& inputs,
                                            const CallContext& ctx) {
  return run(inputs, Tensor(), ctx);
}

std::vector<Tensor> BidirectionalImpl::call_masked(const std::vector<Tensor>& inputs,
                                                   const std::vector<Tensor>& masks,
                                                   const CallContext& ctx) {
  // As a recurrent layer's: given initial states, Keras passes no mask.
  return run(inputs, inputs.size() > 1 ? Tensor() : masks.at(0), ctx);
}

std::vector<Tensor> BidirectionalImpl::compute_mask(const std::vector<Tensor>& inputs,
                                                    const std::vector<Tensor>& masks) const {
  // The merged output's as each layer's; the states after it have none.
  std::vector<Tensor> out = forward_->compute_mask(inputs, masks);
  out.resize(2 * out.size() - 1);
  return out;
}

std::vector<Tensor> BidirectionalImpl::run(const std::vector<Tensor>& inputs,
                                           const Tensor& sequence_mask, const CallContext& ctx) {
  // Keras's initial_state: the forward layer's states, then the backward's
  // (h, or LSTM's h and c, each), split in half as Bidirectional.call does.
  const std::size_t per_layer = forward_->gates() == 4 ? 2 : 1;
  LOCKSTEP_CHECK(inputs.size() == 1 || inputs.size() == 1 + 2 * per_layer, "Bidirectional '",
                 name(), "': expected the sequences, or the sequences and ", 2 * per_layer,
                 " initial states (the forward layer's ", per_layer == 2 ? "h, c" : "h",
                 ", then the backward's), got ", inputs.size(), " inputs");
  std::vector<Tensor> forward_in{inputs[0]}, backward_in{inputs[0]};
  for (std::size_t i = 1; i < inputs.size(); ++i)
    (i <= per_layer ? forward_in : backward_in).push_back(inputs[i]);
  const std::vector<Tensor> masks =
      sequence_mask.defined() ? std::vector<Tensor>{sequence_mask} : std::vector<Tensor>{};
  const std::vector<Tensor> forward = forward_->apply(forward_in, masks, ctx);
  const std::vector<Tensor> backward = backward_->apply(backward_in, masks, ctx);
  const Tensor& y = forward.at(0);
  Tensor y_rev = backward.at(0);
  if (forward_->options().return_sequences) {  // back in time order
    const std::int64_t steps = y_rev.shape()[1];
    std::vector<std::int64_t> order(static_cast<std::size_t>(steps));
    for (std::int64_t t = 0; t < steps; ++t) order[static_cast<std::size_t>(t)] = steps - 1 - t;
    Tensor indices = Tensor::from_vector(order);
    if (!y_rev.device().host_accessible()) indices = indices.copy_to(y_rev.device());
    y_rev = gather(y_rev, indices, 1);
  }
  const std::string& m = options_.merge_mode;
  std::vector<Tensor> out{m == "concat" ? concat({y, y_rev}, -1)
                          : m == "sum"  ? y + y_rev
                          : m == "mul"  ? y * y_rev
                                        : (y + y_rev) / 2.0f};
  // Keras's return_state: the forward layer's states, then the backward's.
  out.insert(out.end(), forward.begin() + 1, forward.end());
  out.insert(out.end(), backward.begin() + 1, backward.end());
  return out;
}

LayerConfig BidirectionalImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("merge_mode", options_.merge_mode);
  return c;
}

Bidirectional::Bidirectional(const Layer& layer, BidirectionalOptions options,
                             std::optional<Layer> backward_layer)
    : Layer(std::make_shared<BidirectionalImpl>(layer, std::move(options),
                                                std::move(backward_layer))) {}

}  // namespace lockstep::layers
