// Layers: the building blocks of models, as keras.layers.Layer.
//
// Two types work together, as in PyTorch's C++ frontend:
//   - LayerImpl: the polymorphic object that owns weights and computes. Users
//     subclass it for custom layers (override build and call).
//   - Layer: a cheap, copyable handle to a LayerImpl (shared ownership). Every
//     built-in layer (layers::Dense, ...) is a Layer handle, which is what lets
//     `ls::layers::Dense(10)(x)` build a graph from temporaries.
//
// A layer is called eagerly on Tensors, or symbolically on KerasTensors to
// build a functional model:
//
//   auto inputs = ls::Input({784});
//   auto x = ls::layers::Dense(256, {.activation = "relu"})(inputs);
//
// Weights are created on the first call, from the input shape, through
// add_weight — which goes through create_variable, so a strategy in scope can
// create them mirrored.
//
// Thread-safety: a layer may be called from one thread at a time (replicas
// each call their own copy).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/mixed_precision.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep {

class Layer;
class KerasTensor;
class LayerImpl;

// Per-call flags that reach every layer (Keras's `training` argument).
struct CallContext {
  bool training = false;
  // Non-null: the layers that count as frozen in this call, whatever their
  // trainable flag is now. Model::fit passes what was frozen at the first
  // training step after compile: Keras traces its train step then and
  // keeps it until the next compile, so changing `trainable` in between
  // takes effect only on recompiling (issue #19, tested against Keras 3).
  const std::unordered_set<const LayerImpl*>* frozen_layers = nullptr;
  // Non-null only in the call of a layer that absorbs_zero_padding(), from
  // a functional graph that folded a ZeroPadding2D into it: the input
  // still lacks these zeros, {{top, bottom}, {left, right}}, and the layer
  // adds them itself.
  const std::array<std::array<std::int64_t, 2>, 2>* zero_padding = nullptr;
  // Non-null only in the call of a layer that absorbs_relu(), from a graph
  // that folded the ReLU reading its output into it: the layer applies this
  // ReLU to its output itself (always with negative_slope and threshold 0).
  const ReluOptions* relu = nullptr;
  // True only in the call of a layer whose own_relu() a graph moved past the
  // max pooling that alone reads its output: the layer returns its result
  // without that activation.
  bool skip_own_relu = false;
  // True in the call on one example of zeros that learns a layer's output
  // shapes (Layer::call_all on symbolic inputs): stateful layers keep no
  // state from it.
  bool shape_probe = false;

  // This context with `relu` set (a graph's folds).
  CallContext with_relu(const ReluOptions* r) const {
    CallContext c = *this;
    c.relu = r;
    return c;
  }
};

