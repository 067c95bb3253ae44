// Batch normalisation over the last axis (NHWC): training mode with batch
// statistics, inference mode with given ones, and training mode followed by
// a ReLU (batch_norm_relu_training), each with its gradient rule.
//
// The batch statistics are our own float64 reduction (batch_moments); the
// normalisation and its gradient are oneDNN's, except after a ReLU: oneDNN
// 2.6 fuses only an unbounded ReLU into its batch norm, not MobileNetV2's
// ReLU6, so that pair is our own loops — one pass forward (normalise and
// clip), two backward (the channel sums, then dx) — reading the ReLU's mask
// from its saved output. Against oneDNN's batch norm and a separate ReLU6 it
// writes no pre-activation tensor, reads and writes no dy tensor, and runs
// forward + backward 1.15-1.43x faster on MobileNetV2's shapes, its dx the
// closer to a float64 oracle (docs/benchmarks.md, "Batch norm and ReLU6 in
// one"); tests compare the two.
//
// bfloat16 data (mixed precision) runs the same loops compiled for it, with
// or without the ReLU (a floor of −∞ makes them plain batch norm): values
// are widened as they are loaded and rounded as they are stored, so no
// float32 copy of the activations or of their gradient is ever made.
// Statistics, gamma, beta and their gradients stay float32.
//
// On a GPU the three modes are the device's kernels (DeviceKernels::batch_norm,
// tensor/backend/cuda/batch_norm.cu: the same formulas, float32 data); on the
// fake accelerator the code below runs as device code.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "lockstep/core/simd.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/batch_norm_relu.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/loops.h"

namespace lockstep {
namespace {

using detail::Grads;

void check_bn(const Tensor& x, const Tensor& gamma, const Tensor& beta, const char* op) {
  check_defined(x, op, "input");
  detail::check_floating(x.dtype(), op, "input");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 2, op, ": expected input of rank >= 2, got ",
                    x.shape());
  const std::int64_t c = x.shape()[x.rank() - 1];
  for (const Tensor* t : {&gamma, &beta}) {
    check_defined(*t, op, "gamma/beta");
    detail::check_float32(t->dtype(), op, "gamma and beta");
    LOCKSTEP_CHECK_AS(ShapeError, t->rank() == 1 && t->shape()[0] == c, op,
                      ": expected gamma and beta of shape [", c, "], got ", t->shape());
  }
}

backend::onednn::BatchNormShape bn_shape(const Tensor& x, float epsilon) {
  const std::int64_t c = x.shape()[x.rank() - 1];
  return {.examples = std::max<std::int64_t>(x.shape()[0], 1),
          .rows = x.numel() / std::max<std::int64_t>(c, 1),
          .channels = c,
          .epsilon = epsilon};
}

// Element access of the loops below on float32 or bfloat16 data: a load
// widens (a shift), a store rounds to nearest even (bf16.h's rule, branch
// free so that the loops vectorise). bfloat16 activations are read and
// written as they are: no float32 copy of them is made.
[[gnu::always_inline]] inline float load(float v) { return v; }
[[gnu::always_inline]] inline float load(bfloat16 v) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16);
}
[[gnu::always_inline]] inline void store(float& to, float v) { to = v; }
[[gnu::always_inline]] inline void store(bfloat16& to, float v) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  to.bits =
      static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

// Each loop below is a template body, compiled into one
// LOCKSTEP_VECTOR_CLONES function per element type (function multiversioning
// takes no templates).

