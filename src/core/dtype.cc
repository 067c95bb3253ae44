// DType names and sizes.
#include "lockstep/core/dtype.h"

#include <array>
#include <utility>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 7> kDTypes = {{
    {DType::kFloat32, "float32", 4},
    {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},
    {DType::kUInt8, "uint8", 1},
    {DType::kBool, "bool", 1},
    {DType::kBFloat16, "bfloat16", 2},
    {DType::kFloat16, "float16", 2},
}};

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<std::size_t>(dtype)]; }

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType dtype_from_name(std::string_view name) {
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  detail::throw_error<ValueError>(
      "unknown dtype '", name,
      "'; valid names: float32, int32, int64, uint8, bool, bfloat16, float16");
}

bool is_floating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}
bool is_integral(DType dtype) {
  return dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8;
}

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

}  // namespace lockstep
