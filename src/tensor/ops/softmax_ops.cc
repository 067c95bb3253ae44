// softmax and log_softmax, exact to one float32 rounding, with their
// gradient rules.
//
// Each row's log-sum-exp is taken in float64: d_i = x_i − max x is exact in
// float64, exp(d_i) comes from a float64 polynomial within a few float64
// ulps (exp64.h, vectorized; the same IEEE operations on every instruction
// set, so the same bits), s = Σ exp(d_i) carries ~1e-16 relative error, and
// the outputs d_i − log s (log-softmax) and exp(d_i)/s (softmax) are rounded
// to float32 once. So every output is within one float32 rounding of the
// true value on every instruction set, a log-softmax is never positive
// (d_i ≤ 0 ≤ log s), and a cross-entropy built on it is never negative.
// oneDNN's primitive, which this replaced, carried a row error of up to
// 3.4e-6 (~14 ulps) that depended on the ISA (issue #21; docs/benchmarks.md
// has the cost, tests/tensor/softmax_test.cc the float64 oracle).
//
// log_softmax's backward, dx = g − softmax·Σg, takes the softmax the
// forward computed (exact), not exp(log_softmax) (which would carry the
// log-softmax's rounding, amplified by its magnitude).
#include <cmath>
#include <limits>
#include <vector>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/parallel.h"
#include "lockstep/tensor/recording.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/exp64.h"

namespace lockstep {
namespace {

using detail::Grads;

// e[i] = exp(x[i] − top) over a contiguous row, vectorized; one clone per
// vector width, chosen when the library loads. Each lane does the same IEEE
// operations as the scalar code (-std=c++20 contracts no multiply-add), so
// every clone gives the same bits.
__attribute__((target_clones("avx512f", "avx2", "default"))) void exp_row(const float* x,
                                                                          std::int64_t n,
                                                                          double top, double* e) {
  for (std::int64_t i = 0; i < n; ++i)
    e[i] = detail::exp_nonpositive(static_cast<double>(x[i]) - top);
}

// One row of n elements `stride` apart. Either output may be null.
// log Σ exp(d_i) is taken as log1p of the sum without the maximum's own
// term (exp(0) = 1): on a saturated row that sum is ~1e-17, which 1 + it
// would lose, and the top log-probability −log1p(rest) would print as 0
// instead of −1e-17.
void softmax_row(const float* x, std::int64_t n, std::int64_t stride, float* log_out,
                 float* prob_out, std::vector<double>& e) {
  float m = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) m = x[i * stride] > m ? x[i * stride] : m;
  std::int64_t top_at = 0;  // the first maximum (0 when every input is -inf or NaN)
  while (top_at < n && !(x[top_at * stride] == m)) ++top_at;
  if (top_at == n) top_at = 0;
  const double top = m;
  e.resize(static_cast<std::size_t>(n));
  double* pe = e.data();
  if (stride == 1) {
    exp_row(x, n, top, pe);
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      pe[i] = detail::exp_nonpositive(static_cast<double>(x[i * stride]) - top);
  }
  double rest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (i != top_at) rest += pe[i];
  }
  const double lse = std::log1p(rest), s = 1.0 + rest;
  for (std::int64_t i = 0; i < n; ++i) {
    if (log_out)
      log_out[i * stride] = static_cast<float>(static_cast<double>(x[i * stride]) - top - lse);
    if (prob_out) prob_out[i * stride] = static_cast<float>(e[static_cast<std::size_t>(i)] / s);
  }
}

struct Outputs {
  Tensor log;   // log-softmax, when asked
  Tensor prob;  // softmax, when asked
};

