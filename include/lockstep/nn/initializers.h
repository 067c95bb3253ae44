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
#include <utility>
#include <variant>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

// A named function from a shape to initial values, with the arguments it
// was made with (Keras's config keys: what a saved model records, and what
// initializers::from_config takes back). Value type.
class Initializer {
 public:
  using Fn = std::function<Tensor(const Shape&)>;
  using Arg = std::variant<double, std::string>;
  using Args = std::vector<std::pair<std::string, Arg>>;
  Initializer(std::string name, Fn fn, Args args = {})
      : name_(std::move(name)), fn_(std::move(fn)), args_(std::move(args)) {}
  Tensor operator()(const Shape& shape) const { return fn_(shape); }
  const std::string& name() const { return name_; }
  const Args& args() const { return args_; }

 private:
  std::string name_;
  Fn fn_;
  Args args_;
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
// U(-limit, limit), limit = sqrt(3 / fan_in).
Initializer LecunUniform(Seed seed = std::nullopt);
// Keras's VarianceScaling, of which the six above are cases: variance
// scale / n with n the fan_in, fan_out or fan_avg ("mode") of the shape;
// "distribution" truncated_normal (stddev corrected for the truncation at 2
// standard deviations; Keras 2's "normal" is this), untruncated_normal or
// uniform. ValueError for another mode or distribution.
Initializer VarianceScaling(double scale = 1.0, const std::string& mode = "fan_in",
                            const std::string& distribution = "truncated_normal",
                            Seed seed = std::nullopt);
// An orthogonal matrix (rows or columns orthonormal, as the shape allows)
// times gain, of a normal matrix's QR decomposition, the rows being all
// axes but the last (Saxe et al.; Keras's Orthogonal). Rank >= 2.
Initializer Orthogonal(double gain = 1.0, Seed seed = std::nullopt);
// gain times the identity matrix (rectangular: ones on the diagonal); 2-D
// shapes only, as Keras's Identity.
Initializer Identity(double gain = 1.0);
Initializer RandomNormal(float mean = 0.0f, float stddev = 0.05f, Seed seed = std::nullopt);
Initializer RandomUniform(float minval = -0.05f, float maxval = 0.05f, Seed seed = std::nullopt);
// Normal values redrawn until within two standard deviations of the mean.
Initializer TruncatedNormal(float mean = 0.0f, float stddev = 0.05f, Seed seed = std::nullopt);
Initializer Zeros();
Initializer Ones();
Initializer Constant(float value);
// By Keras name: "glorot_uniform", "he_normal", "zeros", ...; ValueError
// naming the nearest valid name otherwise.
Initializer get(std::string_view name);
// By name and Keras's config arguments (as Initializer::args() holds them;
// a seed is not one: a file's weights are loaded, not drawn). ValueError
// naming an argument the initializer does not take, or one of the wrong type.
Initializer from_config(const std::string& name, const Initializer::Args& args);
// The names get() and from_config() take.
std::vector<std::string> names();
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
