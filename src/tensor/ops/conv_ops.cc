// Convolution, pooling and batch normalisation ops (NHWC) on the oneDNN
// kernels, each with its gradient rule; the batch statistics are our own
// float64 reduction (batch_moments).
#include <cmath>
#include <vector>

#include "lockstep/core/simd.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/loops.h"

namespace lockstep {
namespace {

using detail::Grads;

struct Padded {
  std::int64_t out, before, after;
};

// TensorFlow's output size and padding for one spatial dimension;
// `explicit_pad` is {before, after} under Padding::kExplicit.
Padded spatial(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dilation,
               Padding padding, const char* op, std::array<std::int64_t, 2> explicit_pad = {}) {
  const std::int64_t effective = (k - 1) * dilation + 1;
  if (padding == Padding::kExplicit) {
    const auto [before, after] = explicit_pad;
    LOCKSTEP_CHECK(before >= 0 && after >= 0, op, ": explicit padding must be >= 0, got {", before,
                   ", ", after, "}");
    LOCKSTEP_CHECK_AS(ShapeError, in + before + after >= effective, op, ": the window (", effective,
                      " with dilation) is larger than the padded input (", in, " + ", before, " + ",
                      after, ")");
    return {(in + before + after - effective) / stride + 1, before, after};
  }
  if (padding == Padding::kValid) {
    LOCKSTEP_CHECK_AS(ShapeError, in >= effective, op, ": the window (", effective,
                      " with dilation) is larger than the input (", in,
                      ") with 'valid' padding. Hint: use "
                      "padding 'same' or a smaller window");
    return {(in - effective) / stride + 1, 0, 0};
  }
  const std::int64_t out = (in + stride - 1) / stride;
  const std::int64_t total = std::max<std::int64_t>((out - 1) * stride + effective - in, 0);
  return {out, total / 2, total - total / 2};
}

void check_nhwc(const Tensor& x, const char* op) {
  check_defined(x, op, "input");
  detail::check_float32(x.dtype(), op, "input");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 4, op,
                    ": expected input of shape [batch, height, width, channels], got ", x.shape(),
                    ". Hint: add a Reshape layer (e.g. to [28, 28, 1] for grayscale images)");
}

backend::onednn::ConvShape conv_shape(const Tensor& x, const Tensor& kernel,
                                      const Conv2DOptions& o) {
  constexpr const char* op = "conv2d";
  check_nhwc(x, op);
  check_defined(kernel, op, "kernel");
  detail::check_float32(kernel.dtype(), op, "kernel");
  LOCKSTEP_CHECK_AS(ShapeError, kernel.rank() == 4, op,
                    ": expected a kernel [kh, kw, in / groups, out], got ", kernel.shape());
  LOCKSTEP_CHECK(o.groups >= 1 && o.strides[0] >= 1 && o.strides[1] >= 1 &&
                     o.dilation_rate[0] >= 1 && o.dilation_rate[1] >= 1,
                 op, ": strides, dilation_rate and groups must be >= 1");
  backend::onednn::ConvShape s;
  s.n = x.shape()[0], s.h = x.shape()[1], s.w = x.shape()[2], s.c = x.shape()[3];
  s.kh = kernel.shape()[0], s.kw = kernel.shape()[1], s.oc = kernel.shape()[3], s.groups = o.groups;
  LOCKSTEP_CHECK_AS(
      ShapeError,
      s.c % s.groups == 0 && s.oc % s.groups == 0 && kernel.shape()[2] == s.c / s.groups, op,
      ": input channels ", s.c, " and kernel ", kernel.shape(), " do not fit groups = ", s.groups,
      " (expected kernel [kh, kw, ", s.c / std::max<std::int64_t>(s.groups, 1),
      ", out] with in and out "
      "divisible by groups)");
  s.sh = o.strides[0], s.sw = o.strides[1], s.dh = o.dilation_rate[0], s.dw = o.dilation_rate[1];
  const Padded ph = spatial(s.h, s.kh, s.sh, s.dh, o.padding, op, o.explicit_padding[0]),
               pw = spatial(s.w, s.kw, s.sw, s.dw, o.padding, op, o.explicit_padding[1]);
  s.oh = ph.out, s.pad_t = ph.before, s.pad_b = ph.after;
  s.ow = pw.out, s.pad_l = pw.before, s.pad_r = pw.after;
  return s;
}

backend::onednn::PoolShape pool_shape(const Tensor& x, const Pool2DOptions& o, bool max,
                                      const char* op) {
  check_nhwc(x, op);
  backend::onednn::PoolShape s;
  s.n = x.shape()[0], s.h = x.shape()[1], s.w = x.shape()[2], s.c = x.shape()[3];
  s.kh = o.pool_size[0], s.kw = o.pool_size[1];
  s.sh = o.strides[0] > 0 ? o.strides[0] : s.kh;
  s.sw = o.strides[1] > 0 ? o.strides[1] : s.kw;
  LOCKSTEP_CHECK(s.kh >= 1 && s.kw >= 1, op, ": pool_size must be >= 1");
  LOCKSTEP_CHECK(o.padding != Padding::kExplicit, op,
                 ": explicit padding is for convolutions; pooling takes 'valid' or 'same'");
  const Padded ph = spatial(s.h, s.kh, s.sh, 1, o.padding, op),
               pw = spatial(s.w, s.kw, s.sw, 1, o.padding, op);
  s.oh = ph.out, s.pad_t = ph.before, s.pad_b = ph.after;
  s.ow = pw.out, s.pad_l = pw.before, s.pad_r = pw.after;
  s.max = max;
  return s;
}

Tensor pool(const Tensor& x, const Pool2DOptions& o, bool max, const char* op) {
  const auto s = pool_shape(x, o, max, op);
  Tensor out = Tensor::empty({s.n, s.oh, s.ow, s.c});
  if (out.numel() == 0) return out;
  const bool record = detail::should_record({x});
  Tensor workspace;
  if (record && max)
    workspace = Tensor::empty({static_cast<std::int64_t>(backend::onednn::pool_workspace_bytes(s))},
                              DType::kUInt8);
  backend::onednn::pool_forward(s, x.data<float>(), out.data<float>(),
                                workspace.defined() ? workspace.raw_data() : nullptr);
  if (record) {
    detail::record(op, {x}, out, [s, workspace](const Tensor& g) {
      Tensor dx = Tensor::empty({s.n, s.h, s.w, s.c});
      const Tensor gc = g;
      backend::onednn::pool_backward(s, gc.data<float>(),
                                     workspace.defined() ? workspace.raw_data() : nullptr,
                                     dx.data<float>());
      return Grads{dx};
    });
  }
  return out;
}

void check_bn(const Tensor& x, const Tensor& gamma, const Tensor& beta, const char* op) {
  check_defined(x, op, "input");
  detail::check_float32(x.dtype(), op, "input");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 2, op, ": expected input of rank >= 2, got ",
                    x.shape());
  const std::int64_t c = x.shape()[x.rank() - 1];
  for (const Tensor* t : {&gamma, &beta}) {
    check_defined(*t, op, "gamma/beta");
    LOCKSTEP_CHECK_AS(ShapeError, t->rank() == 1 && t->shape()[0] == c, op,
                      ": expected gamma and beta of shape [", c, "], got ", t->shape());
  }
}

