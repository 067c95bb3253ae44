// Built-in layers (keras.layers). Each is a Layer handle constructed with
// Keras's arguments as an options struct:
//
//   ls::layers::Dense(256, {.activation = "relu", .kernel_regularizer =
//   ls::regularizers::L2(1e-4)})
//
// and each has a public Impl class holding its weights (layer->kernel()).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/activations.h"
#include "lockstep/nn/layer.h"
#include "lockstep/tensor/random.h"

namespace lockstep {

namespace layers {

// ---- Dense ------------------------------------------------------------------
struct DenseOptions {
  std::string activation{};  // "" = linear
  bool use_bias = true;
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
  std::string dtype{};  // dtype policy ("float32", "mixed_bfloat16"); "" = the global one
};

class DenseImpl : public SingleInputLayerImpl {
 public:
  DenseImpl(std::int64_t units, DenseOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  const Variable& kernel() const { return kernel_; }
  const Variable& bias() const { return bias_; }
  std::int64_t units() const { return units_; }

 private:
  std::int64_t units_;
  DenseOptions options_;
  ActivationFn activation_;
  Variable kernel_, bias_;
};

class Dense : public Layer {
 public:
  explicit Dense(std::int64_t units, DenseOptions options = {});
  DenseImpl* operator->() const { return static_cast<DenseImpl*>(impl_.get()); }
};

// ---- Activation, ReLU, Softmax -------------------------------------------------
class ActivationImpl : public SingleInputLayerImpl {
 public:
  ActivationImpl(const std::string& activation, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  std::optional<ReluOptions> plain_relu() const override;

 private:
  std::string activation_;
  ActivationFn fn_;
};
class Activation : public Layer {
 public:
  explicit Activation(const std::string& activation, std::string name = "");
};

// keras.layers.ReLU: min(x, max_value) above `threshold`, negative_slope ·
// (x − threshold) at or below it. ReLU({.max_value = 6}) is ReLU6.
struct ReLUOptions {
  std::optional<float> max_value{};  // none: unbounded
  float negative_slope = 0.0f;       // leaky slope below the threshold
  float threshold = 0.0f;
  std::string name{};
};
class ReLUImpl : public SingleInputLayerImpl {
 public:
  explicit ReLUImpl(ReLUOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  std::optional<ReluOptions> plain_relu() const override;

 private:
  ReLUOptions options_;
};
class ReLU : public Layer {
 public:
  explicit ReLU(ReLUOptions options = {});
};

// keras.layers.LeakyReLU: x above 0, negative_slope · x below (Keras 3's
// default slope 0.3; Keras 2's files call it alpha).
struct LeakyReLUOptions {
  float negative_slope = 0.3f;
  std::string name{};
};
class LeakyReLUImpl : public SingleInputLayerImpl {
 public:
  explicit LeakyReLUImpl(LeakyReLUOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;

 private:
  LeakyReLUOptions options_;
};
class LeakyReLU : public Layer {
 public:
  explicit LeakyReLU(LeakyReLUOptions options = {});
};

// keras.layers.ELU: x above 0, alpha · (exp(x) − 1) below.
struct ELUOptions {
  float alpha = 1.0f;
  std::string name{};
};
class ELUImpl : public SingleInputLayerImpl {
 public:
  explicit ELUImpl(ELUOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;

 private:
  ELUOptions options_;
};
class ELU : public Layer {
 public:
  explicit ELU(ELUOptions options = {});
};

// keras.layers.PReLU: max(x, 0) + alpha · min(x, 0) with alpha a trainable
// weight of the input's shape without the batch axis, of size 1 along the
// `shared_axes` (Keras's numbering: 1 is the first axis after the batch).
struct PReLUOptions {
  Initializer alpha_initializer = initializers::Zeros();
  Regularizer alpha_regularizer{};
  std::vector<std::int64_t> shared_axes{};
  std::string name{};
};
class PReLUImpl : public SingleInputLayerImpl {
 public:
  explicit PReLUImpl(PReLUOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  const Variable& alpha() const { return alpha_; }

 private:
  PReLUOptions options_;
  Variable alpha_;
};
class PReLU : public Layer {
 public:
  explicit PReLU(PReLUOptions options = {});
  PReLUImpl* operator->() const { return static_cast<PReLUImpl*>(impl_.get()); }
};

class SoftmaxImpl : public SingleInputLayerImpl {
 public:
  SoftmaxImpl(int axis, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  // Keras's: masked positions (false) get no probability; a mask must
  // broadcast to the input from the right.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  int axis_;
};
class Softmax : public Layer {
 public:
  explicit Softmax(int axis = -1, std::string name = "");
};

// ---- Dropout -------------------------------------------------------------------
struct DropoutOptions {
  std::optional<std::uint64_t> seed{};
  std::string name{};
};
// Inverted dropout: in training, zeroes a fraction `rate` of the inputs and
// scales the rest by 1 / (1 - rate); identity in inference.
class DropoutImpl : public SingleInputLayerImpl {
 public:
  DropoutImpl(float rate, DropoutOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;

 private:
  float rate_;
  std::optional<std::uint64_t> explicit_seed_;
  std::uint64_t seed_;
  random::StreamCounter next_stream_;
};
class Dropout : public Layer {
 public:
  explicit Dropout(float rate, DropoutOptions options = {});
};

// ---- Flatten, Reshape ------------------------------------------------------------
class FlattenImpl : public SingleInputLayerImpl {
 public:
  explicit FlattenImpl(std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
};
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name = "");
};

// Reshapes each example to `target_shape` (one dimension may be -1).
class ReshapeImpl : public SingleInputLayerImpl {
 public:
  ReshapeImpl(std::vector<std::int64_t> target_shape, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::vector<std::int64_t> target_;
};
class Reshape : public Layer {
 public:
  explicit Reshape(std::vector<std::int64_t> target_shape, std::string name = "");
};

// ---- merging layers ----------------------------------------------------------------
class AddImpl : public LayerImpl {
 public:
  explicit AddImpl(std::string name);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  // Keras's merge layers: the union of the inputs' masks when every input
  // has one, else none.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
};
class Add : public Layer {
 public:
  explicit Add(std::string name = "");
};

// keras.layers.Multiply, Subtract (exactly 2 inputs), Average, Maximum and
// Minimum: elementwise over inputs of one shape, as Add.
class ElementwiseMergeImpl : public LayerImpl {
 public:
  enum class Kind { kMultiply, kSubtract, kAverage, kMaximum, kMinimum };
  ElementwiseMergeImpl(Kind kind, std::string name);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  // Masks as Add's; Maximum and Minimum also leave a masked input's
  // positions out of the comparison, as Keras's.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;

