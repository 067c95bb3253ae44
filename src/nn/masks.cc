// Keras masks: conversions and combinations (nn/masks.h).
#include "nn/masks.h"

#include "lockstep/tensor/ops.h"

namespace lockstep::nn_detail {

Tensor mask_values(const Tensor& mask, DType dtype) {
  return mask.dtype() == dtype ? mask : cast(mask, dtype);
}

Tensor as_mask(const Tensor& values) {
  if (values.dtype() == DType::kBool) return values;
  return greater(mask_values(values), Tensor::scalar(0.5f));
}

Tensor mask_or(const Tensor& a, const Tensor& b) {
  return as_mask(maximum(mask_values(a), mask_values(b)));
}

Tensor mask_and(const Tensor& a, const Tensor& b) {
  return as_mask(mask_values(a) * mask_values(b));
}

Tensor mask_any(const Tensor& mask, int axis) {
  return as_mask(max(mask_values(mask), {.axes = {axis}}));
}

}  // namespace lockstep::nn_detail