backend::onednn::BatchNormShape bn_shape(const Tensor& x, float epsilon) {
  const std::int64_t c = x.shape()[x.rank() - 1];
  return {.examples = std::max<std::int64_t>(x.shape()[0], 1),
          .rows = x.numel() / std::max<std::int64_t>(c, 1),
          .channels = c,
          .epsilon = epsilon};
}

// Sums of x and x² over rows [begin, end) of [rows, c] into sum / squares
// (float64: float32 sums of ~10^5 values lose ~10^-4 of the variance, which
// 52 layers of MobileNetV2 in training mode amplify past Keras's outputs;
// see BatchNormTraining in the tests).
LOCKSTEP_VECTOR_CLONES void accumulate_moments(const float* __restrict x, std::int64_t begin,
                                               std::int64_t end, std::int64_t c,
                                               double* __restrict sum, double* __restrict squares) {
  for (std::int64_t r = begin; r < end; ++r) {
    const float* row = x + r * c;
    for (std::int64_t j = 0; j < c; ++j) {
      const double v = row[j];
      sum[j] += v;
      squares[j] += v * v;
    }
  }
}

// The batch mean and (biased, as Keras 3's moments) variance of each
// channel of [rows, c]: one pass over x. Blocks of rows are fixed by the
// row count, not the thread count, and added in order, so the statistics
// are the same bits under any number of threads.
void batch_moments(const float* x, std::int64_t rows, std::int64_t c, float* mean,
                   float* variance) {
  constexpr std::int64_t kBlocks = 32;
  const std::int64_t blocks = std::min(kBlocks, rows);
  std::vector<double> partial(static_cast<std::size_t>(blocks * 2 * c), 0.0);
  detail::parallel_for(blocks, rows / blocks * c * 2, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      double* sum = partial.data() + b * 2 * c;
      accumulate_moments(x, rows * b / blocks, rows * (b + 1) / blocks, c, sum, sum + c);
    }
  });
  const double n = static_cast<double>(rows);
  for (std::int64_t j = 0; j < c; ++j) {
    double sum = 0, squares = 0;
    for (std::int64_t b = 0; b < blocks; ++b) {
      sum += partial[static_cast<std::size_t>(b * 2 * c + j)];
      squares += partial[static_cast<std::size_t>(b * 2 * c + c + j)];
    }
    const double m = sum / n;
    mean[j] = static_cast<float>(m);
    // E[x²] − m² in float64: exact enough unless |mean| / stddev > ~10^6.
    variance[j] = static_cast<float>(std::max(squares / n - m * m, 0.0));
  }
}

