// Image resampling ops (image_ops.h): resize (bilinear, nearest) and
// affine_transform, each with its gradient rule beside it.
//
// The arithmetic is TensorFlow's, step for step, so results agree to the
// last bit where the compiler keeps the same order (this file is built
// without floating-point contraction, as TensorFlow's x86-64 kernels are):
//   - resize: tf.image.resize with half-pixel centres — for bilinear the
//     source coordinate (i + 0.5) * scale - 0.5 in float, its floor and
//     ceiling clamped to the image, and the lerp "top + (bottom - top) *
//     y_lerp" of ResizeBilinear; for nearest floor((i + 0.5) * scale)
//     clamped, as ResizeNearestNeighbor;
//   - affine_transform: ImageProjectiveTransformV3 — the projected point,
//     the fill mode's mapping of it into the image (reflect, wrap, nearest
//     clamp it; constant leaves it), then bilinear or nearest sampling in
//     which each neighbour outside the image reads fill_value.
//
// On an accelerator: the fake one runs this file's loops as device code; a
// GPU runs the forwards on its own kernels (DeviceKernels::resize and
// affine_transform, with the sampling worked out here for resize) and the
// gradients here, on the host, through explicit copies — their scatters have
// no deterministic GPU kernel yet, and augmentation layers sit before the
// model's first weights, where no gradient is asked for.
#include "lockstep/tensor/image_ops.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/parallel.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/image_sampling.h"

