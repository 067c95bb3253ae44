// Functional graphs (topological execution) and Sequential stacks.
#include "lockstep/nn/functional.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "lockstep/nn/conv_layers.h"

namespace lockstep {
namespace {

using SlotKey = std::pair<const KerasTensor::Node*, int>;

// The output masks of each graph's last call on this thread, what its
// compute_mask returns right after: the replicas of a strategy call one
// model from several threads. Only graphs whose outputs carry a mask keep
// an entry (a few bool tensors).
thread_local std::map<const LayerImpl*, std::vector<Tensor>> last_output_masks;

void keep_output_masks(const LayerImpl* graph, std::vector<Tensor> masks) {
  bool any = false;
  for (const Tensor& m : masks) any |= m.defined();
  if (any) {
    last_output_masks[graph] = std::move(masks);
  } else {
    last_output_masks.erase(graph);
  }
}

std::vector<Tensor> output_masks_of(const LayerImpl* graph, std::size_t outputs) {
  const auto it = last_output_masks.find(graph);
  return it == last_output_masks.end() ? std::vector<Tensor>(outputs) : it->second;
}

std::string sample_string(const Shape& s) {
  std::string out = "(None";
  for (std::int64_t d : s.dims()) out += ", " + std::to_string(d);
  return out + ")";
}

// Checks that a tensor fed to a model input has the declared example shape.
void check_input(const std::string& model, std::size_t i, const KerasTensor& spec,
                 const Tensor& t) {
  bool ok = t.rank() == spec.sample_shape().rank() + 1;
  for (int d = 0; ok && d < spec.sample_shape().rank(); ++d)
    ok = t.shape()[d + 1] == spec.sample_shape()[d];
  if (ok) return;
  std::string hint;
  if (t.rank() > spec.sample_shape().rank() + 1)
    hint = " Hint: add a Flatten or Reshape layer, or reshape the data.";
  detail::throw_error<ShapeError>("model '", model, "': expected input ", i, " of shape ",
                                  sample_string(spec.sample_shape()), ", got ", t.shape(), ".",
                                  hint);
}

}  // namespace

FunctionalImpl::FunctionalImpl(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs,
                               std::string name)
    : LayerImpl("Functional", std::move(name)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)) {
  set_autocast_inputs(false);  // its layers cast for themselves
  LOCKSTEP_CHECK(!inputs_.empty(), "Model: expected at least one input");
  LOCKSTEP_CHECK(!outputs_.empty(), "Model: expected at least one output");
  std::map<SlotKey, int> slots;
  auto slot_of = [&](const KerasTensor& k) {
    auto [it, inserted] = slots.emplace(SlotKey{k.node().get(), k.index()}, num_slots_);
    if (inserted) ++num_slots_;
    return it->second;
  };
  for (const KerasTensor& in : inputs_) {
    LOCKSTEP_CHECK(in.defined() && in.node()->layer == nullptr,
                   "Model: every input must come from ls::Input(...)");
    input_slots_.push_back(slot_of(in));
  }
  // Which outputs of each layer call are read (a layer with several
  // outputs, an LSTM with return_state, may have some unread), so that each
  // gets a slot when its step is made.
  std::map<const KerasTensor::Node*, std::set<int>> read_outputs;
  {
    std::set<const KerasTensor::Node*> seen;
    std::function<void(const KerasTensor&)> mark = [&](const KerasTensor& k) {
      if (!k.defined()) return;
      read_outputs[k.node().get()].insert(k.index());
      if (!seen.insert(k.node().get()).second) return;
      for (const KerasTensor& in : k.node()->inputs) mark(in);
    };
    for (const KerasTensor& out : outputs_) mark(out);
  }
  // Depth-first post-order from the outputs gives a topological order.
  std::set<const KerasTensor::Node*> done, active;
  std::function<void(const KerasTensor&)> visit = [&](const KerasTensor& k) {
    LOCKSTEP_CHECK(k.defined(), "Model: an output or intermediate tensor is undefined");
    const KerasTensor::Node* node = k.node().get();
    if (done.count(node)) return;
    if (node->layer == nullptr) {
      bool known = false;
      for (const KerasTensor& in : inputs_) known = known || in.node().get() == node;
      LOCKSTEP_CHECK(known, "Model: the outputs depend on Input '", node->input_name,
                     "', which is not among the model's inputs");
      done.insert(node);
      return;
    }
    LOCKSTEP_CHECK_AS(InternalError, !active.count(node), "Model: the layer graph has a cycle");
    active.insert(node);
    Step step{node, {}, {}, k};
    for (const KerasTensor& in : node->inputs) visit(in);
    for (const KerasTensor& in : node->inputs) step.input_slots.push_back(slot_of(in));
    const std::set<int>& read = read_outputs.at(node);
    step.output_slots.assign(static_cast<std::size_t>(*read.rbegin() + 1), -1);
    for (int i : read) {
      step.output_slots[static_cast<std::size_t>(i)] =
          slot_of(KerasTensor(k.node(), i, Shape{}, DType::kFloat32));
    }
    steps_.push_back(step);
    active.erase(node);
    done.insert(node);
    track_impl(node->layer);
  };
  for (const KerasTensor& out : outputs_) visit(out);
  for (const KerasTensor& out : outputs_) output_slots_.push_back(slot_of(out));
  // Each slot's last reader, unless the slot is an output. Without this every
  // intermediate tensor would live until the forward pass ends, those the
  // tape does not keep too (a BatchNormalization's output once its ReLU6 has
  // run): MobileNetV2 at 224 × 224, batch 32, peaked at 3,068 MiB resident
  // that way, 2,686 MiB without (docs/benchmarks.md, bench/compare.sh).
  std::vector<int> last_reader(static_cast<std::size_t>(num_slots_), -1);
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    for (int s : steps_[i].input_slots)
      last_reader[static_cast<std::size_t>(s)] = static_cast<int>(i);
  }
  for (int s : output_slots_) last_reader[static_cast<std::size_t>(s)] = -1;
  for (int s = 0; s < num_slots_; ++s) {
    const int reader = last_reader[static_cast<std::size_t>(s)];
    if (reader >= 0) steps_[static_cast<std::size_t>(reader)].last_use_of.push_back(s);
  }
  fold_zero_padding();
  fold_relu();
  move_relu_past_max_pooling();
  // Names identify layers in saved models and weights: they must be unique.
  std::map<std::string, const void*> names;
  for (const KerasTensor& in : inputs_) names[in.node()->input_name] = in.node().get();
  for (const Step& step : steps_) {
    auto [it, inserted] = names.emplace(step.node->layer->name(), step.node->layer.get());
    LOCKSTEP_CHECK(inserted || it->second == step.node->layer.get(), "Model: the name '",
                   step.node->layer->name(),
                   "' is used by two layers; layer names in a model must be unique");
  }
}

