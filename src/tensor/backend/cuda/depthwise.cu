// Depthwise convolution (groups = channels, oc = channels · multiplier) on
// our own kernels: NHWC data and Keras's HWIO kernel [kh, kw, 1, oc] as they
// are, TensorFlow's asymmetric "same" padding read as zeros in place (no
// padded copy, no filter transpose), and a kernel gradient summed in an
// order fixed by the shape alone (no atomics: the same bits on every run).
//
// Why not cuDNN: its deterministic depthwise algorithms (grouped "direct"
// kernels forward and backward-data, wgrad_alg1 backward-filter) took 44 of
// the 49 ms of GPU time of a MobileNetV2 step at batch 64 on an H200 (ncu,
// docs/benchmarks.md "GPUs"). A depthwise convolution does kh·kw
// multiply-adds per value it reads: it is bound by memory, and these
// kernels read each input from the cache once per tap at most.
//
// Data and kernels come in float32, bfloat16 or float16 (mixed precision):
// loads widen to float32 (exact), the products and sums run in float32 as
// for float32 data, and each result is rounded once to the data's type.
#include <algorithm>
#include <cstdint>
#include <string>

#include "tensor/backend/cuda/half.cuh"
#include "tensor/backend/cuda/kernels.h"

namespace lockstep::backend::cuda {
namespace {

// The shape in the index type of the launch (int where every offset fits).
template <typename I>
struct Shape {
  I n, h, w, c, kh, kw, oc, mult, oh, ow, sh, sw, dh, dw, pt, pl;
};

template <typename I>
Shape<I> shape_of(const ConvParams& p) {
  return {static_cast<I>(p.n),    static_cast<I>(p.h),        static_cast<I>(p.w),
          static_cast<I>(p.c),    static_cast<I>(p.kh),       static_cast<I>(p.kw),
          static_cast<I>(p.oc),   static_cast<I>(p.oc / p.c), static_cast<I>(p.oh),
          static_cast<I>(p.ow),   static_cast<I>(p.sh),       static_cast<I>(p.sw),
          static_cast<I>(p.dh),   static_cast<I>(p.dw),       static_cast<I>(p.pad_h),
          static_cast<I>(p.pad_w)};
}

// W channels per thread of element type T: 4 (one 16-byte load of float32,
// 8 bytes of a half type) when the multiplier is 1 and the channels come in
// fours, else 1. Loads widen to float32; stores round once.
template <typename T, int W>
struct Lanes;
template <typename T>
struct Lanes<T, 1> {
  __device__ static void get(const T* p, float* v) { v[0] = load(*p); }
  __device__ static void put(T* p, const float* v) { *p = store<T>(v[0]); }
};
template <>
struct Lanes<float, 4> {
  __device__ static void get(const float* p, float* v) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  }
  __device__ static void put(float* p, const float* v) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};
template <typename T>  // bfloat16 or float16: four 16-bit values in 8 bytes
struct Lanes<T, 4> {
  __device__ static void get(const T* p, float* v) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    v[0] = load(T{static_cast<std::uint16_t>(a.x & 0xffffu)});
    v[1] = load(T{static_cast<std::uint16_t>(a.x >> 16)});
    v[2] = load(T{static_cast<std::uint16_t>(a.y & 0xffffu)});
    v[3] = load(T{static_cast<std::uint16_t>(a.y >> 16)});
  }
  __device__ static void put(T* p, const float* v) {
    uint2 a;
    a.x = static_cast<std::uint32_t>(store<T>(v[0]).bits) |
          (static_cast<std::uint32_t>(store<T>(v[1]).bits) << 16);
    a.y = static_cast<std::uint32_t>(store<T>(v[2]).bits) |
          (static_cast<std::uint32_t>(store<T>(v[3]).bits) << 16);
    *reinterpret_cast<uint2*>(p) = a;
  }
};

