// Image resampling ops (channels-last), as keras.ops.image / tf.image has
// them: resize and affine_transform. Both are differentiable with respect
// to the images (their gradient rules sit beside them, as every op's).
//
//   auto small = ls::image::resize(images, {96, 96});               // [n, 96, 96, c]
//   auto turned = ls::image::affine_transform(images, transforms,
//                                             {.fill_mode = "reflect"});
//
// Values are TensorFlow's to float32 rounding: tests/tensor/image_ops_test.cc
// compares them with tf.image.resize and ImageProjectiveTransformV3 outputs.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "lockstep/tensor/tensor.h"

namespace lockstep::image {

struct ResizeOptions {
  // "bilinear" or "nearest" (tf.image.resize's method; its other methods —
  // bicubic, area, lanczos, gaussian, mitchellcubic — are not implemented).
  std::string interpolation = "bilinear";
};

// tf.image.resize(images, size, method, antialias=False): half-pixel
// centres, as TensorFlow 2 resizes. `images` is [height, width, channels] or
// [batch, height, width, channels], uint8 or float32. Bilinear returns
// float32; nearest returns the input's dtype (as TensorFlow does).
Tensor resize(const Tensor& images, std::array<std::int64_t, 2> size,
              const ResizeOptions& options = {});

struct AffineTransformOptions {
  std::string interpolation = "bilinear";  // "bilinear" or "nearest"
  // Points outside the image: "constant" (fill_value), "reflect" (d c b a |
  // a b c d | d c b a), "wrap" (a b c d | a b c d) or "nearest" (a a | a b c d).
  std::string fill_mode = "constant";
  float fill_value = 0.0f;
};

// keras.ops.image.affine_transform: output pixel (x, y) of image i takes the
// input at ((a0 x + a1 y + a2) / k, (b0 x + b1 y + b2) / k), k = c0 x + c1 y
// + 1, where transforms[i] = [a0, a1, a2, b0, b1, b2, c0, c1] (one row for
// every image, or a single row for all). `images` is float32 [batch, height,
// width, channels] or [height, width, channels]; `transforms` float32 [8] or
// [batch or 1, 8]. Differentiable with respect to the images, not the
// transforms.
Tensor affine_transform(const Tensor& images, const Tensor& transforms,
                        const AffineTransformOptions& options = {});

}  // namespace lockstep::image
