// Batch normalisation on the GPU, NHWC flattened to [rows, c], with the
// CPU's formulas (tensor/ops/batch_norm_ops.cc): the batch's mean and biased
// variance from float64 sums Σx and Σx², y = clip(a·x + b, bottom, top) with
// a = γ/√(σ² + ε) and b = β − μ·a worked out in float64 per channel, and the
// gradient from Σdy and Σdy·(x − μ). Deterministic: each sum runs over
// chunks of rows whose size depends on `rows` alone, and the chunks' sums are
// added in order — no atomics. x, y and the gradients come in float32,
// bfloat16 or float16 (mixed precision: widened as they are loaded, rounded
// once as they are stored, as the CPU's bfloat16 loops); γ, β and the
// statistics are float32 always.
#include <cstdint>
#include <stdexcept>

#include "tensor/backend/cuda/half.cuh"
#include "tensor/backend/cuda/kernels.h"

namespace lockstep::backend::cuda {
namespace {

// The channel sums run in two kernels. The first gives each block 32
// channels (threadIdx.x, so a warp reads one coalesced row segment) and one
// chunk of rows, which its 8 rows of threads (threadIdx.y) stride through;
// the 8 partial sums meet in a fixed tree in shared memory. The second sums
// the chunks' partials per channel the same way, 32 rows of threads deep.
// Chunks: at most kMaxChunks, at least 256 rows each, fixed by `rows`
// alone — the same order of additions on every GPU and every run.
constexpr int kCols = 32, kRowThreads = 8, kFinalThreads = 32;
constexpr std::int64_t kMaxChunks = 512;

std::int64_t chunk_rows(std::int64_t rows) {
  const std::int64_t c = (rows + kMaxChunks - 1) / kMaxChunks;
  return c < 256 ? 256 : c;
}

// std::min / std::max as the CPU's loops use them (NaN passes through).
__device__ inline float clamp(float v, float bottom, float top) {
  v = v < bottom ? bottom : v;
  return top < v ? top : v;
}

// dy = dz where bottom < z < top (z null: no clip).
template <typename T>
__device__ inline float masked(const T* z, const T* dz, std::int64_t i, float bottom, float top) {
  if (z == nullptr) return load(dz[i]);
  const float v = load(z[i]);
  return v > bottom && v < top ? load(dz[i]) : 0.0f;
}

// Two sums per channel: the moments' Σx and Σx², or the gradient's Σdy and
// Σdy·(x − μ).
template <typename T>
struct MomentTerms {
  const T* x;
  __device__ void operator()(std::int64_t i, std::int64_t, double& a, double& b) const {
    const double v = load(x[i]);
    a += v;
    b += v * v;
  }
};
template <typename T>
struct GradTerms {
  const T *x, *z, *dz;
  const float* mean;
  float bottom, top;
  __device__ void operator()(std::int64_t i, std::int64_t j, double& a, double& b) const {
    const float dy = masked(z, dz, i, bottom, top);
    a += dy;
    b += static_cast<double>(dy * (load(x[i]) - mean[j]));
  }
};

// Adds the column of partial sums held by a block's `ny` rows of threads
// (shared [2][ny][kCols]) in a fixed tree; row 0 ends with the totals.
__device__ inline void tree_sum(double* shared, int ny) {
  const int x = threadIdx.x, y = threadIdx.y;
  for (int w = ny / 2; w > 0; w /= 2) {
    __syncthreads();
    if (y < w) {
      shared[y * kCols + x] += shared[(y + w) * kCols + x];
      shared[(ny + y) * kCols + x] += shared[(ny + y + w) * kCols + x];
    }
  }
  __syncthreads();
}

// partial[chunk][0, c) and [c, 2c): the two sums over one chunk's rows.
template <typename Terms>
__global__ void column_partial_kernel(Terms terms, std::int64_t rows, std::int64_t c,
                                      std::int64_t chunk, double* partial) {
  __shared__ double shared[2 * kRowThreads * kCols];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kCols) + threadIdx.x;
  const std::int64_t begin = blockIdx.y * chunk;
  const std::int64_t end = begin + chunk < rows ? begin + chunk : rows;
  double a = 0.0, b = 0.0;
  if (j < c)
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kRowThreads) terms(r * c + j, j, a, b);
  shared[threadIdx.y * kCols + threadIdx.x] = a;
  shared[(kRowThreads + threadIdx.y) * kCols + threadIdx.x] = b;
  tree_sum(shared, kRowThreads);
  if (threadIdx.y == 0 && j < c) {
    partial[blockIdx.y * 2 * c + j] = shared[threadIdx.x];
    partial[blockIdx.y * 2 * c + c + j] = shared[kRowThreads * kCols + threadIdx.x];
  }
}