// acc[e] += a[e] · b[e], each product rounded, then the sum (no FMA).
template <int W>
__device__ inline void multiply_add(float* acc, const float* a, const float* b) {
#pragma unroll
  for (int e = 0; e < W; ++e) acc[e] += a[e] * b[e];
}

// Element t of an NHWC tensor [n, height, width, groups · W] taken W
// channels at a time: its first channel, column, row and image.
template <typename I>
struct Place {
  I channel, col, row, image;
};
template <typename I, int W>
__device__ Place<I> place_of(I t, I groups, I width, I height) {
  const I pixel = t / groups, line = pixel / width;
  return {(t % groups) * W, pixel % width, line % height, line / height};
}

// y[b, r, q, o] = Σ_{i, j} x[b, r·sh − pt + i·dh, q·sw − pl + j·dw, o / mult] · f[i, j, 0, o]
template <typename T, typename I, int W>
__global__ void forward_kernel(const T* x, const T* f, T* y, Shape<I> s, I total) {
  const I groups = s.oc / W;
  for (I t = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<I>(gridDim.x) * blockDim.x) {
    const Place<I> at = place_of<I, W>(t, groups, s.ow, s.oh);
    const I o = at.channel, q = at.col, r = at.row, b = at.image;
    const I ci = o / s.mult;
    float acc[W] = {};
    for (I i = 0; i < s.kh; ++i) {
      const I ih = r * s.sh - s.pt + i * s.dh;
      if (ih < 0 || ih >= s.h) continue;
      for (I j = 0; j < s.kw; ++j) {
        const I iw = q * s.sw - s.pl + j * s.dw;
        if (iw < 0 || iw >= s.w) continue;
        float a[W], k[W];
        Lanes<T, W>::get(x + ((b * s.h + ih) * s.w + iw) * s.c + ci, a);
        Lanes<T, W>::get(f + (i * s.kw + j) * s.oc + o, k);
        multiply_add<W>(acc, a, k);
      }
    }
    Lanes<T, W>::put(y + t * W, acc);
  }
}

// dx[b, ih, iw, c] = Σ over the taps (i, j) and outputs (r, q) that read it,
// and the multiplier's channels m: dy[b, r, q, c·mult + m] · f[i, j, 0, c·mult + m].
// kUnit: strides of 1, where every tap's output position is whole (no
// division by the stride: a quarter of the kernel's time in MobileNetV2,
// whose depthwise layers mostly have stride 1).
template <typename T, typename I, int W, bool kUnit>
__global__ void backward_data_kernel(const T* dy, const T* f, T* dx, Shape<I> s, I total) {
  const I groups = s.c / W;
  for (I t = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<I>(gridDim.x) * blockDim.x) {
    const Place<I> at = place_of<I, W>(t, groups, s.w, s.h);
    const I ch = at.channel, iw = at.col, ih = at.row, b = at.image;
    float acc[W] = {};
    for (I i = 0; i < s.kh; ++i) {
      const I th = ih + s.pt - i * s.dh;
      if (th < 0 || (!kUnit && th % s.sh != 0)) continue;
      const I r = kUnit ? th : th / s.sh;
      if (r >= s.oh) continue;
      for (I j = 0; j < s.kw; ++j) {
        const I tw = iw + s.pl - j * s.dw;
        if (tw < 0 || (!kUnit && tw % s.sw != 0)) continue;
        const I q = kUnit ? tw : tw / s.sw;
        if (q >= s.ow) continue;
        const T* g = dy + ((b * s.oh + r) * s.ow + q) * s.oc;
        const T* k = f + (i * s.kw + j) * s.oc;
        for (I m = 0; m < s.mult; ++m) {
          const I o = ch * s.mult + m;  // W == 4 only when mult == 1
          float a[W], w[W];
          Lanes<T, W>::get(g + o, a);
          Lanes<T, W>::get(k + o, w);
          multiply_add<W>(acc, a, w);
        }
      }
    }
    Lanes<T, W>::put(dx + t * W, acc);
  }
}