FunctionalImpl::SlotUse FunctionalImpl::slot_use() {
  SlotUse use{std::vector<int>(static_cast<std::size_t>(num_slots_), 0),
              std::vector<Step*>(static_cast<std::size_t>(num_slots_), nullptr)};
  for (Step& step : steps_) {
    for (int s : step.input_slots) ++use.readers[static_cast<std::size_t>(s)];
    for (int s : step.output_slots) {
      if (s >= 0) use.producer[static_cast<std::size_t>(s)] = &step;
    }
  }
  for (int s : output_slots_) ++use.readers[static_cast<std::size_t>(s)];
  return use;
}

// MobileNetV2 pads before each stride-2 depthwise convolution with a
// ZeroPadding2D (Keras's layer names and summary keep it). Run as written,
// the padded copy is made in the forward pass, kept for the convolution's
// weight gradient next to the unpadded tensor its ReLU6 keeps, and its
// gradient cropped in the backward pass: 254 MB a step at 224 × 224, batch
// 32. A ZeroPadding2D whose output one convolution with 'valid' padding
// reads, and nothing else (no other layer, not a model output), is folded
// into that convolution instead: the same zeros, added by oneDNN.
void FunctionalImpl::fold_zero_padding() {
  const SlotUse use = slot_use();
  for (std::size_t i = 0; i < steps_.size(); ++i) {
    Step& pad = steps_[i];
    const auto* zero_padding =
        dynamic_cast<const layers::ZeroPadding2DImpl*>(pad.node->layer.get());
    if (zero_padding == nullptr || pad.input_slots.size() != 1 ||
        use.readers[static_cast<std::size_t>(pad.output_slot())] != 1) {
      continue;
    }
    const auto reader = std::find_if(
        steps_.begin() + static_cast<std::ptrdiff_t>(i) + 1, steps_.end(), [&](const Step& s) {
          return std::find(s.input_slots.begin(), s.input_slots.end(), pad.output_slot()) !=
                 s.input_slots.end();
        });
    if (reader == steps_.end() || reader->input_slots.size() != 1 ||
        !reader->node->layer->absorbs_zero_padding()) {
      continue;
    }
    pad.folded = true;
    reader->zero_padding = zero_padding->padding();
  }
}