// Sums of x and x² over rows [begin, end) of [rows, c] into sum / squares
// (float64: float32 sums of ~10^5 values lose ~10^-4 of the variance, which
// 52 layers of MobileNetV2 in training mode amplify past Keras's outputs;
// see BatchNormTraining in the tests).
template <typename T>
[[gnu::always_inline]] inline void accumulate_moments_body(const T* __restrict x,
                                                           std::int64_t begin, std::int64_t end,
                                                           std::int64_t c, double* __restrict sum,
                                                           double* __restrict squares) {
  for (std::int64_t r = begin; r < end; ++r) {
    const T* row = x + r * c;
    for (std::int64_t j = 0; j < c; ++j) {
      const double v = load(row[j]);
      sum[j] += v;
      squares[j] += v * v;
    }
  }
}
LOCKSTEP_VECTOR_CLONES void accumulate_moments(const float* x, std::int64_t begin, std::int64_t end,
                                               std::int64_t c, double* sum, double* squares) {
  accumulate_moments_body(x, begin, end, c, sum, squares);
}
LOCKSTEP_VECTOR_CLONES void accumulate_moments(const bfloat16* x, std::int64_t begin,
                                               std::int64_t end, std::int64_t c, double* sum,
                                               double* squares) {
  accumulate_moments_body(x, begin, end, c, sum, squares);
}

// Rows are cut into this many blocks, fixed by the row count and not the
// thread count, and the blocks' sums added in order: the same bits under
// any number of threads.
constexpr std::int64_t kSumBlocks = 32;

// Two sums per channel over the rows of [rows, c], in float64 (see
// kSumBlocks): add(first, last, out) adds rows [first, last)'s into out[0,
// c) and out[c, 2c). Returns the 2c totals.
template <typename AddRows>
std::vector<double> channel_sums(std::int64_t rows, std::int64_t c, std::int64_t cost_per_row,
                                 const AddRows& add) {
  const std::int64_t blocks = std::min(kSumBlocks, rows);
  std::vector<double> partial(static_cast<std::size_t>(blocks * 2 * c), 0.0);
  detail::parallel_for(
      blocks, rows / blocks * cost_per_row, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t b = begin; b < end; ++b) {
          add(rows * b / blocks, rows * (b + 1) / blocks, partial.data() + b * 2 * c);
        }
      });
  std::vector<double> total(static_cast<std::size_t>(2 * c), 0.0);
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (std::size_t j = 0; j < total.size(); ++j)
      total[j] += partial[static_cast<std::size_t>(b * 2 * c) + j];
  }
  return total;
}

// The batch mean and (biased, as Keras 3's moments) variance of each
// channel of [rows, c]: one pass over x.
template <typename T>
void batch_moments(const T* x, std::int64_t rows, std::int64_t c, float* mean, float* variance) {
  const std::vector<double> sums =
      channel_sums(rows, c, c * 2, [&](std::int64_t first, std::int64_t last, double* out) {
        accumulate_moments(x, first, last, c, out, out + c);
      });
  const double n = static_cast<double>(rows);
  for (std::int64_t j = 0; j < c; ++j) {
    const double m = sums[static_cast<std::size_t>(j)] / n;
    mean[j] = static_cast<float>(m);
    // E[x²] − m² in float64: exact enough unless |mean| / stddev > ~10^6.
    variance[j] =
        static_cast<float>(std::max(sums[static_cast<std::size_t>(c + j)] / n - m * m, 0.0));
  }
}

Grads bn_backward(const backend::onednn::BatchNormShape& s, bool batch_stats, const Tensor& x,
                  const Tensor& g, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                  const Tensor& variance) {
  Tensor dx = Tensor::empty(x.shape()), dgamma = Tensor::empty({s.channels}),
         dbeta = Tensor::empty({s.channels});
  backend::onednn::batchnorm_backward(s, batch_stats, x.data<float>(), g.data<float>(),
                                      gamma.data<float>(), beta.data<float>(), mean.data<float>(),
                                      variance.data<float>(), dx.data<float>(),
                                      dgamma.data<float>(), dbeta.data<float>());
  return {dx, dgamma, dbeta};
}

// Within a block, float32 sums over this many rows are added into float64:
// vector speed, and a float64 total over ~10^5 rows.
constexpr std::int64_t kRowsPerChunk = 64;

