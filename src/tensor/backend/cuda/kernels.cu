// The CUDA adapter's own kernels: fills and casts, broadcasting elementwise
// ops, reductions, softmax, index ops, transposes and the optimizers'
// updates. Deterministic by construction: no atomics; every sum runs in one
// fixed order (a serial loop per output, or one block's fixed tree), so a
// step gives the same bits every run. Compiled without fused multiply-adds
// (src/CMakeLists.txt), as the CPU's update loops are, so an update rule
// gives the CPU's bits; sums and transcendental functions match the CPU's
// within float32 rounding (docs/distribute.md, "GPUs").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/backend/cuda/element_rules.h"
#include "tensor/backend/cuda/half.cuh"
#include "tensor/backend/cuda/kernels.h"

namespace lockstep::backend::cuda {
namespace {

template <typename T>
__global__ void fill_kernel(T* out, std::int64_t n, T v) {
  LOCKSTEP_FOR_EACH(i, n) out[i] = v;
}

// philox.h's uniform_element, a thread an element; the stream from device
// memory when a slot is given (read once per thread, as the graph runs).
__global__ void random_uniform_kernel(float* out, std::int64_t n, std::uint64_t seed,
                                      const std::uint64_t* stream_slot, std::uint64_t stream_value,
                                      std::uint64_t first_index, float minval, float maxval) {
  const std::uint64_t stream = stream_slot != nullptr ? *stream_slot : stream_value;
  LOCKSTEP_FOR_EACH(i, n) {
    out[i] =
        uniform_element(seed, stream, first_index + static_cast<std::uint64_t>(i), minval, maxval);
  }
}

template <typename S, typename D>
__global__ void cast_kernel(const S* x, D* out, std::int64_t n) {
  LOCKSTEP_FOR_EACH(i, n) out[i] = convert<D>(x[i]);
}

// Offsets of output element i in each operand.
template <int K>
__device__ inline void offsets(const Broadcast& b, std::int64_t i, std::int64_t (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    const std::int64_t c = i % b.dims[d];
    i /= b.dims[d];
    for (int k = 0; k < K; ++k) off[k] += c * b.strides[k][d];
  }
}

template <typename T>
__global__ void binary_kernel(int kind, Broadcast b, const T* x, const T* y, void* out,
                              std::int64_t n) {
  using C = typename Compute<T>::type;
  LOCKSTEP_FOR_EACH(i, n) {
    std::int64_t off[2];
    offsets<2>(b, i, off);
    const C xv = convert<C>(x[off[0]]), yv = convert<C>(y[off[1]]);
    if (kind >= 7) {
      static_cast<bool*>(out)[i] = compare(kind, xv, yv);
    } else {
      static_cast<T*>(out)[i] = convert<T>(arith(kind, xv, yv));
    }
  }
}

template <typename T>
__global__ void unary_kernel(int kind, const T* x, T* out, std::int64_t n) {
  using C = typename Compute<T>::type;
  LOCKSTEP_FOR_EACH(i, n) out[i] = convert<T>(unary_op(kind, convert<C>(x[i])));
}

__global__ void clip_kernel(const float* x, float* out, std::int64_t n, float lo, float hi) {
  LOCKSTEP_FOR_EACH(i, n) {
    const float v = x[i];
    out[i] = v < lo ? lo : (v > hi ? hi : v);
  }
}

__global__ void map2_kernel(int kind, const float* g, const float* y, float* out, std::int64_t n) {
  LOCKSTEP_FOR_EACH(i, n) out[i] = map2_op(kind, g[i], y[i]);
}

__global__ void where_kernel(Broadcast b, const bool* c, const float* x, const float* y, float* out,
                             std::int64_t n) {
  LOCKSTEP_FOR_EACH(i, n) {
    std::int64_t off[3];
    offsets<3>(b, i, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// One block per row of a contiguous [rows, n]: a fixed tree over the block.
__global__ void reduce_rows_kernel(int kind, const float* x, float* out, std::int64_t n) {
  __shared__ double part[kThreads];
  const float* row = x + blockIdx.x * n;
  double acc = kind <= 1 ? 0.0 : static_cast<double>(row[0]);
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) acc = combine(kind, acc, row[j]);
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w)
      part[threadIdx.x] = combine(kind, part[threadIdx.x], part[threadIdx.x + w]);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    double r = part[0];
    if (kind == 1) r /= static_cast<double>(n);
    out[blockIdx.x] = static_cast<float>(r);
  }
}

// One thread per output of [outer, n, inner], inner > 1: a serial sum.
__global__ void reduce_strided_kernel(int kind, const float* x, float* out, std::int64_t outer,
                                      std::int64_t n, std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * inner) {
    const std::int64_t o = t / inner, i = t % inner;
    const float* base = x + o * n * inner + i;
    double acc = kind <= 1 ? 0.0 : static_cast<double>(base[0]);
    for (std::int64_t j = 0; j < n; ++j) acc = combine(kind, acc, base[j * inner]);
    if (kind == 1) acc /= static_cast<double>(n);
    out[t] = static_cast<float>(acc);
  }
}

// Long sums with few outputs (a bias's gradient over every position of a
// batch): chunks of kChunk rows summed in parallel, then the chunks' sums
// in order — the same fixed order every run.
constexpr std::int64_t kChunk = 256;

__global__ void reduce_chunks_kernel(int kind, const float* x, double* partial, std::int64_t outer,
                                     std::int64_t n, std::int64_t inner, std::int64_t chunks) {
  LOCKSTEP_FOR_EACH(t, outer * chunks * inner) {
    const std::int64_t i = t % inner, ch = t / inner % chunks, o = t / (inner * chunks);
    const std::int64_t begin = ch * kChunk, end = begin + kChunk < n ? begin + kChunk : n;
    const float* base = x + o * n * inner + i;
    double acc = kind <= 1 ? 0.0 : static_cast<double>(base[begin * inner]);
    for (std::int64_t j = begin; j < end; ++j) acc = combine(kind, acc, base[j * inner]);
    partial[t] = acc;
  }
}

__global__ void reduce_partials_kernel(int kind, const double* partial, float* out,
                                       std::int64_t outer, std::int64_t n, std::int64_t inner,
                                       std::int64_t chunks) {
  LOCKSTEP_FOR_EACH(t, outer * inner) {
    const std::int64_t o = t / inner, i = t % inner;
    const double* base = partial + o * chunks * inner + i;
    double acc = base[0];
    for (std::int64_t ch = 1; ch < chunks; ++ch) acc = combine(kind, acc, base[ch * inner]);
    if (kind == 1) acc /= static_cast<double>(n);
    out[t] = static_cast<float>(acc);
  }
}

__global__ void argmax_kernel(const float* x, std::int64_t* out, std::int64_t outer, std::int64_t n,
                              std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * inner) {
    const std::int64_t o = t / inner, i = t % inner;
    const float* base = x + o * n * inner + i;
    std::int64_t best = 0;
    for (std::int64_t r = 1; r < n; ++r) {
      if (base[r * inner] > base[best * inner]) best = r;
    }
    out[t] = best;
  }
}

