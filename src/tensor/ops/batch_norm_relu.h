// The two halves of batch_norm_relu_training (lockstep/tensor/ops.h) on raw
// NHWC buffers, [rows, channels] with channels innermost: what the op and
// its gradient rule call, and what bench/model_bench.cc's floor times for a
// batch norm that a ReLU was folded into. `top` is the ReLU's cap (infinity
// for none). Implemented in batch_norm_ops.cc.
#pragma once

#include "tensor/backend/onednn/onednn.h"

namespace lockstep::detail {

// z = min(max(γ (x − μ) / √(σ² + ε) + β, 0), top), with the batch mean μ and
// (biased) variance σ² written to mean / variance: two passes over x.
void batch_norm_relu_forward(const backend::onednn::BatchNormShape& s, const float* x,
                             const float* gamma, const float* beta, float top, float* z,
                             float* mean, float* variance);

// dx, dγ and dβ from the output gradient dz, the ReLU's mask read from z
// (0 < z < top): two passes over x, z and dz.
void batch_norm_relu_backward(const backend::onednn::BatchNormShape& s, float top, const float* x,
                              const float* z, const float* dz, const float* gamma,
                              const float* mean, const float* variance, float* dx, float* dgamma,
                              float* dbeta);

}  // namespace lockstep::detail
