// Keras masks as layers make and combine them (nn/layer.h, "Keras masks"):
// [batch, steps] kBool tensors, true where a step is real. Combined
// through 0/1 floats, which every device's ops take.
#pragma once

#include "lockstep/tensor/tensor.h"

namespace lockstep::nn_detail {

// The mask as 0/1 values of `dtype`.
Tensor mask_values(const Tensor& mask, DType dtype = DType::kFloat32);
// 0/1 values (or a bool tensor) back to a mask.
Tensor as_mask(const Tensor& values);
// Elementwise, broadcasting.
Tensor mask_or(const Tensor& a, const Tensor& b);
Tensor mask_and(const Tensor& a, const Tensor& b);
// True where any element along `axis` is (the axis dropped).
Tensor mask_any(const Tensor& mask, int axis);

}  // namespace lockstep::nn_detail