// The CPU's rule (tensor/ops/softmax_ops.cc): d_i = x_i − max in float64,
// lse = log1p(Σ_{i≠top} exp(d_i)), each output rounded once. One thread per
// row: rows are short (classes) and many (examples).
__global__ void softmax_kernel(const float* x, float* log_out, float* prob_out, std::int64_t outer,
                               std::int64_t n, std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * inner) {
    softmax_row(x, log_out, prob_out, t / inner * n * inner + t % inner, n, inner);
  }
}

// The same rule for long rows along the last axis (a classifier's 1,000
// classes): one block of kRowBlock threads per row, the maximum (its first
// position on ties, as the loop above) and Σ exp in float64 each met in a
// fixed tree in shared memory — deterministic, and ~50x faster than one
// thread walking 1,000 classes three times (0.47 ms for [64, 1000] on an
// H200, ncu).
constexpr int kRowBlock = 256;

__global__ void softmax_rows_kernel(const float* x, float* log_out, float* prob_out,
                                    std::int64_t n) {
  __shared__ float best[kRowBlock];
  __shared__ std::int64_t where[kRowBlock];
  __shared__ double partial[kRowBlock];
  const float* row = x + blockIdx.x * n;
  const int t = threadIdx.x;
  float m = -INFINITY;
  std::int64_t top = n;
  for (std::int64_t j = t; j < n; j += kRowBlock) {
    if (row[j] > m) {
      m = row[j];
      top = j;
    }
  }
  best[t] = m;
  where[t] = top;
  for (int w = kRowBlock / 2; w > 0; w /= 2) {
    __syncthreads();
    if (t < w) {
      const float a = best[t], b = best[t + w];
      const std::int64_t ia = where[t], ib = where[t + w];
      if (b > a || (!(b < a) && ib < ia)) {
        best[t] = b;
        where[t] = ib;
      }
    }
  }
  __syncthreads();
  m = best[0];
  top = where[0] == n ? 0 : where[0];  // no element above -inf: position 0, as the loop
  double rest = 0;
  for (std::int64_t j = t; j < n; j += kRowBlock) {
    if (j != top) rest += exp(static_cast<double>(row[j]) - m);
  }
  partial[t] = rest;
  for (int w = kRowBlock / 2; w > 0; w /= 2) {
    __syncthreads();
    if (t < w) partial[t] += partial[t + w];
  }
  __syncthreads();
  const double lse = log1p(partial[0]), s = 1.0 + partial[0];
  const std::int64_t base = blockIdx.x * n;
  for (std::int64_t j = t; j < n; j += kRowBlock) {
    const double d = static_cast<double>(row[j]) - m;
    if (log_out) log_out[base + j] = static_cast<float>(d - lse);
    if (prob_out) prob_out[base + j] = static_cast<float>(exp(d) / s);
  }
}