class LayerImpl : public std::enable_shared_from_this<LayerImpl> {
 public:
  // `class_name` is the Keras class ("Dense"); `name` defaults to a unique
  // snake_case name derived from it ("dense", "dense_1", ...).
  explicit LayerImpl(std::string class_name, std::string name = "");
  virtual ~LayerImpl() = default;
  LayerImpl(const LayerImpl&) = delete;
  LayerImpl& operator=(const LayerImpl&) = delete;

  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }

  // A frozen layer's weights (and its sublayers') are neither trainable
  // weights nor updated; BatchNormalization also runs in inference mode.
  bool trainable() const { return trainable_; }
  // Whether the layer trains in this call: its flag, or what the call's
  // frozen_layers says (see CallContext).
  bool trainable(const CallContext& ctx) const {
    return ctx.frozen_layers ? !ctx.frozen_layers->contains(this) : trainable_;
  }
  // Sets the flag on this layer and every layer inside it, both ways (as
  // Keras 3: unfreezing a model unfreezes each of its layers).
  virtual void set_trainable(bool trainable);

  // The layer's dtype policy (Keras's layer.dtype_policy): the global policy
  // when the layer was constructed, unless set. Floating inputs are cast to
  // its compute dtype; weights are stored in its variable dtype.
  const DTypePolicy& dtype_policy() const { return dtype_policy_; }
  void set_dtype_policy(const DTypePolicy& policy);
  void set_dtype_policy(const std::string& name) { set_dtype_policy(DTypePolicy::from_name(name)); }
  DType compute_dtype() const { return dtype_policy_.compute_dtype; }

  bool built() const { return built_; }
  // Builds for inputs of these shapes unless already built (what the first
  // call does); strategies build models before replicas run them.
  void ensure_built(const std::vector<Shape>& input_shapes);

  // Creates the weights for inputs of these shapes (batch dimension first).
  virtual void build(const std::vector<Shape>& input_shapes);
  // The computation. Inputs and outputs are lists because some layers take
  // several (Add, Concatenate) — most use SingleInputLayerImpl.
  virtual std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) = 0;

  // Whether call() honours CallContext::zero_padding. A functional graph
  // then gives this layer a ZeroPadding2D's input in place of its output,
  // when the layer is that output's only reader: the convolutions with
  // 'valid' padding do, and oneDNN adds the zeros without a padded copy.
  virtual bool absorbs_zero_padding() const { return false; }
  // Whether call() honours CallContext::relu. A graph then runs a ReLU that
  // alone reads this layer's output inside this layer's call: a
  // BatchNormalization in training mode does, normalising and clipping in
  // one pass and never storing the tensor between (batch_norm_relu_training).
  virtual bool absorbs_relu() const { return false; }
  // What a layer that is max(x, 0), capped or not, computes (a ReLU layer
  // without slope or threshold, Activation("relu") or ("relu6")); none for
  // every other layer. Such a layer may be folded into the one before it.
  virtual std::optional<ReluOptions> plain_relu() const { return std::nullopt; }
  // The plain ReLU this layer applies as its own activation (a convolution
  // with activation "relu" or "relu6"), which call() leaves out under
  // CallContext::skip_own_relu; none for every other layer.
  virtual std::optional<ReluOptions> own_relu() const { return std::nullopt; }
  // Whether relu(layer(x)) is layer(relu(x)) for every plain ReLU, values and
  // gradients (max pooling: max and a ReLU are both monotone, and the window's
  // largest input is the one the gradient reaches either way). A graph then
  // moves a ReLU that only this layer reads past it, onto its smaller output.
  virtual bool commutes_with_relu() const { return false; }

  // What it takes to rebuild this layer (name and trainable here; each layer
  // adds its arguments). Weights are not part of the config.
  virtual LayerConfig get_config() const;

  // Builds on first use, checks, then calls. What Layer::operator() runs.
  std::vector<Tensor> apply(const std::vector<Tensor>& inputs, const CallContext& ctx);
  // The same with the inputs' masks, one per input (an undefined Tensor:
  // none): call_masked when any is defined, else call.
  std::vector<Tensor> apply(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
                            const CallContext& ctx);

  // ---- Keras masks (keras.layers.Masking, Embedding(mask_zero=True)) ----
  // A mask marks the steps of a sequence that count: [batch, steps], kBool,
  // true where the step is real (Keras's `_keras_mask`). Graphs carry each
  // layer's output masks to the layers that read them: the recurrent
  // layers skip masked steps, attention ignores masked keys, pooling over
  // steps averages the real ones.
  //
  // Whether the layer takes a mask and passes its first input's on
  // (Keras's supports_masking). A graph logs a warning where a mask reaches
  // a layer that does not, as Keras does: the mask ends there.
  virtual bool supports_masking() const { return false; }
  // The masks of this layer's outputs, one per output (undefined: none),
  // given its inputs and their masks: by default the first input's mask
  // if supports_masking(), else none. Embedding and Masking make masks;
  // a recurrent layer without return_sequences, or a pooling, ends them.
  virtual std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                           const std::vector<Tensor>& masks) const;
  // call() with the inputs' masks (at least one defined). Layers that read
  // masks override it; by default the masks change nothing.
  virtual std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                          const std::vector<Tensor>& masks,
                                          const CallContext& ctx) {
    (void)masks;
    return call(inputs, ctx);
  }

  // Own weights followed by sublayers' (depth first), without duplicates.
  std::vector<Variable> weights() const;
  std::vector<Variable> trainable_weights() const;
  std::vector<Variable> non_trainable_weights() const;
  // The same two lists with each layer's trainable(ctx) in place of its
  // flag (what compile fixed, for fit; see CallContext::frozen_layers).
  std::vector<Variable> trainable_weights(const CallContext& ctx) const;
  std::vector<Variable> non_trainable_weights(const CallContext& ctx) const;
  std::int64_t count_params() const;
  // This layer's own weights, without its sublayers', as Keras saves them:
  // those created trainable first, then the others, each in creation order
  // (Dense: kernel, bias; BatchNormalization: gamma, beta, moving_mean,
  // moving_variance).
  std::vector<Variable> own_variables() const;
  // Regularisation penalties of this layer and its sublayers, computed from
  // the current weights (call it inside a GradientTape).
  std::vector<Tensor> regularization_losses() const;

  // Sublayers registered with track(), in registration order.
  const std::vector<std::shared_ptr<LayerImpl>>& sublayers() const { return sublayers_; }
  // The attribute Keras saves sublayer i under ("forward_layer" of a
  // Bidirectional), or empty: "layers/<its snake_case class>".
  const std::string& sublayer_attribute(std::size_t i) const { return sublayer_attributes_.at(i); }
  // Where Keras's files keep this layer's own weights, under the layer's
  // path: "vars", or "cell/vars" for the recurrent layers (their cell's).
  virtual std::string keras_vars_path() const { return "vars"; }

  // ---- stateful layers (Keras's RNN(stateful=True)) ----
  // Whether this layer or a sublayer carries state from one batch to the
  // next (a stateful recurrent layer).
  virtual bool stateful() const;
  // Forgets that state (Keras's layer.reset_states()): the next batch starts
  // from zeros. By default, resets every sublayer's.
  virtual void reset_states();

 protected:
  struct WeightOptions {
    std::string name{};
    Shape shape{};
    Initializer initializer = initializers::GlorotUniform();
    bool trainable = true;
    Regularizer regularizer{};  // empty: none
    // How a strategy combines the replicas' copies (autodiff/variable.h).
    VariableAggregation aggregation = VariableAggregation::kNone;
  };
  Variable add_weight(const WeightOptions& options);
  // Registers a sublayer so that its weights and losses count as this layer's;
  // `keras_attribute` names it in Keras's files (sublayer_attribute).
  template <typename L>
  L track(L layer, std::string keras_attribute = "") {
    track_impl(layer.impl(), std::move(keras_attribute));
    return layer;
  }
  void track_impl(const std::shared_ptr<LayerImpl>& layer, std::string keras_attribute = "");
  // A weight as this layer computes with it: cast to the compute dtype when
  // the policy stores it in another (Keras's autocast variables); the cast's
  // gradient returns in the variable's dtype. Undefined stays undefined.
  Tensor autocast(const Variable& v) const;
  // Containers (Input layers, Functional and Sequential models) leave their
  // inputs as they are; their layers cast for themselves.
  void set_autocast_inputs(bool autocast) { autocast_inputs_ = autocast; }

 private:
  struct OwnWeight {
    Variable variable{};
    Regularizer regularizer{};
  };
  void collect(std::vector<const LayerImpl*>& out) const;
  // Own weights of every layer, those that train (or do not) under `ctx`.
  std::vector<Variable> weights_that_train(bool train, const CallContext& ctx) const;

  std::string class_name_;
  std::string name_;
  bool trainable_ = true;
  bool built_ = false;
  DTypePolicy dtype_policy_ = mixed_precision::global_policy();
  bool autocast_inputs_ = true;
  std::vector<OwnWeight> own_weights_;
  std::vector<std::shared_ptr<LayerImpl>> sublayers_;
  std::vector<std::string> sublayer_attributes_;
};

