// Weight initializers and regularizers, with Keras's names and formulas.
//
//   {.kernel_initializer = ls::initializers::HeNormal(),
//    .kernel_regularizer = ls::regularizers::L2(1e-4)}
//
// An initializer without a seed draws from the global seed sequence:
// set_random_seed(s) makes every later unseeded initializer reproducible
// (keras.utils.set_random_seed); the default seed is fixed, so runs are
// reproducible even without it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

// A named function from a shape to initial values. Value type.
class Initializer {
 public:
  using Fn = std::function<Tensor(const Shape&)>;
  Initializer(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  Tensor operator()(const Shape& shape) const { return fn_(shape); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

// A named weight penalty; empty (false) when there is none. Value type.
class Regularizer {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  Regularizer() = default;
  Regularizer(std::string name, Fn fn, float l1 = 0.0f, float l2 = 0.0f)
      : name_(std::move(name)), fn_(std::move(fn)), l1_(l1), l2_(l2) {}
  explicit operator bool() const { return static_cast<bool>(fn_); }
  Tensor operator()(const Tensor& weight) const { return fn_(weight); }
  const std::string& name() const { return name_; }
  // The coefficients of the L1/L2 family (what a saved config records).
  float l1() const { return l1_; }
  float l2() const { return l2_; }

 private:
  std::string name_;
  Fn fn_;
  float l1_ = 0.0f, l2_ = 0.0f;
};

// Seeds the global sequence that unseeded initializers (and later dropout and
// shuffling) draw from.
void set_random_seed(std::uint64_t seed);

namespace initializers {
using Seed = std::optional<std::uint64_t>;
// U(-limit, limit), limit = sqrt(6 / (fan_in + fan_out)). Keras's default.
Initializer GlorotUniform(Seed seed = std::nullopt);
Initializer GlorotNormal(Seed seed = std::nullopt);
// Truncated normal, stddev = sqrt(2 / fan_in) (corrected for truncation).
Initializer HeNormal(Seed seed = std::nullopt);
Initializer HeUniform(Seed seed = std::nullopt);
// Truncated normal, stddev = sqrt(1 / fan_in).
Initializer LecunNormal(Seed seed = std::nullopt);
Initializer RandomNormal(float mean = 0.0f, float stddev = 0.05f, Seed seed = std::nullopt);
Initializer RandomUniform(float minval = -0.05f, float maxval = 0.05f, Seed seed = std::nullopt);
// Normal values redrawn until within two standard deviations of the mean.
Initializer TruncatedNormal(float mean = 0.0f, float stddev = 0.05f, Seed seed = std::nullopt);
Initializer Zeros();
Initializer Ones();
Initializer Constant(float value);
// By Keras name: "glorot_uniform", "he_normal", "zeros", ...; ValueError
// listing the valid names otherwise.
Initializer get(std::string_view name);
}  // namespace initializers

namespace regularizers {
Regularizer L1(float l1 = 0.01f);
Regularizer L2(float l2 = 0.01f);
Regularizer L1L2(float l1 = 0.0f, float l2 = 0.0f);
}  // namespace regularizers

namespace detail {
// (seed, stream) for the next unseeded random draw.
std::pair<std::uint64_t, std::uint64_t> next_global_random_key();
// The whole global state, (seed, next stream), for checkpoints.
std::pair<std::uint64_t, std::uint64_t> global_random_state();
void set_global_random_state(std::uint64_t seed, std::uint64_t next_stream);
}  // namespace detail

}  // namespace lockstep