Outputs softmax_kernel(const Tensor& x, int axis, bool want_log, bool want_prob, const char* op) {
  check_defined(x, op, "input");
  detail::check_float32(x.dtype(), op, "input");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 1, op, ": expected rank >= 1, got a scalar");
  const int a = normalize_axis(axis, x.rank(), op);
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < a; ++i) outer *= x.shape()[i];
  for (int i = a + 1; i < x.rank(); ++i) inner *= x.shape()[i];
  const std::int64_t n = x.shape()[a];
  Outputs out;
  const detail::OnDevice on;
  if (on.kernels()) {
    on.kernels()->softmax(x, a, want_log ? &out.log : nullptr, want_prob ? &out.prob : nullptr);
    return out;
  }
  if (want_log) out.log = Tensor::empty(x.shape());
  if (want_prob) out.prob = Tensor::empty(x.shape());
  if (x.numel() == 0) return out;
  const float* px = x.data<float>();
  float* pl = want_log ? out.log.data<float>() : nullptr;
  float* pp = want_prob ? out.prob.data<float>() : nullptr;
  // ~30 units of work per element: a float64 exp and the passes around it.
  parallel_for(outer * inner, 30 * n, [&](std::int64_t begin, std::int64_t end) {
    std::vector<double> e;
    for (std::int64_t r = begin; r < end; ++r) {
      const std::int64_t base = (r / inner) * n * inner + r % inner;
      softmax_row(px + base, n, inner, pl ? pl + base : nullptr, pp ? pp + base : nullptr, e);
    }
  });
  return out;
}

// softmax's backward, dx = y·(g − Σ g·y), in one pass per row where the
// axis is the last one and both are float32 on the host (the row's Σ in
// float64); elsewhere the same formula composed of ops. On attention
// scores (batch × heads × queries rows of keys) the composed form wrote
// three temporaries the size of the scores.
Tensor softmax_backward(const Tensor& g, const Tensor& y, int axis) {
  const int a = normalize_axis(axis, y.rank(), "softmax");
  if (a != y.rank() - 1 || g.dtype() != DType::kFloat32 || g.shape() != y.shape() ||
      !g.device().host_accessible() || !y.device().host_accessible()) {
    const Tensor dot = sum(mul(g, y), {.axes = {axis}, .keepdims = true});
    return mul(y, sub(g, dot));
  }
  const std::int64_t n = y.shape()[a], rows = n == 0 ? 0 : y.numel() / n;
  Tensor dx = Tensor::empty(y.shape());
  const float* pg = g.data<float>();
  const float* py = y.data<float>();
  float* pd = dx.data<float>();
  parallel_for(rows, 4 * n, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* gr = pg + r * n;
      const float* yr = py + r * n;
      double dot = 0;
      for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(gr[i]) * yr[i];
      const auto d = static_cast<float>(dot);
      for (std::int64_t i = 0; i < n; ++i) pd[r * n + i] = yr[i] * (gr[i] - d);
    }
  });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int axis) {
  // Mixed precision keeps softmax in float32 (Keras's advice for the output layer, made the rule):
  // a bfloat16 input gives a float32 result.
  if (detail::any_half({&x})) return softmax(detail::widen(x), axis);
  Tensor out = softmax_kernel(x, axis, false, true, "softmax").prob;
  if (detail::should_record({x})) {
    detail::record("softmax", {x}, out,
                   [out, axis](const Tensor& g) { return Grads{softmax_backward(g, out, axis)}; });
  }
  return out;
}

Tensor log_softmax(const Tensor& x, int axis) {
  if (detail::any_half({&x})) return log_softmax(detail::widen(x), axis);
  const bool recording = detail::should_record({x});
  Outputs both = softmax_kernel(x, axis, true, recording, "log_softmax");
  if (recording) {
    detail::record("log_softmax", {x}, both.log, [prob = both.prob, axis](const Tensor& g) {
      // dx = g − softmax(x)·Σ g
      const Tensor total = sum(g, {.axes = {axis}, .keepdims = true});
      return Grads{sub(g, mul(prob, total))};
    });
  }
  return both.log;
}

}  // namespace lockstep
