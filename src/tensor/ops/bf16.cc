// float32 <-> bfloat16 conversion loops (bf16.h): the casts of mixed
// precision and the blocks that elementwise kernels run bfloat16 data in.
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

}  // namespace lockstep::detail