// z = min(max(a · x + b, bottom), top) over rows [begin, end) of [rows, c],
// with a = γ / √(σ² + ε) and b = β − μ·a per channel; bottom is 0 after a
// ReLU, −∞ for none.
template <typename T>
[[gnu::always_inline]] inline void normalize_relu_body(const T* __restrict x, T* __restrict z,
                                                       std::int64_t begin, std::int64_t end,
                                                       std::int64_t c, const float* __restrict a,
                                                       const float* __restrict b, float bottom,
                                                       float top) {
  for (std::int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * c;
    T* zr = z + r * c;
    for (std::int64_t j = 0; j < c; ++j)
      store(zr[j], std::min(std::max(a[j] * load(xr[j]) + b[j], bottom), top));
  }
}
LOCKSTEP_VECTOR_CLONES void normalize_relu(const float* x, float* z, std::int64_t begin,
                                           std::int64_t end, std::int64_t c, const float* a,
                                           const float* b, float bottom, float top) {
  normalize_relu_body(x, z, begin, end, c, a, b, bottom, top);
}
LOCKSTEP_VECTOR_CLONES void normalize_relu(const bfloat16* x, bfloat16* z, std::int64_t begin,
                                           std::int64_t end, std::int64_t c, const float* a,
                                           const float* b, float bottom, float top) {
  normalize_relu_body(x, z, begin, end, c, a, b, bottom, top);
}

// dy = dz where bottom < z < top (the ReLU's gradient, from its output),
// else 0; adds Σ dy and Σ dy · (x − μ) over rows [begin, end) into sum /
// moment.
template <typename T>
[[gnu::always_inline]] inline void relu_grad_sums_body(const T* __restrict x, const T* __restrict z,
                                                       const T* __restrict dz, std::int64_t begin,
                                                       std::int64_t end, std::int64_t c,
                                                       const float* __restrict mean, float bottom,
                                                       float top, float* __restrict sum,
                                                       float* __restrict moment) {
  for (std::int64_t r = begin; r < end; ++r) {
    const T *xr = x + r * c, *zr = z + r * c, *gr = dz + r * c;
    for (std::int64_t j = 0; j < c; ++j) {
      // Loaded whatever the mask says: a conditional load compiles to a
      // masked one (vmaskmovps), slow on this AMD core — the backward took
      // 77 ms on [32, 112, 112, 96] that way, 66 ms this way.
      const float g = load(gr[j]), v = load(zr[j]);
      const float dy = v > bottom && v < top ? g : 0.0f;
      sum[j] += dy;
      moment[j] += dy * (load(xr[j]) - mean[j]);
    }
  }
}
LOCKSTEP_VECTOR_CLONES void relu_grad_sums(const float* x, const float* z, const float* dz,
                                           std::int64_t begin, std::int64_t end, std::int64_t c,
                                           const float* mean, float bottom, float top, float* sum,
                                           float* moment) {
  relu_grad_sums_body(x, z, dz, begin, end, c, mean, bottom, top, sum, moment);
}
LOCKSTEP_VECTOR_CLONES void relu_grad_sums(const bfloat16* x, const bfloat16* z, const bfloat16* dz,
                                           std::int64_t begin, std::int64_t end, std::int64_t c,
                                           const float* mean, float bottom, float top, float* sum,
                                           float* moment) {
  relu_grad_sums_body(x, z, dz, begin, end, c, mean, bottom, top, sum, moment);
}