__global__ void bias_relu_kernel(float* c, const float* bias, std::int64_t total, std::int64_t n,
                                 bool relu) {
  LOCKSTEP_FOR_EACH(i, total) {
    float v = c[i];
    if (bias) v += bias[i % n];
    if (relu) v = v > 0.0f ? v : 0.0f;
    c[i] = v;
  }
}

// A bfloat16 or float16 matmul's epilogue: its float32 product, the bias
// (in the product's type) and the relu added in float32, then one rounding —
// what the CPU's kernels do, native or emulated.
template <typename T>
__global__ void bias_relu_round_kernel(const float* c, const T* bias, T* out, std::int64_t total,
                                       std::int64_t n, bool relu) {
  LOCKSTEP_FOR_EACH(i, total) {
    float v = c[i];
    if (bias) v += convert<float>(bias[i % n]);
    if (relu) v = v > 0.0f ? v : 0.0f;
    out[i] = convert<T>(v);
  }
}

// One thread per V-wide group of channels (float4 where the channel count
// allows: 16-byte loads and stores), 32-bit indices where the tensor fits
// them — a padded copy is pure memory traffic, and 64-bit divisions per
// element made it 3x slower than its bytes (ncu, MobileNetV2 on an H200).
template <typename V, typename I>
__global__ void window_kernel(const V* src, I sh, I sw, I c, V* dst, I dh, I dw, I off_h, I off_w,
                              I total) {
  for (I t = blockIdx.x * blockDim.x + threadIdx.x; t < total; t += gridDim.x * blockDim.x) {
    const I ch = t % c, pixel = t / c;
    const I j = pixel % dw, i = pixel / dw % dh, b = pixel / (dw * dh);
    const I si = i + off_h, sj = j + off_w;
    V v{};
    if (si >= 0 && si < sh && sj >= 0 && sj < sw) v = src[((b * sh + si) * sw + sj) * c + ch];
    dst[t] = v;
  }
}

// A pixel of `bytes` bytes copied as bytes / sizeof(V) words of V.
template <typename V, typename I>
void launch_window(cudaStream_t s, const void* src, std::int64_t n, std::int64_t sh,
                   std::int64_t sw, std::int64_t bytes, void* dst, std::int64_t dh, std::int64_t dw,
                   std::int64_t off_h, std::int64_t off_w) {
  const std::int64_t cv = bytes / static_cast<std::int64_t>(sizeof(V)), total = n * dh * dw * cv;
  window_kernel<V, I><<<blocks_for(total), kThreads, 0, s>>>(
      reinterpret_cast<const V*>(src), static_cast<I>(sh), static_cast<I>(sw), static_cast<I>(cv),
      reinterpret_cast<V*>(dst), static_cast<I>(dh), static_cast<I>(dw), static_cast<I>(off_h),
      static_cast<I>(off_w), static_cast<I>(total));
}

