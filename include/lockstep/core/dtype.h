// Element types of tensors.
//
// float32 is the training type; int32/int64 carry labels and indices, uint8
// raw image bytes (and labels as datasets ship them), bool the results of
// comparisons. bfloat16 is reserved: it
// has a name and a size but no op accepts it yet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace lockstep {

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
template <typename T>
inline constexpr DType kDTypeOf = DTypeOf<T>::value;

}  // namespace lockstep
