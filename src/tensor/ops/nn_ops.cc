// matmul (with transposes and fused bias) on oneDNN, in float32 or natively
// in bfloat16 (tensor/ops/bf16.h), with its gradient rules (softmax and
// log_softmax: softmax_ops.cc).
#include <cstring>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/relu_grad.h"

namespace lockstep {
namespace {

using detail::Grads;

Tensor matmul_impl(const Tensor& a, const Tensor& b, const Tensor* bias, const MatmulOptions& o) {
  constexpr const char* op = "matmul";
  check_defined(a, op, "a");
  check_defined(b, op, "b");
  detail::check_floating(a.dtype(), op, "a");
  LOCKSTEP_CHECK(b.dtype() == a.dtype(), op, ": a is ", a.dtype(), " but b is ", b.dtype());
  LOCKSTEP_CHECK_AS(ShapeError, a.rank() == 2 || a.rank() == 3, op,
                    ": expected a of rank 2 or 3, got shape ", a.shape());
  LOCKSTEP_CHECK_AS(ShapeError, b.rank() == 2 || (b.rank() == 3 && a.rank() == 3), op,
                    ": expected b of rank 2 (or 3 when a is batched), got b ", b.shape(),
                    " with a ", a.shape());
  backend::onednn::MatmulShape s;
  s.transpose_a = o.transpose_a;
  s.transpose_b = o.transpose_b;
  s.relu = o.relu;
  s.precision = detail::precision_of(a);
  s.batch = a.rank() == 3 ? a.shape()[0] : 1;
  s.b_shared = a.rank() == 3 && b.rank() == 2;
  const int ra = a.rank(), rb = b.rank();
  s.m = o.transpose_a ? a.shape()[ra - 1] : a.shape()[ra - 2];
  s.k = o.transpose_a ? a.shape()[ra - 2] : a.shape()[ra - 1];
  const std::int64_t kb = o.transpose_b ? b.shape()[rb - 1] : b.shape()[rb - 2];
  s.n = o.transpose_b ? b.shape()[rb - 2] : b.shape()[rb - 1];
  LOCKSTEP_CHECK_AS(ShapeError, s.k == kb, op, ": inner dimensions differ: a ", a.shape(),
                    o.transpose_a ? " (transposed)" : "", " has K = ", s.k, ", b ", b.shape(),
                    o.transpose_b ? " (transposed)" : "", " has K = ", kb);
  if (rb == 3) {
    LOCKSTEP_CHECK_AS(ShapeError, b.shape()[0] == s.batch, op, ": batch sizes differ: a ",
                      a.shape(), ", b ", b.shape());
  }
  if (bias) {
    check_defined(*bias, op, "bias");
    LOCKSTEP_CHECK(bias->dtype() == a.dtype(), op, ": a is ", a.dtype(), " but bias is ",
                   bias->dtype());
    LOCKSTEP_CHECK_AS(ShapeError, bias->rank() == 1 && bias->shape()[0] == s.n, op,
                      ": expected bias of shape [", s.n, "], got ", bias->shape());
  }
  const Shape out_shape = ra == 3 ? Shape{s.batch, s.m, s.n} : Shape{s.m, s.n};
  const detail::OnDevice on;
  if (on.kernels() && s.k > 0) return on.kernels()->matmul(a, b, bias ? *bias : Tensor(), o);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;
  if (s.k == 0) {  // an empty sum: the bias alone (oneDNN rejects zero dims)
    out = bias ? broadcast_to(*bias, out_shape).copy() : Tensor::zeros(out_shape, a.dtype());
    return o.relu ? relu(out) : out;
  }
  backend::onednn::matmul(s, a.raw_data(), b.raw_data(), bias ? bias->raw_data() : nullptr,
                          out.raw_data());
  return out;
}

// The gradient of a b shared across a batch of a (not transposed): one GEMM
// over the batch's rows, [batch · M, K]ᵀ · [batch · M, N], rather than one
// per batch entry and their sum — one float32 accumulation and, in
// bfloat16, one rounding instead of one per entry.
Tensor shared_b_grad(const Tensor& g, const Tensor& a, const MatmulOptions& o) {
  const std::int64_t k = a.shape()[2], n = g.shape()[2];
  const Tensor a2 = reshape(a, {-1, k}), g2 = reshape(g, {-1, n});
  return o.transpose_b ? matmul(g2, a2, {.transpose_a = true})   // C = A·Bᵀ: dB = gᵀ·A
                       : matmul(a2, g2, {.transpose_a = true});  // C = A·B: dB = Aᵀ·g
}

// The gradients of a·b (the derivation is in each case's comment), each only
// if the tape needs it (detail::needs_input_grad): the first layer skips the
// GEMM for the model input's gradient.
Grads matmul_grads(const Tensor& g, const Tensor& a, const Tensor& b, const MatmulOptions& o) {
  Tensor da, db;
  const bool ta = o.transpose_a, tb = o.transpose_b;
  bool want_a = detail::needs_input_grad(0), want_b = detail::needs_input_grad(1);
  if (want_b && a.rank() == 3 && b.rank() == 2 && !ta) {
    db = shared_b_grad(g, a, o);
    want_b = false;
  }
  if (!ta && !tb) {  // C = A·B: dA = g·Bᵀ, dB = Aᵀ·g
    if (want_a) da = matmul(g, b, {.transpose_b = true});
    if (want_b) db = matmul(a, g, {.transpose_a = true});
  } else if (!ta && tb) {  // C = A·Bᵀ: dA = g·B, dB = gᵀ·A
    if (want_a) da = matmul(g, b);
    if (want_b) db = matmul(g, a, {.transpose_a = true});
  } else if (ta && !tb) {  // C = Aᵀ·B: dA = B·gᵀ, dB = A·g
    if (want_a) da = matmul(b, g, {.transpose_b = true});
    if (want_b) db = matmul(a, g);
  } else {  // C = Aᵀ·Bᵀ: dA = Bᵀ·gᵀ, dB = gᵀ·Aᵀ
    if (want_a) da = matmul(b, g, {.transpose_a = true, .transpose_b = true});
    if (want_b) db = matmul(g, a, {.transpose_a = true, .transpose_b = true});
  }
  // b shared across a batch of transposed a: the sum over the batch.
  if (db.defined() && db.rank() == 3 && b.rank() == 2) db = sum(db, {.axes = {0}});
  return {da, db};
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  if (const DType h = detail::half_dtype({&a, &b}); h != DType::kFloat32) {
    if (!detail::native_half(h, detail::HalfOp::kMatmul))
      return detail::narrow(matmul(detail::widen(a), detail::widen(b), options), h);
    if (a.dtype() != b.dtype())
      return matmul(detail::to_half(a, h), detail::to_half(b, h), options);
  }
  Tensor out = matmul_impl(a, b, nullptr, options);
  if (detail::should_record({a, b})) {
    // A fused relu's mask is read from the output, kept for it alone.
    detail::record("matmul", {a, b}, out,
                   [a, b, y = options.relu ? out : Tensor(), options](const Tensor& upstream) {
                     const Tensor g =
                         options.relu ? detail::relu_grad_from_output(upstream, y) : upstream;
                     return matmul_grads(g, a, b, options);
                   });
  }
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const MatmulOptions& options) {
  if (const DType h = detail::half_dtype({&a, &b, &bias}); h != DType::kFloat32) {
    if (!detail::native_half(h, detail::HalfOp::kMatmul))
      return detail::narrow(
          matmul(detail::widen(a), detail::widen(b), detail::widen(bias), options), h);
    if (a.dtype() != b.dtype() || a.dtype() != bias.dtype())
      return matmul(detail::to_half(a, h), detail::to_half(b, h), detail::to_half(bias, h),
                    options);
  }
  Tensor out = matmul_impl(a, b, &bias, options);
  if (detail::should_record({a, b, bias})) {
    detail::record("matmul", {a, b, bias}, out,
                   [a, b, y = options.relu ? out : Tensor(), options,
                    n = bias.shape()](const Tensor& upstream) {
                     const Tensor g =
                         options.relu ? detail::relu_grad_from_output(upstream, y) : upstream;
                     Grads grads = matmul_grads(g, a, b, options);
                     grads.push_back(detail::needs_input_grad(2) ? sum_to(g, n) : Tensor());
                     return grads;
                   });
  }
  return out;
}

}  // namespace lockstep
