// Attention (keras.layers): MultiHeadAttention, and EinsumDense, the
// projection its heads are made of.
//
//   auto x = ls::Input({128, 64});
//   auto a = ls::layers::MultiHeadAttention(4, 16)({x, x});   // self-attention
//   x = ls::layers::LayerNormalization()(ls::layers::Add()({x, a}));
//
// MultiHeadAttention is Keras 3's: per head, the query, key and value are
// projected (EinsumDense "abc,cde->abde"), the scores q·kᵀ/√key_dim go
// through a softmax over the keys (dropout on them in training), and the
// heads' outputs are projected back (EinsumDense "abcd,cde->abe"). Its
// weights are saved under query_dense, key_dense, value_dense and
// output_dense, as Keras saves them.
//
// Masks (nn/layer.h, "Keras masks") work as in Keras: the query's mask
// and the value's (and key's) make the attention mask, a masked key gets
// no attention, and the output carries the query's mask. use_causal_mask
// (in Keras a call argument; here the layer's, so every call of it is
// causal) lets step i attend to steps ≤ i only.
//
// Attention is Keras's dot-product (Luong) or additive ("concat", Bahdanau)
// attention of a query over a value, without projections.
//
// return_attention_scores (like use_causal_mask, a call argument in Keras
// and a setting here) makes the scores a second output: after the softmax,
// [batch, heads, query steps, value steps] (MultiHeadAttention) or
// [batch, query steps, value steps] (Attention).
//
// attention_axes (Keras's): the query, value and key may have several
// step axes, [batch, T1, …, Tn, features]; attention runs over the axes
// named (all of them by default), as one flattened set of positions: the
// softmax spans every attended key position at once, and the axes not
// named are batch-like (each slice attends within itself). The scores are
// then [batch, free axes…, heads, query's attended axes…, key's attended
// axes…], Keras's layout. On such inputs Keras's masks of the inputs and
// use_causal_mask (defined for [batch, steps, features]) are refused; an
// attention_mask [batch, query's attended axes…, key's attended axes…]
// is taken.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/activations.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layer.h"

namespace lockstep::layers {

struct EinsumDenseOptions {
  // The output's axes that carry a bias, a suffix of the equation's output
  // ("de" of "abde"); empty: no bias.
  std::string bias_axes{};
  std::string activation{};
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
};
// keras.layers.EinsumDense for equations that contract the input's last
// axes with the kernel's first ones: "abc,cd->abd" (Dense), "abc,cde->abde",
// "abcd,cde->abe". `output_shape` is Keras's: the output's dimensions
// without the batch, -1 where the input gives it (Keras's None). One matrix
// product, forward and backward.
class EinsumDenseImpl : public SingleInputLayerImpl {
 public:
  EinsumDenseImpl(std::string equation, std::vector<std::int64_t> output_shape,
                  EinsumDenseOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }

