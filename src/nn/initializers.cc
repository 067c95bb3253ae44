// Initializers (Keras's VarianceScaling family, orthogonal, identity and
// constants) and regularizers.
#include "lockstep/nn/initializers.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>

#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"

namespace lockstep {
namespace {

// The global seed sequence: one seed, a counter of streams handed out.
std::atomic<std::uint64_t> g_seed{1337};
std::atomic<std::uint64_t> g_stream{0};

struct Fans {
  double in, out;
};

// Keras's fan computation: dense kernels [in, out]; convolution kernels
// [kh, kw, ..., in, out] scale both by the receptive field.
Fans compute_fans(const Shape& s) {
  if (s.rank() == 0) return {1, 1};
  if (s.rank() == 1) return {static_cast<double>(s[0]), static_cast<double>(s[0])};
  if (s.rank() == 2) return {static_cast<double>(s[0]), static_cast<double>(s[1])};
  double receptive = 1;
  for (int i = 0; i < s.rank() - 2; ++i) receptive *= static_cast<double>(s[i]);
  return {static_cast<double>(s[s.rank() - 2]) * receptive,
          static_cast<double>(s[s.rank() - 1]) * receptive};
}

std::pair<std::uint64_t, std::uint64_t> key_for(initializers::Seed seed) {
  // A seeded initializer gives the same values on every call, as Keras's.
  if (seed) return {*seed, 0};
  return detail::next_global_random_key();
}

enum class Mode { kFanIn, kFanOut, kFanAvg };
enum class Distribution { kTruncatedNormal, kUniform, kNormal };

Mode mode_of(const std::string& mode) {
  if (mode == "fan_in") return Mode::kFanIn;
  if (mode == "fan_out") return Mode::kFanOut;
  LOCKSTEP_CHECK(mode == "fan_avg", "VarianceScaling: mode '", mode,
                 "'; expected fan_in, fan_out or fan_avg");
  return Mode::kFanAvg;
}

Distribution distribution_of(const std::string& distribution) {
  // Keras 2's "normal" was the truncated one.
  if (distribution == "truncated_normal" || distribution == "normal")
    return Distribution::kTruncatedNormal;
  if (distribution == "untruncated_normal") return Distribution::kNormal;
  LOCKSTEP_CHECK(distribution == "uniform", "VarianceScaling: distribution '", distribution,
                 "'; expected truncated_normal, untruncated_normal or uniform");
  return Distribution::kUniform;
}

Initializer variance_scaling(std::string name, double scale, const std::string& mode_name,
                             const std::string& distribution_name, initializers::Seed seed,
                             Initializer::Args args = {}) {
  LOCKSTEP_CHECK(scale > 0, "VarianceScaling: scale must be > 0, got ", scale);
  const Mode mode = mode_of(mode_name);
  const Distribution dist = distribution_of(distribution_name);
  auto fn = [=](const Shape& shape) {
    const Fans f = compute_fans(shape);
    const double n = mode == Mode::kFanIn    ? f.in
                     : mode == Mode::kFanOut ? f.out
                                             : (f.in + f.out) / 2;
    const double variance = scale / std::max(1.0, n);
    const auto [s, stream] = key_for(seed);
    switch (dist) {
      case Distribution::kTruncatedNormal: {
        // 0.8796...: stddev of a unit normal truncated to [-2, 2].
        const float stddev = static_cast<float>(std::sqrt(variance) / 0.87962566103423978);
        return random::truncated_normal(shape, {.stddev = stddev, .seed = s, .stream = stream});
      }
      case Distribution::kNormal:
        return random::normal(
            shape,
            {.stddev = static_cast<float>(std::sqrt(variance)), .seed = s, .stream = stream});
      case Distribution::kUniform:
        break;
    }
    const float limit = static_cast<float>(std::sqrt(3.0 * variance));
    return random::uniform(shape, {.minval = -limit, .maxval = limit, .seed = s, .stream = stream});
  };
  return Initializer(std::move(name), fn, std::move(args));
}

// Q of the thin QR decomposition of the column-major m x n matrix `a`
// (m >= n), by modified Gram-Schmidt, each column orthogonalised twice
// (enough for full float precision here); R's diagonal comes out
// positive, as Keras's q · sign(diag(r)).
std::vector<double> orthonormal_columns(std::vector<double> a, std::int64_t m, std::int64_t n) {
  for (std::int64_t j = 0; j < n; ++j) {
    double* qj = a.data() + j * m;
    for (int pass = 0; pass < 2; ++pass) {
      for (std::int64_t k = 0; k < j; ++k) {
        const double* qk = a.data() + k * m;
        double dot = 0;
        for (std::int64_t i = 0; i < m; ++i) dot += qk[i] * qj[i];
        for (std::int64_t i = 0; i < m; ++i) qj[i] -= dot * qk[i];
      }
    }
    double norm = 0;
    for (std::int64_t i = 0; i < m; ++i) norm += qj[i] * qj[i];
    norm = std::sqrt(norm);
    LOCKSTEP_CHECK_AS(InternalError, norm > 0, "Orthogonal: a drawn column is dependent");
    for (std::int64_t i = 0; i < m; ++i) qj[i] /= norm;
  }
  return a;
}

}  // namespace

void set_random_seed(std::uint64_t seed) {
  g_seed.store(seed);
  g_stream.store(0);
}

namespace detail {
std::pair<std::uint64_t, std::uint64_t> next_global_random_key() {
  return {g_seed.load(), g_stream.fetch_add(1)};
}
std::pair<std::uint64_t, std::uint64_t> global_random_state() {
  return {g_seed.load(), g_stream.load()};
}
void set_global_random_state(std::uint64_t seed, std::uint64_t next_stream) {
  g_seed.store(seed);
  g_stream.store(next_stream);
}
}  // namespace detail

namespace initializers {

Initializer GlorotUniform(Seed seed) {
  return variance_scaling("glorot_uniform", 1.0, "fan_avg", "uniform", seed);
}
Initializer GlorotNormal(Seed seed) {
  return variance_scaling("glorot_normal", 1.0, "fan_avg", "truncated_normal", seed);
}
Initializer HeNormal(Seed seed) {
  return variance_scaling("he_normal", 2.0, "fan_in", "truncated_normal", seed);
}
Initializer HeUniform(Seed seed) {
  return variance_scaling("he_uniform", 2.0, "fan_in", "uniform", seed);
}
Initializer LecunNormal(Seed seed) {
  return variance_scaling("lecun_normal", 1.0, "fan_in", "truncated_normal", seed);
}
Initializer LecunUniform(Seed seed) {
  return variance_scaling("lecun_uniform", 1.0, "fan_in", "uniform", seed);
}
Initializer VarianceScaling(double scale, const std::string& mode, const std::string& distribution,
                            Seed seed) {
  return variance_scaling("variance_scaling", scale, mode, distribution, seed,
                          {{"scale", scale}, {"mode", mode}, {"distribution", distribution}});
}
Initializer Orthogonal(double gain, Seed seed) {
  auto fn = [=](const Shape& shape) {
    LOCKSTEP_CHECK_AS(ShapeError, shape.rank() >= 2,
                      "Orthogonal: the shape must have at least 2 axes, got ", shape);
    const std::int64_t cols = shape[shape.rank() - 1],
                       rows = shape.numel() / std::max<std::int64_t>(cols, 1);
    const std::int64_t m = std::max(rows, cols), n = std::min(rows, cols);
    const auto [s, stream] = key_for(seed);
    const std::vector<float> drawn =
        random::normal(Shape{n, m}, {.seed = s, .stream = stream}).to_vector<float>();
    // n columns of length m (column j is drawn[j*m .. j*m + m)).
    const std::vector<double> q = orthonormal_columns({drawn.begin(), drawn.end()}, m, n);
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) {
        // Tall (rows >= cols): Q itself, [rows, cols]; wide: its transpose.
        const double v = rows >= cols ? q[static_cast<std::size_t>(c * m + r)]
                                      : q[static_cast<std::size_t>(r * m + c)];
        out[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(gain * v);
      }
    }
    return Tensor::from_vector(out, shape);
  };
  return Initializer("orthogonal", fn, {{"gain", gain}});
}
Initializer Identity(double gain) {
  auto fn = [gain](const Shape& shape) {
    LOCKSTEP_CHECK_AS(ShapeError, shape.rank() == 2,
                      "Identity: only 2-D shapes (a Dense kernel) take an identity, got ", shape);
    std::vector<float> out(static_cast<std::size_t>(shape.numel()), 0.0f);
    for (std::int64_t i = 0; i < std::min(shape[0], shape[1]); ++i)
      out[static_cast<std::size_t>(i * shape[1] + i)] = static_cast<float>(gain);
    return Tensor::from_vector(out, shape);
  };
  return Initializer("identity", fn, {{"gain", gain}});
}
Initializer RandomNormal(float mean, float stddev, Seed seed) {
  return Initializer("random_normal",
                     [=](const Shape& shape) {
                       const auto [s, stream] = key_for(seed);
                       return random::normal(
                           shape, {.mean = mean, .stddev = stddev, .seed = s, .stream = stream});
                     },
                     {{"mean", mean}, {"stddev", stddev}});
}
Initializer RandomUniform(float minval, float maxval, Seed seed) {
  return Initializer("random_uniform",
                     [=](const Shape& shape) {
                       const auto [s, stream] = key_for(seed);
                       return random::uniform(
                           shape,
                           {.minval = minval, .maxval = maxval, .seed = s, .stream = stream});
                     },
                     {{"minval", minval}, {"maxval", maxval}});
}
Initializer TruncatedNormal(float mean, float stddev, Seed seed) {
  return Initializer("truncated_normal",
                     [=](const Shape& shape) {
                       const auto [s, stream] = key_for(seed);
                       return random::truncated_normal(
                           shape, {.mean = mean, .stddev = stddev, .seed = s, .stream = stream});
                     },
                     {{"mean", mean}, {"stddev", stddev}});
}
Initializer Zeros() {
  return Initializer("zeros", [](const Shape& shape) { return Tensor::zeros(shape); });
}
Initializer Ones() {
  return Initializer("ones", [](const Shape& shape) { return Tensor::ones(shape); });
}
Initializer Constant(float value) {
  return Initializer("constant", [value](const Shape& shape) { return Tensor::full(shape, value); },
                     {{"value", value}});
}

namespace {

// Each name with the arguments it takes and how it is made from them.
using Maker = std::function<Initializer(const std::map<std::string, Initializer::Arg>&)>;
struct Entry {
  std::vector<std::string> arguments;
  Maker make;
};

double number(const std::map<std::string, Initializer::Arg>& a, const std::string& key,
              double fallback) {
  const auto it = a.find(key);
  if (it == a.end()) return fallback;
  const double* v = std::get_if<double>(&it->second);
  LOCKSTEP_CHECK(v != nullptr, "initializer argument '", key, "' must be a number");
  return *v;
}

std::string text(const std::map<std::string, Initializer::Arg>& a, const std::string& key,
                 const std::string& fallback) {
  const auto it = a.find(key);
  if (it == a.end()) return fallback;
  const std::string* v = std::get_if<std::string>(&it->second);
  LOCKSTEP_CHECK(v != nullptr, "initializer argument '", key, "' must be a string");
  return *v;
}

const std::map<std::string, Entry>& table() {
  using A = std::map<std::string, Initializer::Arg>;
  auto f = [](double v) { return static_cast<float>(v); };
  static const std::map<std::string, Entry> t{
      {"glorot_uniform", {{}, [](const A&) { return GlorotUniform(); }}},
      {"glorot_normal", {{}, [](const A&) { return GlorotNormal(); }}},
      {"he_normal", {{}, [](const A&) { return HeNormal(); }}},
      {"he_uniform", {{}, [](const A&) { return HeUniform(); }}},
      {"lecun_normal", {{}, [](const A&) { return LecunNormal(); }}},
      {"lecun_uniform", {{}, [](const A&) { return LecunUniform(); }}},
      {"variance_scaling",
       {{"scale", "mode", "distribution"},
        [](const A& a) {
          return VarianceScaling(number(a, "scale", 1.0), text(a, "mode", "fan_in"),
                                 text(a, "distribution", "truncated_normal"));
        }}},
      {"orthogonal", {{"gain"}, [](const A& a) { return Orthogonal(number(a, "gain", 1.0)); }}},
      {"identity", {{"gain"}, [](const A& a) { return Identity(number(a, "gain", 1.0)); }}},
      {"random_normal",
       {{"mean", "stddev"},
        [f](const A& a) {
          return RandomNormal(f(number(a, "mean", 0.0)), f(number(a, "stddev", 0.05)));
        }}},
      {"random_uniform",
       {{"minval", "maxval"},
        [f](const A& a) {
          return RandomUniform(f(number(a, "minval", -0.05)), f(number(a, "maxval", 0.05)));
        }}},
      {"truncated_normal",
       {{"mean", "stddev"},
        [f](const A& a) {
          return TruncatedNormal(f(number(a, "mean", 0.0)), f(number(a, "stddev", 0.05)));
        }}},
      {"zeros", {{}, [](const A&) { return Zeros(); }}},
      {"ones", {{}, [](const A&) { return Ones(); }}},
      {"constant", {{"value"}, [f](const A& a) { return Constant(f(number(a, "value", 0.0))); }}},
  };
  return t;
}

}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [name, entry] : table()) out.push_back(name);
  return out;
}

