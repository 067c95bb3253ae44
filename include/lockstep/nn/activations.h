// Keras's activation functions (keras.activations), by name and as
// functions, each a composition of differentiable ops, so its gradient is
// theirs (tests/nn/activations_test.cc checks each against its formula by
// finite differences; tests/train/keras_files_test.cc a model using them
// all against real Keras's outputs).
//
//   ls::layers::Dense(64, {.activation = "gelu"});          // by name
//   ls::Tensor y = ls::activations::gelu(x, /*approximate=*/true);
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/tensor/ops.h"

namespace lockstep {

// An activation function by Keras name (every name keras.activations.get
// takes without arguments; activation_names() lists them). ValueError naming
// the nearest valid name otherwise.
using ActivationFn = std::function<Tensor(const Tensor&)>;
ActivationFn get_activation(const std::string& name);
std::vector<std::string> activation_names();
// The plain ReLU an activation name is ("relu", "relu6"); none otherwise.
std::optional<ReluOptions> plain_relu_activation(const std::string& name);

namespace activations {

// 0.5·x·(1 + erf(x/√2)); approximate: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
Tensor gelu(const Tensor& x, bool approximate = false);
// x where x > 0, else alpha·(exp(x) − 1).
Tensor elu(const Tensor& x, float alpha = 1.0f);
// scale · elu(x, alpha) with Klambauer et al.'s constants.
Tensor selu(const Tensor& x);
// log(1 + exp(x)), computed as max(x, 0) + log1p(exp(−|x|)).
Tensor softplus(const Tensor& x);
Tensor softsign(const Tensor& x);      // x / (1 + |x|)
Tensor silu(const Tensor& x);          // x · sigmoid(x) ("swish")
Tensor hard_sigmoid(const Tensor& x);  // relu6(x + 3) / 6
Tensor hard_silu(const Tensor& x);     // x · hard_sigmoid(x) ("hard_swish")
Tensor hard_tanh(const Tensor& x);     // clip(x, −1, 1)
Tensor mish(const Tensor& x);          // x · tanh(softplus(x))
Tensor leaky_relu(const Tensor& x, float negative_slope = 0.2f);
Tensor log_sigmoid(const Tensor& x);                 // −softplus(−x)
Tensor celu(const Tensor& x, float alpha = 1.0f);    // x > 0 ? x : alpha·(exp(x/alpha) − 1)
Tensor squareplus(const Tensor& x, float b = 4.0f);  // (x + √(x² + b)) / 2
Tensor tanh_shrink(const Tensor& x);                 // x − tanh(x)
Tensor soft_shrink(const Tensor& x, float threshold = 0.5f);
Tensor hard_shrink(const Tensor& x, float threshold = 0.5f);
Tensor sparse_plus(const Tensor& x);     // 0, (x + 1)²/4, x on (−∞, −1], (−1, 1), [1, ∞)
Tensor sparse_sigmoid(const Tensor& x);  // clip((x + 1)/2, 0, 1)
Tensor glu(const Tensor& x, int axis = -1);  // a · sigmoid(b), x split in halves a, b on axis

}  // namespace activations
}  // namespace lockstep
