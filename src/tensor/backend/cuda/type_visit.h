// A visit over the CUDA adapter's element types (gpu_api.h's Type): calls
// f.template operator()<T>() with T the type's C++ type, bfloat16 and
// float16 as the caller's build defines them (half.cuh's for the kernels,
// the tests' emulated adapter its own). Plain C++, for nvcc and the host
// compiler alike.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tensor/backend/cuda/gpu_api.h"

namespace lockstep::backend::cuda {

template <typename Bf16, typename F16, typename F>
void visit_type(Type t, F&& f) {
  switch (t) {
    case Type::kFloat32:
      f.template operator()<float>();
      return;
    case Type::kInt32:
      f.template operator()<std::int32_t>();
      return;
    case Type::kInt64:
      f.template operator()<std::int64_t>();
      return;
    case Type::kUInt8:
      f.template operator()<std::uint8_t>();
      return;
    case Type::kBool:
      f.template operator()<bool>();
      return;
    case Type::kBf16:
      f.template operator()<Bf16>();
      return;
    case Type::kF16:
      f.template operator()<F16>();
      return;
  }
  throw std::runtime_error("unknown element type");
}

// The floating types only (float32, bfloat16, float16); others an error
// naming `op`.
template <typename Bf16, typename F16, typename F>
void visit_floating_type(Type t, const char* op, F&& f) {
  visit_type<Bf16, F16>(t, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) {
      f.template operator()<T>();
    } else {
      throw std::runtime_error(std::string(op) + " takes float32, bfloat16 or float16 data");
    }
  });
}

}  // namespace lockstep::backend::cuda
