// Reductions (sum, mean, max, min, argmax) and sum_to, the inverse of
// broadcasting that every broadcast op's gradient uses.
//
// Summation order is fixed by the shape alone — never by the thread count —
// so a reduction gives the same bits under any device configuration.
#include <algorithm>
#include <limits>
#include <numeric>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/loops.h"

namespace lockstep {
namespace {

using detail::Grads;

enum class ReduceKind { kSum, kMax, kMin };

// Sorted, unique, non-negative axes; empty input means all axes.
std::vector<int> resolve_axes(const Tensor& x, const std::vector<int>& axes, const char* op) {
  std::vector<int> out;
  if (axes.empty()) {
    out.resize(static_cast<std::size_t>(x.rank()));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  for (int a : axes) out.push_back(normalize_axis(a, x.rank(), op));
  std::sort(out.begin(), out.end());
  LOCKSTEP_CHECK_AS(IndexError, std::adjacent_find(out.begin(), out.end()) == out.end(), op,
                    ": axis listed twice in the reduction axes");
  return out;
}

Shape dropped_shape(const Shape& shape, const std::vector<int>& axes) {
  Shape out;
  for (int i = 0; i < shape.rank(); ++i) {
    if (!std::binary_search(axes.begin(), axes.end(), i)) out.push_back(shape[i]);
  }
  return out;
}

template <typename T>
T combine(ReduceKind kind, T acc, T v) {
  switch (kind) {
    case ReduceKind::kSum:
      return acc + v;
    case ReduceKind::kMax:
      return v > acc ? v : acc;
    case ReduceKind::kMin:
      return v < acc ? v : acc;
  }
  return acc;
}

// Sum of n contiguous values with 16 independent partial sums (vectorisable
// and more accurate than one running sum), combined in a fixed order.
template <typename T>
T contiguous_sum(const T* x, std::int64_t n) {
  constexpr int kLanes = 16;
  T lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[i + l];
  }
  T total{};
  for (int l = 0; l < kLanes; ++l) total += lanes[l];
  for (; i < n; ++i) total += x[i];
  return total;
}

// Reduces the consecutive dims [begin, end) of x in one pass: x viewed as
// [outer, n, inner] -> [outer, 1, inner].
template <typename T>
Tensor reduce_run(const Tensor& x, int begin, int end, ReduceKind kind) {
  const Shape& s = x.shape();
  std::int64_t outer = 1, n = 1, inner = 1;
  for (int i = 0; i < begin; ++i) outer *= s[i];
  for (int i = begin; i < end; ++i) n *= s[i];
  for (int i = end; i < s.rank(); ++i) inner *= s[i];
  Shape out_shape = s;
  for (int i = begin; i < end; ++i) out_shape[i] = 1;
  Tensor out = Tensor::empty(out_shape, x.dtype());
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  if (n == 0) {
    std::fill(po, po + outer * inner, T{});
    return out;
  }
  if (inner == 1) {
    if (kind == ReduceKind::kSum && outer == 1) {
      // One long sum: fixed-size chunks summed in parallel, combined in order.
      constexpr std::int64_t kChunk = 1 << 14;
      const std::int64_t chunks = (n + kChunk - 1) / kChunk;
      std::vector<T> partial(static_cast<std::size_t>(chunks));
      detail::parallel_for(chunks, kChunk, [&](std::int64_t cb, std::int64_t ce) {
        for (std::int64_t c = cb; c < ce; ++c) {
          const std::int64_t lo = c * kChunk;
          partial[static_cast<std::size_t>(c)] = contiguous_sum(px + lo, std::min(kChunk, n - lo));
        }
      });
      T total{};
      for (T p : partial) total += p;
      po[0] = total;
      return out;
    }
    detail::parallel_for(outer, n, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        const T* row = px + o * n;
        if (kind == ReduceKind::kSum) {
          po[o] = contiguous_sum(row, n);
        } else {
          T acc = row[0];
          for (std::int64_t r = 1; r < n; ++r) acc = combine(kind, acc, row[r]);
          po[o] = acc;
        }
      }
    });
    return out;
  }
  // Strided: accumulate whole rows of `inner` values (vectorises over inner).
  auto reduce_block = [&](std::int64_t o, std::int64_t ib, std::int64_t ie) {
    T* dst = po + o * inner;
    const T* src = px + o * n * inner;
    for (std::int64_t i = ib; i < ie; ++i) dst[i] = src[i];
    for (std::int64_t r = 1; r < n; ++r) {
      const T* row = src + r * inner;
      if (kind == ReduceKind::kSum) {
        for (std::int64_t i = ib; i < ie; ++i) dst[i] += row[i];
      } else if (kind == ReduceKind::kMax) {
        for (std::int64_t i = ib; i < ie; ++i) dst[i] = row[i] > dst[i] ? row[i] : dst[i];
      } else {
        for (std::int64_t i = ib; i < ie; ++i) dst[i] = row[i] < dst[i] ? row[i] : dst[i];
      }
    }
  };
  if (outer == 1) {
    detail::parallel_for(inner, n,
                         [&](std::int64_t ib, std::int64_t ie) { reduce_block(0, ib, ie); });
  } else {
    detail::parallel_for(outer, n * inner, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) reduce_block(o, 0, inner);
    });
  }
  return out;
}