namespace lockstep::image {
namespace {

using detail::Grads;

// An image batch seen as [n, h, w, c] (a single image is a batch of one).
struct Dims {
  std::int64_t n, h, w, c;
};

Dims batch_dims(const Tensor& images, const char* op) {
  check_defined(images, op, "images");
  LOCKSTEP_CHECK_AS(ShapeError, images.rank() == 3 || images.rank() == 4, op,
                    ": expected images of shape [height, width, channels] or [batch, height, "
                    "width, channels], got shape ",
                    images.shape());
  const int o = images.rank() - 3;
  return {o ? images.dim(0) : 1, images.dim(o), images.dim(o + 1), images.dim(o + 2)};
}

Shape shape_like(const Tensor& images, std::int64_t h, std::int64_t w) {
  Shape s = images.shape();
  const int o = images.rank() - 3;
  s[o] = h;
  s[o + 1] = w;
  return s;
}

// ---- resize ----

struct Lerp {
  std::int64_t lower, upper;
  float lerp;
};

// ResizeBilinear's cached weights (half-pixel centres) for one axis.
std::vector<Lerp> bilinear_weights(std::int64_t out_size, std::int64_t in_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  std::vector<Lerp> w(static_cast<std::size_t>(out_size));
  for (std::int64_t i = 0; i < out_size; ++i) {
    const float in = (static_cast<float>(i) + 0.5f) * scale - 0.5f;
    const float in_f = std::floor(in);
    w[static_cast<std::size_t>(i)] = {
        std::max(static_cast<std::int64_t>(in_f), std::int64_t{0}),
        std::min(static_cast<std::int64_t>(std::ceil(in)), in_size - 1), in - in_f};
  }
  return w;
}

// ResizeNearestNeighbor's source index (half-pixel centres) for one axis.
std::vector<std::int64_t> nearest_indices(std::int64_t out_size, std::int64_t in_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(out_size));
  for (std::int64_t i = 0; i < out_size; ++i) {
    const auto at = static_cast<std::int64_t>(std::floor((static_cast<float>(i) + 0.5f) * scale));
    idx[static_cast<std::size_t>(i)] = std::max(std::int64_t{0}, std::min(at, in_size - 1));
  }
  return idx;
}

// One output row from its two source rows: x_lo / x_hi are the source
// offsets (pixel * channels) of each output column, C the channel count
// when it is known at compile time (0: `c` at run time).
template <int C, typename T>
void bilinear_row(const T* top_row, const T* bottom_row, float* o, const std::int64_t* x_lo,
                  const std::int64_t* x_hi, const float* x_lerp, std::int64_t ow, std::int64_t c,
                  float y_lerp) {
  const std::int64_t channels = C ? C : c;
  for (std::int64_t x = 0; x < ow; ++x, o += channels) {
    const T* tl = top_row + x_lo[x];
    const T* tr = top_row + x_hi[x];
    const T* bl = bottom_row + x_lo[x];
    const T* br = bottom_row + x_hi[x];
    const float xl = x_lerp[x];
    for (std::int64_t k = 0; k < channels; ++k) {
      const auto top_left = static_cast<float>(tl[k]), top_right = static_cast<float>(tr[k]);
      const auto bottom_left = static_cast<float>(bl[k]), bottom_right = static_cast<float>(br[k]);
      const float top = top_left + (top_right - top_left) * xl;
      const float bottom = bottom_left + (bottom_right - bottom_left) * xl;
      o[k] = top + (bottom - top) * y_lerp;
    }
  }
}

template <typename T>
void bilinear_forward(const T* in, float* out, const Dims& d, const std::vector<Lerp>& ys,
                      const std::vector<Lerp>& xs) {
  const auto oh = static_cast<std::int64_t>(ys.size()), ow = static_cast<std::int64_t>(xs.size());
  const std::int64_t c = d.c;
  std::vector<std::int64_t> x_lo(static_cast<std::size_t>(ow)), x_hi(x_lo.size());
  std::vector<float> x_lerp(x_lo.size());
  for (std::size_t x = 0; x < x_lo.size(); ++x) {
    x_lo[x] = xs[x].lower * c;
    x_hi[x] = xs[x].upper * c;
    x_lerp[x] = xs[x].lerp;
  }
  [[maybe_unused]] auto row_fn = c == 3   ? bilinear_row<3, T>
                                 : c == 1 ? bilinear_row<1, T>
                                 : c == 4 ? bilinear_row<4, T>
                                          : bilinear_row<0, T>;
  parallel_for(d.n * oh, ow * c * 8, [&](std::int64_t begin, std::int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t b = row / oh;
        const Lerp& y = ys[static_cast<std::size_t>(row % oh)];
        row_fn(in + (b * d.h + y.lower) * d.w * c, in + (b * d.h + y.upper) * d.w * c,
               out + row * ow * c, x_lo.data(), x_hi.data(), x_lerp.data(), ow, c, y.lerp);
      }
    } else {
      // Integer pixels: each source row converted to float once (the same
      // values the lerps would convert), then the float row function.
      const std::int64_t row_len = d.w * c;
      std::vector<float> buffer(static_cast<std::size_t>(2 * row_len));
      std::int64_t have[2] = {-1, -1};  // the source rows in buffer
      auto source = [&](int slot, std::int64_t at) {
        float* dst = buffer.data() + slot * row_len;
        if (have[slot] != at) {
          std::copy_n(in + at * row_len, row_len, dst);
          have[slot] = at;
        }
        return dst;
      };
      auto float_row = c == 3   ? bilinear_row<3, float>
                       : c == 1 ? bilinear_row<1, float>
                       : c == 4 ? bilinear_row<4, float>
                                : bilinear_row<0, float>;
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t b = row / oh;
        const Lerp& y = ys[static_cast<std::size_t>(row % oh)];
        const float* top = source(0, b * d.h + y.lower);
        const float* bottom = source(1, b * d.h + y.upper);
        float_row(top, bottom, out + row * ow * c, x_lo.data(), x_hi.data(), x_lerp.data(), ow, c,
                  y.lerp);
      }
    }
  });
}

