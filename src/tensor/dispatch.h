// Internal: runs a templated lambda for a tensor's runtime dtype.
//
//   visit_dtype(x.dtype(), "sum", [&]<typename T>() { ... T ... });
//
// The `Allowed` variants restrict which dtypes an op accepts and produce the
// op's dtype error.
#pragma once

#include <cstdint>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"

namespace lockstep::detail {

template <typename F>
void visit_dtype(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f.template operator()<float>();
      return;
    case DType::kInt32:
      f.template operator()<std::int32_t>();
      return;
    case DType::kInt64:
      f.template operator()<std::int64_t>();
      return;
    case DType::kUInt8:
      f.template operator()<std::uint8_t>();
      return;
    case DType::kBool:
      f.template operator()<bool>();
      return;
    case DType::kBFloat16:
      f.template operator()<bfloat16>();
      return;
    case DType::kFloat16:
      f.template operator()<float16>();
      return;
  }
  throw_error<ValueError>(op, ": dtype ", dtype, " is not supported");
}

// float32, int32, int64: the dtypes arithmetic accepts.
template <typename F>
void visit_numeric(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      f.template operator()<float>();
      return;
    case DType::kInt32:
      f.template operator()<std::int32_t>();
      return;
    case DType::kInt64:
      f.template operator()<std::int64_t>();
      return;
    default:
      break;
  }
  throw_error<ValueError>(op, ": expected a float32, int32 or int64 tensor, got dtype ", dtype);
}

// int32, int64 or uint8: the dtypes indices and labels come in.
template <typename F>
void visit_index(DType dtype, const char* op, F&& f) {
  switch (dtype) {
    case DType::kInt32:
      f.template operator()<std::int32_t>();
      return;
    case DType::kInt64:
      f.template operator()<std::int64_t>();
      return;
    case DType::kUInt8:  // labels as datasets ship them (Fashion-MNIST)
      f.template operator()<std::uint8_t>();
      return;
    default:
      break;
  }
  throw_error<ValueError>(op, ": expected int32, int64 or uint8 indices, got dtype ", dtype);
}

// float32, bfloat16 or float16.
inline void check_floating(DType dtype, const char* op, const char* what) {
  LOCKSTEP_CHECK(is_floating(dtype), op, ": expected ", what,
                 " of dtype float32, bfloat16 or float16, got ", dtype);
}

inline void check_float32(DType dtype, const char* op, const char* what) {
  LOCKSTEP_CHECK(dtype == DType::kFloat32, op, ": expected ", what, " of dtype float32, got ",
                 dtype);
}

}  // namespace lockstep::detail