// Reduces over `axes` (sorted), returning the keepdims-shaped result.
Tensor reduce_keepdims(const Tensor& x, const std::vector<int>& axes, ReduceKind kind,
                       const char* op) {
  Tensor cur = x;
  if (axes.empty()) return x.copy();
  // Runs of consecutive axes, reduced last-to-first (each run is one pass).
  std::size_t i = axes.size();
  while (i > 0) {
    std::size_t j = i - 1;
    while (j > 0 && axes[j - 1] + 1 == axes[j]) --j;
    const int begin = axes[j];
    const int end = axes[i - 1] + 1;
    const detail::OnDevice on;
    if (on.kernels() && cur.dtype() == DType::kFloat32) {
      Shape kept = cur.shape();
      for (int d = begin; d < end; ++d) kept[d] = 1;
      const auto device_kind = kind == ReduceKind::kSum   ? detail::ReduceKind::kSum
                               : kind == ReduceKind::kMax ? detail::ReduceKind::kMax
                                                          : detail::ReduceKind::kMin;
      cur = on.kernels()->reduce(device_kind, cur, begin, end, kept);
    } else {
      if (on.kernels()) detail::no_device_kernel("a reduction of integers");
      detail::visit_numeric(x.dtype(), op,
                            [&]<typename T>() { cur = reduce_run<T>(cur, begin, end, kind); });
    }
    i = j;
  }
  return cur;
}

Tensor reduce_minmax(const Tensor& x, const ReduceOptions& options, ReduceKind kind,
                     const char* op) {
  check_defined(x, op, "input");
  const std::vector<int> axes = resolve_axes(x, options.axes, op);
  for (int a : axes) {
    LOCKSTEP_CHECK(x.shape()[a] > 0, op, ": cannot reduce over axis ", a, " of size 0 (shape ",
                   x.shape(), ")");
  }
  const Tensor kept = reduce_keepdims(x, axes, kind, op);
  const Shape final_shape = options.keepdims ? kept.shape() : dropped_shape(x.shape(), axes);
  Tensor out = kept.view_as(final_shape);
  if (x.dtype() == DType::kFloat32 && detail::should_record({x})) {
    detail::record(op, {x}, out, [x, kept](const Tensor& g) {
      // Share the gradient equally among the positions that hold the extreme.
      const Tensor mask = equal(x, broadcast_to(kept, x.shape()));
      const Tensor mask_f = cast(mask, DType::kFloat32);
      const Tensor count = sum_to(mask_f, kept.shape());
      const Tensor share = div(g.view_as(kept.shape()), count);
      return Grads{mul(mask_f, broadcast_to(share, x.shape()))};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const ReduceOptions& options) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(sum(detail::widen(x), options), h);
  check_defined(x, "sum", "input");
  const std::vector<int> axes = resolve_axes(x, options.axes, "sum");
  const Tensor kept = reduce_keepdims(x, axes, ReduceKind::kSum, "sum");
  const Shape final_shape = options.keepdims ? kept.shape() : dropped_shape(x.shape(), axes);
  Tensor out = kept.view_as(final_shape);
  if (x.dtype() == DType::kFloat32 && detail::should_record({x})) {
    detail::record("sum", {x}, out, [sx = x.shape(), sk = kept.shape()](const Tensor& g) {
      return Grads{broadcast_to(g.view_as(sk), sx)};
    });
  }
  return out;
}

Tensor mean(const Tensor& x, const ReduceOptions& options) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(mean(detail::widen(x), options), h);
  check_defined(x, "mean", "input");
  detail::check_float32(x.dtype(), "mean", "input");
  const std::vector<int> axes = resolve_axes(x, options.axes, "mean");
  std::int64_t count = 1;
  for (int a : axes) count *= x.shape()[a];
  LOCKSTEP_CHECK(count > 0, "mean: cannot average over zero elements (shape ", x.shape(), ")");
  return mul(sum(x, {.axes = axes, .keepdims = options.keepdims}),
             Tensor::scalar(1.0f / static_cast<float>(count)));
}

Tensor max(const Tensor& x, const ReduceOptions& options) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(max(detail::widen(x), options), h);
  return reduce_minmax(x, options, ReduceKind::kMax, "max");
}

