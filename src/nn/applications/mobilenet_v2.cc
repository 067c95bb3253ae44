// MobileNetV2's graph, layer for layer as Keras 3 builds it
// (keras/src/applications/mobilenet_v2.py): Conv1 → bn_Conv1 → Conv1_relu,
// seventeen inverted residual blocks (expanded_conv_*, block_1_* …
// block_16_*), Conv_1 → Conv_1_bn → out_relu, then the top or the pooling.
#include "lockstep/nn/applications/mobilenet_v2.h"

#include <cmath>
#include <cstdio>

#include "lockstep/nn/conv_layers.h"
#include "lockstep/nn/layers.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::applications::mobilenet_v2 {
namespace {

// Every BatchNormalization of MobileNetV2 has these.
layers::BatchNormalization bn(const std::string& name) {
  return layers::BatchNormalization({.momentum = 0.999f, .epsilon = 1e-3f, .name = name});
}

layers::ReLU relu6(const std::string& name) {
  return layers::ReLU({.max_value = 6.0f, .name = name});
}

// imagenet_utils.correct_pad for a 3 × 3 kernel: ((top, bottom), (left,
// right)) zeros so that a stride-2 'valid' window sees what TensorFlow's
// 'same' would on an even size.
std::array<layers::Size2, 2> correct_pad(const Shape& sample) {
  const std::int64_t adjust_h = 1 - sample[0] % 2, adjust_w = 1 - sample[1] % 2;
  return {{{1 - adjust_h, 1}, {1 - adjust_w, 1}}};
}

KerasTensor inverted_res_block(const KerasTensor& inputs, std::int64_t expansion,
                               std::int64_t stride, double alpha, std::int64_t filters,
                               int block_id) {
  const std::int64_t in_channels = inputs.sample_shape()[2];
  const auto pointwise_filters =
      make_divisible(static_cast<double>(static_cast<std::int64_t>(static_cast<double>(filters) * alpha)), 8);
  KerasTensor x = inputs;
  std::string prefix = "block_" + std::to_string(block_id) + "_";
  if (block_id != 0) {
    // Expand with a pointwise 1 × 1 convolution.
    x = layers::Conv2D(expansion * in_channels, {1, 1},
                       {.padding = "same", .use_bias = false, .name = prefix + "expand"})(x);
    x = bn(prefix + "expand_BN")(x);
    x = relu6(prefix + "expand_relu")(x);
  } else {
    prefix = "expanded_conv_";
  }
  // Depthwise 3 × 3 convolution.
  if (stride == 2)
    x = layers::ZeroPadding2D(correct_pad(x.sample_shape()), prefix + "pad")(x);
  x = layers::DepthwiseConv2D({3, 3}, {.strides = {stride, stride},
                                       .padding = stride == 1 ? "same" : "valid",
                                       .use_bias = false,
                                       .name = prefix + "depthwise"})(x);
  x = bn(prefix + "depthwise_BN")(x);
  x = relu6(prefix + "depthwise_relu")(x);
  // Project with a pointwise 1 × 1 convolution (linear: no activation).
  x = layers::Conv2D(pointwise_filters, {1, 1},
                     {.padding = "same", .use_bias = false, .name = prefix + "project"})(x);
  x = bn(prefix + "project_BN")(x);
  if (in_channels == pointwise_filters && stride == 1)
    return layers::Add(prefix + "add")(std::vector<KerasTensor>{inputs, x});
  return x;
}

void check_options(const MobileNetV2Options& o, const Shape& shape) {
  LOCKSTEP_CHECK(o.weights != "imagenet",
                 "MobileNetV2: weights = \"imagenet\" needs Keras's pretrained file, which "
                 "Lockstep does not download. Hint: fetch "
                 "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_<alpha>_<rows>[_no_top].h5 "
                 "(keras.applications caches it under ~/.keras/models) and pass its path");
  LOCKSTEP_CHECK(o.alpha > 0, "MobileNetV2: alpha must be > 0, got ", o.alpha);
  LOCKSTEP_CHECK_AS(ShapeError, shape.rank() == 3,
                    "MobileNetV2: `input_shape` must be a tuple of three integers (rows, cols, "
                    "channels), got ",
                    shape);
  LOCKSTEP_CHECK_AS(ShapeError, shape[0] >= 32 && shape[1] >= 32,
                    "MobileNetV2: Input size must be at least 32x32; Received: input_shape=",
                    shape);
  LOCKSTEP_CHECK(o.pooling.empty() || o.pooling == "avg" || o.pooling == "max",
                 "MobileNetV2: pooling must be \"\" (none), \"avg\" or \"max\", got \"", o.pooling,
                 "\"");
  LOCKSTEP_CHECK(!o.include_top || o.classes > 0, "MobileNetV2: classes must be > 0, got ",
                 o.classes);
}

}  // namespace

