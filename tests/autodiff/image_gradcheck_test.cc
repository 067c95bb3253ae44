// image::resize and image::affine_transform: forward values against naive
// float64 references written here, gradients with respect to the images by
// finite differences — bilinear and nearest, up and down, every fill mode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lockstep/tensor/image_ops.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

// Half-pixel-centre resize of NHWC `x` to oh x ow, in float64.
Ref ref_resize(const Ref& x, std::int64_t oh, std::int64_t ow, bool bilinear) {
  const std::int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], c = x.dims[3];
  const double sy = static_cast<double>(h) / oh, sx = static_cast<double>(w) / ow;
  auto at = [&](std::int64_t b, std::int64_t y, std::int64_t xx, std::int64_t k) {
    return x[((b * h + y) * w + xx) * c + k];
  };
  Ref y({n, oh, ow, c});
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t i = 0; i < oh; ++i)
      for (std::int64_t j = 0; j < ow; ++j)
        for (std::int64_t k = 0; k < c; ++k) {
          double v;
          if (bilinear) {
            const double fy = (i + 0.5) * sy - 0.5, fx = (j + 0.5) * sx - 0.5;
            const double ly = fy - std::floor(fy), lx = fx - std::floor(fx);
            const auto y0 =
                std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(fy)), 0, h - 1);
            const auto y1 =
                std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(fy)), 0, h - 1);
            const auto x0 =
                std::clamp<std::int64_t>(static_cast<std::int64_t>(std::floor(fx)), 0, w - 1);
            const auto x1 =
                std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(fx)), 0, w - 1);
            v = (1 - ly) * ((1 - lx) * at(b, y0, x0, k) + lx * at(b, y0, x1, k)) +
                ly * ((1 - lx) * at(b, y1, x0, k) + lx * at(b, y1, x1, k));
          } else {
            const auto yy = std::min<std::int64_t>(
                static_cast<std::int64_t>(std::floor((i + 0.5) * sy)), h - 1);
            const auto xx = std::min<std::int64_t>(
                static_cast<std::int64_t>(std::floor((j + 0.5) * sx)), w - 1);
            v = at(b, yy, xx, k);
          }
          y[((b * oh + i) * ow + j) * c + k] = v;
        }
  return y;
}

// A coordinate brought into [0, len - 1] by a fill mode, from the modes'
// definitions (reflect: period 2 len mirrored about -0.5; wrap: period len
// on the closed range, as TensorFlow's wrap steps by len over len - 1).
double ref_map(double v, std::int64_t len, const std::string& mode) {
  const double n = static_cast<double>(len);
  if (mode == "reflect") {
    double r = std::fmod(v, 2 * n);
    if (r < 0) r += 2 * n;
    if (r >= n) r = 2 * n - 1 - r;
    return std::clamp(r, 0.0, n - 1);
  }
  if (mode == "wrap") {
    if (v < 0)
      v += n * (std::floor(-v / (n - 1)) + 1);
    else if (v > n - 1)
      v -= n * std::floor(v / (n - 1));
    return std::clamp(v, 0.0, n - 1);
  }
  if (mode == "nearest") return std::clamp(v, 0.0, n - 1);
  return v;  // constant
}

Ref ref_affine(const Ref& x, const std::vector<double>& t, const std::string& fill, bool bilinear,
               double fill_value) {
  const std::int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], c = x.dims[3];
  Ref y({n, h, w, c});
  auto read = [&](std::int64_t b, std::int64_t yy, std::int64_t xx, std::int64_t k) {
    if (yy < 0 || yy >= h || xx < 0 || xx >= w) return fill_value;
    return x[((b * h + yy) * w + xx) * c + k];
  };
  for (std::int64_t b = 0; b < n; ++b) {
    const double* m = t.data() + b * 8;
    for (std::int64_t i = 0; i < h; ++i)
      for (std::int64_t j = 0; j < w; ++j) {
        const double k0 = m[6] * j + m[7] * i + 1;
        const double sx = ref_map((m[0] * j + m[1] * i + m[2]) / k0, w, fill);
        const double sy = ref_map((m[3] * j + m[4] * i + m[5]) / k0, h, fill);
        for (std::int64_t k = 0; k < c; ++k) {
          double v;
          if (bilinear) {
            const double fy = std::floor(sy), fx = std::floor(sx);
            const auto y0 = static_cast<std::int64_t>(fy), x0 = static_cast<std::int64_t>(fx);
            v = (fy + 1 - sy) *
                    ((fx + 1 - sx) * read(b, y0, x0, k) + (sx - fx) * read(b, y0, x0 + 1, k)) +
                (sy - fy) * ((fx + 1 - sx) * read(b, y0 + 1, x0, k) +
                             (sx - fx) * read(b, y0 + 1, x0 + 1, k));
          } else {
            v = read(b, static_cast<std::int64_t>(std::round(sy)),
                     static_cast<std::int64_t>(std::round(sx)), k);
          }
          y[((b * h + i) * w + j) * c + k] = v;
        }
      }
  }
  return y;
}

TEST(ImageGradients, ResizeBilinearAndNearestUpAndDown) {
  std::mt19937 rng(19);
  const Ref x = random_ref({2, 5, 7, 2}, rng);
  for (bool bilinear : {true, false}) {
    for (auto [oh, ow] : {std::pair<std::int64_t, std::int64_t>{3, 4}, {9, 12}, {5, 13}, {1, 1}}) {
      const std::string interp = bilinear ? "bilinear" : "nearest";
      check_gradients(
          "resize " + interp + " " + std::to_string(oh) + "x" + std::to_string(ow),
          [=](const std::vector<Tensor>& in) {
            return image::resize(in[0], {oh, ow}, {.interpolation = interp});
          },
          [=](const std::vector<Ref>& in) { return ref_resize(in[0], oh, ow, bilinear); }, {x});
    }
  }
}

TEST(ImageGradients, AffineTransformEveryFillModeBilinearAndNearest) {
  std::mt19937 rng(23);
  const Ref x = random_ref({2, 6, 7, 2}, rng);
  // A rotation by 0.5 rad about the centre, and a zoom out by 2.3 with a
  // shift (points far outside the image) — generic angles, so no sample
  // sits on a pixel boundary where float and double could round apart.
  const double c = std::cos(0.5), s = std::sin(0.5), cx = 3.0, cy = 2.5;
  const std::vector<double> t = {c,    -s,   cx - cx * c + cy * s,
                                 s,    c,    cy - cx * s - cy * c,
                                 0,    0,    2.3,
                                 0.17, -6.1, -0.21,
                                 2.3,  -4.3, 0,
                                 0};
  std::vector<float> tf(t.begin(), t.end());
  const Tensor transforms = Tensor::from_vector(tf, Shape{2, 8});
  for (const std::string fill : {"reflect", "wrap", "constant", "nearest"}) {
    for (bool bilinear : {true, false}) {
      const std::string interp = bilinear ? "bilinear" : "nearest";
      check_gradients(
          "affine_transform " + fill + " " + interp,
          [=](const std::vector<Tensor>& in) {
            return image::affine_transform(
                in[0], transforms,
                {.interpolation = interp, .fill_mode = fill, .fill_value = 0.7f});
          },
          [=](const std::vector<Ref>& in) { return ref_affine(in[0], t, fill, bilinear, 0.7); },
          {x});
    }
  }
}

}  // namespace
}  // namespace lockstep::testing