// ResizeBilinearGrad: each output gradient goes to the four source pixels
// with the weights of the forward lerps. Images of a batch in parallel (the
// sums within one image overlap).
Tensor bilinear_backward(const Tensor& g, const Dims& d, const Shape& in_shape,
                         const std::vector<Lerp>& ys, const std::vector<Lerp>& xs) {
  Tensor grad = Tensor::zeros(in_shape);
  float* pg = grad.data<float>();
  const float* src = g.data<float>();
  const auto oh = static_cast<std::int64_t>(ys.size()), ow = static_cast<std::int64_t>(xs.size());
  const std::int64_t c = d.c;
  parallel_for(d.n, oh * ow * c * 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      for (std::int64_t y = 0; y < oh; ++y) {
        const Lerp& yl = ys[static_cast<std::size_t>(y)];
        float* top = pg + (b * d.h + yl.lower) * d.w * c;
        float* bottom = pg + (b * d.h + yl.upper) * d.w * c;
        const float* s = src + (b * oh + y) * ow * c;
        for (std::int64_t x = 0; x < ow; ++x) {
          const Lerp& xl = xs[static_cast<std::size_t>(x)];
          for (std::int64_t k = 0; k < c; ++k) {
            const float v = s[x * c + k];
            const float vt = v * (1.0f - yl.lerp), vb = v * yl.lerp;
            top[xl.lower * c + k] += vt * (1.0f - xl.lerp);
            top[xl.upper * c + k] += vt * xl.lerp;
            bottom[xl.lower * c + k] += vb * (1.0f - xl.lerp);
            bottom[xl.upper * c + k] += vb * xl.lerp;
          }
        }
      }
    }
  });
  return grad;
}

template <typename T>
void nearest_forward(const T* in, T* out, const Dims& d, const std::vector<std::int64_t>& ys,
                     const std::vector<std::int64_t>& xs) {
  const auto oh = static_cast<std::int64_t>(ys.size()), ow = static_cast<std::int64_t>(xs.size());
  for (std::int64_t b = 0; b < d.n; ++b) {
    for (std::int64_t y = 0; y < oh; ++y) {
      const T* src = in + (b * d.h + ys[static_cast<std::size_t>(y)]) * d.w * d.c;
      T* o = out + (b * oh + y) * ow * d.c;
      for (std::int64_t x = 0; x < ow; ++x) {
        std::copy_n(src + xs[static_cast<std::size_t>(x)] * d.c, d.c, o + x * d.c);
      }
    }
  }
}

Tensor nearest_backward(const Tensor& g, const Dims& d, const Shape& in_shape,
                        const std::vector<std::int64_t>& ys, const std::vector<std::int64_t>& xs) {
  Tensor grad = Tensor::zeros(in_shape);
  float* pg = grad.data<float>();
  const float* src = g.data<float>();
  const auto oh = static_cast<std::int64_t>(ys.size()), ow = static_cast<std::int64_t>(xs.size());
  for (std::int64_t b = 0; b < d.n; ++b) {
    for (std::int64_t y = 0; y < oh; ++y) {
      float* dst = pg + (b * d.h + ys[static_cast<std::size_t>(y)]) * d.w * d.c;
      const float* s = src + (b * oh + y) * ow * d.c;
      for (std::int64_t x = 0; x < ow; ++x) {
        for (std::int64_t k = 0; k < d.c; ++k)
          dst[xs[static_cast<std::size_t>(x)] * d.c + k] += s[x * d.c + k];
      }
    }
  }
  return grad;
}

// ---- affine_transform ----

using backend::Fill;
using backend::map_coordinate;

Fill parse_fill(const std::string& mode) {
  if (mode == "constant") return Fill::kConstant;
  if (mode == "reflect") return Fill::kReflect;
  if (mode == "wrap") return Fill::kWrap;
  if (mode == "nearest") return Fill::kNearest;
  detail::throw_error<ValueError>("affine_transform: unknown fill_mode '", mode,
                                  "'; expected one of constant, reflect, wrap, nearest");
}

bool parse_bilinear(const std::string& interpolation, const char* op) {
  if (interpolation == "bilinear") return true;
  if (interpolation == "nearest") return false;
  detail::throw_error<ValueError>(
      op, ": unknown interpolation '", interpolation,
      "'; Lockstep has bilinear and nearest (TensorFlow's bicubic, area, "
      "lanczos3, lanczos5, gaussian and mitchellcubic are not implemented)");
}

// Where output pixel (x, y) samples: the mapped point and its neighbours
// (-1: outside the image, where fill_value is read). Nearest uses at[0].
struct Taps {
  bool at_infinity;  // the projection is 0: the output is fill_value
  float x, y, x_floor, y_floor, x_ceil, y_ceil;
  std::int64_t at[4];  // (y_floor, x_floor), (y_floor, x_ceil), (y_ceil, x_floor), (y_ceil, x_ceil)