// MobileNetV2 follows 35 of its 52 BatchNormalizations with a ReLU6. Run
// as written, each pair stores the normalised tensor between them, and the
// backward pass writes and reads its gradient too. A ReLU (unbounded or
// capped, without slope or threshold) that alone reads the output of a
// layer that absorbs_relu(), computing in the same dtype, is folded into it
// instead: the batch norm clips as it normalises (batch_norm_relu_training).
namespace {

// The ReLU that `after` is, if `before` may apply it inside its own call
// instead: a plain one (LayerImpl::plain_relu), computing in before's dtype.
// What else must hold (no other reader of the tensor between) is the caller's.
std::optional<ReluOptions> foldable_relu(const LayerImpl& before, const LayerImpl& after) {
  if (!before.absorbs_relu() || before.compute_dtype() != after.compute_dtype()) {
    return std::nullopt;
  }
  return after.plain_relu();
}

}  // namespace

void FunctionalImpl::fold_relu() {
  const SlotUse use = slot_use();
  for (Step& act : steps_) {
    if (act.input_slots.size() != 1) continue;
    const int in = act.input_slots[0];
    Step* before = use.producer[static_cast<std::size_t>(in)];
    if (before == nullptr || before->folded || before->relu ||
        use.readers[static_cast<std::size_t>(in)] != 1) {
      continue;
    }
    const std::optional<ReluOptions> relu = foldable_relu(*before->node->layer, *act.node->layer);
    if (!relu) continue;
    act.folded = true;
    before->relu = relu;
  }
}

// The canonical convnet block, Conv2D(activation="relu") then
// MaxPooling2D, applies its ReLU to the convolution's whole output and masks
// the whole gradient with it: the small CNN's ReLUs cost 6.6-9.9% of its
// step (BM_ReluCost), three quarters of it on elements the pooling drops.
// Max pooling commutes with a plain ReLU, values and gradients
// (LayerImpl::commutes_with_relu), so a ReLU that only a max pooling reads —
// a ReLU layer, or the convolution's own activation — is applied after the
// pooling instead, to a quarter of the elements.
void FunctionalImpl::move_relu_past_max_pooling() {
  const SlotUse use = slot_use();
  for (Step& pool : steps_) {
    const LayerImpl& pooling = *pool.node->layer;
    if (!pooling.commutes_with_relu() || pool.relu || pool.input_slots.size() != 1) continue;
    const int in = pool.input_slots[0];
    Step* before = use.producer[static_cast<std::size_t>(in)];
    if (before == nullptr || before->folded || use.readers[static_cast<std::size_t>(in)] != 1 ||
        before->node->layer->compute_dtype() != pooling.compute_dtype()) {
      continue;
    }
    if (const auto relu = before->node->layer->plain_relu()) {  // a ReLU layer
      before->folded = true;
      pool.relu = relu;
    } else if (const auto own = before->node->layer->own_relu(); own && !before->relu) {
      before->skip_own_relu = true;
      pool.relu = own;
    }
  }
}

std::vector<Tensor> FunctionalImpl::call(const std::vector<Tensor>& inputs,
                                         const CallContext& ctx) {
  return run(inputs, {}, ctx);
}

std::vector<Tensor> FunctionalImpl::call_masked(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& masks,
                                                const CallContext& ctx) {
  return run(inputs, masks, ctx);
}

