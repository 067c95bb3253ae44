// Initializers (Keras's VarianceScaling family and constants) and
// regularizers.
#include "lockstep/nn/initializers.h"

#include <atomic>
#include <cmath>

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

Initializer variance_scaling(std::string name, double scale, Mode mode, Distribution dist,
                             initializers::Seed seed) {
  return Initializer(std::move(name), [=](const Shape& shape) {
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
  });
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
  return variance_scaling("glorot_uniform", 1.0, Mode::kFanAvg, Distribution::kUniform, seed);
}
Initializer GlorotNormal(Seed seed) {
  return variance_scaling("glorot_normal", 1.0, Mode::kFanAvg, Distribution::kTruncatedNormal,
                          seed);
}
Initializer HeNormal(Seed seed) {
  return variance_scaling("he_normal", 2.0, Mode::kFanIn, Distribution::kTruncatedNormal, seed);
}
Initializer HeUniform(Seed seed) {
  return variance_scaling("he_uniform", 2.0, Mode::kFanIn, Distribution::kUniform, seed);
}
Initializer LecunNormal(Seed seed) {
  return variance_scaling("lecun_normal", 1.0, Mode::kFanIn, Distribution::kTruncatedNormal, seed);
}
Initializer RandomNormal(float mean, float stddev, Seed seed) {
  return Initializer("random_normal", [=](const Shape& shape) {
    const auto [s, stream] = key_for(seed);
    return random::normal(shape, {.mean = mean, .stddev = stddev, .seed = s, .stream = stream});
  });
}
Initializer RandomUniform(float minval, float maxval, Seed seed) {
  return Initializer("random_uniform", [=](const Shape& shape) {
    const auto [s, stream] = key_for(seed);
    return random::uniform(shape,
                           {.minval = minval, .maxval = maxval, .seed = s, .stream = stream});
  });
}
Initializer TruncatedNormal(float mean, float stddev, Seed seed) {
  return Initializer("truncated_normal", [=](const Shape& shape) {
    const auto [s, stream] = key_for(seed);
    return random::truncated_normal(shape,
                                    {.mean = mean, .stddev = stddev, .seed = s, .stream = stream});
  });
}
Initializer Zeros() {
  return Initializer("zeros", [](const Shape& shape) { return Tensor::zeros(shape); });
}
Initializer Ones() {
  return Initializer("ones", [](const Shape& shape) { return Tensor::ones(shape); });
}
Initializer Constant(float value) {
  return Initializer("constant",
                     [value](const Shape& shape) { return Tensor::full(shape, value); });
}

Initializer get(std::string_view name) {
  if (name == "glorot_uniform") return GlorotUniform();
  if (name == "glorot_normal") return GlorotNormal();
  if (name == "he_normal") return HeNormal();
  if (name == "he_uniform") return HeUniform();
  if (name == "lecun_normal") return LecunNormal();
  if (name == "random_normal") return RandomNormal();
  if (name == "random_uniform") return RandomUniform();
  if (name == "truncated_normal") return TruncatedNormal();
  if (name == "zeros") return Zeros();
  if (name == "ones") return Ones();
  detail::throw_error<ValueError>(
      "unknown initializer '", name,
      "'; valid names: glorot_uniform, glorot_normal, he_normal, he_uniform, lecun_normal, "
      "random_normal, random_uniform, truncated_normal, zeros, ones (use initializers::Constant(v) "
      "for a constant)");
}

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
