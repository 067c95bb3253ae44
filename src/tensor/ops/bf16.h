// bfloat16 operands of float ops (mixed precision, docs/models.md): native
// kernels where the CPU has bfloat16 instructions, emulation elsewhere.
//
// Native (native_bfloat16(): oneDNN's ISA is avx512_core_bf16 or AMX):
// matmul, convolution and pooling run oneDNN's bfloat16 primitives with
// float32 accumulation, reading and writing bfloat16; an operand in float32
// is rounded to bfloat16 first. Their gradient rules call the same ops, so
// gradients flow in bfloat16 to the casts that bring them back to the
// float32 master weights.
//
// Emulated (every other CPU; oneDNN 2.6 implements no bfloat16 primitive
// below avx512_core): the op widens its operands to float32 (exact), runs
// its float32 kernel and rounds the result to bfloat16 once: what a native
// kernel computes, up to the order of its sums. The casts are recorded ops,
// so gradients take the same path back and no op needs a second gradient
// rule. It costs two conversion passes per op, which is why mixed_bfloat16
// is slower than float32 there and says so (nn/mixed_precision.h).
//
// Elementwise arithmetic and batch norm need no instructions of their own:
// they run on bfloat16 data on every CPU — elementwise ops widen blocks into
// L1 buffers and round their output blocks (run_bf16_blocks below,
// elementwise.cc), batch norm's loops widen as they load and round as they
// store (batch_norm_ops.cc).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include "lockstep/tensor/ops.h"
#include "tensor/backend/onednn/onednn.h"

namespace lockstep::detail {

inline bool any_bf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->dtype() == DType::kBFloat16) return true;
  }
  return false;
}

// Whether a bfloat16 op runs on native kernels here (else it is emulated).
inline bool native_bf16() { return backend::onednn::native_bfloat16(); }

inline Tensor widen(const Tensor& t) {
  return t.defined() && t.dtype() == DType::kBFloat16 ? cast(t, DType::kFloat32) : t;
}

inline Tensor narrow(const Tensor& t) { return cast(t, DType::kBFloat16); }

// An operand of a native bfloat16 kernel: float32 is rounded (a recorded
// cast, so its gradient comes back in float32).
inline Tensor to_bf16(const Tensor& t) {
  return t.defined() && t.dtype() == DType::kFloat32 ? cast(t, DType::kBFloat16) : t;
}

inline backend::onednn::Precision precision_of(const Tensor& t) {
  return t.dtype() == DType::kBFloat16 ? backend::onednn::Precision::kBFloat16
                                       : backend::onednn::Precision::kFloat32;
}

// Vectorised conversions over n contiguous values (bf16.cc): rounding to
// nearest even (NaN kept, quiet), widening exact.
void round_to_bf16(const float* x, bfloat16* y, std::int64_t n);
void widen_from_bf16(const bfloat16* x, float* y, std::int64_t n);

// A float32 kernel over bfloat16 data, in blocks that stay in L1: each
// operand's block is widened, `kernel(in, out, len)` runs on float32, and
// its output block is rounded once. One pass over memory, where widening
// the tensors, running the float32 op and narrowing its result would be
// three (and two temporary tensors).
inline constexpr std::int64_t kBf16Block = 512;
template <std::size_t N, typename Kernel>
void run_bf16_blocks(std::int64_t n, const std::array<const bfloat16*, N>& in, bfloat16* out,
                     Kernel&& kernel) {
  alignas(64) float buffers[N + 1][kBf16Block];
  std::array<const float*, N> widened{};
  for (std::int64_t start = 0; start < n; start += kBf16Block) {
    const std::int64_t len = std::min(kBf16Block, n - start);
    for (std::size_t k = 0; k < N; ++k) {
      widen_from_bf16(in[k] + start, buffers[k], len);
      widened[k] = buffers[k];
    }
    kernel(widened, buffers[N], len);
    round_to_bf16(buffers[N], out + start, len);
  }
}

}  // namespace lockstep::detail