std::vector<Tensor> FunctionalImpl::compute_mask(const std::vector<Tensor>&,
                                                 const std::vector<Tensor>&) const {
  return output_masks_of(this, outputs_.size());
}

std::vector<Tensor> FunctionalImpl::run(const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& input_masks,
                                        const CallContext& ctx) {
  LOCKSTEP_CHECK(inputs.size() == inputs_.size(), "model '", name(), "': expected ", inputs_.size(),
                 " inputs, got ", inputs.size());
  const auto n = static_cast<std::size_t>(num_slots_);
  std::vector<Tensor> slots(n), masks(n);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    check_input(name(), i, inputs_[i], inputs[i]);
    slots[static_cast<std::size_t>(input_slots_[i])] = inputs[i];
    if (i < input_masks.size()) masks[static_cast<std::size_t>(input_slots_[i])] = input_masks[i];
  }
  CallContext plain = ctx;  // a graph's own folds are for the graph, not its layers
  plain.zero_padding = nullptr;
  plain.relu = nullptr;
  plain.skip_own_relu = false;
  for (const Step& step : steps_) {
    std::vector<Tensor> in_masks;
    bool masked = false;
    for (int s : step.input_slots) {
      in_masks.push_back(masks[static_cast<std::size_t>(s)]);
      masked |= in_masks.back().defined();
    }
    if (!masked) in_masks.clear();
    if (step.folded) {  // its reader pads, or the layer before applied it
      slots[static_cast<std::size_t>(step.output_slot())] =
          slots[static_cast<std::size_t>(step.input_slots[0])];
      if (masked) {
        masks[static_cast<std::size_t>(step.output_slot())] =
            step.node->layer->compute_mask({}, in_masks).at(0);
      }
    } else {
      std::vector<Tensor> args;
      args.reserve(step.input_slots.size());
      for (int s : step.input_slots) args.push_back(slots[static_cast<std::size_t>(s)]);
      CallContext folded = plain;
      if (step.zero_padding) folded.zero_padding = &*step.zero_padding;
      if (step.relu) folded.relu = &*step.relu;
      folded.skip_own_relu = step.skip_own_relu;
      const LayerImpl& layer = *step.node->layer;
      const auto outs = step.node->layer->apply(args, in_masks, folded);
      LOCKSTEP_CHECK(outs.size() >= step.output_slots.size(), layer.class_name(), " '",
                     layer.name(), "' returned ", outs.size(), " outputs, the graph reads ",
                     step.output_slots.size());
      // A layer makes masks from its inputs alone (Embedding, Masking), or
      // passes or ends those it was given.
      const std::vector<Tensor> out_masks = layer.compute_mask(args, in_masks);
      for (std::size_t i = 0; i < step.output_slots.size(); ++i) {
        const int slot = step.output_slots[i];
        if (slot < 0) continue;
        slots[static_cast<std::size_t>(slot)] = outs[i];
        masks[static_cast<std::size_t>(slot)] = i < out_masks.size() ? out_masks[i] : Tensor();
      }
    }
    for (int s : step.last_use_of) {
      slots[static_cast<std::size_t>(s)] = Tensor();
      masks[static_cast<std::size_t>(s)] = Tensor();
    }
  }
  std::vector<Tensor> result, out_masks;
  for (int s : output_slots_) {
    result.push_back(slots[static_cast<std::size_t>(s)]);
    out_masks.push_back(masks[static_cast<std::size_t>(s)]);
  }
  keep_output_masks(this, std::move(out_masks));
  return result;
}

SequentialImpl::SequentialImpl(std::string name) : LayerImpl("Sequential", std::move(name)) {
  set_autocast_inputs(false);  // its layers cast for themselves
}

void SequentialImpl::set_input_shape(const Shape& sample_shape, DType dtype,
                                     std::int64_t batch_size) {
  LOCKSTEP_CHECK(!input_.defined(), "Sequential '", name(), "': the input shape is already set");
  input_ = Input(sample_shape, dtype, "", batch_size);
  KerasTensor x = input_;
  for (const Layer& l : layers_) {
    x = l(x);
    outputs_.push_back(x);
  }
}