__global__ void take_kernel(const float* x, const std::int64_t* idx, float* out, std::int64_t outer,
                            std::int64_t n, std::int64_t k, std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * k * inner) {
    const std::int64_t i = t % inner, o = t / (k * inner);
    out[t] = x[(o * n + idx[t]) * inner + i];
  }
}

// relu with a slope, threshold and cap: the CPU's expressions
// (std::min(v, top) is top < v ? top : v).
__global__ void relu_general_kernel(const float* x, float* y, std::int64_t n, float slope,
                                    float top, float threshold) {
  LOCKSTEP_FOR_EACH(i, n) {
    const float v = x[i];
    y[i] = v > threshold ? (top < v ? top : v) : slope * (v - threshold);
  }
}
__global__ void relu_general_grad_kernel(const float* g, const float* y, float* dx, std::int64_t n,
                                         float slope, float top) {
  LOCKSTEP_FOR_EACH(i, n) {
    const float v = y[i], gi = g[i];
    dx[i] = v > 0.0f ? (v < top ? gi : 0.0f) : slope * gi;
  }
}

// Keras's moving-statistics update; without FMA contraction (--fmad=false)
// the two products and the sum round as the CPU's three ops.
__global__ void moving_average_kernel(const float* moving, const float* value, float* out,
                                      std::int64_t n, float momentum, float one_minus) {
  LOCKSTEP_FOR_EACH(i, n) out[i] = moving[i] * momentum + value[i] * one_minus;
}

// Whole rows of `inner` elements, copied as bytes (any dtype).
__global__ void gather_rows_kernel(const unsigned char* x, const std::int64_t* idx,
                                   unsigned char* out, std::int64_t outer, std::int64_t n,
                                   std::int64_t m, std::int64_t row_bytes) {
  LOCKSTEP_FOR_EACH(t, outer * m * row_bytes) {
    const std::int64_t b = t % row_bytes, j = t / row_bytes % m, o = t / (row_bytes * m);
    out[t] = x[(o * n + idx[j]) * row_bytes + b];
  }
}

// One thread per (outer, distinct target row, inner): its g rows added in
// ascending order from 0, as the CPU's loop adds them.
__global__ void gather_rows_grad_kernel(const float* g, const std::int64_t* order,
                                        const std::int64_t* starts, const std::int64_t* targets,
                                        std::int64_t unique, float* out, std::int64_t outer,
                                        std::int64_t n, std::int64_t m, std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * unique * inner) {
    const std::int64_t i = t % inner, u = t / inner % unique, o = t / (inner * unique);
    if (targets[u] < 0) continue;  // a recorded kernel's padding
    float acc = 0.0f;
    for (std::int64_t p = starts[u]; p < starts[u + 1]; ++p)
      acc += g[(o * m + order[p]) * inner + i];
    out[(o * n + targets[u]) * inner + i] = acc;
  }
}

// One thread per (outer, inner) column: zeros, then the k gradients added in
// order (the CPU's order; no atomics).
__global__ void scatter_kernel(const float* g, const std::int64_t* idx, float* out,
                               std::int64_t outer, std::int64_t n, std::int64_t k,
                               std::int64_t inner) {
  LOCKSTEP_FOR_EACH(t, outer * inner) {
    const std::int64_t o = t / inner, i = t % inner;
    for (std::int64_t r = 0; r < n; ++r) out[(o * n + r) * inner + i] = 0.0f;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t at = (o * k + j) * inner + i;
      out[(o * n + idx[at]) * inner + i] += g[at];
    }
  }
}

__global__ void one_hot_kernel(const std::int64_t* idx, float* out, std::int64_t count,
                               std::int64_t depth, float on, float off) {
  LOCKSTEP_FOR_EACH(t, count * depth) out[t] = idx[t / depth] == t % depth ? on : off;
}

struct Dims {
  int rank;
  std::int64_t out[kMaxRank];
  std::int64_t in_strides[kMaxRank];
};

template <typename T>
__global__ void transpose_kernel(Dims d, const T* x, T* out, std::int64_t n) {
  LOCKSTEP_FOR_EACH(t, n) {
    std::int64_t rest = t, src = 0;
    for (int a = d.rank - 1; a >= 0; --a) {
      src += (rest % d.out[a]) * d.in_strides[a];
      rest /= d.out[a];
    }
    out[t] = x[src];
  }
}

