// float32 <-> bfloat16 and float16 conversion loops (bf16.h): the casts of
// mixed precision and the blocks that elementwise kernels run reduced
// floats in.
#include "tensor/ops/bf16.h"

#include <bit>
#include <cstdint>

#include "lockstep/core/simd.h"

namespace lockstep::detail {

// bfloat16::round without its branch, so the loop vectorises: round to
// nearest, ties to even; a NaN keeps its top bits and is made quiet.
LOCKSTEP_VECTOR_CLONES void round_to_bf16(const float* __restrict x, bfloat16* __restrict y,
                                          std::int64_t n) {
  auto* out = reinterpret_cast<std::uint16_t*>(y);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x[i]);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const std::uint32_t quiet = (u >> 16) | 0x40u;
    out[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  }
}

LOCKSTEP_VECTOR_CLONES void widen_from_bf16(const bfloat16* __restrict x, float* __restrict y,
                                            std::int64_t n) {
  const auto* in = reinterpret_cast<const std::uint16_t*>(x);
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = std::bit_cast<float>(static_cast<std::uint32_t>(in[i]) << 16);
}

// float16::round and float16::widen (core/dtype.h) with their branches as
// selects, so the loops vectorise; bitwise the scalar rules
// (Float16.VectorConversionsAreTheScalarRules).
LOCKSTEP_VECTOR_CLONES void round_to_f16(const float* __restrict x, float16* __restrict y,
                                         std::int64_t n) {
  auto* out = reinterpret_cast<std::uint16_t*>(y);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(x[i]);
    const std::uint32_t sign = (bits >> 16) & 0x8000u;
    const std::uint32_t u = bits & 0x7fffffffu;
    const std::uint32_t special = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    const std::uint32_t small =
        std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) + 0.5f) - 0x3f000000u;
    const std::uint32_t normal = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
    const std::uint32_t h = u >= 0x47800000u ? special : u < 0x38800000u ? small : normal;
    out[i] = static_cast<std::uint16_t>(h | sign);
  }
}

LOCKSTEP_VECTOR_CLONES void widen_from_f16(const float16* __restrict x, float* __restrict y,
                                           std::int64_t n) {
  const auto* in = reinterpret_cast<const std::uint16_t*>(x);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t sign = static_cast<std::uint32_t>(in[i] & 0x8000u) << 16;
    const std::uint32_t magnitude = in[i] & 0x7fffu;
    const std::uint32_t special = 0x7f800000u | ((magnitude & 0x3ffu) << 13);
    const std::uint32_t normal = (magnitude << 13) + 0x38000000u;
    const std::uint32_t subnormal = std::bit_cast<std::uint32_t>(
        static_cast<float>(static_cast<std::int32_t>(magnitude)) * 0x1p-24f);
    const std::uint32_t u = magnitude >= 0x7c00u   ? special
                            : magnitude >= 0x0400u ? normal
                                                   : subnormal;
    y[i] = std::bit_cast<float>(u | sign);
  }
}

}  // namespace lockstep::detail
