// Recurrent layers over sequences [batch, steps, features] (keras.layers):
// SimpleRNN, LSTM and GRU, and the Bidirectional wrapper. Each layer projects
// the whole sequence through its kernel in one matrix product, then runs the
// recurrence as one op (simple_rnn, lstm, gru in tensor/ops.h), whose
// backward pass is backpropagation through time.
//
// Keras's config keys, weights and files: the weights are the cell's
// (kernel [features, gates · units], recurrent_kernel [units, gates · units],
// bias; GRU's with reset_after is [2, 3 · units], input then recurrent),
// saved under `cell/vars` as Keras 3 saves them. Dropout and
// recurrent_dropout draw one mask per sequence, as Keras's cells (with
// recurrent dropout, one per gate: Keras's implementation 1).
//
//   auto x = ls::layers::Embedding(20000, 128)(tokens);
//   x = ls::layers::Bidirectional(ls::layers::LSTM(64, {.return_sequences = true}))(x);
//   x = ls::layers::GRU(32)(x);
//
// Masks (Embedding's mask_zero, Masking) skip steps as Keras does: the
// states stay as they were at a masked step, and the output there is the
// last output, or zeros with zero_output_for_mask (which Bidirectional sets
// when it returns sequences). A layer with return_sequences passes the mask
// on; one without ends it.
//
// return_state: the layer's outputs are the output, then its final states
// (h; LSTM: h, c), as Keras's `output, h, c = lstm(x)`:
//
//   auto outs = ls::layers::LSTM(32, {.return_state = true}).call_all(x);
//
// Initial states (Keras's `lstm(x, initial_state=[h, c])`, a decoder
// starting from its encoder's states) are inputs after the sequences:
//
//   auto decoded = ls::layers::LSTM(32, {.return_sequences = true})({y, outs[1], outs[2]});
//
// Stateful layers (Keras's stateful=True): each batch starts from the
// states the previous batch ended with, row by row — row i of a batch
// continues row i of the one before — until reset_states() (on the layer,
// or Model::reset_states() on them all). The state holds the batch size of
// the first call after a reset; a batch of another size is a ValueError
// naming both (batch the data so that every batch is whole). No gradient
// flows into the previous batch. Under a strategy each replica keeps the
// states of its own rows, so N replicas train like one. As in Keras the
// states are no part of the model's files; Keras needs a static batch size
// to load such a model, which an Input's batch_size gives.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layer.h"
#include "lockstep/tensor/random.h"

namespace lockstep::layers {

struct RecurrentLayerOptions {
  std::string activation = "tanh";
  std::string recurrent_activation = "sigmoid";  // LSTM and GRU
  bool use_bias = true;
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer recurrent_initializer = initializers::Orthogonal();
  Initializer bias_initializer = initializers::Zeros();
  // LSTM: the forget gate's bias starts at 1 (added to bias_initializer's).
  bool unit_forget_bias = true;
  Regularizer kernel_regularizer{};
  Regularizer recurrent_regularizer{};
  Regularizer bias_regularizer{};
  float dropout = 0.0f;            // of the inputs, in training
  float recurrent_dropout = 0.0f;  // of the state, in training
  std::optional<std::uint64_t> seed{};
  bool return_sequences = false;  // every step's output, else the last
  bool return_state = false;      // the final states as further outputs
  bool go_backwards = false;      // last step first; the output keeps that order
  bool reset_after = true;        // GRU: Keras 3's default
  bool unroll = false;            // accepted for Keras's files; the same arithmetic either way
  // Under a mask: zeros at masked steps, in place of the last output.
  bool zero_output_for_mask = false;
  // Each batch starts from the states the previous one ended with.
  bool stateful = false;
  std::string name{};
};

// SimpleRNN (1 gate), LSTM (4: i, f, c, o) or GRU (3: z, r, h).
class RecurrentImpl : public LayerImpl {
 public:
  RecurrentImpl(std::string class_name, std::int64_t units, RecurrentLayerOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  // Called on {sequences}, or with initial states {sequences, h} (LSTM:
  // {sequences, h, c}); returns {output}, or {output, h} and LSTM's
  // {output, h, c} with return_state.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  LayerConfig get_config() const override;
  std::string keras_vars_path() const override { return "cell/vars"; }
  // Keras's Bidirectional sets it on both its layers (to return_sequences).
  void set_zero_output_for_mask(bool zero) { options_.zero_output_for_mask = zero; }
  bool stateful() const override { return options_.stateful; }
  void reset_states() override;
  // A stateful layer's states now (h; LSTM: h, c) for the calling replica,
  // [batch, units] each; empty before the first batch and after a reset.
  std::vector<Tensor> states() const;

  std::int64_t units() const { return units_; }
  const RecurrentLayerOptions& options() const { return options_; }
  const Variable& kernel() const { return kernel_; }
  const Variable& recurrent_kernel() const { return recurrent_kernel_; }
  const Variable& bias() const { return bias_; }
  // Gate blocks per unit: 1 (SimpleRNN), 3 (GRU) or 4 (LSTM).
  std::int64_t gates() const;

 private:
  std::string class_name_text() const;  // "LSTM 'lstm'", for messages
  // Dropout masks, one per sequence (and per gate with recurrent dropout).
  Tensor mask(const Shape& shape, float rate);
  // The layer's computation, under a sequence mask (undefined: none).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Tensor& sequence_mask,
                          const CallContext& ctx);

