// The emulated CUDA adapter's element types and its kernels' shared rules:
// bfloat16 and float16 as the adapter's half.cuh stores and rounds them,
// float32 arithmetic for both (Compute), and a visit over the adapter's
// element types. The emulated adapter (emulated_gpu_api.cc) is
// src/tensor/backend/cuda/gpu_api.h implemented with host memory and host
// loops: CI has no GPU, and through it every push runs the GPU's host side
// (tensor/gpu_kernels.cc: its dtype dispatch, layouts, padded copies,
// widening, logical GPUs, staging areas) exactly as a GPU would be driven.
// What it cannot check is CUDA itself: the GPU check does.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tensor/backend/cuda/gpu_api.h"
#include "tensor/backend/cuda/type_visit.h"

namespace lockstep::backend::cuda::emulated {

struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

inline float to_float(Bf16 v) {
  const std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even; a NaN stays a (quiet) NaN — half.cuh's rule.
inline Bf16 to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
  return Bf16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// IEEE binary16 through the compiler's _Float16 (correctly rounded, as
// CUDA's __float2half_rn); widening from a table of all 65,536 values (the
// compiler's conversion is a library call here: it made the emulated
// mixed_float16 step 8x slower than bfloat16's).
inline float to_float(F16 v) {
  static const float* const table = [] {
    auto* t = new float[65536];
    for (std::uint32_t bits = 0; bits < 65536; ++bits) {
      const auto b = static_cast<std::uint16_t>(bits);
      _Float16 h;
      std::memcpy(&h, &b, 2);
      t[bits] = static_cast<float>(h);
    }
    return t;
  }();
  return table[v.bits];
}
inline F16 to_f16(float f) {
  const auto h = static_cast<_Float16>(f);
  F16 out;
  std::memcpy(&out.bits, &h, 2);
  return out;
}

template <typename D, typename S>
D convert(S v) {
  if constexpr (std::is_same_v<S, Bf16> || std::is_same_v<S, F16>) {
    return convert<D>(to_float(v));
  } else if constexpr (std::is_same_v<D, Bf16>) {
    return to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, F16>) {
    return to_f16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S{};
  } else {
    return static_cast<D>(v);
  }
}

// The type a kernel computes an element of T in.
template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<bool> {  // bool + bool as C++ promotes it (CUDA's kernel)
  using type = int;
};
template <>
struct Compute<Bf16> {
  using type = float;
};
template <>
struct Compute<F16> {
  using type = float;
};

template <typename T>
float load(T v) {
  return convert<float>(v);
}
template <typename T>
T store(float v) {
  return convert<T>(v);
}

// type_visit.h's visits with this file's half types.
template <typename F>
void visit(Type t, F&& f) {
  visit_type<Bf16, F16>(t, std::forward<F>(f));
}

template <typename F>
void visit_floating(Type t, const char* op, F&& f) {
  visit_floating_type<Bf16, F16>(t, op, std::forward<F>(f));
}

// The neural-network kernels (emulated_nn.cc), with gpu_api.h's contracts.
void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
          const float* b, float* c, std::int64_t batch, std::int64_t stride_a,
          std::int64_t stride_b, const float* bias, bool relu);
void gemm_half(Type type, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
               const void* a, const void* b, void* c, std::int64_t batch, std::int64_t stride_a,
               std::int64_t stride_b, const void* bias, bool relu);
void conv_forward(const ConvParams& p, const void* x, const void* filter, void* y);
void conv_backward_data(const ConvParams& p, const void* dy, const void* filter, void* dx);
void conv_backward_filter(const ConvParams& p, const void* x, const void* dy, void* dfilter);
void depthwise_forward(Type type, const ConvParams& p, const void* x, const void* filter, void* y);
void depthwise_backward_data(Type type, const ConvParams& p, const void* dy, const void* filter,
                             void* dx);
void depthwise_backward_filter(Type type, const ConvParams& p, const void* x, const void* dy,
                               void* dfilter);
void pool_forward(const PoolParams& p, const float* x, float* y);
void pool_backward(const PoolParams& p, const float* x, const float* y, const float* dy, float* dx);
void batch_norm(Type type, const void* x, void* y, std::int64_t rows, std::int64_t c,
                const float* gamma, const float* beta, float* mean, float* variance,
                bool batch_stats, float epsilon, float bottom, float top);
void batch_norm_backward(Type type, const void* x, const void* z, const void* dz, std::int64_t rows,
                         std::int64_t c, const float* gamma, const float* mean,
                         const float* variance, bool batch_stats, float epsilon, float bottom,
                         float top, void* dx, float* dgamma, float* dbeta);
void resize(Type type, const void* in, void* out, std::int64_t n, std::int64_t h, std::int64_t w,
            std::int64_t c, std::int64_t oh, std::int64_t ow, bool bilinear,
            const std::int64_t* y_lower, const std::int64_t* y_upper, const float* y_lerp,
            const std::int64_t* x_lower, const std::int64_t* x_upper, const float* x_lerp);
void affine_transform(const float* in, float* out, const float* transforms, std::int64_t rows,
                      std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, int fill,
                      bool bilinear, float fill_value);

}  // namespace lockstep::backend::cuda::emulated
