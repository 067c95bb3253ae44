// Convolution, pooling and batch normalisation ops (NHWC) on the oneDNN
// kernels, each with its gradient rule.
#include <cmath>

#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"

namespace lockstep {
namespace {

using detail::Grads;

struct Padded {
  std::int64_t out, before, after;
};

// TensorFlow's output size and padding for one spatial dimension.
Padded spatial(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t dilation,
               Padding padding, const char* op) {
  const std::int64_t effective = (k - 1) * dilation + 1;
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
  const Padded ph = spatial(s.h, s.kh, s.sh, s.dh, o.padding, op),
               pw = spatial(s.w, s.kw, s.sw, s.dw, o.padding, op);
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

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2DOptions& o) {
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
  return pool(x, o, true, "max_pool2d");
}
Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& o) {
  return pool(x, o, false, "avg_pool2d");
}

BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  const std::int64_t c = x.shape()[x.rank() - 1];
  const backend::onednn::BatchNormShape s{.examples = x.shape()[0],
                                          .rows = x.numel() / std::max<std::int64_t>(c, 1),
                                          .channels = c,
                                          .epsilon = epsilon};
  LOCKSTEP_CHECK(s.rows > 0,
                 "batch_norm: cannot compute batch statistics of an empty batch (shape ", x.shape(),
                 ")");
  BatchNormResult r{Tensor::empty(x.shape()), Tensor::empty({c}), Tensor::empty({c})};
  backend::onednn::batchnorm_forward(s, x.data<float>(), gamma.data<float>(), beta.data<float>(),
                                     r.y.data<float>(), r.mean.data<float>(),
                                     r.variance.data<float>(), true);
  if (detail::should_record({x, gamma, beta})) {
    detail::record("batch_norm", {x, gamma, beta}, r.y,
                   [s, x, gamma, beta, mean = r.mean, var = r.variance](const Tensor& g) {
                     Tensor dx = Tensor::empty(x.shape()), dgamma = Tensor::empty({s.channels}),
                            dbeta = Tensor::empty({s.channels});
                     backend::onednn::batchnorm_backward(
                         s, x.data<float>(), g.data<float>(), gamma.data<float>(),
                         beta.data<float>(), mean.data<float>(), var.data<float>(),
                         dx.data<float>(), dgamma.data<float>(), dbeta.data<float>());
                     return Grads{dx, dgamma, dbeta};
                   });
  }
  return r;
}

Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& mean, const Tensor& variance, float epsilon) {
  check_bn(x, gamma, beta, "batch_norm");
  // An affine map per channel, composed from differentiable ops so that a
  // frozen layer still passes gradients to its input (fine-tuning).
  const Tensor scale = div(gamma, sqrt(add(variance, Tensor::scalar(epsilon))));
  return add(mul(sub(x, mean), scale), beta);
}

}  // namespace lockstep
