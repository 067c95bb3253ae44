// Keras's activation functions by name and as functions (activations.h).
// Each is written as Keras's TensorFlow backend computes it, from ops
// whose gradients exist; branches taken by `where` are kept finite on both
// sides (exp of min(x, 0), never of a large x), so no 0 · inf makes a NaN
// in the gradient of the branch not taken.
#include "lockstep/nn/activations.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"

namespace lockstep {

namespace activations {

namespace {

// exp(x) − 1 for x <= 0 (the negative branch of elu, selu and celu); the
// clamp keeps the branch finite where it is not taken.
Tensor expm1_of_negative_part(const Tensor& x) { return exp(minimum(x, zeros_like(x))) - 1.0f; }

Tensor positive(const Tensor& x) { return greater(x, zeros_like(x)); }

}  // namespace

Tensor gelu(const Tensor& x, bool approximate) {
  if (approximate) {
    const float c = std::sqrt(2.0f / static_cast<float>(M_PI));
    return 0.5f * x * (tanh(c * (x + 0.044715f * x * x * x)) + 1.0f);
  }
  return 0.5f * x * (erf(x * static_cast<float>(M_SQRT1_2)) + 1.0f);
}

Tensor elu(const Tensor& x, float alpha) {
  return where(positive(x), x, alpha * expm1_of_negative_part(x));
}

Tensor selu(const Tensor& x) {
  // Klambauer et al. (2017), as Keras's.
  constexpr float kAlpha = 1.6732632423543772848170429916717f;
  constexpr float kScale = 1.0507009873554804934193349852946f;
  return kScale * elu(x, kAlpha);
}

Tensor softplus(const Tensor& x) { return maximum(x, zeros_like(x)) + log1p(exp(neg(abs(x)))); }

Tensor softsign(const Tensor& x) { return x / (abs(x) + 1.0f); }

Tensor silu(const Tensor& x) { return x * sigmoid(x); }

Tensor hard_sigmoid(const Tensor& x) { return relu(x + 3.0f, {.max_value = 6.0f}) / 6.0f; }

Tensor hard_silu(const Tensor& x) { return x * hard_sigmoid(x); }

Tensor hard_tanh(const Tensor& x) { return clip(x, -1.0f, 1.0f); }

Tensor mish(const Tensor& x) { return x * tanh(softplus(x)); }

Tensor leaky_relu(const Tensor& x, float negative_slope) {
  return relu(x, {.negative_slope = negative_slope});
}

Tensor log_sigmoid(const Tensor& x) { return neg(softplus(neg(x))); }

Tensor celu(const Tensor& x, float alpha) {
  LOCKSTEP_CHECK(alpha != 0.0f, "celu: alpha must not be 0");
  return where(positive(x), x, alpha * expm1_of_negative_part(x / alpha));
}

Tensor squareplus(const Tensor& x, float b) {
  LOCKSTEP_CHECK(b >= 0.0f, "squareplus: b must be >= 0, got ", b);
  return (x + sqrt(x * x + b)) * 0.5f;
}

Tensor tanh_shrink(const Tensor& x) { return x - tanh(x); }

Tensor soft_shrink(const Tensor& x, float threshold) {
  const Tensor zero = zeros_like(x);
  return where(greater(x, zero + threshold), x - threshold,
               where(less(x, zero - threshold), x + threshold, zero));
}

Tensor hard_shrink(const Tensor& x, float threshold) {
  return where(greater(abs(x), zeros_like(x) + threshold), x, zeros_like(x));
}

Tensor sparse_plus(const Tensor& x) {
  const Tensor zero = zeros_like(x);
  const Tensor middle = (x + 1.0f) * (x + 1.0f) * 0.25f;
  return where(less_equal(x, zero - 1.0f), zero, where(greater_equal(x, zero + 1.0f), x, middle));
}

Tensor sparse_sigmoid(const Tensor& x) { return clip((x + 1.0f) * 0.5f, 0.0f, 1.0f); }

Tensor glu(const Tensor& x, int axis) {
  const int rank = x.rank();
  const int a = axis < 0 ? axis + rank : axis;
  LOCKSTEP_CHECK_AS(ShapeError, a >= 0 && a < rank && x.dim(a) % 2 == 0, "glu: axis ", axis,
                    " of an input of shape ", x.shape(), " must exist and have an even size");
  std::vector<std::int64_t> begin(static_cast<std::size_t>(rank), 0);
  std::vector<std::int64_t> size(x.shape().dims().begin(), x.shape().dims().end());
  size[static_cast<std::size_t>(a)] /= 2;
  const Tensor first = slice(x, begin, size);
  begin[static_cast<std::size_t>(a)] = size[static_cast<std::size_t>(a)];
  return first * sigmoid(slice(x, begin, size));
}

}  // namespace activations

namespace {

const std::map<std::string, ActivationFn>& by_name() {
  using namespace activations;
  static const std::map<std::string, ActivationFn> m{
      {"linear", [](const Tensor& x) { return x; }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"relu6", [](const Tensor& x) { return relu(x, {.max_value = 6.0f}); }},
      {"leaky_relu", [](const Tensor& x) { return leaky_relu(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"softmax", [](const Tensor& x) { return softmax(x, -1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"swish", [](const Tensor& x) { return silu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"elu", [](const Tensor& x) { return elu(x); }},
      {"selu", [](const Tensor& x) { return selu(x); }},
      {"celu", [](const Tensor& x) { return celu(x); }},
      {"softplus", [](const Tensor& x) { return softplus(x); }},
      {"softsign", [](const Tensor& x) { return softsign(x); }},
      {"exponential", [](const Tensor& x) { return exp(x); }},
      {"hard_sigmoid", [](const Tensor& x) { return hard_sigmoid(x); }},
      {"hard_silu", [](const Tensor& x) { return hard_silu(x); }},
      {"hard_swish", [](const Tensor& x) { return hard_silu(x); }},
      {"hard_tanh", [](const Tensor& x) { return hard_tanh(x); }},
      {"mish", [](const Tensor& x) { return mish(x); }},
      {"log_sigmoid", [](const Tensor& x) { return log_sigmoid(x); }},
      {"squareplus", [](const Tensor& x) { return squareplus(x); }},
      {"tanh_shrink", [](const Tensor& x) { return tanh_shrink(x); }},
      {"soft_shrink", [](const Tensor& x) { return soft_shrink(x); }},
      {"hard_shrink", [](const Tensor& x) { return hard_shrink(x); }},
      {"sparse_plus", [](const Tensor& x) { return sparse_plus(x); }},
      {"sparse_sigmoid", [](const Tensor& x) { return sparse_sigmoid(x); }},
      {"glu", [](const Tensor& x) { return glu(x); }},
  };
  return m;
}

}  // namespace

std::vector<std::string> activation_names() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : by_name()) names.push_back(name);
  return names;
}

ActivationFn get_activation(const std::string& name) {
  if (name.empty()) return by_name().at("linear");
  if (auto it = by_name().find(name); it != by_name().end()) return it->second;
  std::string all;
  for (const auto& [known, fn] : by_name()) all += (all.empty() ? "" : ", ") + known;
  const std::string nearest = nearest_name(name, activation_names());
  const bool needs_arguments = name == "threshold" || name == "sparsemax";
  detail::throw_error<ValueError>(
      "unknown activation '", name, "'",
      needs_arguments ? " (Keras's takes arguments or a sort Lockstep does not have yet)" : "",
      "; did you mean '", nearest, "'? Lockstep's: ", all);
}

std::optional<ReluOptions> plain_relu_activation(const std::string& name) {
  if (name == "relu") return ReluOptions{};
  if (name == "relu6") return ReluOptions{.max_value = 6.0f};
  return std::nullopt;
}

}  // namespace lockstep
