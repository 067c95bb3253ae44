// layer_normalization (ops.h): oneDNN's primitive for float32 on the host,
// forward and backward, and the same formula composed of the library's ops
// everywhere else (the reference the tests compare it with).
//
// As ten elementwise and reduction ops, each with its tape record and its
// own full-size temporaries, the two LayerNormalizations of a transformer
// encoder block (bench/workloads --workload transformer --mode mirrored)
// took a fifth of its training step on the 2-core AMD EPYC (Zen 4): 18.7 ms
// against 14.9 ms without them; as one oneDNN primitive each way, 15.5 ms
// (single runs on a shared machine; docs/benchmarks.md, "Sequences and
// attention", has the rounds against TensorFlow).
#include "lockstep/core/error.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"

namespace lockstep {
namespace {

using detail::Grads;

// The formula, composed: float32 whatever x's dtype, back to it at the end.
Tensor composed(const Tensor& x_in, const Tensor& gamma, const Tensor& beta, float epsilon) {
  const Tensor x = x_in.dtype() == DType::kFloat32 ? x_in : cast(x_in, DType::kFloat32);
  const ReduceOptions last{.axes = {-1}, .keepdims = true};
  const Tensor mu = mean(x, last);
  const Tensor variance = mean(square(x - mu), last);
  Tensor inv = Tensor::scalar(1.0f) / sqrt(variance + epsilon);
  if (gamma.defined()) inv = inv * gamma;
  Tensor shift = neg(mu) * inv;
  if (beta.defined()) shift = shift + beta;
  const Tensor y = x * inv + shift;
  return y.dtype() == x_in.dtype() ? y : cast(y, x_in.dtype());
}

}  // namespace

Tensor layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           float epsilon) {
  LOCKSTEP_CHECK(x.defined(), "layer_normalization: the input is undefined");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 1,
                    "layer_normalization: expected rank >= 1, got a scalar");
  const std::int64_t channels = x.shape()[x.rank() - 1];
  for (const Tensor* p : {&gamma, &beta}) {
    if (!p->defined()) continue;
    LOCKSTEP_CHECK_AS(ShapeError, p->shape() == Shape{channels}, "layer_normalization: expected ",
                      p == &gamma ? "gamma" : "beta", " [", channels, "], got ", p->shape());
    LOCKSTEP_CHECK(p->dtype() == DType::kFloat32,
                   "layer_normalization: ", p == &gamma ? "gamma" : "beta",
                   " must be float32, got ", dtype_name(p->dtype()));
  }
  LOCKSTEP_CHECK(epsilon >= 0.0f, "layer_normalization: epsilon must be >= 0, got ", epsilon);
  const detail::OnDevice on;
  if (on.kernels() || x.dtype() != DType::kFloat32 || x.numel() == 0)
    return composed(x, gamma, beta, epsilon);
  const backend::onednn::LayerNormShape s{.rows = x.numel() / channels,
                                          .channels = channels,
                                          .epsilon = epsilon,
                                          .scale = gamma.defined(),
                                          .shift = beta.defined()};
  const Tensor& xc = x;
  Tensor y = Tensor::empty(x.shape());
  Tensor mean = Tensor::empty({s.rows}), variance = Tensor::empty({s.rows});
  backend::onednn::layernorm_forward(s, xc.data<float>(), s.scale ? gamma.data<float>() : nullptr,
                                     s.shift ? beta.data<float>() : nullptr, y.data<float>(),
                                     mean.data<float>(), variance.data<float>());
  std::vector<Tensor> inputs{x};
  if (s.scale) inputs.push_back(gamma);
  if (s.shift) inputs.push_back(beta);
  if (detail::should_record(inputs)) {
    detail::record(
        "layer_normalization", inputs, y, [s, xc, gamma, beta, mean, variance](const Tensor& g) {
          const detail::OnDevice on;  // a device that runs host kernels: its scope
          const Tensor& gc = g;
          Tensor dx = Tensor::empty(xc.shape());
          Tensor dgamma = s.scale ? Tensor::empty({s.channels}) : Tensor();
          Tensor dbeta = s.shift ? Tensor::empty({s.channels}) : Tensor();
          backend::onednn::layernorm_backward(
              s, xc.data<float>(), gc.data<float>(), s.scale ? gamma.data<float>() : nullptr,
              s.shift ? beta.data<float>() : nullptr, mean.data<float>(), variance.data<float>(),
              dx.data<float>(), s.scale ? dgamma.data<float>() : nullptr,
              s.shift ? dbeta.data<float>() : nullptr);
          Grads grads{dx};
          if (s.scale) grads.push_back(dgamma);
          if (s.shift) grads.push_back(dbeta);
          return grads;
        });
  }
  return y;
}

}  // namespace lockstep