// Base for layers with one input and one output: implement this call.
class SingleInputLayerImpl : public LayerImpl {
 public:
  using LayerImpl::LayerImpl;
  virtual Tensor call(const Tensor& input, const CallContext& ctx) = 0;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) final;
};

// A symbolic tensor: the output of a layer in a functional graph, with its
// shape (the batch dimension is unknown and not stored) and dtype.
class KerasTensor {
 public:
  struct Node;  // the layer call that produced it (see functional.h)

  KerasTensor() = default;
  KerasTensor(std::shared_ptr<const Node> node, int index, Shape sample_shape, DType dtype,
              bool has_mask = false)
      : node_(std::move(node)),
        index_(index),
        sample_shape_(sample_shape),
        dtype_(dtype),
        has_mask_(has_mask) {}

  // Shape of one example (without the batch dimension).
  const Shape& sample_shape() const { return sample_shape_; }
  DType dtype() const { return dtype_; }
  // Whether a Keras mask comes with this tensor (see LayerImpl::compute_mask).
  bool has_mask() const { return has_mask_; }
  // "(None, 28, 28, 1)"
  std::string shape_string() const;

  const std::shared_ptr<const Node>& node() const { return node_; }
  int index() const { return index_; }
  bool defined() const { return node_ != nullptr; }