Initializer from_config(const std::string& name, const Initializer::Args& args) {
  const auto it = table().find(name);
  if (it == table().end()) {
    std::string all;
    for (const std::string& n : names()) all += (all.empty() ? "" : ", ") + n;
    detail::throw_error<ValueError>("unknown initializer '", name, "'; did you mean '",
                                    nearest_name(name, names()), "'? Lockstep's: ", all);
  }
  std::map<std::string, Initializer::Arg> by_key;
  for (const auto& [key, value] : args) {
    const auto& known = it->second.arguments;
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string takes;
      for (const std::string& k : known) takes += (takes.empty() ? "" : ", ") + k;
      detail::throw_error<ValueError>(
          "initializer '", name, "' has no argument '", key, "' (",
          takes.empty() ? std::string("it takes none") : "it takes " + takes, ")");
    }
    by_key[key] = value;
  }
  const Initializer made = it->second.make(by_key);
  // Its arguments as given (0.1, not the float 0.100000001 it draws with),
  // so a loaded file is saved with the numbers it had.
  Initializer::Args kept = made.args();
  for (auto& [key, value] : kept) {
    if (const auto given = by_key.find(key); given != by_key.end()) value = given->second;
  }
  return Initializer(
      made.name(), [made](const Shape& shape) { return made(shape); }, kept);
}

Initializer get(std::string_view name) { return from_config(std::string(name), {}); }

}  // namespace initializers

namespace regularizers {

Regularizer L1L2(float l1, float l2) {
  return Regularizer(
      "l1_l2",
      [l1, l2](const Tensor& w) {
        Tensor penalty = Tensor::scalar(0.0f);
        if (l1 != 0.0f) penalty = add(penalty, mul(Tensor::scalar(l1), sum(abs(w))));
        if (l2 != 0.0f) penalty = add(penalty, mul(Tensor::scalar(l2), sum(square(w))));
        return penalty;
      },
      l1, l2);
}
Regularizer L1(float l1) {
  return Regularizer(
      "l1", [l1](const Tensor& w) { return mul(Tensor::scalar(l1), sum(abs(w))); }, l1, 0.0f);
}
Regularizer L2(float l2) {
  return Regularizer(
      "l2", [l2](const Tensor& w) { return mul(Tensor::scalar(l2), sum(square(w))); }, 0.0f, l2);
}

}  // namespace regularizers
}  // namespace lockstep
