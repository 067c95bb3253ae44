// TensorFlow's ImageProjectiveTransformV3 MapCoordinate (a coordinate
// outside [0, len - 1] brought inside the image by the fill mode) and the
// transform's value per output element. One definition for the CPU's kernel
// (tensor/ops/image_ops.cc: map_coordinate), the GPU's (backend/cuda/image.cu)
// and the tests' emulated adapter, compiled for each, so they cannot drift:
// every build keeps its float operations unfused, and its results are
// bitwise one.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LOCKSTEP_HOST_DEVICE __host__ __device__
#else
#define LOCKSTEP_HOST_DEVICE
#endif

namespace lockstep::backend {

// keras.ops.image.affine_transform's fill_mode.
enum class Fill : int { kConstant = 0, kReflect = 1, kWrap = 2, kNearest = 3 };

// std::clamp(v, lo, hi), NaN passing through.
LOCKSTEP_HOST_DEVICE inline float clamp_coordinate(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

LOCKSTEP_HOST_DEVICE inline float map_coordinate(float in, std::int64_t len, Fill fill) {
  const auto last = static_cast<float>(len - 1);
  switch (fill) {
    case Fill::kConstant:
      return in;
    case Fill::kNearest:
      return clamp_coordinate(in, 0.0f, last);
    case Fill::kReflect:
      if (in < 0) {
        if (len <= 1) {
          in = 0;
        } else {
          const std::int64_t sz2 = 2 * len;
          if (in < static_cast<float>(sz2)) {
            in = static_cast<float>(sz2) *
                     static_cast<float>(static_cast<std::int64_t>(-in / static_cast<float>(sz2))) +
                 in;
          }
          in = (in < static_cast<float>(-len)) ? in + static_cast<float>(sz2) : -in - 1;
        }
      } else if (in > last) {
        if (len <= 1) {
          in = 0;
        } else {
          const std::int64_t sz2 = 2 * len;
          in -= static_cast<float>(sz2) *
                static_cast<float>(static_cast<std::int64_t>(in / static_cast<float>(sz2)));
          if (in >= static_cast<float>(len)) in = static_cast<float>(sz2) - in - 1;
        }
      }
      return clamp_coordinate(in, 0.0f, last);
    case Fill::kWrap:
      if (in < 0) {
        if (len <= 1) {
          in = 0;
        } else {
          const std::int64_t sz = len - 1;
          in += static_cast<float>(len *
                                   (static_cast<std::int64_t>(-in / static_cast<float>(sz)) + 1));
        }
      } else if (in > last) {
        if (len <= 1) {
          in = 0;
        } else {
          const std::int64_t sz = len - 1;
          in -= static_cast<float>(len * static_cast<std::int64_t>(in / static_cast<float>(sz)));
        }
      }
      return clamp_coordinate(in, 0.0f, last);
  }
  return in;
}

// affine_transform's forward: [n, h, w, c] float32 images, transforms
// [rows, 8] (one for all when rows is 1), fill as Fill's numbers.
struct AffineSpec {
  std::int64_t n, h, w, c, rows;
  int fill;
  bool bilinear;
  float fill_value;
};

// Output value i of affine_transform (TensorFlow's ImageProjectiveTransformV3
// expressions in its order): the GPU's kernel (backend/cuda/image.cu) and
// the tests' emulated adapter compute it with this one definition.
LOCKSTEP_HOST_DEVICE inline float affine_value(const float* in, const float* transforms,
                                               const AffineSpec& a, std::int64_t i) {
  const std::int64_t k = i % a.c, pixel = i / a.c, out_x = pixel % a.w, row = pixel / a.w;
  const std::int64_t out_y = row % a.h, b = row / a.h;
  const float* t = transforms + (a.rows == 1 ? 0 : b) * 8;
  const float* img = in + b * a.h * a.w * a.c;
  const auto ox = static_cast<float>(out_x), oy = static_cast<float>(out_y);
  const float projection = t[6] * ox + t[7] * oy + 1.f;
  if (projection == 0) return a.fill_value;
  const auto fill = static_cast<Fill>(a.fill);
  const float x = map_coordinate((t[0] * ox + t[1] * oy + t[2]) / projection, a.w, fill);
  const float y = map_coordinate((t[3] * ox + t[4] * oy + t[5]) / projection, a.h, fill);
  // The value at (py, px), fill_value outside the image.
  auto read = [&](std::int64_t py, std::int64_t px) {
    return (0 <= py && py < a.h && 0 <= px && px < a.w) ? img[(py * a.w + px) * a.c + k]
                                                        : a.fill_value;
  };
  if (!a.bilinear)
    return read(static_cast<std::int64_t>(roundf(y)), static_cast<std::int64_t>(roundf(x)));
  const float y_floor = floorf(y), x_floor = floorf(x);
  const float y_ceil = y_floor + 1, x_ceil = x_floor + 1;
  const auto yf = static_cast<std::int64_t>(y_floor), xf = static_cast<std::int64_t>(x_floor);
  const auto yc = static_cast<std::int64_t>(y_ceil), xc = static_cast<std::int64_t>(x_ceil);
  const float value_yfloor = (x_ceil - x) * read(yf, xf) + (x - x_floor) * read(yf, xc);
  const float value_yceil = (x_ceil - x) * read(yc, xf) + (x - x_floor) * read(yc, xc);
  return (y_ceil - y) * value_yfloor + (y - y_floor) * value_yceil;
}

}  // namespace lockstep::backend