// dx = a · dy + k · (x − μ) + k0 over rows [begin, end), per channel.
template <typename T>
[[gnu::always_inline]] inline void relu_grad_dx_body(
    const T* __restrict x, const T* __restrict z, const T* __restrict dz, T* __restrict dx,
    std::int64_t begin, std::int64_t end, std::int64_t c, const float* __restrict mean,
    float bottom, float top, const float* __restrict a, const float* __restrict k,
    const float* __restrict k0) {
  for (std::int64_t r = begin; r < end; ++r) {
    const T *xr = x + r * c, *zr = z + r * c, *gr = dz + r * c;
    T* dr = dx + r * c;
    for (std::int64_t j = 0; j < c; ++j) {
      const float g = load(gr[j]), v = load(zr[j]);  // both loaded, as in relu_grad_sums
      const float dy = v > bottom && v < top ? g : 0.0f;
      store(dr[j], a[j] * dy + k[j] * (load(xr[j]) - mean[j]) + k0[j]);
    }
  }
}
LOCKSTEP_VECTOR_CLONES void relu_grad_dx(const float* x, const float* z, const float* dz, float* dx,
                                         std::int64_t begin, std::int64_t end, std::int64_t c,
                                         const float* mean, float bottom, float top, const float* a,
                                         const float* k, const float* k0) {
  relu_grad_dx_body(x, z, dz, dx, begin, end, c, mean, bottom, top, a, k, k0);
}
LOCKSTEP_VECTOR_CLONES void relu_grad_dx(const bfloat16* x, const bfloat16* z, const bfloat16* dz,
                                         bfloat16* dx, std::int64_t begin, std::int64_t end,
                                         std::int64_t c, const float* mean, float bottom, float top,
                                         const float* a, const float* k, const float* k0) {
  relu_grad_dx_body(x, z, dz, dx, begin, end, c, mean, bottom, top, a, k, k0);
}

// The forward of batch_norm_relu (below) over float32 or bfloat16 data.
template <typename T>
void bn_relu_forward(const backend::onednn::BatchNormShape& s, const T* x, const float* gamma,
                     const float* beta, float bottom, float top, T* z, float* mean,
                     float* variance) {
  batch_moments(x, s.rows, s.channels, mean, variance);
  std::vector<float> a(static_cast<std::size_t>(s.channels)), b(a.size());
  for (std::int64_t j = 0; j < s.channels; ++j) {
    const auto u = static_cast<std::size_t>(j);
    const double scale =
        static_cast<double>(gamma[j]) / std::sqrt(static_cast<double>(variance[j]) + s.epsilon);
    a[u] = static_cast<float>(scale);
    b[u] = static_cast<float>(beta[j] - mean[j] * scale);
  }
  const std::int64_t c = s.channels;
  detail::parallel_for(s.rows, c * 3, [&](std::int64_t begin, std::int64_t end) {
    normalize_relu(x, z, begin, end, c, a.data(), b.data(), bottom, top);
  });
}

// With N rows, x̂ = (x − μ)·r, r = 1 / √(σ² + ε), and dy the ReLU's
// gradient:
//   dβ = Σ dy,  dγ = r · Σ dy · (x − μ),
//   dx = γr · (dy − dβ / N − x̂ · dγ / N)
//      = γr · dy − γr³ (Σ dy (x − μ)) / N · (x − μ) − γr · dβ / N.
template <typename T>
void bn_relu_backward(const backend::onednn::BatchNormShape& s, float bottom, float top, const T* x,
                      const T* z, const T* dz, const float* gamma, const float* mean,
                      const float* variance, T* dx, float* dgamma, float* dbeta) {
  const std::int64_t rows = s.rows, c = s.channels;
  const std::vector<double> sums =
      channel_sums(rows, c, c * 4, [&](std::int64_t first, std::int64_t last, double* out) {
        // float32 sums over chunks of kRowsPerChunk rows, added into float64.
        std::vector<float> chunk(static_cast<std::size_t>(2 * c));
        for (std::int64_t r = first; r < last; r += kRowsPerChunk) {
          std::fill(chunk.begin(), chunk.end(), 0.0f);
          relu_grad_sums(x, z, dz, r, std::min(r + kRowsPerChunk, last), c, mean, bottom, top,
                         chunk.data(), chunk.data() + c);
          for (std::int64_t j = 0; j < 2 * c; ++j) out[j] += chunk[static_cast<std::size_t>(j)];
        }
      });
  std::vector<float> a(static_cast<std::size_t>(c)), k(a.size()), k0(a.size());
  const double n = static_cast<double>(rows);
  for (std::int64_t j = 0; j < c; ++j) {
    const auto u = static_cast<std::size_t>(j);
    const double sum = sums[u], moment = sums[static_cast<std::size_t>(c + j)];
    const double r = 1.0 / std::sqrt(static_cast<double>(variance[j]) + s.epsilon);
    const double gr = static_cast<double>(gamma[j]) * r;
    dbeta[j] = static_cast<float>(sum);
    dgamma[j] = static_cast<float>(moment * r);
    a[u] = static_cast<float>(gr);
    k[u] = static_cast<float>(-gr * r * r * moment / n);
    k0[u] = static_cast<float>(-gr * sum / n);
  }
  detail::parallel_for(rows, c * 6, [&](std::int64_t begin, std::int64_t end) {
    relu_grad_dx(x, z, dz, dx, begin, end, c, mean, bottom, top, a.data(), k.data(), k0.data());
  });
}

}  // namespace

