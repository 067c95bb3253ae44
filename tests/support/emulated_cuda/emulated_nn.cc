// The emulated CUDA adapter's neural-network kernels (emulated.h): what
// cuBLAS, cuDNN and the adapter's batch_norm.cu, depthwise.cu and image.cu
// compute, as plain loops over host memory with gpu_api.h's layouts — NHWC
// data, cuDNN's [oc, kh, kw, c / groups] filters with symmetric padding,
// Keras's HWIO depthwise filters with TensorFlow's top and left padding.
// Products and convolutions sum in float64 and round once (a test oracle:
// the libraries' orders differ, and the tests compare within tolerances);
// half types are widened as loaded and rounded once as stored, as on the
// GPU. batch_norm and resize follow their .cu expressions; affine_transform
// is image_sampling.h's affine_value, the GPU kernel's own.
#include <cmath>
#include <vector>

#include "emulated.h"
#include "tensor/backend/image_sampling.h"

namespace lockstep::backend::cuda::emulated {
namespace {

// A float32 product [batch, m, n] of op(a)·op(b) in float64 sums.
template <typename T>
void product(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const T* a,
             const T* b, float* c, std::int64_t batch, std::int64_t stride_a,
             std::int64_t stride_b) {
  for (std::int64_t e = 0; e < batch; ++e) {
    const T* ae = a + e * stride_a;
    const T* be = b + e * stride_b;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (std::int64_t q = 0; q < k; ++q) {
          const float av = load(ta ? ae[q * m + i] : ae[i * k + q]);
          const float bv = load(tb ? be[j * k + q] : be[q * n + j]);
          acc += static_cast<double>(av) * bv;
        }
        c[(e * m + i) * n + j] = static_cast<float>(acc);
      }
    }
  }
}

template <typename T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

std::vector<double> zeros(std::int64_t n) {
  return std::vector<double>(static_cast<std::size_t>(n));
}

template <typename T>
void round_into(const std::vector<double>& acc, void* out) {
  for (std::size_t i = 0; i < acc.size(); ++i)
    static_cast<T*>(out)[i] = store<T>(static_cast<float>(acc[i]));
}

// Every tap of a convolution: f(x index, filter index, y index) for each
// output element, each window position inside the input (symmetric padding
// pad_h / pad_w, or TensorFlow's top and left for a depthwise one: the
// bottom and right follow from oh, ow) and each input channel of its group.
// Depthwise: output channel o reads input channel o / (oc / c), Keras's
// [kh, kw, 1, oc] filter; else cuDNN's [oc, kh, kw, c / groups].
template <typename F>
void for_each_tap(const ConvParams& p, bool depthwise, F&& f) {
  const std::int64_t cg = depthwise ? 1 : p.c / p.groups;
  const std::int64_t og = depthwise ? p.oc / p.c : p.oc / p.groups;
  for (std::int64_t b = 0; b < p.n; ++b)
    for (std::int64_t oy = 0; oy < p.oh; ++oy)
      for (std::int64_t ox = 0; ox < p.ow; ++ox)
        for (std::int64_t o = 0; o < p.oc; ++o) {
          const std::int64_t y_at = ((b * p.oh + oy) * p.ow + ox) * p.oc + o;
          for (std::int64_t ky = 0; ky < p.kh; ++ky) {
            const std::int64_t iy = oy * p.sh - p.pad_h + ky * p.dh;
            if (iy < 0 || iy >= p.h) continue;
            for (std::int64_t kx = 0; kx < p.kw; ++kx) {
              const std::int64_t ix = ox * p.sw - p.pad_w + kx * p.dw;
              if (ix < 0 || ix >= p.w) continue;
              for (std::int64_t ci = 0; ci < cg; ++ci) {
                const std::int64_t x_at = ((b * p.h + iy) * p.w + ix) * p.c + o / og * cg + ci;
                const std::int64_t f_at = depthwise ? (ky * p.kw + kx) * p.oc + o
                                                    : ((o * p.kh + ky) * p.kw + kx) * cg + ci;
                f(x_at, f_at, y_at);
              }
            }
          }
        }
}

// A convolution's forward (x, filter → y), input gradient (dy, filter →
// dx) or filter gradient (x, dy → dfilter), summed in float64 and rounded
// once to `type`.
enum class Pass { kForward, kData, kFilter };

