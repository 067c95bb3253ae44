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
#include <algorithm>
#include <cstdint>
#include <string>

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

// W channels per thread: 4 (16-byte loads) when the multiplier is 1 and
// the channels come in fours, else 1.
template <int W>
struct Vec;
template <>
struct Vec<1> {
  using T = float;
  __device__ static void fma(float* acc, T a, T b) { acc[0] += a * b; }
  __device__ static T make(const float* acc) { return acc[0]; }
};
template <>
struct Vec<4> {
  using T = float4;
  __device__ static void fma(float* acc, T a, T b) {
    acc[0] += a.x * b.x;
    acc[1] += a.y * b.y;
    acc[2] += a.z * b.z;
    acc[3] += a.w * b.w;
  }
  __device__ static T make(const float* acc) { return make_float4(acc[0], acc[1], acc[2], acc[3]); }
};

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
template <typename I, int W>
__global__ void forward_kernel(const float* x, const float* f, float* y, Shape<I> s, I total) {
  using V = typename Vec<W>::T;
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
        Vec<W>::fma(acc, *reinterpret_cast<const V*>(x + ((b * s.h + ih) * s.w + iw) * s.c + ci),
                    *reinterpret_cast<const V*>(f + (i * s.kw + j) * s.oc + o));
      }
    }
    *reinterpret_cast<V*>(y + t * W) = Vec<W>::make(acc);
  }
}

// dx[b, ih, iw, c] = Σ over the taps (i, j) and outputs (r, q) that read it,
// and the multiplier's channels m: dy[b, r, q, c·mult + m] · f[i, j, 0, c·mult + m].
// kUnit: strides of 1, where every tap's output position is whole (no
// division by the stride: a quarter of the kernel's time in MobileNetV2,
// whose depthwise layers mostly have stride 1).
template <typename I, int W, bool kUnit>
__global__ void backward_data_kernel(const float* dy, const float* f, float* dx, Shape<I> s,
                                     I total) {
  using V = typename Vec<W>::T;
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
        const float* g = dy + ((b * s.oh + r) * s.ow + q) * s.oc;
        const float* k = f + (i * s.kw + j) * s.oc;
        for (I m = 0; m < s.mult; ++m) {
          const I o = ch * s.mult + m;  // W == 4 only when mult == 1
          Vec<W>::fma(acc, *reinterpret_cast<const V*>(g + o), *reinterpret_cast<const V*>(k + o));
        }
      }
    }
    *reinterpret_cast<V*>(dx + t * W) = Vec<W>::make(acc);
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

