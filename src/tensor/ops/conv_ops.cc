// Convolution and pooling ops (NHWC) on the oneDNN kernels, in float32 or
// natively in bfloat16 (tensor/ops/bf16.h), each with its gradient rule.
// Batch normalisation is in batch_norm_ops.cc.
#include <algorithm>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"

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
  detail::check_floating(x.dtype(), op, "input");
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 4, op,
                    ": expected input of shape [batch, height, width, channels], got ", x.shape(),
                    ". Hint: add a Reshape layer (e.g. to [28, 28, 1] for grayscale images)");
}

backend::onednn::ConvShape conv_shape(const Tensor& x, const Tensor& kernel,
                                      const Conv2DOptions& o) {
  constexpr const char* op = "conv2d";
  check_nhwc(x, op);
  check_defined(kernel, op, "kernel");
  LOCKSTEP_CHECK(kernel.dtype() == x.dtype(), op, ": the input is ", x.dtype(),
                 " but the kernel is ", kernel.dtype());
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
  s.precision = detail::precision_of(x);
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
  s.precision = detail::precision_of(x);
  return s;
}

detail::ConvGeometry geometry(const backend::onednn::ConvShape& s) {
  return {.n = s.n,
          .h = s.h,
          .w = s.w,
          .c = s.c,
          .kh = s.kh,
          .kw = s.kw,
          .oc = s.oc,
          .groups = s.groups,
          .sh = s.sh,
          .sw = s.sw,
          .dh = s.dh,
          .dw = s.dw,
          .pad_t = s.pad_t,
          .pad_l = s.pad_l,
          .pad_b = s.pad_b,
          .pad_r = s.pad_r,
          .oh = s.oh,
          .ow = s.ow};
}

detail::PoolGeometry geometry(const backend::onednn::PoolShape& s) {
  return {.n = s.n,
          .h = s.h,
          .w = s.w,
          .c = s.c,
          .kh = s.kh,
          .kw = s.kw,
          .sh = s.sh,
          .sw = s.sw,
          .pad_t = s.pad_t,
          .pad_l = s.pad_l,
          .pad_b = s.pad_b,
          .pad_r = s.pad_r,
          .oh = s.oh,
          .ow = s.ow,
          .max = s.max};
}

// Records conv2d on the tape: its inputs are x, the kernel and the bias
// when there is one.
void record_conv(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Tensor& out,
                 detail::BackwardFn backward) {
  if (bias.defined()) {
    detail::record("conv2d", {x, kernel, bias}, out, std::move(backward));
  } else {
    detail::record("conv2d", {x, kernel}, out, std::move(backward));
  }
}

// conv2d on a GPU: the adapter's kernels forward and backward (bias's
// gradient: a sum over every output position), in float32 or in one half
// type (x, kernel and bias alike; the gradient rounded to it first).
Tensor conv2d_on_device(detail::DeviceKernels& k, const Tensor& x, const Tensor& kernel,
                        const Tensor& bias, const backend::onednn::ConvShape& s) {
  const detail::ConvGeometry geo = geometry(s);
  Tensor out = k.conv2d(x, kernel, bias, geo);
  const bool with_bias = bias.defined();
  const bool record =
      with_bias ? detail::should_record({x, kernel, bias}) : detail::should_record({x, kernel});
  if (!record) return out;
  auto backward = [geo, x, kernel, with_bias](const Tensor& upstream) {
    const detail::OnDevice on;
    const Tensor g = upstream.dtype() == x.dtype() ? upstream : cast(upstream, x.dtype());
    Tensor dx, dw, db;
    if (detail::needs_input_grad(0)) dx = on.kernels()->conv2d_backward_data(g, kernel, geo);
    if (detail::needs_input_grad(1)) dw = on.kernels()->conv2d_backward_kernel(x, g, geo);
    if (with_bias && detail::needs_input_grad(2)) db = sum(reshape(g, {-1, geo.oc}), {.axes = {0}});
    Grads grads{dx, dw};
    if (with_bias) grads.push_back(db);
    return grads;
  };
  record_conv(x, kernel, bias, out, std::move(backward));
  return out;
}