std::int64_t make_divisible(double v, std::int64_t divisor, std::int64_t min_value) {
  if (min_value == 0) min_value = divisor;
  // int(v + divisor / 2) // divisor * divisor, in Python's arithmetic.
  const auto rounded = static_cast<std::int64_t>(v + static_cast<double>(divisor) / 2.0);
  std::int64_t out = std::max(min_value, rounded / divisor * divisor);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;  // never more than 10% down
  return out;
}

Tensor preprocess_input(const Tensor& x) {
  const Tensor f = x.dtype() == DType::kFloat32 ? x : cast(x, DType::kFloat32);
  return sub(div(f, Tensor::scalar(127.5f)), Tensor::scalar(1.0f));
}

std::shared_ptr<FunctionalImpl> build(const MobileNetV2Options& o) {
  const Shape shape = o.input_shape.value_or(Shape{224, 224, 3});
  check_options(o, shape);
  const double alpha = o.alpha;
  const KerasTensor img_input = Input(shape);
  KerasTensor x = layers::Conv2D(make_divisible(32 * alpha, 8), {3, 3},
                                 {.strides = {2, 2},
                                  .padding = "same",
                                  .use_bias = false,
                                  .name = "Conv1"})(img_input);
  x = bn("bn_Conv1")(x);
  x = relu6("Conv1_relu")(x);
  struct Block {
    std::int64_t filters, stride, expansion;
  };
  static constexpr Block kBlocks[] = {{16, 1, 1},  {24, 2, 6},  {24, 1, 6},  {32, 2, 6},
                                      {32, 1, 6},  {32, 1, 6},  {64, 2, 6},  {64, 1, 6},
                                      {64, 1, 6},  {64, 1, 6},  {96, 1, 6},  {96, 1, 6},
                                      {96, 1, 6},  {160, 2, 6}, {160, 1, 6}, {160, 1, 6},
                                      {320, 1, 6}};
  for (int id = 0; id < 17; ++id) {
    const Block& b = kBlocks[id];
    x = inverted_res_block(x, b.expansion, b.stride, alpha, b.filters, id);
  }
  const std::int64_t last_block_filters = alpha > 1.0 ? make_divisible(1280 * alpha, 8) : 1280;
  x = layers::Conv2D(last_block_filters, {1, 1}, {.use_bias = false, .name = "Conv_1"})(x);
  x = bn("Conv_1_bn")(x);
  x = relu6("out_relu")(x);
  if (o.include_top) {
    x = layers::GlobalAveragePooling2D()(x);
    x = layers::Dense(o.classes, {.activation = o.classifier_activation, .name = "predictions"})(x);
  } else if (o.pooling == "avg") {
    x = layers::GlobalAveragePooling2D()(x);
  } else if (o.pooling == "max") {
    x = layers::GlobalMaxPooling2D()(x);
  }
  std::string name = o.name;
  if (name.empty()) {
    char alpha_text[32];
    std::snprintf(alpha_text, sizeof alpha_text, "%0.2f", alpha);
    name = "mobilenetv2_" + std::string(alpha_text) + "_" + std::to_string(shape[0]);
  }
  return std::make_shared<FunctionalImpl>(std::vector<KerasTensor>{img_input},
                                          std::vector<KerasTensor>{x}, name);
}

}  // namespace lockstep::applications::mobilenet_v2