void convolve(Type type, const ConvParams& p, bool depthwise, Pass pass, const void* first,
              const void* second, void* out, const char* op) {
  visit_floating(type, op, [&]<typename T>() {
    const T* a = as<T>(first);
    const T* b = as<T>(second);
    const std::int64_t filter_size =
        depthwise ? p.kh * p.kw * p.oc : p.oc * p.kh * p.kw * (p.c / p.groups);
    std::vector<double> acc = zeros(pass == Pass::kForward ? p.n * p.oh * p.ow * p.oc
                                    : pass == Pass::kData  ? p.n * p.h * p.w * p.c
                                                           : filter_size);
    for_each_tap(p, depthwise, [&](std::int64_t x_at, std::int64_t f_at, std::int64_t y_at) {
      if (pass == Pass::kForward) {
        acc[static_cast<std::size_t>(y_at)] += static_cast<double>(load(a[x_at])) * load(b[f_at]);
      } else if (pass == Pass::kData) {
        acc[static_cast<std::size_t>(x_at)] += static_cast<double>(load(a[y_at])) * load(b[f_at]);
      } else {
        acc[static_cast<std::size_t>(f_at)] += static_cast<double>(load(a[x_at])) * load(b[y_at]);
      }
    });
    round_into<T>(acc, out);
  });
}

}  // namespace

void gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
          const float* b, float* c, std::int64_t batch, std::int64_t stride_a,
          std::int64_t stride_b, const float* bias, bool relu) {
  product(ta, tb, m, n, k, a, b, c, batch, stride_a, stride_b);
  for (std::int64_t i = 0; i < batch * m * n; ++i) {
    float v = c[i];
    if (bias) v += bias[i % n];
    if (relu) v = v > 0.0f ? v : 0.0f;
    c[i] = v;
  }
}

void gemm_half(Type type, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
               const void* a, const void* b, void* c, std::int64_t batch, std::int64_t stride_a,
               std::int64_t stride_b, const void* bias, bool relu) {
  if (type != Type::kBf16 && type != Type::kF16)
    throw std::runtime_error("gemm_half takes bfloat16 or float16 operands");
  visit(type, [&]<typename T>() {
    if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) {
      std::vector<float> prod(static_cast<std::size_t>(batch * m * n));
      product(ta, tb, m, n, k, as<T>(a), as<T>(b), prod.data(), batch, stride_a, stride_b);
      for (std::int64_t i = 0; i < batch * m * n; ++i) {
        float v = prod[static_cast<std::size_t>(i)];
        if (bias) v += load(as<T>(bias)[i % n]);
        if (relu) v = v > 0.0f ? v : 0.0f;
        static_cast<T*>(c)[i] = store<T>(v);
      }
    }
  });
}

void conv_forward(const ConvParams& p, const void* x, const void* filter, void* y) {
  convolve(p.type, p, false, Pass::kForward, x, filter, y, "the convolution");
}
void conv_backward_data(const ConvParams& p, const void* dy, const void* filter, void* dx) {
  convolve(p.type, p, false, Pass::kData, dy, filter, dx, "the convolution's input gradient");
}
void conv_backward_filter(const ConvParams& p, const void* x, const void* dy, void* dfilter) {
  convolve(p.type, p, false, Pass::kFilter, x, dy, dfilter, "the convolution's filter gradient");
}
void depthwise_forward(Type type, const ConvParams& p, const void* x, const void* filter, void* y) {
  convolve(type, p, true, Pass::kForward, x, filter, y, "the depthwise convolution");
}
void depthwise_backward_data(Type type, const ConvParams& p, const void* dy, const void* filter,
                             void* dx) {
  convolve(type, p, true, Pass::kData, dy, filter, dx,
           "the depthwise convolution's input gradient");
}
void depthwise_backward_filter(Type type, const ConvParams& p, const void* x, const void* dy,
                               void* dfilter) {
  convolve(type, p, true, Pass::kFilter, x, dy, dfilter,
           "the depthwise convolution's filter gradient");
}

namespace {

// The pooling window of output (b, oy, ox, ch) inside the image: each
// element visited in row-major order. Returns how many there are.
template <typename F>
std::int64_t for_window(const PoolParams& p, std::int64_t b, std::int64_t oy, std::int64_t ox,
                        std::int64_t ch, F&& f) {
  std::int64_t count = 0;
  for (std::int64_t ky = 0; ky < p.kh; ++ky) {
    const std::int64_t iy = oy * p.sh - p.pad_h + ky;
    if (iy < 0 || iy >= p.h) continue;
    for (std::int64_t kx = 0; kx < p.kw; ++kx) {
      const std::int64_t ix = ox * p.sw - p.pad_w + kx;
      if (ix < 0 || ix >= p.w) continue;
      f(((b * p.h + iy) * p.w + ix) * p.c + ch);
      ++count;
    }
  }
  return count;
}

}  // namespace