  // A stateful layer's states for one replica (copy of the mirrored
  // variables; 0 outside replicas): the batch size they were made for
  // (0 after a reset) and the final states of the last batch.
  struct Held {
    std::int64_t batch = 0;
    std::vector<Tensor> states{};
  };
  Held& held();

  std::int64_t units_;
  RecurrentLayerOptions options_;
  std::uint64_t seed_ = 0;
  random::StreamCounter next_stream_;
  Variable kernel_, recurrent_kernel_, bias_;
  mutable std::mutex held_mu_;  // the replicas' threads add their entries
  std::map<int, Held> held_;
};
class SimpleRNN : public Layer {
 public:
  explicit SimpleRNN(std::int64_t units, RecurrentLayerOptions options = {});
  RecurrentImpl* operator->() const { return static_cast<RecurrentImpl*>(impl_.get()); }
};
class LSTM : public Layer {
 public:
  explicit LSTM(std::int64_t units, RecurrentLayerOptions options = {});
  RecurrentImpl* operator->() const { return static_cast<RecurrentImpl*>(impl_.get()); }
};
class GRU : public Layer {
 public:
  explicit GRU(std::int64_t units, RecurrentLayerOptions options = {});
  RecurrentImpl* operator->() const { return static_cast<RecurrentImpl*>(impl_.get()); }
};

// A recurrent layer run both ways: the layer over the sequence and a copy of
// it (fresh weights, go_backwards flipped) over the reversed sequence, the
// backward outputs put back in time order when return_sequences, merged by
// merge_mode: concat (Keras's default), sum, mul, ave.
struct BidirectionalOptions {
  std::string merge_mode = "concat";
  std::string name{};
};
class BidirectionalImpl : public LayerImpl {
 public:
  BidirectionalImpl(const Layer& layer, BidirectionalOptions options,
                    std::optional<Layer> backward_layer = std::nullopt);
  // {merged output}, then with return_state the forward layer's final
  // states and the backward layer's, as Keras's. Inputs: the sequences,
  // then optionally Keras's initial_state, the forward layer's states (h,
  // or LSTM's h and c) followed by the backward layer's.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  LayerConfig get_config() const override;
  RecurrentImpl& forward_layer() const { return *forward_; }
  RecurrentImpl& backward_layer() const { return *backward_; }
  const std::string& merge_mode() const { return options_.merge_mode; }

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const Tensor& sequence_mask,
                          const CallContext& ctx);

  BidirectionalOptions options_;
  std::shared_ptr<RecurrentImpl> forward_, backward_;
};
class Bidirectional : public Layer {
 public:
  explicit Bidirectional(const Layer& layer, BidirectionalOptions options = {},
                         std::optional<Layer> backward_layer = std::nullopt);
  BidirectionalImpl* operator->() const { return static_cast<BidirectionalImpl*>(impl_.get()); }
};

// The recurrent activations these layers take, by Keras's name ("tanh",
// "sigmoid", "hard_sigmoid", "relu", "linear"); another name is an error
// that lists them.
RecurrentActivation recurrent_activation(const std::string& name, const std::string& where);

}  // namespace lockstep::layers