  // The bilinear weights of at[0..3], for the gradient (the forward keeps
  // TensorFlow's grouping of the same products).
  float weight(int i) const {
    const float wy = i < 2 ? y_ceil - y : y - y_floor;
    const float wx = i % 2 == 0 ? x_ceil - x : x - x_floor;
    return wy * wx;
  }
};

struct Sampler {
  const float* t;  // the 8 transform coefficients of this image
  std::int64_t h, w;
  Fill fill;
  bool bilinear;

  std::int64_t pixel(std::int64_t y, std::int64_t x) const {
    return (0 <= y && y < h && 0 <= x && x < w) ? y * w + x : -1;
  }

  Taps taps(std::int64_t out_y, std::int64_t out_x) const {
    Taps p{};
    const auto ox = static_cast<float>(out_x), oy = static_cast<float>(out_y);
    const float projection = t[6] * ox + t[7] * oy + 1.f;
    p.at_infinity = projection == 0;
    if (p.at_infinity) return p;
    p.x = map_coordinate((t[0] * ox + t[1] * oy + t[2]) / projection, w, fill);
    p.y = map_coordinate((t[3] * ox + t[4] * oy + t[5]) / projection, h, fill);
    if (!bilinear) {
      p.at[0] = pixel(static_cast<std::int64_t>(std::round(p.y)),
                      static_cast<std::int64_t>(std::round(p.x)));
      return p;
    }
    p.y_floor = std::floor(p.y);
    p.x_floor = std::floor(p.x);
    p.y_ceil = p.y_floor + 1;
    p.x_ceil = p.x_floor + 1;
    const auto yf = static_cast<std::int64_t>(p.y_floor), xf = static_cast<std::int64_t>(p.x_floor);
    const auto yc = static_cast<std::int64_t>(p.y_ceil), xc = static_cast<std::int64_t>(p.x_ceil);
    p.at[0] = pixel(yf, xf);
    p.at[1] = pixel(yf, xc);
    p.at[2] = pixel(yc, xf);
    p.at[3] = pixel(yc, xc);
    return p;
  }
};

void affine_forward(const float* in, float* out, const float* transforms, std::int64_t rows,
                    const Dims& d, Fill fill, bool bilinear, float fill_value) {
  parallel_for(d.n * d.h, d.w * d.c * 24, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      const std::int64_t b = row / d.h, y = row % d.h;
      const Sampler s{transforms + (rows == 1 ? 0 : b) * 8, d.h, d.w, fill, bilinear};
      const float* img = in + b * d.h * d.w * d.c;
      float* o = out + row * d.w * d.c;
      for (std::int64_t x = 0; x < d.w; ++x, o += d.c) {
        const Taps p = s.taps(y, x);
        auto read = [&](int i, std::int64_t k) {
          return p.at[i] < 0 ? fill_value : img[p.at[i] * d.c + k];
        };
        for (std::int64_t k = 0; k < d.c; ++k) {
          if (p.at_infinity) {
            o[k] = fill_value;
          } else if (!bilinear) {
            o[k] = read(0, k);
          } else {
            const float value_yfloor =
                (p.x_ceil - p.x) * read(0, k) + (p.x - p.x_floor) * read(1, k);
            const float value_yceil =
                (p.x_ceil - p.x) * read(2, k) + (p.x - p.x_floor) * read(3, k);
            o[k] = (p.y_ceil - p.y) * value_yfloor + (p.y - p.y_floor) * value_yceil;
          }
        }
      }
    }
  });
}

