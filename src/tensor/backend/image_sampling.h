// TensorFlow's ImageProjectiveTransformV3 MapCoordinate: a coordinate
// outside [0, len - 1] brought inside the image by the fill mode. One
// definition for the CPU's kernel (tensor/ops/image_ops.cc) and the GPU's
// (backend/cuda/image.cu), compiled for each, so the two cannot drift: both
// builds keep its float operations unfused, and its results are bitwise one.
#pragma once

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

}  // namespace lockstep::backend