template <typename I, int kTaps>
__global__ void filter_partial_kernel(const float* x, const float* dy, float* partial, Shape<I> s,
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
      const float g = dy[p * s.oc + o];
#pragma unroll
      for (int k = 0; k < kTaps; ++k) {
        if (k >= taps) break;
        const I i = k / s.kw, j = k % s.kw;
        const I ih = r * s.sh - s.pt + i * s.dh, iw = q * s.sw - s.pl + j * s.dw;
        if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w)
          acc[k] += g * x[((b * s.h + ih) * s.w + iw) * s.c + ci];
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

template <typename I>
__global__ void filter_partial4_kernel(const float* x, const float* dy, float* partial, Shape<I> s,
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
      const float4 g = *reinterpret_cast<const float4*>(dy + p * s.oc + o);
#pragma unroll
      for (int k = 0; k < 9; ++k) {
        if (k >= taps) break;
        const I i = k / s.kw, j = k % s.kw;
        const I ih = r * s.sh - s.pt + i * s.dh, iw = q * s.sw - s.pl + j * s.dw;
        if (ih >= 0 && ih < s.h && iw >= 0 && iw < s.w) {
          const float4 v =
              *reinterpret_cast<const float4*>(x + ((b * s.h + ih) * s.w + iw) * s.c + o);
          acc[k][0] += g.x * v.x;
          acc[k][1] += g.y * v.y;
          acc[k][2] += g.z * v.z;
          acc[k][3] += g.w * v.w;
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
__global__ void filter_final_kernel(const float* partial, float* df, std::int64_t chunks,
                                    std::int64_t outputs) {
  LOCKSTEP_FOR_EACH(t, outputs) {
    double total = 0.0;
    for (std::int64_t chunk = 0; chunk < chunks; ++chunk) total += partial[chunk * outputs + t];
    df[t] = static_cast<float>(total);
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

template <typename I>
void forward(cudaStream_t st, const ConvParams& p, const float* x, const float* f, float* y) {
  const Shape<I> s = shape_of<I>(p);
  if (four_wide(p, x, f, y)) {
    const I total = s.n * s.oh * s.ow * s.oc / 4;
    forward_kernel<I, 4><<<blocks_for(total), kThreads, 0, st>>>(x, f, y, s, total);
  } else {
    const I total = s.n * s.oh * s.ow * s.oc;
    forward_kernel<I, 1><<<blocks_for(total), kThreads, 0, st>>>(x, f, y, s, total);
  }
  check_launch("depthwise convolution");
}

template <typename I>
void backward_data(cudaStream_t st, const ConvParams& p, const float* dy, const float* f,
                   float* dx) {
  const Shape<I> s = shape_of<I>(p);
  const bool unit = p.sh == 1 && p.sw == 1;
  if (four_wide(p, dy, f, dx)) {
    const I total = s.n * s.h * s.w * s.c / 4;
    if (unit) {
      backward_data_kernel<I, 4, true><<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    } else {
      backward_data_kernel<I, 4, false>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    }
  } else {
    const I total = s.n * s.h * s.w * s.c;
    if (unit) {
      backward_data_kernel<I, 1, true><<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    } else {
      backward_data_kernel<I, 1, false>
          <<<blocks_for(total), kThreads, 0, st>>>(dy, f, dx, s, total);
    }
  }
  check_launch("depthwise convolution's input gradient");
}

template <typename I, int kTaps>
void partial_sums(cudaStream_t st, const ConvParams& p, const float* x, const float* dy,
                  float* partial, std::int64_t chunks) {
  const Shape<I> s = shape_of<I>(p);
  const dim3 grid(static_cast<unsigned>(chunks),
                  static_cast<unsigned>((p.oc + kChannels - 1) / kChannels));
  filter_partial_kernel<I, kTaps>
      <<<grid, dim3(kChannels, kLanes), 0, st>>>(x, dy, partial, s, s.n * s.oh * s.ow);
}

template <typename I>
void backward_filter(cudaStream_t st, const ConvParams& p, const float* x, const float* dy,
                     float* df) {
  const std::int64_t positions = p.n * p.oh * p.ow, taps = p.kh * p.kw;
  const std::int64_t chunks = (positions + kChunk - 1) / kChunk;
  if (chunks > 0x7fffffff) throw std::runtime_error("depthwise convolution: too many positions");
  const std::int64_t outputs = taps * p.oc;
  const Scratch partial(
      st, static_cast<std::size_t>(std::max<std::int64_t>(chunks, 1) * outputs) * sizeof(float),
      "depthwise convolution's kernel gradient");
  if (chunks == 0) {
    check(cudaMemsetAsync(df, 0, static_cast<std::size_t>(outputs) * sizeof(float), st),
          "depthwise convolution's kernel gradient");
    return;
  }
  static_assert(kDepthwiseMaxTaps == 25, "one instantiation per tap bound");
  if (taps <= 9 && four_wide(p, x, dy, df)) {
    const Shape<I> s = shape_of<I>(p);
    const dim3 grid(static_cast<unsigned>(chunks),
                    static_cast<unsigned>((p.oc + kChannels - 1) / kChannels));
    filter_partial4_kernel<I><<<grid, dim3(kGroups4, kLanes4), 0, st>>>(x, dy, partial.as<float>(),
                                                                        s, s.n * s.oh * s.ow);
  } else if (taps <= 9) {
    partial_sums<I, 9>(st, p, x, dy, partial.as<float>(), chunks);
  } else {
    partial_sums<I, 25>(st, p, x, dy, partial.as<float>(), chunks);
  }
  check_launch("depthwise convolution's kernel gradient");
  filter_final_kernel<<<blocks_for(outputs), kThreads, 0, st>>>(partial.as<float>(), df, chunks,
                                                                outputs);
  check_launch("depthwise convolution's kernel gradient");
}

void check_shape(const ConvParams& p) {
  if (p.groups != p.c || p.oc % p.c != 0 || p.kh * p.kw > kDepthwiseMaxTaps)
    throw std::runtime_error("depthwise convolution: not a depthwise shape of at most " +
                             std::to_string(kDepthwiseMaxTaps) + " taps");
}

}  // namespace

void launch_depthwise_forward(cudaStream_t s, const ConvParams& p, const float* x, const float* f,
                              float* y) {
  check_shape(p);
  if (p.n * p.oh * p.ow * p.oc == 0) return;
  fits_int(p) ? forward<int>(s, p, x, f, y) : forward<long long>(s, p, x, f, y);
}

void launch_depthwise_backward_data(cudaStream_t s, const ConvParams& p, const float* dy,
                                    const float* f, float* dx) {
  check_shape(p);
  if (p.n * p.h * p.w * p.c == 0) return;
  fits_int(p) ? backward_data<int>(s, p, dy, f, dx) : backward_data<long long>(s, p, dy, f, dx);
}

void launch_depthwise_backward_filter(cudaStream_t s, const ConvParams& p, const float* x,
                                      const float* dy, float* df) {
  check_shape(p);
  fits_int(p) ? backward_filter<int>(s, p, x, dy, df) : backward_filter<long long>(s, p, x, dy, df);
}

}  // namespace lockstep::backend::cuda