// The chunks' partials summed per channel, then `finish(j, a, b)`.
template <typename Finish>
__global__ void column_final_kernel(const double* partial, std::int64_t chunks, std::int64_t c,
                                    Finish finish) {
  __shared__ double shared[2 * kFinalThreads * kCols];
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(kCols) + threadIdx.x;
  double a = 0.0, b = 0.0;
  if (j < c) {
    for (std::int64_t ch = threadIdx.y; ch < chunks; ch += kFinalThreads) {
      a += partial[ch * 2 * c + j];
      b += partial[ch * 2 * c + c + j];
    }
  }
  shared[threadIdx.y * kCols + threadIdx.x] = a;
  shared[(kFinalThreads + threadIdx.y) * kCols + threadIdx.x] = b;
  tree_sum(shared, kFinalThreads);
  if (threadIdx.y == 0 && j < c)
    finish(j, shared[threadIdx.x], shared[kFinalThreads * kCols + threadIdx.x]);
}

// mean and (biased) variance: E[x²] − μ² in float64, as the CPU's.
struct MomentsFinish {
  double rows;
  float *mean, *variance;
  __device__ void operator()(std::int64_t j, double sum, double squares) const {
    const double m = sum / rows, var = squares / rows - m * m;
    mean[j] = static_cast<float>(m);
    variance[j] = static_cast<float>(var > 0.0 ? var : 0.0);
  }
};

// dβ = Σdy, dγ = r·Σdy(x − μ); coef: a = γr, k = −γr³·Σdy(x − μ)/N,
// k0 = −γr·Σdy/N (k and k0 only with batch statistics).
struct GradFinish {
  double rows;
  const float *gamma, *variance;
  float epsilon;
  bool batch_stats;
  std::int64_t c;
  float *dgamma, *dbeta, *coef;
  __device__ void operator()(std::int64_t j, double sum, double moment) const {
    const double r = 1.0 / sqrt(static_cast<double>(variance[j]) + epsilon);
    const double gr = static_cast<double>(gamma[j]) * r;
    dbeta[j] = static_cast<float>(sum);
    dgamma[j] = static_cast<float>(moment * r);
    coef[j] = static_cast<float>(gr);
    coef[c + j] = batch_stats ? static_cast<float>(-gr * r * r * moment / rows) : 0.0f;
    coef[2 * c + j] = batch_stats ? static_cast<float>(-gr * sum / rows) : 0.0f;
  }
};

// coef[0, c): a, [c, 2c): b.
__global__ void coefficients_kernel(const float* gamma, const float* beta, const float* mean,
                                    const float* variance, float epsilon, std::int64_t c,
                                    float* coef) {
  LOCKSTEP_FOR_EACH(j, c) {
    const double scale =
        static_cast<double>(gamma[j]) / sqrt(static_cast<double>(variance[j]) + epsilon);
    coef[j] = static_cast<float>(scale);
    coef[c + j] = static_cast<float>(beta[j] - mean[j] * scale);
  }
}

// Elementwise passes index with I: 32-bit where the tensor allows (a 64-bit
// remainder per element costs as much as the pass's memory traffic).
template <typename T, typename I>
__global__ void normalize_kernel(const T* x, T* y, I n, I c, const float* coef, float bottom,
                                 float top) {
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const I j = i % c;
    y[i] = store<T>(clamp(coef[j] * load(x[i]) + coef[c + j], bottom, top));
  }
}

template <typename T, typename I>
__global__ void grad_dx_kernel(const T* x, const T* z, const T* dz, T* dx, I n, I c,
                               const float* mean, float bottom, float top, bool batch_stats,
                               const float* coef) {
  for (I i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const I j = i % c;
    const float dy = masked(z, dz, i, bottom, top);
    dx[i] =
        store<T>(batch_stats ? coef[j] * dy + coef[c + j] * (load(x[i]) - mean[j]) + coef[2 * c + j]
                             : coef[j] * dy);
  }
}

// The two sums of `terms` per channel of [rows, c], then `finish`.
template <typename Terms, typename Finish>
void column_sums(cudaStream_t s, std::int64_t rows, std::int64_t c, Terms terms, Finish finish,
                 double* partial, std::int64_t chunk, std::int64_t chunks) {
  const unsigned col_blocks = static_cast<unsigned>((c + kCols - 1) / kCols);
  column_partial_kernel<<<dim3(col_blocks, static_cast<unsigned>(chunks)), dim3(kCols, kRowThreads),
                          0, s>>>(terms, rows, c, chunk, partial);
  column_final_kernel<<<col_blocks, dim3(kCols, kFinalThreads), 0, s>>>(partial, chunks, c, finish);
}

// 32-bit indices while i + the grid's stride cannot wrap.
constexpr std::int64_t kMax32 = 0xefffffffLL;