Tensor pool(const Tensor& x, const Pool2DOptions& o, bool max, const char* op) {
  const auto s = pool_shape(x, o, max, op);
  const detail::OnDevice on;
  if (on.kernels()) {
    const detail::PoolGeometry geo = geometry(s);
    Tensor out = on.kernels()->pool2d(x, geo);
    if (detail::should_record({x})) {
      detail::record(op, {x}, out, [x, out, geo](const Tensor& g) {
        const detail::OnDevice on_g;
        return Grads{on_g.kernels()->pool2d_backward(x, out, g, geo)};
      });
    }
    return out;
  }
  Tensor out = Tensor::empty({s.n, s.oh, s.ow, s.c}, x.dtype());
  if (out.numel() == 0) return out;
  const bool record = detail::should_record({x});
  Tensor workspace;
  if (record && max)
    workspace = Tensor::empty({static_cast<std::int64_t>(backend::onednn::pool_workspace_bytes(s))},
                              DType::kUInt8);
  backend::onednn::pool_forward(s, x.raw_data(), out.raw_data(),
                                workspace.defined() ? workspace.raw_data() : nullptr);
  if (record) {
    detail::record(op, {x}, out, [s, workspace, dtype = x.dtype()](const Tensor& g) {
      const detail::OnDevice on;  // the fake accelerator's scope
      Tensor dx = Tensor::empty({s.n, s.h, s.w, s.c}, dtype);
      const Tensor gc = g.dtype() == dtype ? g : cast(g, dtype);
      backend::onednn::pool_backward(
          s, gc.raw_data(), workspace.defined() ? workspace.raw_data() : nullptr, dx.raw_data());
      return Grads{dx};
    });
  }
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias, const Conv2DOptions& o) {
  if (const DType h = detail::half_dtype({&x, &kernel, &bias}); h != DType::kFloat32) {
    if (!detail::native_half(h, detail::HalfOp::kConv))
      return detail::narrow(conv2d(detail::widen(x), detail::widen(kernel), detail::widen(bias), o),
                            h);
    if (x.dtype() != kernel.dtype() || (bias.defined() && bias.dtype() != x.dtype()))
      return conv2d(detail::to_half(x, h), detail::to_half(kernel, h), detail::to_half(bias, h), o);
  }
  const auto s = conv_shape(x, kernel, o);
  if (bias.defined()) {
    LOCKSTEP_CHECK(bias.dtype() == x.dtype(), "conv2d: the input is ", x.dtype(),
                   " but the bias is ", bias.dtype());
    LOCKSTEP_CHECK_AS(ShapeError, bias.rank() == 1 && bias.shape()[0] == s.oc,
                      "conv2d: expected bias of shape [", s.oc, "], got ", bias.shape());
  }
  const detail::OnDevice on;
  if (on.kernels()) return conv2d_on_device(*on.kernels(), x, kernel, bias, s);
  Tensor out = Tensor::empty({s.n, s.oh, s.ow, s.oc}, x.dtype());
  if (out.numel() > 0) {
    backend::onednn::conv2d_forward(s, x.raw_data(), kernel.raw_data(),
                                    bias.defined() ? bias.raw_data() : nullptr, out.raw_data());
  }
  const bool with_bias = bias.defined();
  const bool record =
      with_bias ? detail::should_record({x, kernel, bias}) : detail::should_record({x, kernel});
  if (record) {
    // Only what the tape needs: no input gradient for the first layer, no
    // weight gradients for a frozen one (detail::needs_input_grad).
    auto backward = [s, x, kernel, with_bias](const Tensor& upstream) {
      const detail::OnDevice on;  // the fake accelerator's scope
      const Tensor g = upstream.dtype() == x.dtype() ? upstream : cast(upstream, x.dtype());
      const bool want_x = detail::needs_input_grad(0);
      const bool want_w = detail::needs_input_grad(1) || (with_bias && detail::needs_input_grad(2));
      Tensor dx, dw, db;
      if (g.numel() == 0) {
        if (want_x) dx = zeros_like(x);
        if (want_w)
          dw = zeros_like(kernel), db = with_bias ? Tensor::zeros({s.oc}, x.dtype()) : Tensor();
      } else {
        if (want_x) {
          dx = Tensor::empty(x.shape(), x.dtype());
          backend::onednn::conv2d_backward_data(s, g.raw_data(), kernel.raw_data(), dx.raw_data());
        }
        if (want_w) {
          dw = Tensor::empty(kernel.shape(), x.dtype());
          db = with_bias ? Tensor::empty({s.oc}, x.dtype()) : Tensor();
          backend::onednn::conv2d_backward_weights(s, x.raw_data(), g.raw_data(), dw.raw_data(),
                                                   with_bias ? db.raw_data() : nullptr);
        }
      }
      Grads grads{dx, dw};
      if (with_bias) grads.push_back(db);
      return grads;
    };
    record_conv(x, kernel, bias, out, std::move(backward));
  }
  return out;
}

Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                        const Conv2DOptions& o) {
  constexpr const char* op = "conv2d_transpose";
  if (const DType h = detail::half_dtype({&x, &kernel, &bias});
      h != DType::kFloat32)  // emulated: float32 in between
    return detail::narrow(
        conv2d_transpose(detail::widen(x), detail::widen(kernel), detail::widen(bias), o), h);
  check_nhwc(x, op);
  check_defined(kernel, op, "kernel");
  LOCKSTEP_CHECK_AS(ShapeError, kernel.rank() == 4 && kernel.shape()[3] == x.shape()[3], op,
                    ": expected a kernel [kh, kw, filters, ", x.shape()[3], "], got ",
                    kernel.shape());
  LOCKSTEP_CHECK(o.groups == 1 && o.padding != Padding::kExplicit, op,
                 ": takes 'valid' or 'same' padding and groups 1");
  LOCKSTEP_CHECK(
      o.strides[0] >= 1 && o.strides[1] >= 1 && o.dilation_rate[0] >= 1 && o.dilation_rate[1] >= 1,
      op, ": strides and dilation_rate must be >= 1");
  // The convolution whose input gradient this is: from [n, oh, ow, filters]
  // to x's [n, h, w, c], with Keras's output lengths
  // (keras/src/utils/conv_utils.py's deconv_output_length).
  backend::onednn::ConvShape s;
  s.n = x.shape()[0], s.c = kernel.shape()[2], s.oc = x.shape()[3];
  s.kh = kernel.shape()[0], s.kw = kernel.shape()[1];
  s.sh = o.strides[0], s.sw = o.strides[1], s.dh = o.dilation_rate[0], s.dw = o.dilation_rate[1];
  auto length = [&](std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t d) {
    const std::int64_t effective = (k - 1) * d + 1;
    return o.padding == Padding::kSame
               ? in * stride
               : in * stride + std::max<std::int64_t>(effective - stride, 0);
  };
  s.h = length(x.shape()[1], s.kh, s.sh, s.dh);
  s.w = length(x.shape()[2], s.kw, s.sw, s.dw);
  const Padded ph = spatial(s.h, s.kh, s.sh, s.dh, o.padding, op),
               pw = spatial(s.w, s.kw, s.sw, s.dw, o.padding, op);
  s.oh = ph.out, s.pad_t = ph.before, s.pad_b = ph.after;
  s.ow = pw.out, s.pad_l = pw.before, s.pad_r = pw.after;
  LOCKSTEP_CHECK(s.oh == x.shape()[1] && s.ow == x.shape()[2], op,
                 ": internal: the convolution of the output does not give the input's size");
  s.precision = detail::precision_of(x);
  const Shape out_shape{s.n, s.h, s.w, s.c};
  const detail::ConvGeometry geo = geometry(s);
  const detail::OnDevice on;
  Tensor out;
  if (detail::DeviceKernels* k = on.kernels()) {
    out = k->conv2d_backward_data(x, kernel, geo);
  } else {
    out = Tensor::empty(out_shape, x.dtype());
    if (out.numel() > 0 && x.numel() > 0) {
      backend::onednn::conv2d_backward_data(s, x.raw_data(), kernel.raw_data(), out.raw_data());
    } else if (out.numel() > 0) {
      out = Tensor::zeros(out_shape, x.dtype());
    }
  }
  if (detail::should_record({x, kernel})) {
    detail::record(op, {x, kernel}, out, [s, geo, x, kernel](const Tensor& upstream) {
      const detail::OnDevice on_g;
      const Tensor g = upstream.dtype() == x.dtype() ? upstream : cast(upstream, x.dtype());
      Tensor dx, dk;
      if (detail::DeviceKernels* k = on_g.kernels()) {
        if (detail::needs_input_grad(0)) dx = k->conv2d(g, kernel, Tensor(), geo);
        if (detail::needs_input_grad(1)) dk = k->conv2d_backward_kernel(g, x, geo);
        return Grads{dx, dk};
      }
      if (detail::needs_input_grad(0)) {
        dx = Tensor::empty(x.shape(), x.dtype());
        if (dx.numel() > 0)
          backend::onednn::conv2d_forward(s, g.raw_data(), kernel.raw_data(), nullptr,
                                          dx.raw_data());
      }
      if (detail::needs_input_grad(1)) {
        dk = Tensor::zeros(kernel.shape(), x.dtype());
        if (g.numel() > 0 && x.numel() > 0)
          backend::onednn::conv2d_backward_weights(s, g.raw_data(), x.raw_data(), dk.raw_data(),
                                                   nullptr);
      }
      return Grads{dx, dk};
    });
  }
  if (!bias.defined()) return out;
  LOCKSTEP_CHECK_AS(ShapeError, bias.rank() == 1 && bias.shape()[0] == s.c, op,
                    ": expected bias of shape [", s.c, "], got ", bias.shape());
  return add(out, bias);
}

namespace {

// bfloat16 pooling runs natively only where windows do not overlap
// (strides >= pool size, Keras's default): oneDNN 2.6's bfloat16 backward
// adds the contributions of overlapping windows in bfloat16, 1-2% off the
// float32 sum (measured by tests/autodiff/bfloat16_native_test.cc), so
// overlapping ones are emulated in float32. float16 is emulated always.
bool native_half_pool(const Tensor& x, const Pool2DOptions& o) {
  const DType h = detail::half_dtype({&x});
  if (h == DType::kFloat32) return true;
  const auto stride = [&](int i) { return o.strides[i] > 0 ? o.strides[i] : o.pool_size[i]; };
  return detail::native_half(h, detail::HalfOp::kPool) && stride(0) >= o.pool_size[0] &&
         stride(1) >= o.pool_size[1];
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2DOptions& o) {
  if (!native_half_pool(x, o)) return detail::narrow(max_pool2d(detail::widen(x), o), x.dtype());
  return pool(x, o, true, "max_pool2d");
}
Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& o) {
  if (!native_half_pool(x, o)) return detail::narrow(avg_pool2d(detail::widen(x), o), x.dtype());
  return pool(x, o, false, "avg_pool2d");
}

}  // namespace lockstep
