// Element types of tensors.
//
// float32 is the training type; int32/int64 carry labels and indices, uint8
// raw image bytes (and labels as datasets ship them), bool the results of
// comparisons, bfloat16 and float16 the compute types of mixed precision
// (Keras's "mixed_bfloat16" and "mixed_float16" policies: docs/models.md,
// "Mixed precision").
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace lockstep {

// One bfloat16 value: the top 16 bits of a float32 (8 exponent bits, 7
// mantissa bits). From float32 it rounds to nearest, ties to even, as
// TensorFlow and oneDNN round; NaN stays a (quiet) NaN. To float32 it is
// exact.
struct bfloat16 {
  std::uint16_t bits = 0;

  bfloat16() = default;
  explicit bfloat16(float value) : bits(round(value)) {}
  operator float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

  static std::uint16_t round(float value) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
    return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
};

// One IEEE 754 half-precision value (binary16: 5 exponent bits, 10 mantissa
// bits; largest finite 65504, smallest subnormal 2^-24). From float32 it
// rounds to nearest, ties to even, as F16C's vcvtps2ph and CUDA's
// __float2half_rn: past 65504 (from 65520 on) to infinity, below 2^-14 to
// a subnormal or zero; NaN stays a quiet NaN. To float32 it is exact.
struct float16 {
  std::uint16_t bits = 0;

  float16() = default;
  explicit float16(float value) : bits(round(value)) {}
  operator float() const { return widen(bits); }

  static std::uint16_t round(float value) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    std::uint32_t h;
    if (u >= 0x47800000u) {  // 65536 or more, inf, NaN
      h = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
    } else if (u < 0x38800000u) {  // below 2^-14: a subnormal half or zero
      // Adding 0.5 puts the half's 10 mantissa bits at the bottom of the
      // float's, rounded by the float addition itself (nearest, ties even).
      h = std::bit_cast<std::uint32_t>(std::bit_cast<float>(u) + 0.5f) - 0x3f000000u;
    } else {  // normal: exponent rebased, 13 bits dropped, ties to even
      h = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;  // 0xc8000000: (15 - 127) << 23
    }
    return static_cast<std::uint16_t>(h | sign);
  }

  static float widen(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t magnitude = h & 0x7fffu;
    std::uint32_t u;
    if (magnitude >= 0x7c00u) {  // inf, NaN
      u = 0x7f800000u | ((magnitude & 0x3ffu) << 13);
    } else if (magnitude >= 0x0400u) {      // normal
      u = (magnitude << 13) + 0x38000000u;  // (127 - 15) << 23
    } else {                                // subnormal or zero: magnitude * 2^-24, exact
      u = std::bit_cast<std::uint32_t>(static_cast<float>(magnitude) * 0x1p-24f);
    }
    return std::bit_cast<float>(u | sign);
  }
};

enum class DType : std::uint8_t { kFloat32, kInt32, kInt64, kUInt8, kBool, kBFloat16, kFloat16 };

// Size of one element in bytes.
std::size_t dtype_size(DType dtype);

// The Keras/NumPy name: "float32", "int64", ...
std::string_view dtype_name(DType dtype);

// Parses a name produced by dtype_name; throws ValueError listing valid names.
DType dtype_from_name(std::string_view name);

bool is_floating(DType dtype);
bool is_integral(DType dtype);

std::ostream& operator<<(std::ostream& os, DType dtype);

// Maps a C++ element type to its DType at compile time.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kFloat32;
};
template <>
struct DTypeOf<std::int32_t> {
  static constexpr DType value = DType::kInt32;
};
template <>
struct DTypeOf<std::int64_t> {
  static constexpr DType value = DType::kInt64;
};
template <>
struct DTypeOf<std::uint8_t> {
  static constexpr DType value = DType::kUInt8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::kBFloat16;
};
template <>
struct DTypeOf<float16> {
  static constexpr DType value = DType::kFloat16;
};
template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

}  // namespace lockstep
