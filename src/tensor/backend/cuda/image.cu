// The image ops' forwards on the GPU (tensor/image_ops.h): resize from the
// sampling tables the host worked out (ResizeBilinear's rows, columns and
// lerps; ResizeNearestNeighbor's rows and columns), and affine_transform as
// ImageProjectiveTransformV3 — the projected point, the fill mode's mapping
// of it into the image, bilinear or nearest sampling with fill_value
// outside. One thread per output value, each the CPU's expression in the
// CPU's order (this library is built without fused multiply-adds), so the
// results are the CPU's bits.
#include <cstdint>
#include <stdexcept>

#include "tensor/backend/cuda/kernels.h"
#include "tensor/backend/image_sampling.h"

namespace lockstep::backend::cuda {
namespace {

using backend::affine_value;
using backend::AffineSpec;

struct Extent {
  std::int64_t n, h, w, c, oh, ow;
};

template <typename T>
__global__ void resize_bilinear_kernel(const T* in, float* out, Extent e, const std::int64_t* y_lo,
                                       const std::int64_t* y_hi, const float* y_lerp,
                                       const std::int64_t* x_lo, const std::int64_t* x_hi,
                                       const float* x_lerp, std::int64_t total) {
  LOCKSTEP_FOR_EACH(i, total) {
    const std::int64_t k = i % e.c, pixel = i / e.c, x = pixel % e.ow, row = pixel / e.ow;
    const std::int64_t y = row % e.oh, b = row / e.oh;
    const T* top = in + (b * e.h + y_lo[y]) * e.w * e.c;
    const T* bottom = in + (b * e.h + y_hi[y]) * e.w * e.c;
    const auto top_left = static_cast<float>(top[x_lo[x] * e.c + k]);
    const auto top_right = static_cast<float>(top[x_hi[x] * e.c + k]);
    const auto bottom_left = static_cast<float>(bottom[x_lo[x] * e.c + k]);
    const auto bottom_right = static_cast<float>(bottom[x_hi[x] * e.c + k]);
    const float xl = x_lerp[x];
    const float t = top_left + (top_right - top_left) * xl;
    const float u = bottom_left + (bottom_right - bottom_left) * xl;
    out[i] = t + (u - t) * y_lerp[y];
  }
}

template <typename T>
__global__ void resize_nearest_kernel(const T* in, T* out, Extent e, const std::int64_t* ys,
                                      const std::int64_t* xs, std::int64_t total) {
  LOCKSTEP_FOR_EACH(i, total) {
    const std::int64_t k = i % e.c, pixel = i / e.c, x = pixel % e.ow, row = pixel / e.ow;
    const std::int64_t y = row % e.oh, b = row / e.oh;
    out[i] = in[((b * e.h + ys[y]) * e.w + xs[x]) * e.c + k];
  }
}

__global__ void affine_kernel(const float* in, float* out, const float* transforms, AffineSpec a,
                              std::int64_t total) {
  LOCKSTEP_FOR_EACH(i, total) out[i] = affine_value(in, transforms, a, i);
}

}  // namespace

void launch_resize(cudaStream_t s, Type type, const void* in, void* out, std::int64_t n,
                   std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oh, std::int64_t ow,
                   bool bilinear, const std::int64_t* y_lower, const std::int64_t* y_upper,
                   const float* y_lerp, const std::int64_t* x_lower, const std::int64_t* x_upper,
                   const float* x_lerp) {
  const Extent e{n, h, w, c, oh, ow};
  const std::int64_t total = n * oh * ow * c;
  if (type != Type::kFloat32 && type != Type::kUInt8)
    throw std::runtime_error("resize takes float32 or uint8 images");
  if (bilinear) {
    if (type == Type::kFloat32) {
      resize_bilinear_kernel<<<blocks_for(total), kThreads, 0, s>>>(
          static_cast<const float*>(in), static_cast<float*>(out), e, y_lower, y_upper, y_lerp,
          x_lower, x_upper, x_lerp, total);
    } else {
      resize_bilinear_kernel<<<blocks_for(total), kThreads, 0, s>>>(
          static_cast<const std::uint8_t*>(in), static_cast<float*>(out), e, y_lower, y_upper,
          y_lerp, x_lower, x_upper, x_lerp, total);
    }
  } else if (type == Type::kFloat32) {
    resize_nearest_kernel<<<blocks_for(total), kThreads, 0, s>>>(
        static_cast<const float*>(in), static_cast<float*>(out), e, y_lower, x_lower, total);
  } else {
    resize_nearest_kernel<<<blocks_for(total), kThreads, 0, s>>>(
        static_cast<const std::uint8_t*>(in), static_cast<std::uint8_t*>(out), e, y_lower, x_lower,
        total);
  }
  check_launch("resize");
}

void launch_affine_transform(cudaStream_t s, const float* in, float* out, const float* transforms,
                             std::int64_t rows, std::int64_t n, std::int64_t h, std::int64_t w,
                             std::int64_t c, int fill, bool bilinear, float fill_value) {
  const std::int64_t total = n * h * w * c;
  affine_kernel<<<blocks_for(total), kThreads, 0, s>>>(
      in, out, transforms, AffineSpec{n, h, w, c, rows, fill, bilinear, fill_value}, total);
  check_launch("affine_transform");
}

}  // namespace lockstep::backend::cuda