// The update rules (element_rules.h's update_element), a thread an element.
__global__ void update_kernel(UpdateParams params, float* var, const float* g, float* m, float* v,
                              float* a, std::int64_t n) {
  if (skips_update(params)) return;
  const UpdateParams p = with_step_numbers(params);
  LOCKSTEP_FOR_EACH(i, n) update_element(p, i, var, g, m, v, a);
}

struct Sources {
  const float* p[16];
};

__global__ void sum_buffers_kernel(Sources s, int count, float* dst, std::int64_t n) {
  LOCKSTEP_FOR_EACH(i, n) {
    float acc = s.p[0][i];
    for (int r = 1; r < count; ++r) acc += s.p[r][i];
    dst[i] = acc;
  }
}

}  // namespace

void launch_fill(cudaStream_t s, Type type, void* out, std::int64_t n, double value) {
  visit(type, [&]<typename T>() {
    T v;
    if constexpr (std::is_same_v<T, Bf16>) {
      const float f = static_cast<float>(value);
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      v = Bf16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
    } else if constexpr (std::is_same_v<T, F16>) {
      v = float_to_f16(static_cast<float>(value));
    } else {
      v = static_cast<T>(value);
    }
    fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<T*>(out), n, v);
  });
  check_launch("fill");
}

void launch_random_uniform(cudaStream_t s, float* out, std::int64_t n, std::uint64_t seed,
                           const std::uint64_t* stream_slot, std::uint64_t stream_value,
                           std::uint64_t first_index, float minval, float maxval) {
  if (n == 0) return;
  random_uniform_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, n, seed, stream_slot, stream_value,
                                                           first_index, minval, maxval);
  check_launch("random_uniform");
}

void launch_cast(cudaStream_t s, Type from, Type to, const void* x, void* out, std::int64_t n) {
  visit(from, [&]<typename S>() {
    visit(to, [&]<typename D>() {
      cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const S*>(x), static_cast<D*>(out),
                                                     n);
    });
  });
  check_launch("cast");
}

void launch_binary(cudaStream_t s, int kind, Type type, const Broadcast& b, const void* x,
                   const void* y, void* out) {
  std::int64_t n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.dims[d];
  visit(type, [&]<typename T>() {
    binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(kind, b, static_cast<const T*>(x),
                                                     static_cast<const T*>(y), out, n);
  });
  check_launch("binary op");
}

void launch_unary(cudaStream_t s, int kind, Type type, const void* x, void* out, std::int64_t n) {
  visit(type, [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      throw std::runtime_error("bool has no GPU kernel for unary ops");
    } else {
      unary_kernel<<<blocks_for(n), kThreads, 0, s>>>(kind, static_cast<const T*>(x),
                                                      static_cast<T*>(out), n);
    }
  });
  check_launch("unary op");
}

void launch_clip(cudaStream_t s, const float* x, float* out, std::int64_t n, float lo, float hi) {
  clip_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, out, n, lo, hi);
  check_launch("clip");
}

void launch_map2(cudaStream_t s, int kind, const float* x, const float* y, float* out,
                 std::int64_t n) {
  map2_kernel<<<blocks_for(n), kThreads, 0, s>>>(kind, x, y, out, n);
  check_launch("map2");
}

void launch_where(cudaStream_t s, const Broadcast& b, const bool* c, const float* x, const float* y,
                  float* out) {
  std::int64_t n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.dims[d];
  where_kernel<<<blocks_for(n), kThreads, 0, s>>>(b, c, x, y, out, n);
  check_launch("where");
}

void launch_reduce(cudaStream_t s, int kind, const float* x, float* out, std::int64_t outer,
                   std::int64_t n, std::int64_t inner) {
  if (n == 0) {
    launch_fill(s, Type::kFloat32, out, outer * inner, 0.0);
    return;
  }
  if (inner == 1 && outer <= 65535 * 16) {
    reduce_rows_kernel<<<static_cast<unsigned>(outer), kThreads, 0, s>>>(kind, x, out, n);
  } else if (n > 4 * kChunk && outer * inner < 4 * 65536) {
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    void* partial = nullptr;
    check(cudaMallocAsync(&partial, static_cast<std::size_t>(outer * chunks * inner) * 8, s),
          "reduce's partial sums");
    reduce_chunks_kernel<<<blocks_for(outer * chunks * inner), kThreads, 0, s>>>(
        kind, x, static_cast<double*>(partial), outer, n, inner, chunks);
    reduce_partials_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(
        kind, static_cast<const double*>(partial), out, outer, n, inner, chunks);
    check(cudaFreeAsync(partial, s), "reduce's partial sums");
  } else {
    reduce_strided_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(kind, x, out, outer, n,
                                                                         inner);
  }
  check_launch("reduce");
}

