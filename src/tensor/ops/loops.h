// Internal building blocks of the op kernels: a parallel-for over OpenMP
// that stays serial for small work (the per-op overhead on tiny tensors is
// what a replica's step is made of), and a broadcast iterator that collapses
// dimensions so that the inner loop is contiguous or a broadcast scalar.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"
#include "tensor/denormals.h"

namespace lockstep::detail {

// Below this many elements a loop runs on the calling thread alone: waking
// the team costs more than it saves.
inline constexpr std::int64_t kParallelThreshold = 1 << 15;

// Calls f(begin, end) over [0, n), split across the calling thread's OpenMP
// team when n * cost_per_item is large enough.
//
// Under ThreadSanitizer the loop always runs serially: libgomp is not built
// with TSan, so its barriers are invisible to it and every parallel region
// would be reported as a race. Our own threads (replicas, prefetch) are what
// the tsan preset exists to check.
template <typename F>
void parallel_for(std::int64_t n, std::int64_t cost_per_item, F&& f) {
  if (n <= 0) return;
  FlushDenormalsScope flush;  // see tensor/denormals.h
#if defined(__SANITIZE_THREAD__)
  const int threads = 1;
#else
  const int threads = omp_get_max_threads();
#endif
  if (threads <= 1 || n < 2 || n * cost_per_item < kParallelThreshold) {
    f(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunks = std::min<std::int64_t>(threads, n);
#pragma omp parallel for num_threads(static_cast <int>(chunks)) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    set_flush_denormals();  // worker threads keep the mode
    f(n * c / chunks, n * (c + 1) / chunks);
  }
}

// NumPy broadcasting of two shapes; ShapeError naming `op` otherwise.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Iteration plan over an output shape for K operands broadcast into it.
// After collapsing, the last dimension is the inner loop; each operand's
// inner stride is 1 (contiguous) or 0 (broadcast scalar).
template <int K>
struct BroadcastPlan {
  int rank = 1;
  std::array<std::int64_t, Shape::kMaxRank> dims{};
  std::array<std::array<std::int64_t, Shape::kMaxRank>, K> strides{};

  std::int64_t inner() const { return dims[static_cast<std::size_t>(rank - 1)]; }
  std::int64_t rows() const {
    std::int64_t r = 1;
    for (int i = 0; i < rank - 1; ++i) r *= dims[static_cast<std::size_t>(i)];
    return r;
  }
  std::int64_t inner_stride(int k) const {
    return strides[static_cast<std::size_t>(k)][static_cast<std::size_t>(rank - 1)];
  }
  // Element offset of each operand at the start of output row `row`.
  std::array<std::int64_t, K> row_offsets(std::int64_t row) const {
    std::array<std::int64_t, K> off{};
    for (int i = rank - 2; i >= 0; --i) {
      const auto d = static_cast<std::size_t>(i);
      const std::int64_t idx = row % dims[d];
      row /= dims[d];
      for (int k = 0; k < K; ++k)
        off[static_cast<std::size_t>(k)] += idx * strides[static_cast<std::size_t>(k)][d];
    }
    return off;
  }
};

template <int K>
BroadcastPlan<K> make_broadcast_plan(const Shape& out, const std::array<Shape, K>& inputs) {
  const int r = out.rank();
  // Uncollapsed strides, right-aligned; 0 where an operand broadcasts.
  std::array<std::array<std::int64_t, Shape::kMaxRank>, K> st{};
  for (int k = 0; k < K; ++k) {
    const Shape& s = inputs[static_cast<std::size_t>(k)];
    const auto row_strides = s.strides();
    for (int i = 0; i < r; ++i) {
      const int j = i - (r - s.rank());
      std::int64_t v = 0;
      if (j >= 0 && s[j] != 1) v = row_strides[static_cast<std::size_t>(j)];
      st[static_cast<std::size_t>(k)][static_cast<std::size_t>(i)] = v;
    }
  }
  BroadcastPlan<K> plan;
  plan.rank = 0;
  for (int i = 0; i < r; ++i) {
    if (out[i] == 1) continue;  // size-1 dims contribute nothing
    const auto cur = static_cast<std::size_t>(i);
    if (plan.rank > 0) {
      const auto prev = static_cast<std::size_t>(plan.rank - 1);
      bool mergeable = true;
      for (int k = 0; k < K; ++k) {
        const auto ku = static_cast<std::size_t>(k);
        if (plan.strides[ku][prev] != st[ku][cur] * out[i]) mergeable = false;
      }
      if (mergeable) {
        plan.dims[prev] *= out[i];
        for (int k = 0; k < K; ++k)
          plan.strides[static_cast<std::size_t>(k)][prev] = st[static_cast<std::size_t>(k)][cur];
        continue;
      }
    }
    const auto at = static_cast<std::size_t>(plan.rank++);
    plan.dims[at] = out[i];
    for (int k = 0; k < K; ++k)
      plan.strides[static_cast<std::size_t>(k)][at] = st[static_cast<std::size_t>(k)][cur];
  }
  if (plan.rank == 0) {  // scalar or all-ones output
    plan.rank = 1;
    plan.dims[0] = 1;
    for (int k = 0; k < K; ++k) plan.strides[static_cast<std::size_t>(k)][0] = 0;
  }
  return plan;
}

// Runs f(offsets, out_offset, length, inner_strides) over every contiguous
// run of the output, in parallel for large outputs. A single long row is
// split into chunks so that same-shape ops parallelise too.
template <int K, typename F>
void for_each_run(const BroadcastPlan<K>& plan, std::int64_t cost_per_item, F&& f) {
  const std::int64_t inner = plan.inner();
  const std::int64_t rows = plan.rows();
  std::array<std::int64_t, K> inner_strides{};
  for (int k = 0; k < K; ++k) inner_strides[static_cast<std::size_t>(k)] = plan.inner_stride(k);
  if (rows == 1) {
    parallel_for(inner, cost_per_item, [&](std::int64_t begin, std::int64_t end) {
      std::array<std::int64_t, K> off{};
      for (int k = 0; k < K; ++k)
        off[static_cast<std::size_t>(k)] = begin * inner_strides[static_cast<std::size_t>(k)];
      f(off, begin, end - begin, inner_strides);
    });
    return;
  }
  parallel_for(rows, inner * cost_per_item, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      f(plan.row_offsets(row), row * inner, inner, inner_strides);
    }
  });
}

}  // namespace lockstep::detail