// Each output gradient goes to the source pixels the output read, with
// their weights (nothing to fill_value, which is a constant). Images of a
// batch in parallel (the sums within one image overlap).
Tensor affine_backward(const Tensor& g, const float* transforms, std::int64_t rows, const Dims& d,
                       const Shape& in_shape, Fill fill, bool bilinear) {
  Tensor grad = Tensor::zeros(in_shape);
  float* pg = grad.data<float>();
  const float* src = g.data<float>();
  const int taps = bilinear ? 4 : 1;
  parallel_for(d.n, d.h * d.w * d.c * 32, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t b = begin; b < end; ++b) {
      const Sampler s{transforms + (rows == 1 ? 0 : b) * 8, d.h, d.w, fill, bilinear};
      float* img = pg + b * d.h * d.w * d.c;
      for (std::int64_t y = 0; y < d.h; ++y) {
        for (std::int64_t x = 0; x < d.w; ++x) {
          const Taps p = s.taps(y, x);
          if (p.at_infinity) continue;
          const float* gv = src + ((b * d.h + y) * d.w + x) * d.c;
          for (int i = 0; i < taps; ++i) {
            if (p.at[i] < 0) continue;
            const float wt = bilinear ? p.weight(i) : 1.0f;
            float* dst = img + p.at[i] * d.c;
            for (std::int64_t k = 0; k < d.c; ++k) dst[k] += wt * gv[k];
          }
        }
      }
    }
  });
  return grad;
}

// resize's sampling as a device's kernel takes it (DeviceKernels::resize).
detail::ResizePlan plan_of(const Dims& d, const std::vector<Lerp>& ys,
                           const std::vector<Lerp>& xs) {
  detail::ResizePlan p{.n = d.n,
                       .h = d.h,
                       .w = d.w,
                       .c = d.c,
                       .oh = static_cast<std::int64_t>(ys.size()),
                       .ow = static_cast<std::int64_t>(xs.size()),
                       .bilinear = true};
  for (const Lerp& y : ys) {
    p.y_lower.push_back(y.lower);
    p.y_upper.push_back(y.upper);
    p.y_lerp.push_back(y.lerp);
  }
  for (const Lerp& x : xs) {
    p.x_lower.push_back(x.lower);
    p.x_upper.push_back(x.upper);
    p.x_lerp.push_back(x.lerp);
  }
  return p;
}
detail::ResizePlan plan_of(const Dims& d, const std::vector<std::int64_t>& ys,
                           const std::vector<std::int64_t>& xs) {
  return {.n = d.n,
          .h = d.h,
          .w = d.w,
          .c = d.c,
          .oh = static_cast<std::int64_t>(ys.size()),
          .ow = static_cast<std::int64_t>(xs.size()),
          .bilinear = false,
          .y_lower = ys,
          .x_lower = xs};
}

// A gradient rule's result for an accelerator's tensor `g`: `rule` on host
// copies of its inputs, the result copied back to g's device. Elsewhere
// (the host, or the fake accelerator, which runs these loops as device
// code) `rule` on g itself.
template <typename Rule>
Tensor gradient_on_host(const Tensor& g, Rule&& rule) {
  const detail::OnDevice on;
  if (!on.kernels()) return rule(g);
  Device& device = g.device();
  Tensor out;
  {
    DeviceScope host(host_device(), {.pin_thread = false});
    out = rule(g.cpu());
  }
  return out.copy_to(device);
}

}  // namespace