void launch_argmax(cudaStream_t s, const float* x, std::int64_t* out, std::int64_t outer,
                   std::int64_t n, std::int64_t inner) {
  argmax_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(x, out, outer, n, inner);
  check_launch("argmax");
}

void launch_softmax(cudaStream_t s, const float* x, float* log_out, float* prob_out,
                    std::int64_t outer, std::int64_t n, std::int64_t inner) {
  if (inner == 1 && n >= kRowBlock && outer <= 0x7fffffff) {
    softmax_rows_kernel<<<static_cast<unsigned>(outer), kRowBlock, 0, s>>>(x, log_out, prob_out, n);
    check_launch("softmax");
    return;
  }
  softmax_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(x, log_out, prob_out, outer, n,
                                                                inner);
  check_launch("softmax");
}

void launch_bias_relu(cudaStream_t s, float* c, const float* bias, std::int64_t rows,
                      std::int64_t n, bool relu) {
  bias_relu_kernel<<<blocks_for(rows * n), kThreads, 0, s>>>(c, bias, rows * n, n, relu);
  check_launch("bias and relu");
}

void launch_bias_relu_round(cudaStream_t s, Type type, const float* c, const void* bias, void* out,
                            std::int64_t rows, std::int64_t n, bool relu) {
  visit(type, [&]<typename T>() {
    if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) {
      bias_relu_round_kernel<<<blocks_for(rows * n), kThreads, 0, s>>>(
          c, static_cast<const T*>(bias), static_cast<T*>(out), rows * n, n, relu);
    } else {
      throw std::runtime_error("a matmul's rounding epilogue takes bfloat16 or float16 only");
    }
  });
  check_launch("matmul's bias, relu and rounding");
}

void launch_nhwc_window(cudaStream_t s, int elem_bytes, const void* src, std::int64_t n,
                        std::int64_t sh, std::int64_t sw, std::int64_t c, void* dst,
                        std::int64_t dh, std::int64_t dw, std::int64_t off_h, std::int64_t off_w) {
  const std::int64_t bytes = c * elem_bytes;  // a pixel's
  // Signed 32-bit indices (offsets may be negative) while every index and
  // the grid's stride stay below 2^31 (counted in bytes: the narrowest word).
  const bool small = n * std::max(sh * sw, dh * dw) * bytes < (std::int64_t{1} << 30);
  auto launch = [&]<typename V>() {
    if (small) {
      launch_window<V, std::int32_t>(s, src, n, sh, sw, bytes, dst, dh, dw, off_h, off_w);
    } else {
      launch_window<V, std::int64_t>(s, src, n, sh, sw, bytes, dst, dh, dw, off_h, off_w);
    }
  };
  if (bytes % 16 == 0) {
    launch.template operator()<float4>();
  } else if (bytes % 4 == 0) {
    launch.template operator()<float>();
  } else if (bytes % 2 == 0) {
    launch.template operator()<std::uint16_t>();
  } else {
    launch.template operator()<std::uint8_t>();
  }
  check_launch("padding or cropping");
}

void launch_take_along_axis(cudaStream_t s, const float* x, const std::int64_t* idx, float* out,
                            std::int64_t outer, std::int64_t n, std::int64_t k,
                            std::int64_t inner) {
  take_kernel<<<blocks_for(outer * k * inner), kThreads, 0, s>>>(x, idx, out, outer, n, k, inner);
  check_launch("take_along_axis");
}

void launch_scatter_along_axis(cudaStream_t s, const float* g, const std::int64_t* idx, float* out,
                               std::int64_t outer, std::int64_t n, std::int64_t k,
                               std::int64_t inner) {
  scatter_kernel<<<blocks_for(outer * inner), kThreads, 0, s>>>(g, idx, out, outer, n, k, inner);
  check_launch("take_along_axis's gradient");
}

