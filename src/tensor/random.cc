// Philox-4x32-10 and the distributions built on it.
//
// Counter layout: word pair (c0, c1) = element index / k, (c2, c3) = stream
// (with the truncated-normal attempt in the top byte); key = seed. Each
// element therefore has its own fixed counter, independent of how many
// values were drawn before it or by which thread.
#include "lockstep/tensor/random.h"

#include <cmath>
#include <numbers>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "tensor/ops/loops.h"

namespace lockstep::random {
namespace {

constexpr std::uint32_t kM0 = 0xD2511F53;
constexpr std::uint32_t kM1 = 0xCD9E8D57;
constexpr std::uint32_t kW0 = 0x9E3779B9;
constexpr std::uint32_t kW1 = 0xBB67AE85;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// 24 random bits -> [0, 1).
inline float to_unit(std::uint32_t w) { return static_cast<float>(w >> 8) * 0x1.0p-24f; }

// Values drawn on the host (the same bits on every device), then copied to
// the current device when it is a GPU; on the fake accelerator, written as
// its device code. Counted per thread (random_fills_on_this_thread).
thread_local std::uint64_t t_fills = 0;

template <typename F>
Tensor fill(const Shape& shape, F value_at) {
  ++t_fills;
  const detail::OnDevice on;
  Tensor out = Tensor::empty_on(on.kernels() ? host_device() : current_device(), shape);
  float* p = out.data<float>();
  detail::parallel_for(out.numel(), 32, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) p[i] = value_at(static_cast<std::uint64_t>(i));
  });
  return on.kernels() ? out.copy_to(current_device()) : out;
}

// A standard normal for global element `index` on `stream` (Box-Muller over
// the first two words of the element pair's block).
inline float standard_normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const auto w = philox4x32(seed, stream, index / 2);
  const float u1 = (static_cast<float>(w[0] >> 8) + 1.0f) * 0x1.0p-24f;  // (0, 1]: log is finite
  const float u2 = to_unit(w[1]);
  const float r = std::sqrt(-2.0f * std::log(u1));
  const float theta = 2.0f * std::numbers::pi_v<float> * u2;
  return (index % 2 == 0) ? r * std::cos(theta) : r * std::sin(theta);
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo);
  std::uint32_t c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi);
  std::uint32_t c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key);
  std::uint32_t k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kM0, c0, hi0, lo0);
    mulhilo(kM1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0;
    const std::uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

Tensor uniform(const Shape& shape, const UniformOptions& o) {
  LOCKSTEP_CHECK(o.minval < o.maxval, "random::uniform: expected minval < maxval, got ", o.minval,
                 " and ", o.maxval);
  const float span = o.maxval - o.minval;
  return fill(shape, [&](std::uint64_t i) {
    const std::uint64_t index = o.first_index + i;
    const auto w = philox4x32(o.seed, o.stream, index / 4);
    const float v = o.minval + span * to_unit(w[index % 4]);
    return v < o.maxval ? v : std::nextafter(o.maxval, o.minval);  // rounding may reach maxval
  });
}

Tensor normal(const Shape& shape, const NormalOptions& o) {
  LOCKSTEP_CHECK(o.stddev >= 0.0f, "random::normal: stddev must be >= 0, got ", o.stddev);
  return fill(shape, [&](std::uint64_t i) {
    return o.mean + o.stddev * standard_normal(o.seed, o.stream, o.first_index + i);
  });
}

Tensor truncated_normal(const Shape& shape, const NormalOptions& o) {
  LOCKSTEP_CHECK(o.stddev >= 0.0f, "random::truncated_normal: stddev must be >= 0, got ", o.stddev);
  constexpr std::uint64_t kAttemptShift = 56;
  return fill(shape, [&](std::uint64_t i) {
    const std::uint64_t index = o.first_index + i;
    float z = 0.0f;
    // P(|z| > 2) = 4.6%: 255 redraws all failing has probability ~1e-340.
    for (std::uint64_t attempt = 0; attempt < 255; ++attempt) {
      z = standard_normal(o.seed, o.stream ^ (attempt << kAttemptShift), index);
      if (std::fabs(z) <= 2.0f) break;
    }
    return o.mean + o.stddev * std::fmax(-2.0f, std::fmin(2.0f, z));
  });
}

std::vector<std::int64_t> permutation_indices(std::int64_t n, std::uint64_t seed,
                                              std::uint64_t stream) {
  LOCKSTEP_CHECK(n >= 0, "random::permutation: n must be >= 0, got ", n);
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto w = philox4x32(seed, stream, static_cast<std::uint64_t>(i));
    const std::uint64_t r = (static_cast<std::uint64_t>(w[0]) << 32) | w[1];
    std::swap(p[static_cast<std::size_t>(i)],
              p[static_cast<std::size_t>(r % static_cast<std::uint64_t>(i + 1))]);
  }
  return p;
}

Tensor permutation(std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  return Tensor::from_vector(permutation_indices(n, seed, stream));
}

Tensor shuffle(const Tensor& x, std::uint64_t seed, std::uint64_t stream) {
  check_defined(x, "random::shuffle", "x");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 1, "random::shuffle: expected a tensor with rows, got ",
                    "a scalar");
  return gather(x, permutation(x.dim(0), seed, stream), 0);
}

Tensor Generator::uniform(const Shape& shape, float minval, float maxval) {
  return random::uniform(
      shape, {.minval = minval, .maxval = maxval, .seed = seed_, .stream = next_stream_++});
}

Tensor Generator::normal(const Shape& shape, float mean, float stddev) {
  return random::normal(shape,
                        {.mean = mean, .stddev = stddev, .seed = seed_, .stream = next_stream_++});
}

Tensor Generator::truncated_normal(const Shape& shape, float mean, float stddev) {
  return random::truncated_normal(
      shape, {.mean = mean, .stddev = stddev, .seed = seed_, .stream = next_stream_++});
}

}  // namespace lockstep::random

namespace lockstep::detail {
std::uint64_t random_fills_on_this_thread() { return random::t_fills; }
}  // namespace lockstep::detail
