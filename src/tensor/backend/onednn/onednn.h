// The oneDNN adapter: the only code in Lockstep that includes oneDNN headers
// (an upgrade of oneDNN touches this folder alone). Raw-pointer kernels with
// primitives cached per thread by shape and attributes; the op library
// (tensor/ops) checks shapes and dtypes before calling them.
#pragma once

#include <cstdint>

namespace lockstep::backend::onednn {

// The element type of a kernel's operands and result: float32, or bfloat16
// with float32 accumulation inside the kernel (mixed precision). bfloat16
// kernels are oneDNN's native ones (avx512_core_bf16, AMX): the ops call them
// only where native_bfloat16() and emulate in float32 elsewhere. Data
// pointers are `void*` and point to float or lockstep::bfloat16 by it.
enum class Precision : std::uint8_t { kFloat32, kBFloat16 };

// Whether oneDNN runs bfloat16 natively here (avx512_bf16 or AMX).
bool native_bfloat16();
// Whether the CPU itself has bfloat16 instructions (CPUID: AVX512_BF16 or
// AMX-BF16), whatever oneDNN is allowed to use (ONEDNN_MAX_CPU_ISA).
bool cpu_has_bfloat16();

// The name of the implementation oneDNN picks for a bfloat16 matmul here
// (e.g. "brg:avx512_core_bf16"): what the mixed-precision header reports.
const char* bfloat16_matmul_implementation();

// C[b] = op(A[b]) · op(B[b]) (+ bias), row-major. Unbatched float32 products
// run on oneDNN's sgemm, batched ones and every bfloat16 one on its matmul
// primitive (bias in the operands' precision).
// A is [batch, M, K] ([batch, K, M] if transpose_a), B is [batch_b, K, N]
// ([batch_b, N, K] if transpose_b) with batch_b = batch or 1 (shared).
struct MatmulShape {
  std::int64_t batch = 1;
  std::int64_t m = 0, k = 0, n = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  bool b_shared = false;  // B has batch 1 and is used for every batch entry
  bool relu = false;      // C = max(C, 0), a post-op (after sgemm: one pass while C is hot)
  Precision precision = Precision::kFloat32;
  // Row strides of A, B and C in elements (0: their rows are contiguous):
  // a matrix whose rows are every T-th of a bigger one (one time step of a
  // batch-major sequence). Unbatched float32 products only.
  std::int64_t lda = 0, ldb = 0, ldc = 0;
};

void matmul(const MatmulShape& shape, const void* a, const void* b, const void* bias, void* c);

// Softmax (or log-softmax) over the middle dimension of [outer, axis, inner].
void softmax(const float* x, float* y, std::int64_t outer, std::int64_t axis, std::int64_t inner,
             bool log);

enum class Eltwise { kExp, kLog, kSqrt, kTanh, kSigmoid };
// y = f(x) over n contiguous floats (may be in place).
void eltwise(Eltwise kind, const float* x, float* y, std::int64_t n);

// oneDNN's own sgemm entry point, row-major (benchmarks compare against it).
void reference_sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                     std::int64_t k, const float* a, const float* b, float* c);

}  // namespace lockstep::backend::onednn

namespace lockstep::backend::onednn {

// 2-D convolution over channels-last (NHWC) data with Keras's kernel layout
// [kh, kw, in_channels / groups, out_channels]. Dilations are Keras's (1 =
// dense). Padding is explicit (the op computes "same" / "valid").
struct ConvShape {
  std::int64_t n = 0, h = 0, w = 0, c = 0;  // input
  std::int64_t kh = 0, kw = 0, oc = 0, groups = 1;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  std::int64_t oh = 0, ow = 0;                // output
  Precision precision = Precision::kFloat32;  // of data, kernel, bias and their gradients
};
void conv2d_forward(const ConvShape& s, const void* x, const void* w, const void* bias, void* y);
void conv2d_backward_data(const ConvShape& s, const void* dy, const void* w, void* dx);
// dbias may be null.
void conv2d_backward_weights(const ConvShape& s, const void* x, const void* dy, void* dw,
                             void* dbias);

// Max or average (padding excluded, as TensorFlow) pooling over NHWC data.
struct PoolShape {
  std::int64_t n = 0, h = 0, w = 0, c = 0;
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1;
  std::int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
  std::int64_t oh = 0, ow = 0;
  bool max = true;
  Precision precision = Precision::kFloat32;
};
// Bytes of workspace max pooling needs to run backward (0 for average).
std::size_t pool_workspace_bytes(const PoolShape& s);
// `workspace` null: inference (no backward possible for max pooling).
void pool_forward(const PoolShape& s, const void* x, void* y, void* workspace);
void pool_backward(const PoolShape& s, const void* dy, const void* workspace, void* dx);

// Batch normalisation over the last dimension of [rows, channels] data
// (rows = every position of every example; `examples` divides rows).
struct BatchNormShape {
  std::int64_t examples = 1, rows = 0, channels = 0;
  float epsilon = 1e-3f;
};
// y = gamma · (x − mean) / sqrt(variance + epsilon) + beta per channel, with
// the given statistics (the batch's in training: the op computes them).
void batchnorm_forward(const BatchNormShape& s, const float* x, const float* gamma,
                       const float* beta, const float* mean, const float* variance, float* y);
// dx, dgamma, dbeta. `batch_stats`: mean and variance were the batch's own
// (training), so dx includes their dependence on x; otherwise they were
// constants (inference, a frozen layer). oneDNN 2.6 reads beta too (it
// validates every declared argument).
void batchnorm_backward(const BatchNormShape& s, bool batch_stats, const float* x, const float* dy,
                        const float* gamma, const float* beta, const float* mean,
                        const float* variance, float* dx, float* dgamma, float* dbeta);

// Layer normalisation over the last dimension of [rows, channels] data:
// y = gamma · (x − mean_row) / sqrt(variance_row + epsilon) + beta, gamma and
// beta each optional (scale, shift). Training's forward writes each row's
// mean and (biased) variance for the backward pass.
struct LayerNormShape {
  std::int64_t rows = 0, channels = 0;
  float epsilon = 1e-3f;
  bool scale = true, shift = true;
};
void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma,
                       const float* beta, float* y, float* mean, float* variance);
// dx, and dgamma / dbeta where scale / shift.
void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* beta, const float* mean,
                        const float* variance, float* dx, float* dgamma, float* dbeta);

}  // namespace lockstep::backend::onednn