// cuDNN's CUDNN_POOLING_MAX_DETERMINISTIC and AVERAGE_COUNT_EXCLUDE_PADDING;
// a maximum's gradient goes to its window's first largest element.
void pool_forward(const PoolParams& p, const float* x, float* y) {
  for (std::int64_t b = 0; b < p.n; ++b)
    for (std::int64_t oy = 0; oy < p.oh; ++oy)
      for (std::int64_t ox = 0; ox < p.ow; ++ox)
        for (std::int64_t ch = 0; ch < p.c; ++ch) {
          float best = -INFINITY;
          double sum = 0;
          const std::int64_t count = for_window(p, b, oy, ox, ch, [&](std::int64_t i) {
            best = x[i] > best ? x[i] : best;
            sum += x[i];
          });
          y[((b * p.oh + oy) * p.ow + ox) * p.c + ch] =
              p.max ? best : static_cast<float>(count > 0 ? sum / static_cast<double>(count) : 0);
        }
}

void pool_backward(const PoolParams& p, const float* x, const float*, const float* dy, float* dx) {
  std::vector<double> acc = zeros(p.n * p.h * p.w * p.c);
  for (std::int64_t b = 0; b < p.n; ++b)
    for (std::int64_t oy = 0; oy < p.oh; ++oy)
      for (std::int64_t ox = 0; ox < p.ow; ++ox)
        for (std::int64_t ch = 0; ch < p.c; ++ch) {
          const float g = dy[((b * p.oh + oy) * p.ow + ox) * p.c + ch];
          std::int64_t top = -1;
          std::vector<std::int64_t> window;
          for_window(p, b, oy, ox, ch, [&](std::int64_t i) {
            if (top < 0 || x[i] > x[top]) top = i;
            window.push_back(i);
          });
          if (p.max) {
            if (top >= 0) acc[static_cast<std::size_t>(top)] += g;
          } else {
            for (std::int64_t i : window)
              acc[static_cast<std::size_t>(i)] +=
                  static_cast<double>(g) / static_cast<double>(window.size());
          }
        }
  for (std::size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<float>(acc[i]);
}

// batch_norm.cu's expressions; its sums' trees become sums in row order.
void batch_norm(Type type, const void* x, void* y, std::int64_t rows, std::int64_t c,
                const float* gamma, const float* beta, float* mean, float* variance,
                bool batch_stats, float epsilon, float bottom, float top) {
  visit_floating(type, "batch_norm", [&]<typename T>() {
    const T* xs = as<T>(x);
    if (batch_stats) {
      for (std::int64_t j = 0; j < c; ++j) {
        double sum = 0, squares = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          const double v = load(xs[r * c + j]);
          sum += v;
          squares += v * v;
        }
        const double m = sum / static_cast<double>(rows),
                     var = squares / static_cast<double>(rows) - m * m;
        mean[j] = static_cast<float>(m);
        variance[j] = static_cast<float>(var > 0.0 ? var : 0.0);
      }
    }
    std::vector<float> scale(static_cast<std::size_t>(c)), shift(static_cast<std::size_t>(c));
    for (std::int64_t j = 0; j < c; ++j) {
      const double s =
          static_cast<double>(gamma[j]) / std::sqrt(static_cast<double>(variance[j]) + epsilon);
      scale[static_cast<std::size_t>(j)] = static_cast<float>(s);
      shift[static_cast<std::size_t>(j)] = static_cast<float>(beta[j] - mean[j] * s);
    }
    for (std::int64_t i = 0; i < rows * c; ++i) {
      const auto j = static_cast<std::size_t>(i % c);
      float v = scale[j] * load(xs[i]) + shift[j];
      v = v < bottom ? bottom : v;
      v = top < v ? top : v;
      static_cast<T*>(y)[i] = store<T>(v);
    }
  });
}

