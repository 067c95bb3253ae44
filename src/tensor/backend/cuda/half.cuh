// Element types in the adapter's kernels (kernels.cu, batch_norm.cu,
// depthwise.cu):
// bfloat16 and float16 as Lockstep stores them (16 bits), their conversions
// to and from float32 with the CPU's rounding, the type each element type
// computes in, and the dispatch from a Type to its C++ type. A CUDA-only
// header: .cu files include it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tensor/backend/cuda/gpu_api.h"
#include "tensor/backend/cuda/type_visit.h"

namespace lockstep::backend::cuda {

// bfloat16 storage as Lockstep's (a uint16 with float32's top bits), rounded
// to nearest even as the CPU's round_to_bf16.
struct Bf16 {
  std::uint16_t bits;
};
__device__ inline float bf16_to_float(Bf16 v) {
  return __uint_as_float(static_cast<std::uint32_t>(v.bits) << 16);
}
__device__ inline Bf16 float_to_bf16(float f) {
  const std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return Bf16{static_cast<std::uint16_t>(rounded >> 16)};
}

// float16 storage as Lockstep's (IEEE binary16 bits), converted by CUDA's
// own rules (round to nearest even, as the CPU's round_to_f16).
struct F16 {
  std::uint16_t bits;
};
__host__ __device__ inline float f16_to_float(F16 v) {
  return __half2float(__ushort_as_half(v.bits));
}
__host__ __device__ inline F16 float_to_f16(float f) {
  return F16{__half_as_ushort(__float2half_rn(f))};
}

template <typename D, typename S>
__device__ inline D convert(S v) {
  if constexpr (std::is_same_v<S, Bf16>) {
    return convert<D>(bf16_to_float(v));
  } else if constexpr (std::is_same_v<S, F16>) {
    return convert<D>(f16_to_float(v));
  } else if constexpr (std::is_same_v<D, Bf16>) {
    return float_to_bf16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, F16>) {
    return float_to_f16(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, bool>) {
    return v != S{};
  } else {
    return static_cast<D>(v);
  }
}

// The type an element type computes in: float for bfloat16 and float16 (one
// rounding per result, as the CPU's run_half_blocks), itself otherwise.
template <typename T>
struct Compute {
  using type = T;
};
template <>
struct Compute<Bf16> {
  using type = float;
};
template <>
struct Compute<F16> {
  using type = float;
};

// An element loaded as float32 (exact for every storage type here) and a
// float32 result stored as T (rounded to nearest even for the half types).
template <typename T>
__device__ inline float load(T v) {
  return convert<float>(v);
}
template <typename T>
__device__ inline T store(float v) {
  return convert<T>(v);
}

// Calls f.template operator()<T>() for a Type (type_visit.h), the half
// types as Bf16 and F16; visit_floating for float32 and the half types only.
template <typename F>
void visit(Type t, F&& f) {
  visit_type<Bf16, F16>(t, std::forward<F>(f));
}

template <typename F>
void visit_floating(Type t, const char* op, F&& f) {
  visit_floating_type<Bf16, F16>(t, op, std::forward<F>(f));
}

}  // namespace lockstep::backend::cuda
