// relu's gradient from its output: dx = g where y > 0, else 0, over float32
// or bfloat16 (g is cast to y's dtype). What relu's gradient rule and
// matmul's fused relu (MatmulOptions::relu) share; in elementwise.cc.
#pragma once

#include "lockstep/tensor/tensor.h"

namespace lockstep::detail {

Tensor relu_grad_from_output(const Tensor& g, const Tensor& y);

}  // namespace lockstep::detail