Tensor resize(const Tensor& images, std::array<std::int64_t, 2> size,
              const ResizeOptions& options) {
  const Dims d = batch_dims(images, "resize");
  const bool bilinear = parse_bilinear(options.interpolation, "resize");
  LOCKSTEP_CHECK(size[0] > 0 && size[1] > 0, "resize: size must be positive, got [", size[0], ", ",
                 size[1], "]");
  LOCKSTEP_CHECK(images.dtype() == DType::kFloat32 || images.dtype() == DType::kUInt8,
                 "resize: expected float32 or uint8 images, got ", dtype_name(images.dtype()));
  LOCKSTEP_CHECK_AS(ShapeError, d.h > 0 && d.w > 0, "resize: images of shape ", images.shape(),
                    " have no pixels");
  const Shape out_shape = shape_like(images, size[0], size[1]);
  const detail::OnDevice on;
  // One path for both methods: the forward for the images' dtype, and the
  // gradient rule (float32 images only) holding the same source indices.
  auto run = [&](const char* op, auto ys, auto xs, DType out_dtype, auto forward, auto backward) {
    Tensor out;
    if (detail::DeviceKernels* k = on.kernels()) {
      out = reshape(k->resize(images, plan_of(d, ys, xs)), out_shape.to_vector());
    } else {
      out = Tensor::empty(out_shape, out_dtype);
      if (images.dtype() == DType::kUInt8) {
        forward(images.data<std::uint8_t>(), out, ys, xs);
      } else {
        forward(images.data<float>(), out, ys, xs);
      }
    }
    if (images.dtype() == DType::kFloat32 && detail::should_record({images})) {
      detail::record(op, {images}, out,
                     [d, in_shape = images.shape(), ys = std::move(ys), xs = std::move(xs),
                      backward](const Tensor& g) {
                       return Grads{gradient_on_host(
                           g, [&](const Tensor& gh) { return backward(gh, d, in_shape, ys, xs); })};
                     });
    }
    return out;
  };
  if (bilinear) {
    return run(
        "resize_bilinear", bilinear_weights(size[0], d.h), bilinear_weights(size[1], d.w),
        DType::kFloat32,
        [&](const auto* in, Tensor& out, const auto& ys, const auto& xs) {
          bilinear_forward(in, out.data<float>(), d, ys, xs);
        },
        bilinear_backward);
  }
  return run(
      "resize_nearest", nearest_indices(size[0], d.h), nearest_indices(size[1], d.w),
      images.dtype(),
      [&](const auto* in, Tensor& out, const auto& ys, const auto& xs) {
        using T = std::remove_cvref_t<decltype(*in)>;
        nearest_forward(in, out.data<T>(), d, ys, xs);
      },
      nearest_backward);
}

Tensor affine_transform(const Tensor& images, const Tensor& transforms,
                        const AffineTransformOptions& options) {
  const Dims d = batch_dims(images, "affine_transform");
  const bool bilinear = parse_bilinear(options.interpolation, "affine_transform");
  const Fill fill = parse_fill(options.fill_mode);
  LOCKSTEP_CHECK(images.dtype() == DType::kFloat32,
                 "affine_transform: expected float32 images, got ", dtype_name(images.dtype()),
                 ". Hint: cast them with lockstep::cast(x, DType::kFloat32)");
  check_defined(transforms, "affine_transform", "transforms");
  LOCKSTEP_CHECK(transforms.dtype() == DType::kFloat32,
                 "affine_transform: expected float32 "
                 "transforms, got ",
                 dtype_name(transforms.dtype()));
  const std::int64_t rows = transforms.rank() == 1 ? 1 : transforms.dim(0);
  const bool ok = (transforms.rank() == 1 && transforms.dim(0) == 8) ||
                  (transforms.rank() == 2 && transforms.dim(1) == 8 && (rows == 1 || rows == d.n));
  LOCKSTEP_CHECK_AS(ShapeError, ok,
                    "affine_transform: expected transforms of shape [8], [1, 8] or [", d.n,
                    ", 8] (one per image), got shape ", transforms.shape());
  const detail::OnDevice on;
  Tensor out;
  if (detail::DeviceKernels* k = on.kernels()) {
    out = k->affine_transform(images, transforms,
                              {.n = d.n,
                               .h = d.h,
                               .w = d.w,
                               .c = d.c,
                               .rows = rows,
                               .fill = static_cast<int>(fill),
                               .bilinear = bilinear,
                               .fill_value = options.fill_value});
  } else {
    out = Tensor::empty(images.shape());
    affine_forward(images.data<float>(), out.data<float>(), transforms.data<float>(), rows, d, fill,
                   bilinear, options.fill_value);
  }
  if (detail::should_record({images})) {
    detail::record(
        "affine_transform", {images}, out,
        [d, rows, fill, bilinear, in_shape = images.shape(), transforms](const Tensor& g) {
          return Grads{gradient_on_host(g, [&](const Tensor& gh) {
            const Tensor t = gh.device().host_accessible() ? transforms.cpu() : transforms;
            return affine_backward(gh, t.data<float>(), rows, d, in_shape, fill, bilinear);
          })};
        });
  }
  return out;
}

}  // namespace lockstep::image
