// The oneDNN adapter: the only code in Lockstep that includes oneDNN headers
// (an upgrade of oneDNN touches this folder alone). Raw-pointer kernels with
// primitives cached per thread by shape and attributes; the op library
// (tensor/ops) checks shapes and dtypes before calling them.
#pragma once

#include <cstdint>

namespace lockstep::backend::onednn {

// C[b] = op(A[b]) · op(B[b]) (+ bias), row-major float32. Unbatched products
// run on oneDNN's sgemm, batched ones on its matmul primitive.
// A is [batch, M, K] ([batch, K, M] if transpose_a), B is [batch_b, K, N]
// ([batch_b, N, K] if transpose_b) with batch_b = batch or 1 (shared).
struct MatmulShape {
  std::int64_t batch = 1;
  std::int64_t m = 0, k = 0, n = 0;
  bool transpose_a = false;
  bool transpose_b = false;
  bool b_shared = false;  // B has batch 1 and is used for every batch entry
};
void matmul(const MatmulShape& shape, const float* a, const float* b, const float* bias, float* c);

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