// The kernel gradient, first stage: block (chunk, 32 channels) sums
// dy[p, o] · x[tap's input of p, o / mult] over the chunk's kChunk output
// positions p, for every tap at once (taps ≤ kTaps, in registers), kLanes
// positions in flight per channel; the lanes' sums are added in lane order.
// partial[chunk][tap][o].
constexpr int kLanes = 8;
constexpr int kChannels = 32;
constexpr int kChunk = 512;

template <typename T, typename I, int kTaps>
__global__ void filter_partial_kernel(const T* x, const T* dy, float* partial, Shape<I> s,
                                      I positions) {
  __shared__ float sums[kLanes][kTaps][kChannels];
  const I o = blockIdx.y * static_cast<I>(kChannels) + threadIdx.x;
  const I begin = blockIdx.x * static_cast<I>(kChunk);
  const I end = begin + kChunk < positions ? begin + kChunk : positions;
  const I taps = s.kh * s.kw;
  float acc[kTaps];
#pragma unroll
  for (int k = 0; k < kTaps; ++k) acc[k] = 0.0f;
  if (o < s.oc) {
    const I ci = o / s.mult;
    for (I p = begin + threadIdx.y; p < end; p += kLanes) {
      const I q = p % s.ow, r = p / s.ow % s.oh, b = p / (s.ow * s.oh);
      const float g = load(dy[p * s.oc + o]);
#pragma unroll
      for (int k = 0; k < kTaps; ++k) {
        if (k >= taps) break;
        const I i = k / s.kw, j = k % s.kw;
        const I ih = r * s.sh - s.pt + i * s.dh, iw = q * s.sw - s.pl + j * s.dw;
        if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w)
          acc[k] += g * load(x[((b * s.h + ih) * s.w + iw) * s.c + ci]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kTaps; ++k) sums[threadIdx.y][k][threadIdx.x] = acc[k];
  __syncthreads();
  if (o >= s.oc) return;
  for (I k = threadIdx.y; k < taps; k += kLanes) {
    float total = 0.0f;
#pragma unroll
    for (int lane = 0; lane < kLanes; ++lane) total += sums[lane][k][threadIdx.x];
    partial[(static_cast<I>(blockIdx.x) * taps + k) * s.oc + o] = total;
  }
}

// The same for a multiplier of 1 and channels in fours, up to 3×3: each
// thread takes four channels (16-byte loads: a quarter of the index work
// per byte of the kernel above), kLanes4 positions in flight per channel
// group; the lanes' sums are added in lane order.
constexpr int kLanes4 = 32;
constexpr int kGroups4 = kChannels / 4;

template <typename T, typename I>
__global__ void filter_partial4_kernel(const T* x, const T* dy, float* partial, Shape<I> s,
                                       I positions) {
  __shared__ float sums[kLanes4][9][kChannels];
  const I o = (blockIdx.y * static_cast<I>(kGroups4) + threadIdx.x) * 4;
  const I begin = blockIdx.x * static_cast<I>(kChunk);
  const I end = begin + kChunk < positions ? begin + kChunk : positions;
  const I taps = s.kh * s.kw;
  float acc[9][4];
#pragma unroll
  for (int k = 0; k < 9; ++k) acc[k][0] = acc[k][1] = acc[k][2] = acc[k][3] = 0.0f;
  if (o < s.oc) {
    for (I p = begin + threadIdx.y; p < end; p += kLanes4) {
      const I q = p % s.ow, r = p / s.ow % s.oh, b = p / (s.ow * s.oh);
      float g[4];
      Lanes<T, 4>::get(dy + p * s.oc + o, g);
#pragma unroll
      for (int k = 0; k < 9; ++k) {
        if (k >= taps) break;
        const I i = k / s.kw, j = k % s.kw;
        const I ih = r * s.sh - s.pt + i * s.dh, iw = q * s.sw - s.pl + j * s.dw;
        if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) {
          float v[4];
          Lanes<T, 4>::get(x + ((b * s.h + ih) * s.w + iw) * s.c + o, v);
          multiply_add<4>(acc[k], g, v);
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 9; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) sums[threadIdx.y][k][threadIdx.x * 4 + e] = acc[k][e];
  }
  __syncthreads();
  const I first = blockIdx.y * static_cast<I>(kChannels);
  for (I t = threadIdx.y * kGroups4 + threadIdx.x; t < taps * kChannels; t += kLanes4 * kGroups4) {
    const I k = t / kChannels, ch = t % kChannels;
    if (first + ch >= s.oc) continue;
    float total = 0.0f;
#pragma unroll 8
    for (int lane = 0; lane < kLanes4; ++lane) total += sums[lane][k][ch];
    partial[(static_cast<I>(blockIdx.x) * taps + k) * s.oc + first + ch] = total;
  }
}

// Second stage: df[tap, o] = Σ over the chunks in order, in double.
template <typename T>
__global__ void filter_final_kernel(const float* partial, T* df, std::int64_t chunks,
                                    std::int64_t outputs) {
  LOCKSTEP_FOR_EACH(t, outputs) {
    double total = 0.0;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * outputs + t];
    df[t] = store<T>(static_cast<float>(total));
  }
}

bool fits_int(const ConvParams& p) {
  constexpr std::int64_t kMax = 0x3fffffff;  // offsets, plus a grid stride, stay below 2^31
  return p.n * p.h * p.w * p.c < kMax && p.n * p.oh * p.ow * p.oc < kMax;
}

bool aligned(const void* a, const void* b, const void* c) {
  return (reinterpret_cast<std::uintptr_t>(a) | reinterpret_cast<std::uintptr_t>(b) |
          reinterpret_cast<std::uintptr_t>(c)) %
             16 ==
         0;
}
bool four_wide(const ConvParams& p, const void* a, const void* b, const void* c) {
  return p.oc == p.c && p.c % 4 == 0 && aligned(a, b, c);
}

template <typename T, typename I>
void forward(cudaStream_t st, const ConvParams& p, const T* x, const T* f, T* y) {
  const Shape<I> s = shape_of<I>(p);
  if (four_wide(p, x, f, y)) {
    const I total = s.n * s.oh * s.ow * s.oc / 4;
    forward_kernel<T, I, 4><<<blocks_for(total), kThreads, 0, st>>>(x, f, y, s, total);
  } else {
    const I total = s.n * s.oh * s.ow * s.oc;
    forward_kernel<T, I, 1><<<blocks_for(total), kThreads, 0, st>>>(x, f, y, s, total);
  }
  check_launch("depthwise convolution");
}

template <typename T, typename I>
void backward_data(cudaStream_t st, const ConvParams& p, const T* dy, const T* f, T* dx) {
  const Shape<I> s = shape_of<I>(p);
  const bool unit = p.sh == 1 && p.sw == 1;
  if (four_wide(p, dy, f, dx)) {
    const I total = s.n * s.h * s.w * s.c / 4;
    if (unit) {
      backward_data_kernel<T, I, 4, true>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    } else {
      backward_data_kernel<T, I, 4, false>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    }
  } else {
    const I total = s.n * s.h * s.w * s.c;
    if (unit) {
      backward_data_kernel<T, I, 1, true>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    } else {
      backward_data_kernel<T, I, 1, false>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    }
  }
  check_launch("depthwise convolution's input gradient");
}

template <typename T, typename I, int kTaps>
void partial_sums(cudaStream_t st, const ConvParams& p, const T* x, const T* dy, float* partial,
                  std::int64_t chunks) {
  const Shape<I> s = shape_of<I>(p);
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((p.oc + kChannels - 1) / kChannels));
  filter_partial_kernel<T, I, kTaps>
      <<<grid, dim3(kChannels, kLanes), 0, st>>>(x, dy, partial, s, s.n * s.oh * s.ow);
}

template <typename T, typename I>
void backward_filter(cudaStream_t st, const ConvParams& p, const T* x, const T* dy, T* df) {
  const std::int64_t positions = p.n * p.oh * p.ow, taps = p.kh * p.kw;
  const std::int64_t chunks = (positions + kChunk - 1) / kChunk;
  if (chunks > 0x7fffffff) throw std::runtime_error("depthwise convolution: too many positions");
  const std::int64_t outputs = taps * p.oc;
  const Scratch partial(
      st, static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * outputs) * sizeof(float),
      "depthwise convolution's kernel gradient");
  if (chunks == 0) {
    check(cudaMemsetAsync(df, 0, static_cast<std::size_t>(outputs) * sizeof(T), st),
          "depthwise convolution's kernel gradient");
    return;
  }
  static_assert(kDepthwiseMaxTaps == 25, "one instantiation per tap bound");
  if (taps <= 9 && four_wide(p, x, dy, df)) {
    const Shape<I> s = shape_of<I>(p);
    const dim3 grid(static_cast<unsigned>(chunks),
                    static_cast<unsigned>((p.oc + kChannels - 1) / kChannels));
    filter_partial4_kernel<T, I><<<grid, dim3(kGroups4, kLanes4), 0, st>>>(
        x, dy, partial.as<float>(), s, s.n * s.oh * s.ow);
  } else if (taps <= 9) {
    partial_sums<T, I, 9>(st, p, x, dy, partial.as<float>(), chunks);
  } else {
    partial_sums<T, I, 25>(st, p, x, dy, partial.as<float>(), chunks);
  }
  check_launch("depthwise convolution's kernel gradient");
  filter_final_kernel<T>
      <<<blocks_for(outputs), kThreads, 0, st>>>(partial.as<float>(), df, chunks, outputs);
  check_launch("depthwise convolution's kernel gradient");
}

