// bfloat16 operands of float ops (mixed precision, docs/models.md).
//
// An op given a bfloat16 operand widens its operands to float32 (exact),
// runs its float32 kernel, and rounds the result to bfloat16 once: what a
// native bfloat16 kernel with float32 accumulation computes, up to the
// order of its sums. The casts are recorded ops, so gradients take the same
// path back (bfloat16 upstream gradient -> float32 backward -> bfloat16),
// and no op needs a second gradient rule. On CPUs without bfloat16
// instructions this is also the only way there is (oneDNN 2.6 implements
// no bfloat16 primitive below avx512_core): it costs two conversion passes
// per op, which is why mixed_bfloat16 is slower than float32 there and says
// so (nn/mixed_precision.h).
#pragma once

#include <initializer_list>

#include "lockstep/tensor/ops.h"

namespace lockstep::detail {

inline bool any_bf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->dtype() == DType::kBFloat16) return true;
  }
  return false;
}

inline Tensor widen(const Tensor& t) {
  return t.defined() && t.dtype() == DType::kBFloat16 ? cast(t, DType::kFloat32) : t;
}

inline Tensor narrow(const Tensor& t) { return cast(t, DType::kBFloat16); }

}  // namespace lockstep::detail
