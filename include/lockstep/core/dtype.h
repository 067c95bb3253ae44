// Element types of tensors.
//
// float32 is the training type; int32/int64 carry labels and indices, uint8
// raw image bytes (and labels as datasets ship them), bool the results of
// comparisons, bfloat16 the compute type of mixed precision (Keras's
// "mixed_bfloat16" policy: docs/models.md, "Mixed precision").
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

enum class DType : std::uint8_t { kFloat32, kInt32, kInt64, kUInt8, kBool, kBFloat16 };

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
template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

}  // namespace lockstep