void check_shape(const ConvParams& p) {
  if (p.groups != p.c || p.oc % p.c != 0 || p.kh * p.kw > kDepthwiseMaxTaps)
    throw std::runtime_error("depthwise convolution: not a depthwise shape of at most " +
                             std::to_string(kDepthwiseMaxTaps) + " taps");
}

}  // namespace

void launch_depthwise_forward(cudaStream_t s, Type type, const ConvParams& p, const void* x,
                              const void* f, void* y) {
  check_shape(p);
  if (p.n * p.oh * p.ow * p.oc == 0) return;
  visit_floating(type, "depthwise convolution", [&]<typename T>() {
    const auto *xt = static_cast<const T*>(x), *ft = static_cast<const T*>(f);
    auto* yt = static_cast<T*>(y);
    fits_int(p) ? forward<T, int>(s, p, xt, ft, yt) : forward<T, long long>(s, p, xt, ft, yt);
  });
}

void launch_depthwise_backward_data(cudaStream_t s, Type type, const ConvParams& p, const void* dy,
                                    const void* f, void* dx) {
  check_shape(p);
  if (p.n * p.h * p.w * p.c == 0) return;
  visit_floating(type, "depthwise convolution", [&]<typename T>() {
    const auto *g = static_cast<const T*>(dy), *ft = static_cast<const T*>(f);
    auto* d = static_cast<T*>(dx);
    fits_int(p) ? backward_data<T, int>(s, p, g, ft, d)
                : backward_data<T, long long>(s, p, g, ft, d);
  });
}

void launch_depthwise_backward_filter(cudaStream_t s, Type type, const ConvParams& p, const void* x,
                                      const void* dy, void* df) {
  check_shape(p);
  visit_floating(type, "depthwise convolution", [&]<typename T>() {
    const auto *xt = static_cast<const T*>(x), *g = static_cast<const T*>(dy);
    auto* d = static_cast<T*>(df);
    fits_int(p) ? backward_filter<T, int>(s, p, xt, g, d)
                : backward_filter<T, long long>(s, p, xt, g, d);
  });
}

}  // namespace lockstep::backend::cuda