void SequentialImpl::build(const std::vector<Shape>& input_shapes) {
  if (input_.defined() || layers_.empty()) return;
  LOCKSTEP_CHECK(input_shapes.size() == 1 && input_shapes[0].rank() >= 1, "Sequential '", name(),
                 "': expected one batched input to build from");
  const auto dims = input_shapes[0].dims();
  set_input_shape(Shape(std::vector<std::int64_t>(dims.begin() + 1, dims.end())));
}

void SequentialImpl::add(const Layer& layer) {
  LOCKSTEP_CHECK(layer.defined(), "Sequential '", name(), "': cannot add an undefined layer");
  track_impl(layer.impl());
  layers_.push_back(layer);
  if (input_.defined()) {
    const KerasTensor& prev = outputs_.empty() ? input_ : outputs_.back();
    outputs_.push_back(layer(prev));
  }
}

std::vector<Tensor> SequentialImpl::call(const std::vector<Tensor>& inputs,
                                         const CallContext& ctx) {
  return run(inputs, {}, ctx);
}

std::vector<Tensor> SequentialImpl::call_masked(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& masks,
                                                const CallContext& ctx) {
  return run(inputs, masks, ctx);
}

std::vector<Tensor> SequentialImpl::compute_mask(const std::vector<Tensor>&,
                                                 const std::vector<Tensor>&) const {
  return output_masks_of(this, 1);
}

std::vector<Tensor> SequentialImpl::run(const std::vector<Tensor>& inputs,
                                        const std::vector<Tensor>& masks, const CallContext& ctx) {
  LOCKSTEP_CHECK(inputs.size() == 1, "Sequential '", name(), "': expected 1 input, got ",
                 inputs.size());
  LOCKSTEP_CHECK(!layers_.empty(), "Sequential '", name(), "' has no layers; add some with add()");
  if (input_.defined()) check_input(name(), 0, input_, inputs[0]);
  // As in a functional graph (no other layer sees the tensor between): a
  // ReLU after a layer that absorbs it is folded in (FunctionalImpl::fold_relu),
  // and one before a max pooling moves after it (move_relu_past_max_pooling).
  CallContext plain = ctx;
  plain.zero_padding = nullptr;
  plain.relu = nullptr;
  plain.skip_own_relu = false;
  Tensor x = inputs[0];
  Tensor mask = masks.empty() ? Tensor() : masks[0];
  // Runs layer i on x under `c`, and carries the mask through it.
  auto step = [&](std::size_t i, const CallContext& c) {
    LayerImpl& layer = *layers_[i].impl();
    const std::vector<Tensor> in_masks =
        mask.defined() ? std::vector<Tensor>{mask} : std::vector<Tensor>{};
    const Tensor in = x;
    x = layer.apply({in}, in_masks, c).at(0);
    mask = layer.compute_mask({in}, in_masks).at(0);
  };
  // The mask through a layer a fold does not run.
  auto pass_mask = [&](std::size_t i) {
    if (mask.defined()) mask = layers_[i]->compute_mask({x}, {mask}).at(0);
  };
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const LayerImpl& layer = *layers_[i].impl();
    const LayerImpl* next = i + 1 < layers_.size() ? layers_[i + 1].impl().get() : nullptr;
    if (const auto relu = next ? foldable_relu(layer, *next) : std::nullopt) {
      step(i, CallContext{plain}.with_relu(&*relu));
      pass_mask(++i);
      continue;
    }
    if (next && next->commutes_with_relu() && next->compute_dtype() == layer.compute_dtype()) {
      if (const auto relu = layer.plain_relu()) {  // the ReLU layer is not run
        pass_mask(i);
        step(++i, CallContext{plain}.with_relu(&*relu));
        continue;
      }
      if (const auto relu = layer.own_relu()) {
        CallContext without = plain;
        without.skip_own_relu = true;
        step(i, without);
        step(++i, CallContext{plain}.with_relu(&*relu));
        continue;
      }
    }
    step(i, plain);
  }
  keep_output_masks(this, {mask});
  return {x};
}

}  // namespace lockstep
