// MobileNetV2's network as keras.applications builds it (Sandler et al.,
// "MobileNetV2: Inverted Residuals and Linear Bottlenecks", CVPR 2018):
// the same layers, names, paddings and widths as Keras 3's
// keras/src/applications/mobilenet_v2.py, so Keras's weight files fit it.
//
// Users call applications::MobileNetV2 (lockstep/train/applications.h),
// which wraps this graph in a Model and loads weights; this half builds the
// graph and knows nothing of files.
//
//   auto base = ls::applications::MobileNetV2(
//       {.input_shape = ls::Shape{96, 96, 3}, .alpha = 0.35, .include_top = false});
//   auto x = ls::applications::mobilenet_v2::preprocess_input(images);  // to [-1, 1]
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/nn/functional.h"

namespace lockstep::applications {

// keras.applications.MobileNetV2's arguments (input_tensor aside).
struct MobileNetV2Options {
  // (rows, cols, channels), at least 32 × 32. Unset: 224 × 224 × 3 (Keras
  // leaves the spatial size open with include_top = false; Lockstep's
  // inputs have static shapes).
  std::optional<Shape> input_shape{};
  // The width multiplier: every layer's filters scaled by it (rounded to
  // multiples of 8). Keras's pretrained widths are 0.35, 0.5, 0.75, 1.0,
  // 1.3 and 1.4; any positive value builds.
  double alpha = 1.0;
  bool include_top = true;  // GlobalAveragePooling2D and the Dense classifier
  // "" (Keras's None): fresh weights; or the path of a Keras file to load
  // (.keras, .weights.h5, legacy .h5). "imagenet" needs Keras's download;
  // pass the downloaded file's path instead. Keras's default is "imagenet".
  std::string weights{};
  // Without the top: "" (the 4-D feature map), "avg" or "max" (global pooling).
  std::string pooling{};
  std::int64_t classes = 1000;
  std::string classifier_activation = "softmax";  // "" or "linear": logits
  std::string name{};  // "": Keras's "mobilenetv2_<alpha, 2 decimals>_<rows>"
};

namespace mobilenet_v2 {

// The graph: Input → Conv1 … out_relu (→ pooling or top). Checks the
// options as Keras does (ValueError naming the argument); `weights` is the
// caller's to load.
std::shared_ptr<FunctionalImpl> build(const MobileNetV2Options& options);

// keras.applications.mobilenet_v2.preprocess_input: pixels in [0, 255] (any
// numeric dtype) to float32 in [-1, 1] — x / 127.5 − 1, as Keras computes it.
Tensor preprocess_input(const Tensor& x);

// Keras's _make_divisible: v rounded to the nearest multiple of `divisor`
// (at least min_value, default divisor), never more than 10% below v.
std::int64_t make_divisible(double v, std::int64_t divisor, std::int64_t min_value = 0);

}  // namespace mobilenet_v2
}  // namespace lockstep::applications