Grads bn_backward(const backend::onednn::BatchNormShape& s, bool batch_stats, const Tensor& x,
                  const Tensor& g, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                  const Tensor& variance) {
  Tensor dx = Tensor::empty(x.shape()), dgamma = Tensor::empty({s.channels}),
         dbeta = Tensor::empty({s.channels});
  backend::onednn::batchnorm_backward(s, batch_stats, x.data<float>(), g.data<float>(),
                                      gamma.data<float>(), beta.data<float>(), mean.data<float>(),
                                      variance.data<float>(), dx.data<float>(),
                                      dgamma.data<float>(), dbeta.data<float>());
  return {dx, dgamma, dbeta};
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2DOptions& o) {
  if (detail::any_bf16({&x, &kernel, &bias}))
    return detail::narrow(conv2d(detail::widen(x), detail::widen(kernel), detail::widen(bias), o));
  const auto s = conv_shape(x, kernel, o);
  if (bias.defined()) {
    detail::check_float32(bias.dtype(), "conv2d", "bias");
    LOCKSTEP_CHECK_AS(ShapeError, bias.rank() == 1 && bias.shape()[0] == s.oc,
                      "conv2d: expected bias of shape [", s.oc, "], got ", bias.shape());
  }
  Tensor out = Tensor::empty({s.n, s.oh, s.ow, s.oc});
  if (out.numel() > 0) {
    backend::onednn::conv2d_forward(s, x.data<float>(), kernel.data<float>(),
                                    bias.defined() ? bias.data<float>() : nullptr,
                                    out.data<float>());
  }
  const bool with_bias = bias.defined();
  const bool record =
      with_bias ? detail::should_record({x, kernel, bias}) : detail::should_record({x, kernel});
  if (record) {
    // Only what the tape needs: no input gradient for the first layer, no
    // weight gradients for a frozen one (detail::needs_input_grad).
    auto backward = [s, x, kernel, with_bias](const Tensor& g) {
      const bool want_x = detail::needs_input_grad(0);
      const bool want_w = detail::needs_input_grad(1) || (with_bias && detail::needs_input_grad(2));
      Tensor dx, dw, db;
      if (g.numel() == 0) {
        if (want_x) dx = zeros_like(x);
        if (want_w) dw = zeros_like(kernel), db = with_bias ? Tensor::zeros({s.oc}) : Tensor();
      } else {
        if (want_x) {
          dx = Tensor::empty(x.shape());
          backend::onednn::conv2d_backward_data(s, g.data<float>(), kernel.data<float>(),
                                                dx.data<float>());
        }
        if (want_w) {
          dw = Tensor::empty(kernel.shape());
          db = with_bias ? Tensor::empty({s.oc}) : Tensor();
          backend::onednn::conv2d_backward_weights(s, x.data<float>(), g.data<float>(),
                                                   dw.data<float>(),
                                                   with_bias ? db.data<float>() : nullptr);
        }
      }
      Grads grads{dx, dw};
      if (with_bias) grads.push_back(db);
      return grads;
    };
    if (with_bias) {
      detail::record("conv2d", {x, kernel, bias}, out, backward);
    } else {
      detail::record("conv2d", {x, kernel}, out, backward);
    }
  }
  return out;
}