void batch_norm_backward(Type type, const void* x, const void* z, const void* dz, std::int64_t rows,
                         std::int64_t c, const float* gamma, const float* mean,
                         const float* variance, bool batch_stats, float epsilon, float bottom,
                         float top, void* dx, float* dgamma, float* dbeta) {
  visit_floating(type, "batch_norm's gradient", [&]<typename T>() {
    const T *xs = as<T>(x), *zs = as<T>(z), *dzs = as<T>(dz);
    const auto upstream = [&](std::int64_t i) {
      if (zs == nullptr) return load(dzs[i]);
      const float v = load(zs[i]);
      return v > bottom && v < top ? load(dzs[i]) : 0.0f;
    };
    const auto n = static_cast<double>(rows);
    std::vector<float> coef(static_cast<std::size_t>(3 * c));
    for (std::int64_t j = 0; j < c; ++j) {
      double sum = 0, moment = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        const float dy = upstream(r * c + j);
        sum += dy;
        moment += static_cast<double>(dy * (load(xs[r * c + j]) - mean[j]));
      }
      const double rs = 1.0 / std::sqrt(static_cast<double>(variance[j]) + epsilon);
      const double gr = static_cast<double>(gamma[j]) * rs;
      dbeta[j] = static_cast<float>(sum);
      dgamma[j] = static_cast<float>(moment * rs);
      coef[static_cast<std::size_t>(j)] = static_cast<float>(gr);
      coef[static_cast<std::size_t>(c + j)] =
          batch_stats ? static_cast<float>(-gr * rs * rs * moment / n) : 0.0f;
      coef[static_cast<std::size_t>(2 * c + j)] =
          batch_stats ? static_cast<float>(-gr * sum / n) : 0.0f;
    }
    for (std::int64_t i = 0; i < rows * c; ++i) {
      const auto j = static_cast<std::size_t>(i % c);
      const float dy = upstream(i);
      static_cast<T*>(dx)[i] = store<T>(
          batch_stats ? coef[j] * dy + coef[c + j] * (load(xs[i]) - mean[j]) + coef[2 * c + j]
                      : coef[j] * dy);
    }
  });
}

// image.cu's kernels.
void resize(Type type, const void* in, void* out, std::int64_t n, std::int64_t h, std::int64_t w,
            std::int64_t c, std::int64_t oh, std::int64_t ow, bool bilinear,
            const std::int64_t* y_lower, const std::int64_t* y_upper, const float* y_lerp,
            const std::int64_t* x_lower, const std::int64_t* x_upper, const float* x_lerp) {
  if (type != Type::kFloat32 && type != Type::kUInt8)
    throw std::runtime_error("resize takes float32 or uint8 images");
  const auto go = [&]<typename T>() {
    const T* src = as<T>(in);
    for (std::int64_t i = 0; i < n * oh * ow * c; ++i) {
      const std::int64_t k = i % c, pixel = i / c, x = pixel % ow, row = pixel / ow;
      const std::int64_t y = row % oh, b = row / oh;
      if (!bilinear) {
        static_cast<T*>(out)[i] = src[((b * h + y_lower[y]) * w + x_lower[x]) * c + k];
        continue;
      }
      const T* top_row = src + (b * h + y_lower[y]) * w * c;
      const T* bottom_row = src + (b * h + y_upper[y]) * w * c;
      const auto top_left = static_cast<float>(top_row[x_lower[x] * c + k]);
      const auto top_right = static_cast<float>(top_row[x_upper[x] * c + k]);
      const auto bottom_left = static_cast<float>(bottom_row[x_lower[x] * c + k]);
      const auto bottom_right = static_cast<float>(bottom_row[x_upper[x] * c + k]);
      const float xl = x_lerp[x];
      const float t = top_left + (top_right - top_left) * xl;
      const float u = bottom_left + (bottom_right - bottom_left) * xl;
      static_cast<float*>(out)[i] = t + (u - t) * y_lerp[y];
    }
  };
  if (type == Type::kFloat32) {
    go.template operator()<float>();
  } else {
    go.template operator()<std::uint8_t>();
  }
}

void affine_transform(const float* in, float* out, const float* transforms, std::int64_t rows,
                      std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c, int fill,
                      bool bilinear, float fill_value) {
  const AffineSpec spec{n, h, w, c, rows, fill, bilinear, fill_value};
  for (std::int64_t i = 0; i < n * h * w * c; ++i) out[i] = affine_value(in, transforms, spec, i);
}

}  // namespace lockstep::backend::cuda::emulated