 private:
  Kind kind_;
};
class Multiply : public Layer {
 public:
  explicit Multiply(std::string name = "");
};
class Subtract : public Layer {
 public:
  explicit Subtract(std::string name = "");
};
class Average : public Layer {
 public:
  explicit Average(std::string name = "");
};
class Maximum : public Layer {
 public:
  explicit Maximum(std::string name = "");
};
class Minimum : public Layer {
 public:
  explicit Minimum(std::string name = "");
};

class ConcatenateImpl : public LayerImpl {
 public:
  ConcatenateImpl(int axis, std::string name);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  // Keras's: an input without a mask counts as all real; the output's mask
  // is true where any input's is, along the joined axis when it is a step axis.
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  LayerConfig get_config() const override;

 private:
  int axis_;
};
class Concatenate : public Layer {
 public:
  explicit Concatenate(int axis = -1, std::string name = "");
};

// ---- Rescaling -------------------------------------------------------------------
struct RescalingOptions {
  float offset = 0.0f;
  std::string name{};
};
// x · scale + offset, inputs of any numeric dtype cast to float32 first
// (keras.layers.Rescaling: Rescaling(1 / 127.5, {.offset = -1}) maps
// [0, 255] to [−1, 1]).
class RescalingImpl : public SingleInputLayerImpl {
 public:
  RescalingImpl(float scale, RescalingOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;

 private:
  float scale_;
  RescalingOptions options_;
};
class Rescaling : public Layer {
 public:
  explicit Rescaling(float scale, RescalingOptions options = {});
};

// ---- Normalization ---------------------------------------------------------------
struct NormalizationOptions {
  // Per feature of the last axis (or one value for all); both or neither.
  // Neither: adapt() computes them from data before the layer is used.
  std::vector<double> mean{};
  std::vector<double> variance{};
  bool invert = false;  // x · sqrt(variance) + mean instead
  std::string name{};
};
// (x − mean) / max(sqrt(variance), 1e-7) over the last axis
// (keras.layers.Normalization with axis=-1, mean and variance given: its
// config carries them, so a saved model normalises as it did in training).
//
// Built without mean and variance (a layer adapted after it joined a model,
// or one Keras adapted and saved: Keras 3 keeps the statistics as weights
// then, with null in the config), the layer holds them as Keras does: three
// non-trainable weights, mean and variance [features] (0 and 1 until
// adapted: the identity) and an int64 count, which a file's weights fill.
class NormalizationImpl : public SingleInputLayerImpl {
 public:
  explicit NormalizationImpl(NormalizationOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;
  // The mean and (population) variance of `data` ([n, ..., features]) per
  // feature, as Keras's adapt(): into the weights when the layer has them,
  // else into the config.
  void adapt(const Tensor& data);
  // The statistics in use (the weights' values when the layer has them).
  std::vector<double> mean() const;
  std::vector<double> variance() const;

 private:
  NormalizationOptions options_;
  Variable mean_, variance_, count_;  // defined when the statistics are weights
};
class Normalization : public Layer {
 public:
  explicit Normalization(NormalizationOptions options = {});
  NormalizationImpl* operator->() const { return static_cast<NormalizationImpl*>(impl_.get()); }
};

// ---- LayerNormalization -------------------------------------------------------
struct LayerNormalizationOptions {
  float epsilon = 1e-3f;
  bool center = true;
  bool scale = true;
  // Keras 3's deprecated form: x · rsqrt(var(x) + epsilon) · gamma (the
  // input is not centred; gamma only).
  bool rms_scaling = false;
  Initializer beta_initializer = initializers::Zeros();
  Initializer gamma_initializer = initializers::Ones();
  Regularizer beta_regularizer{};
  Regularizer gamma_regularizer{};
  std::string name{};
};
// keras.layers.LayerNormalization over the last axis: each example's
// features to mean 0 and variance 1, then · gamma + beta (weights
// [features]); computed in float32 under a mixed policy, as Keras's, in
// Keras's order: x · inv + (beta − mean · inv), inv = gamma / sqrt(var + ε).
class LayerNormalizationImpl : public SingleInputLayerImpl {
 public:
  explicit LayerNormalizationImpl(LayerNormalizationOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  LayerConfig get_config() const override;

 private:
  LayerNormalizationOptions options_;
  Variable gamma_, beta_;
};
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(LayerNormalizationOptions options = {});
};

// ---- Embedding ---------------------------------------------------------------------
struct EmbeddingOptions {
  Initializer embeddings_initializer = initializers::RandomUniform();
  Regularizer embeddings_regularizer{};
  // Id 0 is padding: the output carries a mask, false where the id is 0,
  // that the layers after it honour (Keras's mask_zero).
  bool mask_zero = false;
  std::string name{};
};
// Maps integer ids in [0, input_dim) to vectors of size output_dim.
class EmbeddingImpl : public SingleInputLayerImpl {
 public:
  EmbeddingImpl(std::int64_t input_dim, std::int64_t output_dim, EmbeddingOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& ids, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  LayerConfig get_config() const override;
  const Variable& embeddings() const { return embeddings_; }

 private:
  std::int64_t input_dim_, output_dim_;
  EmbeddingOptions options_;
  Variable embeddings_;
};
class Embedding : public Layer {
 public:
  Embedding(std::int64_t input_dim, std::int64_t output_dim, EmbeddingOptions options = {});
  EmbeddingImpl* operator->() const { return static_cast<EmbeddingImpl*>(impl_.get()); }
};

// ---- Masking ---------------------------------------------------------------------
// keras.layers.Masking: a step whose features all equal mask_value is
// padding. The output is the input with such steps zeroed, and a mask
// [batch, steps], false there, that the layers after it honour.
class MaskingImpl : public SingleInputLayerImpl {
 public:
  MaskingImpl(double mask_value, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs,
                                   const std::vector<Tensor>& masks) const override;
  LayerConfig get_config() const override;
  double mask_value() const { return mask_value_; }

 private:
  double mask_value_;
};
class Masking : public Layer {
 public:
  explicit Masking(double mask_value = 0.0, std::string name = "");
};

}  // namespace layers
}  // namespace lockstep