Tensor max_pool2d(const Tensor& x, const Pool2DOptions& o) {
  if (detail::any_bf16({&x})) return detail::narrow(max_pool2d(detail::widen(x), o));
  return pool(x, o, true, "max_pool2d");
}
Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& o) {
  if (detail::any_bf16({&x})) return detail::narrow(avg_pool2d(detail::widen(x), o));
  return pool(x, o, false, "avg_pool2d");
}

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  const auto s = bn_shape(x, epsilon);
  LOCKSTEP_CHECK(s.rows > 0,
                 "batch_norm: cannot compute batch statistics of an empty batch (shape ", x.shape(),
                 ")");
  BatchNormResult r{Tensor::empty(x.shape()), Tensor::empty({s.channels}),
                    Tensor::empty({s.channels})};
  batch_moments(x.data<float>(), s.rows, s.channels, r.mean.data<float>(),
                r.variance.data<float>());
  backend::onednn::batchnorm_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(),
                                     r.mean.data<float>(), r.variance.data<float>(),
                                     r.y.data<float>());
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm", {x, gamma, beta}, r.y,
                   [s, x, gamma, beta, mean = r.mean, var = r.variance](const Tensor& g) {
                     return bn_backward(s, true, x, g, gamma, beta, mean, var);
                   });
  }
  return r;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& mean, const Tensor& variance, float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  for (const Tensor* t : {&mean, &variance}) {
    check_defined(*t, "batch_norm", "mean/variance");
    detail::check_float32(t->dtype(), "batch_norm", "mean/variance");
    LOCKSTEP_CHECK_AS(ShapeError, t->rank() == 1 && t->shape()[0] == gamma.shape()[0],
                      "batch_norm: expected mean and variance of shape [", gamma.shape()[0],
                      "], got ", t->shape());
  }
  Tensor y = Tensor::empty(x.shape());
  if (x.numel() == 0) return y;
  const auto s = bn_shape(x, epsilon);
  backend::onednn::batchnorm_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(),
                                     mean.data<float>(), variance.data<float>(), y.data<float>());
  // A frozen layer still passes gradients to its input (fine-tuning), and
  // to gamma and beta; the statistics are constants.
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm_inference", {x, gamma, beta}, y,
                   [s, x, gamma, beta, mean, variance](const Tensor& g) {
                     return bn_backward(s, false, x, g, gamma, beta, mean, variance);
                   });
  }
  return y;
}

}  // namespace lockstep