Tensor min(const Tensor& x, const ReduceOptions& options) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(min(detail::widen(x), options), h);
  return reduce_minmax(x, options, ReduceKind::kMin, "min");
}

Tensor argmax(const Tensor& x, int axis) {
  if (detail::any_half({&x})) return argmax(detail::widen(x), axis);
  check_defined(x, "argmax", "input");
  const int a = normalize_axis(axis, x.rank(), "argmax");
  const Shape& s = x.shape();
  LOCKSTEP_CHECK(s[a] > 0, "argmax: axis ", a, " has size 0 (shape ", s, ")");
  std::int64_t outer = 1, n = s[a], inner = 1;
  for (int i = 0; i < a; ++i) outer *= s[i];
  for (int i = a + 1; i < s.rank(); ++i) inner *= s[i];
  const detail::OnDevice on;
  if (on.kernels()) {
    if (x.dtype() != DType::kFloat32) detail::no_device_kernel("argmax of integers");
    return on.kernels()->argmax(x, a);
  }
  Tensor out = Tensor::empty(dropped_shape(s, {a}), DType::kInt64);
  std::int64_t* po = out.data<std::int64_t>();
  detail::visit_numeric(x.dtype(), "argmax", [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    detail::parallel_for(outer, n * inner, [&](std::int64_t ob, std::int64_t oe) {
      for (std::int64_t o = ob; o < oe; ++o) {
        for (std::int64_t i = 0; i < inner; ++i) {
          const T* base = px + o * n * inner + i;
          std::int64_t best = 0;
          for (std::int64_t r = 1; r < n; ++r) {
            if (base[r * inner] > base[best * inner]) best = r;
          }
          po[o * inner + i] = best;
        }
      }
    });
  });
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined(x, "sum_to", "input");
  if (x.shape() == shape) return x;
  const int lead = x.rank() - shape.rank();
  LOCKSTEP_CHECK_AS(ShapeError, lead >= 0, "sum_to: cannot sum ", x.shape(), " down to ", shape,
                    " (target has the higher rank)");
  std::vector<int> axes;
  for (int i = 0; i < x.rank(); ++i) {
    if (i < lead) {
      axes.push_back(i);
      continue;
    }
    const std::int64_t want = shape[i - lead];
    LOCKSTEP_CHECK_AS(ShapeError, want == x.shape()[i] || want == 1, "sum_to: cannot sum ",
                      x.shape(), " down to ", shape, " (dimension ", i, ": ", x.shape()[i], " vs ",
                      want, ")");
    if (want == 1 && x.shape()[i] != 1) axes.push_back(i);
  }
  if (axes.empty()) return reshape(x, shape.to_vector());  // only size-1 dims differ
  const Tensor kept = sum(x, {.axes = axes, .keepdims = true});
  return reshape(kept, shape.to_vector());
}

}  // namespace lockstep
