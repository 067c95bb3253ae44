// Image ops on NHWC tensors: bilinear resizing as tf.image.resize does it
// (half-pixel centres, no antialiasing), with its gradient rule.
#include <algorithm>
#include <cmath>
#include <vector>

#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/dispatch.h"
#include "tensor/ops/loops.h"

namespace lockstep {
namespace {

// Where output row (or column) i samples the input: TensorFlow's
// compute_interpolation_weights with its HalfPixelScaler, in float as it
// computes them, so that the weights — and the results — are its own.
struct Sample {
  std::int64_t lower = 0, upper = 0;
  float lerp = 0.0f;
};

std::vector<Sample> samples(std::int64_t in, std::int64_t out) {
  const float scale = static_cast<float>(in) / static_cast<float>(out);
  std::vector<Sample> s(static_cast<std::size_t>(out));
  for (std::int64_t i = 0; i < out; ++i) {
    const float at = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float floor = std::floor(at);
    s[static_cast<std::size_t>(i)] = {
        std::max<std::int64_t>(static_cast<std::int64_t>(floor), 0),
        std::min<std::int64_t>(static_cast<std::int64_t>(std::ceil(at)), in - 1), at - floor};
  }
  return s;
}

struct ResizePlan {
  std::int64_t n, h, w, c, oh, ow;
  std::vector<Sample> ys, xs;
};

}  // namespace

Tensor resize_bilinear(const Tensor& images, std::int64_t height, std::int64_t width) {
  constexpr const char* op = "resize_bilinear";
  check_defined(images, op, "images");
  detail::check_float32(images.dtype(), op, "images");
  LOCKSTEP_CHECK_AS(ShapeError, images.rank() == 4, op,
                    ": expected images of shape [batch, height, width, channels], got ",
                    images.shape());
  LOCKSTEP_CHECK(height > 0 && width > 0, op, ": the output size must be positive, got ", height,
                 "x", width);
  const Shape& s = images.shape();
  LOCKSTEP_CHECK_AS(ShapeError, s[1] > 0 && s[2] > 0, op, ": cannot resize empty images ", s);
  auto plan = std::make_shared<const ResizePlan>(
      ResizePlan{s[0], s[1], s[2], s[3], height, width, samples(s[1], height), samples(s[2], width)});
  Tensor out = Tensor::empty({s[0], height, width, s[3]});
  const float* px = images.data<float>();
  float* po = out.data<float>();
  const ResizePlan& p = *plan;
  // One output row per item: [n · oh] rows of ow · c values.
  detail::parallel_for(p.n * p.oh, p.ow * p.c * 8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t b = row / p.oh, oy = row % p.oh;
      const Sample& y = p.ys[static_cast<std::size_t>(oy)];
      const float* top_row = px + ((b * p.h + y.lower) * p.w) * p.c;
      const float* bottom_row = px + ((b * p.h + y.upper) * p.w) * p.c;
      float* o = po + row * p.ow * p.c;
      for (std::int64_t ox = 0; ox < p.ow; ++ox) {
        const Sample& x = p.xs[static_cast<std::size_t>(ox)];
        for (std::int64_t ch = 0; ch < p.c; ++ch) {
          const float tl = top_row[x.lower * p.c + ch], tr = top_row[x.upper * p.c + ch];
          const float bl = bottom_row[x.lower * p.c + ch], br = bottom_row[x.upper * p.c + ch];
          const float top = tl + (tr - tl) * x.lerp;
          const float bottom = bl + (br - bl) * x.lerp;
          o[ox * p.c + ch] = top + (bottom - top) * y.lerp;
        }
      }
    }
  });
  if (detail::should_record({images})) {
    // Each output value's gradient goes back to its four inputs with the
    // weights it was made with; images are independent, so the scatter runs
    // in parallel over the batch.
    detail::record(op, {images}, out, [plan](const Tensor& g) {
      const ResizePlan& p = *plan;
      Tensor dx = Tensor::zeros({p.n, p.h, p.w, p.c});
      const float* pg = g.data<float>();
      float* pd = dx.data<float>();
      detail::parallel_for(p.n, p.oh * p.ow * p.c * 8, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t b = begin; b < end; ++b) {
          for (std::int64_t oy = 0; oy < p.oh; ++oy) {
            const Sample& y = p.ys[static_cast<std::size_t>(oy)];
            float* top_row = pd + ((b * p.h + y.lower) * p.w) * p.c;
            float* bottom_row = pd + ((b * p.h + y.upper) * p.w) * p.c;
            const float* gr = pg + ((b * p.oh + oy) * p.ow) * p.c;
            for (std::int64_t ox = 0; ox < p.ow; ++ox) {
              const Sample& x = p.xs[static_cast<std::size_t>(ox)];
              for (std::int64_t ch = 0; ch < p.c; ++ch) {
                const float v = gr[ox * p.c + ch];
                const float top = v * (1.0f - y.lerp), bottom = v * y.lerp;
                top_row[x.lower * p.c + ch] += top * (1.0f - x.lerp);
                top_row[x.upper * p.c + ch] += top * x.lerp;
                bottom_row[x.lower * p.c + ch] += bottom * (1.0f - x.lerp);
                bottom_row[x.upper * p.c + ch] += bottom * x.lerp;
              }
            }
          }
        }
      });
      return detail::Grads{dx};
    });
  }
  return out;
}

}  // namespace lockstep
