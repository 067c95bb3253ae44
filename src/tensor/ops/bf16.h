// bfloat16 and float16 operands of float ops (mixed precision,
// docs/models.md): native bfloat16 kernels where the CPU has bfloat16
// instructions, emulation elsewhere; float16 is emulated on every CPU.
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
// float16 (mixed_float16) takes the emulated path everywhere, the same way.
//
// Elementwise arithmetic and batch norm need no instructions of their own:
// they run on bfloat16 and float16 data on every CPU — elementwise ops widen
// blocks into L1 buffers and round their output blocks (run_half_blocks
// below, elementwise.cc); batch norm's loops widen bfloat16 as they load and
// round as they store (batch_norm_ops.cc), and emulate float16.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>

#include "lockstep/core/error.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "tensor/backend/onednn/onednn.h"

namespace lockstep::detail {

// The reduced-precision float among `tensors` (bfloat16 or float16), or
// float32 when there is none. bfloat16 beside float16 is refused: no policy
// makes both, and an op would have to pick a rounding.
inline DType half_dtype(std::initializer_list<const Tensor*> tensors) {
  DType found = DType::kFloat32;
  for (const Tensor* t : tensors) {
    if (!t->defined() || (t->dtype() != DType::kBFloat16 && t->dtype() != DType::kFloat16))
      continue;
    LOCKSTEP_CHECK(found == DType::kFloat32 || found == t->dtype(),
                   "an op was given both bfloat16 and float16 operands; cast one of them "
                   "(mixed_bfloat16 and mixed_float16 layers do not mix)");
    found = t->dtype();
  }
  return found;
}

inline bool any_half(std::initializer_list<const Tensor*> tensors) {
  return half_dtype(tensors) != DType::kFloat32;
}

// Whether a bfloat16 op runs on native kernels on this CPU (else it is
// emulated). float16 is emulated on every CPU (oneDNN 2.6 has no float16
// primitives for the CPUs it runs on here).
inline bool native_bf16() { return backend::onednn::native_bfloat16(); }

// Whether the current device runs `op` natively on `half` operands: on an
// accelerator with kernels of its own (a GPU), what its kernels take
// (DeviceKernels::takes_half: cuBLAS's matmul in either type); elsewhere —
// a CPU, or the fake accelerator, which runs the CPU's kernels — the CPU's
// rule. The host's CPU never decides for a GPU: a GPU beside an
// avx512_bf16 host would otherwise be handed bfloat16 convolutions it has
// no kernel for.
inline bool native_half(DType half, HalfOp op) {
  if (DeviceKernels* k = current_device().kernels(); k != nullptr && !k->runs_host_kernels())
    return k->takes_half(op, half);
  return half == DType::kBFloat16 && native_bf16();
}

inline Tensor widen(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::kBFloat16 || t.dtype() == DType::kFloat16)
             ? cast(t, DType::kFloat32)
             : t;
}

// A float32 result rounded to the operands' reduced type `half`.
inline Tensor narrow(const Tensor& t, DType half) { return cast(t, half); }

// An operand of a native kernel in `half`: float32 is rounded (a recorded
// cast, so its gradient comes back in float32).
inline Tensor to_half(const Tensor& t, DType half) {
  return t.defined() && t.dtype() == DType::kFloat32 ? cast(t, half) : t;
}
inline Tensor to_bf16(const Tensor& t) { return to_half(t, DType::kBFloat16); }

inline backend::onednn::Precision precision_of(const Tensor& t) {
  return t.dtype() == DType::kBFloat16 ? backend::onednn::Precision::kBFloat16
                                       : backend::onednn::Precision::kFloat32;
}

// Vectorised conversions over n contiguous values (bf16.cc): rounding to
// nearest even (NaN kept, quiet; float16 past 65504 to infinity), widening
// exact.
void round_to_bf16(const float* x, bfloat16* y, std::int64_t n);
void widen_from_bf16(const bfloat16* x, float* y, std::int64_t n);
void round_to_f16(const float* x, float16* y, std::int64_t n);
void widen_from_f16(const float16* x, float* y, std::int64_t n);

inline void round_to(const float* x, bfloat16* y, std::int64_t n) { round_to_bf16(x, y, n); }
inline void round_to(const float* x, float16* y, std::int64_t n) { round_to_f16(x, y, n); }
inline void widen_from(const bfloat16* x, float* y, std::int64_t n) { widen_from_bf16(x, y, n); }
inline void widen_from(const float16* x, float* y, std::int64_t n) { widen_from_f16(x, y, n); }

// Runs `f.template operator()<H>()` with H the element type of a reduced
// float dtype (bfloat16 or float16).
template <typename F>
void visit_half(DType dtype, F&& f) {
  if (dtype == DType::kFloat16) {
    f.template operator()<float16>();
  } else {
    f.template operator()<bfloat16>();
  }
}

// A float32 kernel over bfloat16 or float16 data (H), in blocks that stay in
// L1: each operand's block is widened, `kernel(in, out, len)` runs on
// float32, and its output block is rounded once. One pass over memory, where
// widening the tensors, running the float32 op and narrowing its result
// would be three (and two temporary tensors).
inline constexpr std::int64_t kBf16Block = 512;
template <std::size_t N, typename H, typename Kernel>
void run_half_blocks(std::int64_t n, const std::array<const H*, N>& in, H* out, Kernel&& kernel) {
  alignas(64) float buffers[N + 1][kBf16Block];
  std::array<const float*, N> widened{};
  for (std::int64_t start = 0; start < n; start += kBf16Block) {
    const std::int64_t len = std::min(kBf16Block, n - start);
    for (std::size_t k = 0; k < N; ++k) {
      widen_from(in[k] + start, buffers[k], len);
      widened[k] = buffers[k];
    }
    kernel(widened, buffers[N], len);
    round_to(buffers[N], out + start, len);
  }
}

}  // namespace lockstep::detail