namespace detail {

void batch_norm_relu_forward(const backend::onednn::BatchNormShape& s, const float* x,
                             const float* gamma, const float* beta, float top, float* z,
                             float* mean, float* variance) {
  bn_relu_forward(s, x, gamma, beta, 0.0f, top, z, mean, variance);
}

void batch_norm_relu_backward(const backend::onednn::BatchNormShape& s, float top, const float* x,
                              const float* z, const float* dz, const float* gamma,
                              const float* mean, const float* variance, float* dx, float* dgamma,
                              float* dbeta) {
  bn_relu_backward(s, 0.0f, top, x, z, dz, gamma, mean, variance, dx, dgamma, dbeta);
}

}  // namespace detail

namespace {

// Training-mode batch norm of bfloat16 data, followed by a ReLU clipped to
// [bottom, top] (−∞, ∞: none): our loops on widened blocks, output and
// input gradient in bfloat16.
BatchNormResult bn_relu_training_bf16(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                      const backend::onednn::BatchNormShape& s, float bottom,
                                      float top, const char* op) {
  BatchNormResult r{Tensor::empty(x.shape(), DType::kBFloat16), Tensor::empty({s.channels}),
                    Tensor::empty({s.channels})};
  bn_relu_forward(s, x.data<bfloat16>(), gamma.data<float>(), beta.data<float>(), bottom, top,
                  r.y.data<bfloat16>(), r.mean.data<float>(), r.variance.data<float>());
  if (detail::should_record({x, gamma, beta})) {
    detail::record(op, {x, gamma, beta}, r.y,
                   [s, bottom, top, x, z = r.y, gamma, mean = r.mean,
                    var = r.variance](const Tensor& upstream) {
                     const detail::OnDevice on;  // the fake accelerator's scope
                     const Tensor g = detail::to_bf16(upstream);
                     Tensor dx = Tensor::empty(x.shape(), DType::kBFloat16),
                            dgamma = Tensor::empty({s.channels}),
                            dbeta = Tensor::empty({s.channels});
                     bn_relu_backward(s, bottom, top, x.data<bfloat16>(), z.data<bfloat16>(),
                                      g.data<bfloat16>(), gamma.data<float>(), mean.data<float>(),
                                      var.data<float>(), dx.data<bfloat16>(), dgamma.data<float>(),
                                      dbeta.data<float>());
                     return Grads{dx, dgamma, dbeta};
                   });
  }
  return r;
}

constexpr float kInf = std::numeric_limits<float>::infinity();

// Training-mode batch norm clipped to [bottom, top] on a GPU (float32 or
// bfloat16 x; statistics in float32).
BatchNormResult bn_on_device(detail::DeviceKernels& k, const Tensor& x, const Tensor& gamma,
                             const Tensor& beta, float epsilon, float bottom, float top,
                             const char* op) {
  BatchNormResult r;
  r.y = k.batch_norm(x, gamma, beta, r.mean, r.variance, true, epsilon, bottom, top);
  if (detail::should_record({x, gamma, beta})) {
    const Tensor z = bottom > -kInf || top < kInf ? r.y : Tensor();
    detail::record(
        op, {x, gamma, beta}, r.y,
        [x, z, gamma, mean = r.mean, var = r.variance, epsilon, bottom, top](const Tensor& g) {
          const detail::OnDevice on;
          return on.kernels()->batch_norm_backward(x, z, g, gamma, mean, var, true, epsilon, bottom,
                                                   top);
        });
  }
  return r;
}

}  // namespace

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  const auto s = bn_shape(x, epsilon);
  LOCKSTEP_CHECK(s.rows > 0,
                 "batch_norm: cannot compute batch statistics of an empty batch (shape ", x.shape(),
                 ")");
  if (x.dtype() == DType::kFloat16) {  // emulated: float32 in between, y rounded
    BatchNormResult r = batch_norm_training(detail::widen(x), gamma, beta, epsilon);
    r.y = detail::narrow(r.y, DType::kFloat16);
    return r;
  }
  const detail::OnDevice on;
  if (detail::DeviceKernels* k = on.kernels())
    return bn_on_device(*k, x, gamma, beta, epsilon, -kInf, kInf, "batch_norm");
  if (x.dtype() == DType::kBFloat16) {
    return bn_relu_training_bf16(x, gamma, beta, s, -kInf, kInf, "batch_norm");
  }
  BatchNormResult r{Tensor::empty(x.shape()), Tensor::empty({s.channels}),
                    Tensor::empty({s.channels})};
  batch_moments(x.data<float>(), s.rows, s.channels, r.mean.data<float>(),
                r.variance.data<float>());
  backend::onednn::batchnorm_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(),
                                     r.mean.data<float>(), r.variance.data<float>(),
                                     r.y.data<float>());
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm", {x, gamma, beta}, r.y,
                   [s, x, gamma, beta, mean = r.mean, var = r.variance](const Tensor& g) {
                     const detail::OnDevice on;  // the fake accelerator's scope
                     return bn_backward(s, true, x, g, gamma, beta, mean, var);
                   });
  }
  return r;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& mean, const Tensor& variance, float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  if (detail::any_half({&x}))  // emulated: inference runs once per batch, not per step
    return detail::narrow(
        batch_norm_inference(detail::widen(x), gamma, beta, mean, variance, epsilon), x.dtype());
  for (const Tensor* t : {&mean, &variance}) {
    check_defined(*t, "batch_norm", "mean/variance");
    detail::check_float32(t->dtype(), "batch_norm", "mean/variance");
    LOCKSTEP_CHECK_AS(ShapeError, t->rank() == 1 && t->shape()[0] == gamma.shape()[0],
                      "batch_norm: expected mean and variance of shape [", gamma.shape()[0],
                      "], got ", t->shape());
  }
  const detail::OnDevice on;
  if (detail::DeviceKernels* k = on.kernels()) {
    Tensor m = mean, v = variance;
    Tensor y = k->batch_norm(x, gamma, beta, m, v, false, epsilon, -kInf, kInf);
    if (detail::should_record({x, gamma, beta})) {
      detail::record("batch_norm_inference", {x, gamma, beta}, y,
                     [x, gamma, m, v, epsilon](const Tensor& g) {
                       const detail::OnDevice on_g;
                       return on_g.kernels()->batch_norm_backward(x, Tensor(), g, gamma, m, v,
                                                                  false, epsilon, -kInf, kInf);
                     });
    }
    return y;
  }
  Tensor y = Tensor::empty(x.shape());
  if (x.numel() == 0) return y;
  const auto s = bn_shape(x, epsilon);
  backend::onednn::batchnorm_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(),
                                     mean.data<float>(), variance.data<float>(), y.data<float>());
  // A frozen layer still passes gradients to its input (fine-tuning), and
  // to gamma and beta; the statistics are constants.
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm_inference", {x, gamma, beta}, y,
                   [s, x, gamma, beta, mean, variance](const Tensor& g) {
                     const detail::OnDevice on;  // the fake accelerator's scope
                     return bn_backward(s, false, x, g, gamma, beta, mean, variance);
                   });
  }
  return y;
}