void launch_moving_average(cudaStream_t s, const float* moving, const float* value, float* out,
                           std::int64_t n, float momentum, float one_minus) {
  moving_average_kernel<<<blocks_for(n), kThreads, 0, s>>>(moving, value, out, n, momentum,
                                                           one_minus);
  check_launch("moving_average");
}

void launch_relu_general(cudaStream_t s, const float* x, float* y, std::int64_t n, float slope,
                         float top, float threshold) {
  relu_general_kernel<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, slope, top, threshold);
  check_launch("relu");
}

void launch_relu_general_grad(cudaStream_t s, const float* g, const float* y, float* dx,
                              std::int64_t n, float slope, float top) {
  relu_general_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(g, y, dx, n, slope, top);
  check_launch("relu's gradient");
}

void launch_gather_rows(cudaStream_t s, int elem_bytes, const void* x, const std::int64_t* idx,
                        void* out, std::int64_t outer, std::int64_t n, std::int64_t m,
                        std::int64_t inner) {
  const std::int64_t row_bytes = inner * elem_bytes;
  gather_rows_kernel<<<blocks_for(outer * m * row_bytes), kThreads, 0, s>>>(
      static_cast<const unsigned char*>(x), idx, static_cast<unsigned char*>(out), outer, n, m,
      row_bytes);
  check_launch("gather");
}

void launch_gather_rows_grad(cudaStream_t s, const float* g, const std::int64_t* order,
                             const std::int64_t* starts, const std::int64_t* targets,
                             std::int64_t unique, float* out, std::int64_t outer, std::int64_t n,
                             std::int64_t m, std::int64_t inner) {
  launch_fill(s, Type::kFloat32, out, outer * n * inner, 0.0);
  if (unique > 0) {
    gather_rows_grad_kernel<<<blocks_for(outer * unique * inner), kThreads, 0, s>>>(
        g, order, starts, targets, unique, out, outer, n, m, inner);
  }
  check_launch("gather's gradient");
}

void launch_one_hot(cudaStream_t s, const std::int64_t* idx, float* out, std::int64_t count,
                    std::int64_t depth, float on, float off) {
  one_hot_kernel<<<blocks_for(count * depth), kThreads, 0, s>>>(idx, out, count, depth, on, off);
  check_launch("one_hot");
}

void launch_transpose(cudaStream_t s, int elem_bytes, int rank, const std::int64_t* out_dims,
                      const std::int64_t* in_strides, const void* x, void* out) {
  if (rank > kMaxRank) throw std::runtime_error("transpose: rank above 8");
  Dims d{};
  d.rank = rank;
  std::int64_t n = 1;
  for (int a = 0; a < rank; ++a) {
    d.out[a] = out_dims[a];
    d.in_strides[a] = in_strides[a];
    n *= out_dims[a];
  }
  auto go = [&]<typename T>() {
    transpose_kernel<<<blocks_for(n), kThreads, 0, s>>>(d, static_cast<const T*>(x),
                                                        static_cast<T*>(out), n);
  };
  switch (elem_bytes) {
    case 1:
      go.template operator()<std::uint8_t>();
      break;
    case 2:
      go.template operator()<std::uint16_t>();
      break;
    case 4:
      go.template operator()<std::uint32_t>();
      break;
    default:
      go.template operator()<std::uint64_t>();
      break;
  }
  check_launch("transpose");
}

void launch_update(cudaStream_t s, const UpdateParams& p, float* value, const float* grad,
                   float* const* slots, int num_slots, std::int64_t n) {
  const UpdateSlots u = update_slots(p, slots, num_slots);
  update_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, value, grad, u.m, u.v, u.a, n);
  check_launch("the optimizer's update");
}

void launch_sum_buffers(cudaStream_t s, const float* const* srcs, int count, float* dst,
                        std::int64_t n) {
  if (count < 1 || count > 16) throw std::runtime_error("sum_buffers: 1 to 16 buffers");
  Sources src{};
  for (int r = 0; r < count; ++r) src.p[r] = srcs[r];
  sum_buffers_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, count, dst, n);
  check_launch("sum of replicas' buffers");
}

}  // namespace lockstep::backend::cuda