 private:
  std::string equation_;
  std::vector<std::int64_t> output_shape_;
  EinsumDenseOptions options_;
  ActivationFn activation_;
  std::size_t contracted_ = 0;            // how many of the input's last axes the kernel takes
  std::vector<std::int64_t> kernel_out_;  // the kernel's other dimensions
  Variable kernel_, bias_;
};
class EinsumDense : public Layer {
 public:
  EinsumDense(std::string equation, std::vector<std::int64_t> output_shape,
              EinsumDenseOptions options = {});
  EinsumDenseImpl* operator->() const { return static_cast<EinsumDenseImpl*>(impl_.get()); }
};

struct MultiHeadAttentionOptions {
  std::int64_t value_dim = 0;  // 0: key_dim
  float dropout = 0.0f;        // of the attention probabilities, in training
  bool use_bias = true;
  std::int64_t output_dim = 0;  // Keras's output_shape; 0: the query's features
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  std::optional<std::uint64_t> seed{};
  // Step i of the query attends to steps ≤ i of the value only.
  bool use_causal_mask = false;
  // The attention scores as a second output.
  bool return_attention_scores = false;
  // Keras's attention_mask call argument: the last input is then a mask
  // [batch, query steps, value steps] (bool, or 0 / 1), true
  // where a query step may attend to a value step; it joins the inputs'
  // masks and the causal one.
  bool attention_mask = false;
  // The axes attended over (Keras's attention_axes), of the query's shape,
  // negative from its end; empty: every axis but the batch and features
  // (Keras's None).
  std::vector<std::int64_t> attention_axes{};
  std::string name{};
};
// Called on {query, value} or {query, value, key} ([batch, steps…,
// features] each, one rank; key defaults to value), then the attention mask
// with `attention_mask`; returns [batch, query steps…, output_dim].
class MultiHeadAttentionImpl : public LayerImpl {
 public:
  MultiHeadAttentionImpl(std::int64_t num_heads, std::int64_t key_dim,
                         MultiHeadAttentionOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  LayerConfig get_config() const override;
  std::int64_t num_heads() const { return num_heads_; }
  std::int64_t key_dim() const { return key_dim_; }
  std::int64_t value_dim() const { return options_.value_dim; }
  // What a Keras file's call arguments set (keras_config).
  bool use_causal_mask() const { return options_.use_causal_mask; }
  void set_use_causal_mask(bool causal) { options_.use_causal_mask = causal; }
  bool return_attention_scores() const { return options_.return_attention_scores; }
  void set_return_attention_scores(bool on) { options_.return_attention_scores = on; }
  bool attention_mask() const { return options_.attention_mask; }
  void set_attention_mask(bool on) { options_.attention_mask = on; }
  // The attended axes, normalised (after build; before it, as given).
  const std::vector<std::int64_t>& attention_axes() const { return options_.attention_axes; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
                          const CallContext& ctx);

  std::int64_t num_heads_, key_dim_;
  MultiHeadAttentionOptions options_;
  std::vector<std::int64_t> free_axes_;  // the step axes not attended over (batch-like)
  Layer query_dense_, key_dense_, value_dense_, output_dense_, softmax_, dropout_;
};
class MultiHeadAttention : public Layer {
 public:
  MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                     MultiHeadAttentionOptions options = {});
  MultiHeadAttentionImpl* operator->() const {
    return static_cast<MultiHeadAttentionImpl*>(impl_.get());
  }
};

// ---- Attention ---------------------------------------------------------------------
struct AttentionOptions {
  // A trainable scalar (initially 1) that multiplies the scores.
  bool use_scale = false;
  // "dot": scores q·kᵀ; "concat": Σ tanh(q + k) (times the scale inside,
  // when use_scale), times a trainable scalar (initially 1).
  std::string score_mode = "dot";
  float dropout = 0.0f;  // of the attention distribution, in training
  std::optional<std::uint64_t> seed{};
  // Step i of the query attends to steps ≤ i of the value only.
  bool use_causal_mask = false;
  // The attention distribution as a second output.
  bool return_attention_scores = false;
  std::string name{};
};
// keras.layers.Attention, called on {query, value} or {query, value, key}
// ([batch, steps, dim] each; key defaults to value): softmax(scores) · value,
// [batch, query steps, value dim]. The value's mask hides steps from every
// query; the query's zeroes the output at masked query steps and is the
// output's mask.
class AttentionImpl : public LayerImpl {
 public:
  explicit AttentionImpl(AttentionOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  LayerConfig get_config() const override;
  bool use_causal_mask() const { return options_.use_causal_mask; }
  void set_use_causal_mask(bool causal) { options_.use_causal_mask = causal; }
  bool return_attention_scores() const { return options_.return_attention_scores; }
  void set_return_attention_scores(bool on) { options_.return_attention_scores = on; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;

 private:
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, const std::vector<Tensor>& masks,
                          const CallContext& ctx);

  AttentionOptions options_;
  Variable scale_, concat_score_weight_;
  Layer dropout_;
};
class Attention : public Layer {
 public:
  explicit Attention(AttentionOptions options = {});
  AttentionImpl* operator->() const { return static_cast<AttentionImpl*>(impl_.get()); }
};

}  // namespace lockstep::layers
