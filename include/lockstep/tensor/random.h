// Counter-based random numbers (Philox-4x32-10).
//
// A value depends only on (seed, stream, element index): it can be
// regenerated for any (seed, step, index) without replaying a sequence. That
// is what exact resume and replica-count-invariant dropout rely on: a
// replica draws the values of *its* examples by their global index.
//
// Stateless functions take the key explicitly; Generator hands out a fresh
// stream per call and its whole state is two integers (saved in checkpoints).
//
//   auto w = lockstep::random::normal({784, 256}, {.stddev = 0.05f, .seed = 42});
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::random {

// One Philox-4x32-10 block: four 32-bit words for a 64-bit key and 128-bit
// counter (the reference algorithm of Salmon et al., SC'11).
std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo);

// `stream` is typically the global step; element i of a result uses global
// index first_index + i (a replica passes the index of its first example).
struct UniformOptions {
  float minval = 0.0f;
  float maxval = 1.0f;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t first_index = 0;
};
struct NormalOptions {
  float mean = 0.0f;
  float stddev = 1.0f;
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t first_index = 0;
};

// float32 in [minval, maxval). On a GPU drawn there, the same bits.
Tensor uniform(const Shape& shape, const UniformOptions& options = {});
// uniform() on stream `next_stream` of `seed`, which it then advances: a
// layer's own counter of draws (Dropout's masks). Unlike a fixed stream,
// it may be drawn in a step recorded as a graph (fit on a GPU): the
// recording reads the stream from device memory and advances next_stream
// before each replay, so that each replay draws what the eager step would.
// `next_stream` must then outlive the recording (a layer's member does).
Tensor uniform_next(const Shape& shape, std::uint64_t seed, std::uint64_t& next_stream,
                    float minval = 0.0f, float maxval = 1.0f);

// A layer's own counter of streams for uniform_next, one per local replica:
// under a strategy every replica's thread calls the layer at once. Replica
// r > 0 draws streams with r in the top byte, from the layer's first
// stream, each replica counting its own draws: the replicas draw distinct
// numbers, the same run after run whatever order their threads come in
// (one shared counter was a data race, and the masks depended on it).
// Replica 0 — and any call outside a strategy — draws the streams a layer
// always drew.
class StreamCounter {
 public:
  StreamCounter() = default;
  StreamCounter(const StreamCounter&) = delete;
  StreamCounter& operator=(const StreamCounter&) = delete;
  // Starts every replica's count again from `first` (a layer's block).
  void reset(std::uint64_t first);
  // Replica `replica`'s counter (-1: outside a strategy, replica 0's),
  // made at its first use; it stays where it is while the counter lives.
  std::uint64_t& of(int replica);

 private:
  std::uint64_t first_ = 0;
  std::uint64_t primary_ = 0;
  std::mutex mutex_;
  std::map<int, std::uint64_t> replicas_;  // r > 0
};
Tensor normal(const Shape& shape, const NormalOptions& options = {});
// Normal values redrawn until within two standard deviations of the mean.
Tensor truncated_normal(const Shape& shape, const NormalOptions& options = {});

// A random order of 0 .. n-1 (int64 [n]): numpy's permutation(n), and what
// the guide's random validation hold-out takes. Fisher-Yates with Philox
// draws, so the order depends only on (seed, stream).
Tensor permutation(std::int64_t n, std::uint64_t seed, std::uint64_t stream = 0);
// The same order as a vector (for host-side loops).
std::vector<std::int64_t> permutation_indices(std::int64_t n, std::uint64_t seed,
                                              std::uint64_t stream = 0);
// x with its rows (dim 0) in the order permutation(x.dim(0), seed, stream)
// gives: keras.random.shuffle(x, seed=seed) and tf.random.shuffle.
Tensor shuffle(const Tensor& x, std::uint64_t seed, std::uint64_t stream = 0);

// A stateful source: each call uses the next stream of its seed.
// Value type; not thread-safe.
class Generator {
 public:
  explicit Generator(std::uint64_t seed, std::uint64_t next_stream = 0)
      : seed_(seed), next_stream_(next_stream) {}

  Tensor uniform(const Shape& shape, float minval = 0.0f, float maxval = 1.0f);
  Tensor normal(const Shape& shape, float mean = 0.0f, float stddev = 1.0f);
  Tensor truncated_normal(const Shape& shape, float mean = 0.0f, float stddev = 1.0f);

  std::uint64_t seed() const { return seed_; }
  // The stream the next call will use; with seed(), the whole state.
  std::uint64_t next_stream() const { return next_stream_; }

 private:
  std::uint64_t seed_;
  std::uint64_t next_stream_;
};

}  // namespace lockstep::random

namespace lockstep::detail {
// How many tensors of random values of a fixed stream this thread has
// drawn (fit's step graph runs a step eagerly and asks whether it drew any:
// a recorded step would replay one draw forever). uniform_next's are not
// counted: a recording advances them.
std::uint64_t random_fills_on_this_thread();
}  // namespace lockstep::detail