BatchNormResult batch_norm_relu_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float epsilon, std::optional<float> max_value) {
  check_bn(x, gamma, beta, "batch_norm_relu");
  LOCKSTEP_CHECK(!max_value || *max_value >= 0.0f,
                 "batch_norm_relu: expected max_value >= 0 or none, got ",
                 max_value.value_or(0.0f));
  const auto s = bn_shape(x, epsilon);
  LOCKSTEP_CHECK(s.rows > 0,
                 "batch_norm_relu: cannot compute batch statistics of an empty batch (shape ",
                 x.shape(), ")");
  const float top = max_value ? *max_value : kInf;
  if (x.dtype() == DType::kFloat16) {  // emulated: float32 in between, y rounded
    BatchNormResult r = batch_norm_relu_training(detail::widen(x), gamma, beta, epsilon, max_value);
    r.y = detail::narrow(r.y, DType::kFloat16);
    return r;
  }
  const detail::OnDevice on;
  if (detail::DeviceKernels* k = on.kernels())
    return bn_on_device(*k, x, gamma, beta, epsilon, 0.0f, top, "batch_norm_relu");
  if (x.dtype() == DType::kBFloat16)
    return bn_relu_training_bf16(x, gamma, beta, s, 0.0f, top, "batch_norm_relu");
  BatchNormResult r{Tensor::empty(x.shape()), Tensor::empty({s.channels}),
                    Tensor::empty({s.channels})};
  detail::batch_norm_relu_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(), top,
                                  r.y.data<float>(), r.mean.data<float>(),
                                  r.variance.data<float>());
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm_relu", {x, gamma, beta}, r.y,
                   [s, top, x, z = r.y, gamma, mean = r.mean, var = r.variance](const Tensor& g) {
                     const detail::OnDevice on;  // the fake accelerator's scope
                     Tensor dx = Tensor::empty(x.shape()), dgamma = Tensor::empty({s.channels}),
                            dbeta = Tensor::empty({s.channels});
                     detail::batch_norm_relu_backward(
                         s, top, x.data<float>(), z.data<float>(), g.data<float>(),
                         gamma.data<float>(), mean.data<float>(), var.data<float>(),
                         dx.data<float>(), dgamma.data<float>(), dbeta.data<float>());
                     return Grads{dx, dgamma, dbeta};
                   });
  }
  return r;
}

Tensor moving_average(const Tensor& moving, const Tensor& value, float momentum) {
  check_defined(moving, "moving_average", "moving");
  check_defined(value, "moving_average", "value");
  LOCKSTEP_CHECK_AS(ShapeError,
                    moving.shape() == value.shape() && moving.dtype() == DType::kFloat32 &&
                        value.dtype() == DType::kFloat32,
                    "moving_average: expected two float32 tensors of one shape, got ",
                    moving.dtype(), " ", moving.shape(), " and ", value.dtype(), " ",
                    value.shape());
  const float one_minus = 1.0f - momentum;
  const detail::OnDevice on;
  if (detail::DeviceKernels* k = on.kernels()) return k->moving_average(moving, value, momentum);
  Tensor out = Tensor::empty(moving.shape());
  const float* m = moving.data<float>();
  const float* v = value.data<float>();
  float* o = out.data<float>();
  for (std::int64_t i = 0; i < out.numel(); ++i) o[i] = m[i] * momentum + v[i] * one_minus;
  return out;
}

}  // namespace lockstep
