// Internal to nn: how layers write their common arguments into a LayerConfig.
#pragma once

#include <string>
#include <variant>

#include "lockstep/nn/config.h"
#include "lockstep/nn/initializers.h"

namespace lockstep::nn_detail {

// An initializer as its name under `key` and each argument under
// "key.argument" (what keras_config turns into Keras's object, and
// config.cc's initializer() back).
inline void put_initializer(LayerConfig& c, const std::string& key, const Initializer& init) {
  c.set(key, init.name());
  for (const auto& [arg, value] : init.args())
    std::visit([&, &a = arg](const auto& v) { c.set(key + "." + a, v); }, value);
}

inline void put_regularizer(LayerConfig& c, const std::string& key, const Regularizer& r) {
  if (!r) return;
  c.set(key + "_l1", static_cast<double>(r.l1()));
  c.set(key + "_l2", static_cast<double>(r.l2()));
}

// The arguments Dense and Conv2D share: activation, bias, kernel and bias
// initializers and regularizers.
inline void put_kernel_layer_options(LayerConfig& c, const std::string& activation, bool use_bias,
                                     const Initializer& kernel_initializer,
                                     const Initializer& bias_initializer,
                                     const Regularizer& kernel_regularizer,
                                     const Regularizer& bias_regularizer) {
  c.set("activation", activation.empty() ? std::string("linear") : activation);
  c.set("use_bias", use_bias);
  put_initializer(c, "kernel_initializer", kernel_initializer);
  put_initializer(c, "bias_initializer", bias_initializer);
  put_regularizer(c, "kernel_regularizer", kernel_regularizer);
  put_regularizer(c, "bias_regularizer", bias_regularizer);
}

}  // namespace lockstep::nn_detail
