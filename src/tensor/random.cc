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
#include "tensor/backend/philox.h"
#include "tensor/ops/loops.h"

namespace lockstep::random {
namespace {

// 24 random bits -> [0, 1).
inline float to_unit(std::uint32_t w) { return backend::unit_from_bits(w); }

// Draws of a fixed stream, counted per thread (random_fills_on_this_thread):
// a recorded step would replay one such draw for ever, so none may be
// recorded (random::uniform_next's may).
thread_local std::uint64_t t_fills = 0;

void count_fixed_draw(const char* what) {
  ++t_fills;
  LOCKSTEP_CHECK_AS(DeviceError, !detail::recording_step(), what,
                    ": a draw of a fixed stream cannot be recorded in a graph (each replay would "
                    "draw the same numbers); random::uniform_next's stream moves at each replay");
}

// Values drawn on the host (the same bits on every device), then copied to
// the current device when it is a GPU; on the fake accelerator, written as
// its device code.
template <typename F>
Tensor fill(const Shape& shape, F value_at) {
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
  const backend::PhiloxBlock b = backend::philox4x32_10(key, counter_hi, counter_lo);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

namespace {

// On a GPU in its kernel (philox.h: the host's bits, and nothing crosses
// from the host), elsewhere on the host; the stream from `slot` (device
// memory) where given.
Tensor draw_uniform(const Shape& shape, const UniformOptions& o, const Tensor* slot) {
  LOCKSTEP_CHECK(o.minval < o.maxval, "random::uniform: expected minval < maxval, got ", o.minval,
                 " and ", o.maxval);
  const detail::OnDevice on;
  if (on.kernels() != nullptr)
    return on.kernels()->random_uniform(shape, o.seed, o.stream, slot, o.first_index, o.minval,
                                        o.maxval);
  return fill(shape, [&](std::uint64_t i) {
    return backend::uniform_element(o.seed, o.stream, o.first_index + i, o.minval, o.maxval);
  });
}

}  // namespace

Tensor uniform(const Shape& shape, const UniformOptions& o) {
  count_fixed_draw("random::uniform");
  return draw_uniform(shape, o, nullptr);
}

Tensor uniform_next(const Shape& shape, std::uint64_t seed, std::uint64_t& next_stream,
                    float minval, float maxval) {
  const UniformOptions o{.minval = minval, .maxval = maxval, .seed = seed};
  if (!detail::recording_step())
    return draw_uniform(shape,
                        {.minval = minval, .maxval = maxval, .seed = seed, .stream = next_stream++},
                        nullptr);
  // Recorded: the kernel reads the stream the recorder stages before each
  // replay, which advances the counter as the eager step would.
  LOCKSTEP_CHECK_AS(DeviceError, detail::OnDevice().kernels() != nullptr,
                    "random::uniform_next: a step is recorded on ", current_device().name(),
                    ", which draws nothing in a graph");
  const Tensor slot = detail::staged_tensor({1}, DType::kInt64);
  std::uint64_t* counter = &next_stream;
  detail::before_each_replay([slot, counter] {
    Tensor stream = Tensor::empty_on(host_device(), {1}, DType::kInt64);  // one copy up
    *stream.data<std::int64_t>() = static_cast<std::int64_t>((*counter)++);
    detail::copy_into(slot, stream);
  });
  return draw_uniform(shape, o, &slot);
}

void StreamCounter::reset(std::uint64_t first) {
  const std::lock_guard lock(mutex_);
  first_ = primary_ = first;
  replicas_.clear();
}

std::uint64_t& StreamCounter::of(int replica) {
  if (replica <= 0) return primary_;
  LOCKSTEP_CHECK(replica < 256, "random::StreamCounter: replica ", replica,
                 " has no stream of its own (at most 256 local replicas)");
  const std::lock_guard lock(mutex_);
  return replicas_.try_emplace(replica, first_ | (static_cast<std::uint64_t>(replica) << 56))
      .first->second;
}

Tensor normal(const Shape& shape, const NormalOptions& o) {
  LOCKSTEP_CHECK(o.stddev >= 0.0f, "random::normal: stddev must be >= 0, got ", o.stddev);
  count_fixed_draw("random::normal");
  return fill(shape, [&](std::uint64_t i) {
    return o.mean + o.stddev * standard_normal(o.seed, o.stream, o.first_index + i);
  });
}

Tensor truncated_normal(const Shape& shape, const NormalOptions& o) {
  LOCKSTEP_CHECK(o.stddev >= 0.0f, "random::truncated_normal: stddev must be >= 0, got ", o.stddev);
  count_fixed_draw("random::truncated_normal");
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