 private:
  std::shared_ptr<const Node> node_;
  int index_ = 0;
  Shape sample_shape_;
  DType dtype_ = DType::kFloat32;
  bool has_mask_ = false;
};

// A handle to a LayerImpl. Copies share the layer (and its weights).
class Layer {
 public:
  Layer() = default;
  explicit Layer(std::shared_ptr<LayerImpl> impl) : impl_(std::move(impl)) {}

  // Eager calls.
  Tensor operator()(const Tensor& input, const CallContext& ctx = {}) const;
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs,
                                 const CallContext& ctx = {}) const;
  // Symbolic calls: build a functional graph.
  KerasTensor operator()(const KerasTensor& input) const;
  KerasTensor operator()(const std::vector<KerasTensor>& inputs) const;
  // A symbolic call of a layer with several outputs, one KerasTensor each
  // (an LSTM with return_state: the sequence or last output, then its
  // states), as Keras's `outputs, h, c = lstm(x)`. operator() refuses such
  // a layer and says to use this.
  std::vector<KerasTensor> call_all(const std::vector<KerasTensor>& inputs) const;
  std::vector<KerasTensor> call_all(const KerasTensor& input) const {
    return call_all(std::vector<KerasTensor>{input});
  }

  LayerImpl* operator->() const { return impl_.get(); }
  const std::shared_ptr<LayerImpl>& impl() const { return impl_; }
  bool defined() const { return impl_ != nullptr; }

  const std::string& name() const { return impl_->name(); }
  std::vector<Variable> weights() const { return impl_->weights(); }
  std::vector<Variable> trainable_weights() const { return impl_->trainable_weights(); }
  std::vector<Variable> non_trainable_weights() const { return impl_->non_trainable_weights(); }
  // Keras 3's spellings of the same lists.
  std::vector<Variable> trainable_variables() const { return trainable_weights(); }
  std::vector<Variable> non_trainable_variables() const { return non_trainable_weights(); }
  std::int64_t count_params() const { return impl_->count_params(); }
  bool trainable() const { return impl_->trainable(); }
  void set_trainable(bool trainable) const { impl_->set_trainable(trainable); }
  const DTypePolicy& dtype_policy() const { return impl_->dtype_policy(); }
  void set_dtype_policy(const std::string& name) const { impl_->set_dtype_policy(name); }

 protected:
  std::shared_ptr<LayerImpl> impl_;
};

// Wraps a custom LayerImpl subclass in a handle:
//   auto scale = ls::make_layer<Scale>(2.0f);
template <typename Impl, typename... Args>
Layer make_layer(Args&&... args) {
  return Layer(std::make_shared<Impl>(std::forward<Args>(args)...));
}

// The entry point of a functional model: a symbolic tensor of examples of
// shape `sample_shape` (the batch dimension is implied). `batch_size`:
// Keras's static batch size (Input(batch_shape=(4, ...))), which Keras
// needs to load a model with stateful layers; it is written in the model's
// files and changes nothing here (0: any).
KerasTensor Input(const Shape& sample_shape, DType dtype = DType::kFloat32, std::string name = "",
                  std::int64_t batch_size = 0);

// Resets the counters behind automatic layer names ("dense", "dense_1"...),
// as keras.backend.clear_session().
void clear_session();

}  // namespace lockstep