template <typename T>
void batch_norm(cudaStream_t s, const T* x, T* y, std::int64_t rows, std::int64_t c,
                const float* gamma, const float* beta, float* mean, float* variance,
                bool batch_stats, float epsilon, float bottom, float top) {
  if (batch_stats) {
    const std::int64_t chunk = chunk_rows(rows), chunks = (rows + chunk - 1) / chunk;
    const Scratch partial(s, static_cast<std::size_t>(chunks * 2 * c) * sizeof(double),
                          "batch norm's partial sums");
    column_sums(s, rows, c, MomentTerms<T>{x},
                MomentsFinish{static_cast<double>(rows), mean, variance}, partial.as<double>(),
                chunk, chunks);
    check_launch("batch norm's moments");
  }
  const Scratch coef(s, static_cast<std::size_t>(2 * c) * sizeof(float),
                     "batch norm's coefficients");
  coefficients_kernel<<<blocks_for(c), kThreads, 0, s>>>(gamma, beta, mean, variance, epsilon, c,
                                                         coef.as<float>());
  const std::int64_t n = rows * c;
  if (n <= kMax32) {
    normalize_kernel<T, std::uint32_t><<<blocks_for(n), kThreads, 0, s>>>(
        x, y, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(c), coef.as<float>(),
        bottom, top);
  } else {
    normalize_kernel<T, std::int64_t>
        <<<blocks_for(n), kThreads, 0, s>>>(x, y, n, c, coef.as<float>(), bottom, top);
  }
  check_launch("batch norm");
}

template <typename T>
void batch_norm_backward(cudaStream_t s, const T* x, const T* z, const T* dz, std::int64_t rows,
                         std::int64_t c, const float* gamma, const float* mean,
                         const float* variance, bool batch_stats, float epsilon, float bottom,
                         float top, T* dx, float* dgamma, float* dbeta) {
  const std::int64_t chunk = chunk_rows(rows), chunks = (rows + chunk - 1) / chunk;
  const Scratch partial(
      s, static_cast<std::size_t>((chunks > 0 ? chunks : 1) * 2 * c) * sizeof(double),
      "batch norm's gradient sums");
  const Scratch coef(s, static_cast<std::size_t>(3 * c) * sizeof(float),
                     "batch norm's gradient coefficients");
  if (chunks > 0) {
    column_sums(s, rows, c, GradTerms<T>{x, z, dz, mean, bottom, top},
                GradFinish{static_cast<double>(rows), gamma, variance, epsilon, batch_stats, c,
                           dgamma, dbeta, coef.as<float>()},
                partial.as<double>(), chunk, chunks);
  } else {  // no rows: the sums are empty
    check(cudaMemsetAsync(dgamma, 0, static_cast<std::size_t>(c) * sizeof(float), s), "dgamma");
    check(cudaMemsetAsync(dbeta, 0, static_cast<std::size_t>(c) * sizeof(float), s), "dbeta");
  }
  const std::int64_t n = rows * c;
  if (n <= kMax32) {
    grad_dx_kernel<T, std::uint32_t><<<blocks_for(n), kThreads, 0, s>>>(
        x, z, dz, dx, static_cast<std::uint32_t>(n), static_cast<std::uint32_t>(c), mean, bottom,
        top, batch_stats, coef.as<float>());
  } else {
    grad_dx_kernel<T, std::int64_t><<<blocks_for(n), kThreads, 0, s>>>(
        x, z, dz, dx, n, c, mean, bottom, top, batch_stats, coef.as<float>());
  }
  check_launch("batch norm's gradient");
}

}  // namespace

void launch_batch_norm(cudaStream_t s, Type type, const void* x, void* y, std::int64_t rows,
                       std::int64_t c, const float* gamma, const float* beta, float* mean,
                       float* variance, bool batch_stats, float epsilon, float bottom, float top) {
  visit_floating(type, "batch norm", [&]<typename T>() {
    batch_norm(s, static_cast<const T*>(x), static_cast<T*>(y), rows, c, gamma, beta, mean,
               variance, batch_stats, epsilon, bottom, top);
  });
}

void launch_batch_norm_backward(cudaStream_t s, Type type, const void* x, const void* z,
                                const void* dz, std::int64_t rows, std::int64_t c,
                                const float* gamma, const float* mean, const float* variance,
                                bool batch_stats, float epsilon, float bottom, float top, void* dx,
                                float* dgamma, float* dbeta) {
  visit_floating(type, "batch norm", [&]<typename T>() {
    batch_norm_backward(s, static_cast<const T*>(x), static_cast<const T*>(z),
                        static_cast<const T*>(dz), rows, c, gamma, mean, variance, batch_stats,
                        epsilon, bottom, top, static_cast<T*>(dx), dgamma, dbeta);
  });
}

}  // namespace lockstep::backend::cuda
