// Networks of layers: a functional graph (Input -> layers -> outputs) and a
// sequential stack. Both are LayerImpls, so they nest like any layer; the
// train layer's Model wraps one of them (or a user's subclass) with
// compile / fit / evaluate / predict.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

// The layer call that produced a KerasTensor.
struct KerasTensor::Node {
  std::shared_ptr<LayerImpl> layer{};  // null for an Input
  std::vector<KerasTensor> inputs{};
  std::string input_name{};                  // for an Input
  std::shared_ptr<LayerImpl> input_layer{};  // for an Input: its InputLayer (model.layers)
  std::int64_t input_batch_size = 0;         // for an Input: its static batch size; 0: any
  // The example shape of each of the call's outputs (read or not).
  std::vector<Shape> output_shapes{};
};

// What Keras lists for an Input among a functional model's layers
// (model.layers[0] is the InputLayer). It has no weights and passes its
// input through; the graph runs Inputs without it.
class InputLayerImpl : public SingleInputLayerImpl {
 public:
  explicit InputLayerImpl(std::string name) : SingleInputLayerImpl("InputLayer", std::move(name)) {
    set_autocast_inputs(false);
  }
  Tensor call(const Tensor& input, const CallContext&) override { return input; }
};

// Runs the graph between `inputs` and `outputs`, layers in topological order.
// Shared layers and residual branches work; every Input the outputs depend on
// must be among `inputs`.
class FunctionalImpl : public LayerImpl {
 public:
  FunctionalImpl(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs,
                 std::string name = "");
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  // Masks flow through the graph as its layers make, pass and end them; a
  // nested model passes its inputs' masks in and its outputs' out.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  // The output masks of the last call on this thread (what a graph asks
  // right after it).
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;

  const std::vector<KerasTensor>& inputs() const { return inputs_; }
  const std::vector<KerasTensor>& outputs() const { return outputs_; }

  // One layer call of the graph, in execution order.
  struct Step {
    const KerasTensor::Node* node{};
    std::vector<int> input_slots{};  // where its inputs are
    // Where each of its outputs goes, by output index; -1 for an output
    // nothing reads (an LSTM's states when only its sequence is used).
    std::vector<int> output_slots{};
    KerasTensor output{};  // its first output read
    int output_slot() const { return output_slots.at(static_cast<std::size_t>(output.index())); }
    // Slots no later step reads and no output is: dropped after this step,
    // so a tensor lives only as long as the graph or the tape needs it.
    std::vector<int> last_use_of{};
    // Not run: its input is passed on as its output. A ZeroPadding2D whose
    // output only a convolution with 'valid' padding reads, which adds the
    // zeros itself (`zero_padding` below), so the padded copy is never made;
    // or a ReLU that alone reads a BatchNormalization's output, which
    // applies it (`relu` below), so the tensor between is never stored.
    // A ReLU read only by a max pooling also becomes `folded`, or, if it is
    // this layer's own activation, `skip_own_relu` (the layer runs without
    // it); either way the pooling applies it to its smaller output (`relu`).
    bool folded = false;
    bool skip_own_relu = false;
    std::optional<std::array<std::array<std::int64_t, 2>, 2>> zero_padding{};
    std::optional<ReluOptions> relu{};
  };
  const std::vector<Step>& steps() const { return steps_; }

 private:
  void fold_zero_padding();
  void fold_relu();
  void move_relu_past_max_pooling();
  // For each slot: how many steps and model outputs read it, and the step
  // that writes it (null for a model input). What the folds consult.
  struct SlotUse {
    std::vector<int> readers{};
    std::vector<Step*> producer{};
  };
  SlotUse slot_use();
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
                          const CallContext& ctx);

  std::vector<KerasTensor> inputs_;
  std::vector<KerasTensor> outputs_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<Step> steps_;
  int num_slots_ = 0;
};

// A plain stack of single-input layers (keras.Sequential).
class SequentialImpl : public LayerImpl {
 public:
  explicit SequentialImpl(std::string name = "");
  // Declares the shape of one example, so that every layer is built (and has
  // an output shape for summary) as soon as it is added.
  // batch_size: the Input's static batch size (0: any; see Input()).
  void set_input_shape(const Shape& sample_shape, DType dtype = DType::kFloat32,
                       std::int64_t batch_size = 0);
  void add(const Layer& layer);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  // As a functional graph's (FunctionalImpl).
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  // Without an input shape, the first build (call) sets it from the data,
  // creating every layer's weights at once (Keras's Sequential.build).
  void build(const std::vector<Shape>& input_shapes) override;

  const std::vector<Layer>& layers() const { return layers_; }
  // The symbolic output of each layer (empty until the input shape is known).
  const std::vector<KerasTensor>& layer_outputs() const { return outputs_; }
  const KerasTensor& input() const { return input_; }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
                          const CallContext& ctx);

  std::vector<Layer> layers_;
  KerasTensor input_;
  std::vector<KerasTensor> outputs_;
};

}  // namespace lockstep
