// Layers over sequences [batch, steps, features] (keras.layers): Conv1D,
// MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, GlobalMaxPooling1D,
// and TimeDistributed.
// Each runs as its 2-D counterpart on [batch, 1, steps, features] (oneDNN's
// convolution and pooling, forward and backward), so its gradients are
// those kernels'.
//
//   auto x = ls::layers::Conv1D(64, 5, {.padding = "causal", .activation = "relu"})(tokens);
//   x = ls::layers::GlobalMaxPooling1D()(x);
#pragma once

#include <cstdint>
#include <string>

#include "lockstep/nn/activations.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/layer.h"

namespace lockstep::layers {

struct Conv1DOptions {
  std::int64_t strides = 1;
  std::string padding = "valid";  // valid, same, or causal (left zeros: step t sees steps <= t)
  std::int64_t dilation_rate = 1;
  std::int64_t groups = 1;
  std::string activation{};
  bool use_bias = true;
  Initializer kernel_initializer = initializers::GlorotUniform();
  Initializer bias_initializer = initializers::Zeros();
  Regularizer kernel_regularizer{};
  Regularizer bias_regularizer{};
  std::string name{};
};
// Kernel [kernel_size, features / groups, filters], Keras's layout.
class Conv1DImpl : public SingleInputLayerImpl {
 public:
  Conv1DImpl(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const Variable& kernel() const { return kernel_; }

 private:
  std::int64_t filters_, kernel_size_;
  Conv1DOptions options_;
  ActivationFn activation_;
  Variable kernel_, bias_;
};
class Conv1D : public Layer {
 public:
  Conv1D(std::int64_t filters, std::int64_t kernel_size, Conv1DOptions options = {});
  Conv1DImpl* operator->() const { return static_cast<Conv1DImpl*>(impl_.get()); }
};

struct Pooling1DOptions {
  std::int64_t strides = 0;  // 0: the pool size
  std::string padding = "valid";
  std::string name{};
};
class Pooling1DImpl : public SingleInputLayerImpl {
 public:
  Pooling1DImpl(bool max, std::int64_t pool_size, Pooling1DOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  bool max_;
  std::int64_t pool_size_;
  Pooling1DOptions options_;
};
class MaxPooling1D : public Layer {
 public:
  explicit MaxPooling1D(std::int64_t pool_size = 2, Pooling1DOptions options = {});
};
class AveragePooling1D : public Layer {
 public:
  explicit AveragePooling1D(std::int64_t pool_size = 2, Pooling1DOptions options = {});
};

struct GlobalPooling1DOptions {
  bool keepdims = false;  // [batch, 1, features] instead of [batch, features]
  std::string name{};
};
// The mean or the maximum over the steps, per feature.
class GlobalPooling1DImpl : public SingleInputLayerImpl {
 public:
  GlobalPooling1DImpl(bool max, GlobalPooling1DOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  // The average takes a mask, as Keras's: the mean of the real steps (and
  // ends the mask); the maximum does not take one, as in Keras.
  bool supports_masking() const override { return !max_; }
  std::vector<Tensor> call_masked(const std::vector<Tensor>& inputs,
                                  const std::vector<Tensor>& masks,
                                  const CallContext& ctx) override;
  std::vector<Tensor> compute_mask(const std::vector<Tensor>&,
                                   const std::vector<Tensor>&) const override {
    return {Tensor()};
  }
  LayerConfig get_config() const override;

 private:
  bool max_;
  GlobalPooling1DOptions options_;
};
class GlobalAveragePooling1D : public Layer {
 public:
  explicit GlobalAveragePooling1D(GlobalPooling1DOptions options = {});
};
class GlobalMaxPooling1D : public Layer {
 public:
  explicit GlobalMaxPooling1D(GlobalPooling1DOptions options = {});
};

// keras.layers.TimeDistributed: `layer` applied to every step of [batch,
// steps, ...] alone, as one call on [batch · steps, ...] (the same weights
// for every step); saved under the attribute `layer`, as Keras saves it.
class TimeDistributedImpl : public SingleInputLayerImpl {
 public:
  TimeDistributedImpl(const Layer& layer, std::string name);
  void build(const std::vector<Shape>& input_shapes) override;
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  bool supports_masking() const override { return true; }  // passes it on
  const Layer& layer() const { return layer_; }

 private:
  Layer layer_;
};
class TimeDistributed : public Layer {
 public:
  explicit TimeDistributed(const Layer& layer, std::string name = "");
  TimeDistributedImpl* operator->() const { return static_cast<TimeDistributedImpl*>(impl_.get()); }
};

}  // namespace lockstep::layers
