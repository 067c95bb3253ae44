// Every device op against the CPU's, forward and backward, on random inputs;
// the optimizers' updates bit for bit; the seed MLP trained on the device
// (one device, and two logical devices) against the CPU; fit's step recorded
// and replayed where the device records. One binary for
// both accelerators: CTest runs it on the fake accelerator on every push
// (LOCKSTEP_TEST_DEVICE unset) and on the emulated GPU
// (LOCKSTEP_TEST_DEVICE=emulated: the GPU's host side, with host loops for
// its kernels), scripts/gpu-check.sh on a GPU with
// LOCKSTEP_TEST_DEVICE=/gpu:0 (docs/distribute.md, "GPUs").
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"
#include "support/log_texts.h"
#include "support/mlp_examples.h"
#include "support/weights.h"

namespace lockstep {
namespace {

using distribute::MirroredStrategy;
using distribute::OneDeviceStrategy;

// LOCKSTEP_TEST_DEVICE: a device's name, or "emulated": /gpu:0 of the
// emulated CUDA adapter (tests/support/emulated_cuda), which CTest runs too.
std::string device_name() {
  const char* name = std::getenv("LOCKSTEP_TEST_DEVICE");  // NOLINT(concurrency-mt-unsafe)
  if (name != nullptr && std::string(name) == "emulated") {
    ::setenv("LOCKSTEP_CUDA_LIBRARY", LOCKSTEP_EMULATED_CUDA_LIBRARY,
             1);  // NOLINT(concurrency-mt-unsafe)
    return "/gpu:0";
  }
  return name ? name : "/device:FAKE:0";
}

// The device under test and a second logical device beside it (two fake
// devices, or two logical GPUs of GPU 0).
std::vector<Device*> devices() {
  static const std::vector<Device*> list = [] {
    const std::string name = device_name();
    if (name.find("FAKE") != std::string::npos) {
      set_fake_devices(2);
      return fake_devices();
    }
    set_logical_gpu_devices(2);
    return std::vector<Device*>{&device("/gpu:0"), &device("/gpu:1")};
  }();
  return list;
}
Device& dev() { return *devices()[0]; }

Tensor random_tensor(const Shape& shape, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(shape.numel()));
  for (float& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

void expect_near(const Tensor& want, const Tensor& got, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(want.shape(), got.shape()) << what;
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  const std::vector<double> a = want.to_vector<double>(), b = got.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_FALSE(std::isnan(b[i]) && !std::isnan(a[i])) << what << " element " << i;
    ASSERT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(a[i]))) << what << " element " << i;
  }
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// f on the CPU and on the device, and the gradient of Σ f·w for every
// float input, compared within `tol` (relative, floored at 1).
void check_op(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs,
              double tol = 1e-5) {
  auto run = [&](const std::vector<Tensor>& xs) {
    GradientTape tape;
    for (const Tensor& x : xs)
      if (x.dtype() == DType::kFloat32) tape.watch(x);
    const Tensor y = f(xs);
    std::vector<Tensor> out{y};
    if (y.dtype() == DType::kFloat32) {
      std::vector<float> w(static_cast<std::size_t>(y.numel()));
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + static_cast<float>(i % 7) * 0.25f;
      const Tensor loss = sum(mul(y, Tensor::from_vector(w, y.shape())));
      std::vector<Tensor> sources;
      for (const Tensor& x : xs)
        if (x.dtype() == DType::kFloat32) sources.push_back(x);
      for (const Tensor& g : tape.gradient(loss, sources)) out.push_back(g.cpu());
    }
    out[0] = out[0].cpu();
    return out;
  };
  const std::vector<Tensor> want = run(inputs);
  std::vector<Tensor> got;
  {
    DeviceScope on(dev(), {.pin_thread = false});
    std::vector<Tensor> moved;
    for (const Tensor& x : inputs) moved.push_back(x.copy_to(dev()));
    got = run(moved);
  }
  ASSERT_EQ(want.size(), got.size()) << name;
  for (std::size_t i = 0; i < want.size(); ++i)
    expect_near(want[i], got[i], tol,
                name + (i == 0 ? " forward" : " gradient " + std::to_string(i)));
}

TEST(DeviceOps, ElementwiseWithBroadcastingMatchCpu) {
  std::mt19937 rng(1);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{4, 5}, {4, 5}}, {{4, 5}, {5}}, {{3, 1, 4}, {2, 1}}, {{6}, {}}, {{2, 3, 4}, {2, 1, 4}}};
  for (const auto& [sa, sb] : shapes) {
    const std::string at = " " + sa.to_string() + " x " + sb.to_string();
    const Tensor a = random_tensor(sa, rng), b = random_tensor(sb, rng, 0.5f, 2.0f);
    check_op("add" + at, [](const auto& x) { return add(x[0], x[1]); }, {a, b});
    check_op("sub" + at, [](const auto& x) { return sub(x[0], x[1]); }, {a, b});
    check_op("mul" + at, [](const auto& x) { return mul(x[0], x[1]); }, {a, b});
    check_op("div" + at, [](const auto& x) { return div(x[0], x[1]); }, {a, b});
    check_op("maximum" + at, [](const auto& x) { return maximum(x[0], x[1]); }, {a, b});
    check_op("minimum" + at, [](const auto& x) { return minimum(x[0], x[1]); }, {a, b});
    check_op("greater" + at, [](const auto& x) { return greater(x[0], x[1]); }, {a, b});
    check_op("equal" + at, [](const auto& x) { return equal(x[0], x[0]); }, {a, b});
    check_op("where" + at, [](const auto& x) { return where(less(x[0], x[1]), x[0], x[1]); },
             {a, b});
  }
}

TEST(DeviceOps, UnaryMatchCpu) {
  std::mt19937 rng(2);
  const Tensor x = random_tensor({7, 9}, rng, -3.0f, 3.0f);
  const Tensor pos = random_tensor({7, 9}, rng, 0.1f, 4.0f);
  check_op("neg", [](const auto& v) { return neg(v[0]); }, {x});
  check_op("relu", [](const auto& v) { return relu(v[0]); }, {x});
  check_op("square", [](const auto& v) { return square(v[0]); }, {x});
  check_op("abs", [](const auto& v) { return abs(v[0]); }, {x});
  check_op("clip", [](const auto& v) { return clip(v[0], -1.0f, 0.5f); }, {x});
  // Transcendental functions: CUDA's and libm's each within 2 ulp.
  check_op(
      "exp", [](const auto& v) { return exp(v[0]); }, {x}, 1e-6);
  check_op(
      "log", [](const auto& v) { return log(v[0]); }, {pos}, 1e-6);
  check_op(
      "log1p", [](const auto& v) { return log1p(v[0]); }, {pos}, 1e-6);
  check_op(
      "erf", [](const auto& v) { return erf(v[0]); }, {x}, 1e-6);
  check_op(
      "sqrt", [](const auto& v) { return sqrt(v[0]); }, {pos}, 1e-6);
  check_op(
      "sigmoid", [](const auto& v) { return sigmoid(v[0]); }, {x}, 1e-6);
  check_op(
      "tanh", [](const auto& v) { return tanh(v[0]); }, {x}, 1e-6);
}

TEST(DeviceOps, ReductionsAndSoftmaxMatchCpu) {
  std::mt19937 rng(3);
  const Tensor x = random_tensor({5, 6, 7}, rng, -4.0f, 4.0f);
  for (const std::vector<int>& axes : std::vector<std::vector<int>>{{0}, {1}, {2}, {0, 1}, {}}) {
    const std::string at =
        " axes " + std::to_string(axes.size() ? axes[0] : -1) + "/" + std::to_string(axes.size());
    check_op("sum" + at, [axes](const auto& v) { return sum(v[0], {.axes = axes}); }, {x});
    check_op("mean" + at, [axes](const auto& v) { return mean(v[0], {.axes = axes}); }, {x});
    check_op("max" + at, [axes](const auto& v) { return max(v[0], {.axes = axes}); }, {x});
  }
  check_op("argmax", [](const auto& v) { return argmax(v[0], -1); }, {x});
  check_op("argmax axis 1", [](const auto& v) { return argmax(v[0], 1); }, {x});
  check_op("softmax", [](const auto& v) { return softmax(v[0], -1); }, {x});
  check_op("log_softmax", [](const auto& v) { return log_softmax(v[0], -1); }, {x});
  check_op("log_softmax axis 1", [](const auto& v) { return log_softmax(v[0], 1); }, {x});
  // Rows of 1,000 classes take a block each on a GPU; ties for the maximum
  // (its first position is the one left out of the sum) and a row of -inf
  // but one.
  std::vector<float> wide = random_tensor({3, 1000}, rng, -8.0f, 8.0f).to_vector<float>();
  wide[17] = wide[600] = 9.0f;
  for (int j = 1000; j < 2000; ++j) wide[static_cast<std::size_t>(j)] = -INFINITY;
  wide[1999] = 0.5f;
  const Tensor classes = Tensor::from_vector(wide, {3, 1000});
  check_op("softmax of 1000 classes", [](const auto& v) { return softmax(v[0], -1); }, {classes});
  check_op("log_softmax of 1000 classes", [](const auto& v) { return log_softmax(v[0], -1); },
           {random_tensor({3, 1000}, rng, -8.0f, 8.0f)});
}

// The recurrent sequence ops (composed of the ops above, so they run
// wherever those do) and layer normalisation, whose host path is oneDNN's
// primitive (the fake accelerator's too: it runs host kernels) and whose GPU
// path is the formula composed: on a GPU the run checks one against the other.
TEST(DeviceOps, SequenceOpsAndLayerNormalizationMatchCpu) {
  std::mt19937 rng(11);
  const Tensor x3 = random_tensor({2, 5, 9}, rng), x4 = random_tensor({2, 5, 12}, rng);
  const Tensor u1 = random_tensor({3, 3}, rng, -0.5f, 0.5f),
               u3 = random_tensor({3, 9}, rng, -0.5f, 0.5f);
  const Tensor u4 = random_tensor({3, 12}, rng, -0.5f, 0.5f), b3 = random_tensor({9}, rng);
  const Tensor x1 = random_tensor({2, 5, 3}, rng);
  check_op("simple_rnn", [](const auto& v) { return simple_rnn(v[0], v[1]); }, {x1, u1});
  check_op("lstm backwards", [](const auto& v) { return lstm(v[0], v[1], {.go_backwards = true}); },
           {x4, u4});
  check_op("gru", [](const auto& v) { return gru(v[0], v[1], v[2], true); }, {x3, u3, b3});
  check_op("gru reset before, hard_sigmoid",
           [](const auto& v) {
             return gru(v[0], v[1], Tensor(), false,
                        {.recurrent_activation = RecurrentActivation::kHardSigmoid});
           },
           {x3, u3});
  const Tensor h = random_tensor({4, 3, 10}, rng, -3.0f, 3.0f);
  const Tensor gamma = random_tensor({10}, rng, 0.5f, 1.5f), beta = random_tensor({10}, rng);
  check_op("layer_normalization",
           [](const auto& v) { return layer_normalization(v[0], v[1], v[2], 1e-3f); },
           {h, gamma, beta});
  check_op("layer_normalization without beta",
           [](const auto& v) { return layer_normalization(v[0], v[1], Tensor(), 1e-6f); },
           {h, gamma});
}

// Batch normalisation in its three modes (training, training folded with a
// ReLU or ReLU6, inference with given statistics), a capped ReLU, and
// gather (an Embedding's op, with repeated indices), forward and backward.
// BatchNormalization's moving statistics: one kernel on a device, the
// CPU's three ops' bits (two products and their sum, no fused multiply-add).
TEST(DeviceOps, MovingAverageIsBitwiseTheCpusThreeOps) {
  std::mt19937 rng(4);
  const Tensor moving = random_tensor({1000}, rng), value = random_tensor({1000}, rng, 0.0f, 3.0f);
  const float momentum = 0.99f;
  const Tensor three_ops =
      add(mul(moving, Tensor::scalar(momentum)), mul(value, Tensor::scalar(1.0f - momentum)));
  EXPECT_EQ(moving_average(moving, value, momentum).to_vector<float>(),
            three_ops.to_vector<float>());
  Tensor on_device;
  {
    DeviceScope on(dev(), {.pin_thread = false});
    on_device = moving_average(moving.copy_to(dev()), value.copy_to(dev()), momentum).cpu();
  }
  EXPECT_EQ(on_device.to_vector<float>(), three_ops.to_vector<float>());
  EXPECT_THROW(moving_average(moving, value.view_rows(0, 10), momentum), ShapeError);
}

TEST(DeviceOps, BatchNormCappedReluAndGatherMatchCpu) {
  std::mt19937 rng(12);
  const Tensor x = random_tensor({4, 5, 3, 6}, rng, -3.0f, 5.0f);
  const Tensor gamma = random_tensor({6}, rng, 0.5f, 1.5f), beta = random_tensor({6}, rng);
  const Tensor high_beta = random_tensor({6}, rng, 4.0f, 6.0f);  // ReLU6's cap is reached
  const Tensor mean = random_tensor({6}, rng), variance = random_tensor({6}, rng, 0.5f, 2.0f);
  check_op("batch_norm training",
           [](const auto& v) { return batch_norm_training(v[0], v[1], v[2], 1e-3f).y; },
           {x, gamma, beta});
  check_op("batch_norm + relu training",
           [](const auto& v) {
             return batch_norm_relu_training(v[0], v[1], v[2], 1e-3f, std::nullopt).y;
           },
           {x, gamma, beta});
  check_op("batch_norm + relu6 training",
           [](const auto& v) { return batch_norm_relu_training(v[0], v[1], v[2], 1e-3f, 6.0f).y; },
           {x, gamma, high_beta});
  check_op(
      "batch_norm inference",
      [&](const auto& v) { return batch_norm_inference(v[0], v[1], v[2], mean, variance, 1e-3f); },
      {x, gamma, beta});
  {
    const BatchNormResult want = batch_norm_training(x, gamma, beta, 1e-3f);
    DeviceScope on(dev(), {.pin_thread = false});
    const BatchNormResult got =
        batch_norm_training(x.copy_to(dev()), gamma.copy_to(dev()), beta.copy_to(dev()), 1e-3f);
    expect_near(want.mean, got.mean.cpu(), 1e-6, "batch mean");
    expect_near(want.variance, got.variance.cpu(), 1e-6, "batch variance");
  }
  const Tensor wide = random_tensor({3, 40}, rng, -4.0f, 9.0f);
  check_op("relu6", [](const auto& v) { return relu(v[0], {.max_value = 6.0f}); }, {wide});
  check_op("leaky relu with a threshold",
           [](const auto& v) { return relu(v[0], {.negative_slope = 0.2f, .threshold = 0.5f}); },
           {wide});
  // Random ops draw on the host and copy (Dropout's mask, an initializer
  // under a DeviceScope): the same mask on every device.
  check_op(
      "dropout",
      [](const auto& v) { return layers::Dropout(0.5f, {.seed = 3})(v[0], {.training = true}); },
      {wide});
  const Tensor table = random_tensor({5, 4}, rng), cube = random_tensor({3, 6, 2}, rng);
  check_op("gather axis 0, repeated rows",
           [](const auto& v) {
             return gather(v[0], Tensor::from_vector<std::int64_t>({3, 0, 3, 1, 3, 3}, {2, 3}), 0);
           },
           {table});
  check_op("gather axis 1",
           [](const auto& v) {
             return gather(v[0], Tensor::from_vector<std::int32_t>({5, 5, 0}), 1);
           },
           {cube});
}

TEST(DeviceOps, MatmulMatchesCpu) {
  std::mt19937 rng(4);
  const Tensor a = random_tensor({33, 17}, rng), b = random_tensor({17, 9}, rng);
  const Tensor at = random_tensor({17, 33}, rng), bt = random_tensor({9, 17}, rng);
  const Tensor bias = random_tensor({9}, rng);
  check_op("matmul", [](const auto& v) { return matmul(v[0], v[1]); }, {a, b});
  check_op("matmul a^T", [](const auto& v) { return matmul(v[0], v[1], {.transpose_a = true}); },
           {at, b});
  check_op("matmul b^T", [](const auto& v) { return matmul(v[0], v[1], {.transpose_b = true}); },
           {a, bt});
  check_op("matmul bias relu",
           [](const auto& v) { return matmul(v[0], v[1], v[2], {.relu = true}); }, {a, b, bias});
  const Tensor ba = random_tensor({3, 8, 5}, rng), bb = random_tensor({3, 5, 4}, rng);
  const Tensor shared = random_tensor({5, 4}, rng);
  check_op("batched matmul", [](const auto& v) { return matmul(v[0], v[1]); }, {ba, bb});
  check_op("batched matmul, shared b", [](const auto& v) { return matmul(v[0], v[1]); },
           {ba, shared});
}

TEST(DeviceOps, ConvolutionAndPoolingMatchCpu) {
  std::mt19937 rng(9);
  const Tensor x = random_tensor({2, 9, 8, 3}, rng);
  const Tensor k = random_tensor({3, 3, 3, 4}, rng), bias = random_tensor({4}, rng);
  check_op("conv2d valid", [](const auto& v) { return conv2d(v[0], v[1], v[2]); }, {x, k, bias});
  // TensorFlow's "same" with stride 2: asymmetric padding on the GPU too.
  check_op("conv2d same stride 2",
           [](const auto& v) {
             return conv2d(v[0], v[1], v[2], {.strides = {2, 2}, .padding = Padding::kSame});
           },
           {x, k, bias});
  // Eight channels: the padded copy moves four at a time.
  check_op("conv2d same stride 2, 8 channels",
           [](const auto& v) {
             return conv2d(v[0], v[1], Tensor(), {.strides = {2, 2}, .padding = Padding::kSame});
           },
           {random_tensor({2, 9, 8, 8}, rng), random_tensor({3, 3, 8, 4}, rng)});
  check_op("depthwise conv2d same stride 2, 8 channels",
           [](const auto& v) {
             return conv2d(v[0], v[1], Tensor(),
                           {.strides = {2, 2}, .padding = Padding::kSame, .groups = 8});
           },
           {random_tensor({2, 10, 10, 8}, rng), random_tensor({3, 3, 1, 8}, rng)});
  check_op("conv2d same 4x4 (even window)",
           [](const auto& v) { return conv2d(v[0], v[1], Tensor(), {.padding = Padding::kSame}); },
           {x, random_tensor({4, 4, 3, 4}, rng)});
  check_op("depthwise conv2d",
           [](const auto& v) {
             return conv2d(v[0], v[1], Tensor(), {.padding = Padding::kSame, .groups = 3});
           },
           {x, random_tensor({3, 3, 1, 3}, rng)});
  check_op(
      "conv2d_transpose same stride 2",
      [](const auto& v) {
        return conv2d_transpose(v[0], v[1], v[2], {.strides = {2, 2}, .padding = Padding::kSame});
      },
      {x, random_tensor({3, 3, 4, 3}, rng), random_tensor({4}, rng)});
  check_op("max_pool2d", [](const auto& v) { return max_pool2d(v[0]); }, {x});
  check_op("avg_pool2d",
           [](const auto& v) {
             return avg_pool2d(v[0], {.pool_size = {3, 3}});
           },
           {x});
}

// On a GPU these take their own paths (gpu_kernels.cc's ConvPath): 1×1
// stride-1 convolutions are cuBLAS matrix products; depthwise ones up to 5×5
// run our kernels (four channels a thread where the multiplier is 1 and the
// channels come in fours, else one), with the kernel gradient summed in
// chunks of 512 positions and blocks of 32 channels; 7×7 stays on cuDNN.
TEST(DeviceOps, DepthwiseAndPointwiseConvolutionsMatchCpu) {
  std::mt19937 rng(11);
  const auto depthwise = [](std::int64_t groups, Conv2DOptions o) {
    o.groups = groups;
    return [o](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], Tensor(), o); };
  };
  check_op("depthwise 3x3, multiplier 2, valid stride 2", depthwise(3, {.strides = {2, 2}}),
           {random_tensor({2, 9, 8, 3}, rng), random_tensor({3, 3, 1, 6}, rng)});
  check_op("depthwise 3x3 dilated 2, same",
           depthwise(4, {.padding = Padding::kSame, .dilation_rate = {2, 2}}),
           {random_tensor({2, 9, 8, 4}, rng), random_tensor({3, 3, 1, 4}, rng)});
  check_op("depthwise 5x5 same stride 2, 8 channels",
           depthwise(8, {.strides = {2, 2}, .padding = Padding::kSame}),
           {random_tensor({2, 11, 10, 8}, rng), random_tensor({5, 5, 1, 8}, rng)});
  check_op("depthwise 3x3, explicit padding 0/2 rows, 1/0 columns",
           depthwise(4, {.padding = Padding::kExplicit, .explicit_padding = {{{0, 2}, {1, 0}}}}),
           {random_tensor({2, 7, 6, 4}, rng), random_tensor({3, 3, 1, 4}, rng)});
  check_op("depthwise 7x7 same (cuDNN)", depthwise(4, {.padding = Padding::kSame}),
           {random_tensor({1, 9, 9, 4}, rng), random_tensor({7, 7, 1, 4}, rng)});
  // 2,700 positions (6 chunks, the last partial) and 40 channels (two
  // blocks, the second partial).
  check_op("depthwise 3x3 same, 3x30x30x40", depthwise(40, {.padding = Padding::kSame}),
           {random_tensor({3, 30, 30, 40}, rng), random_tensor({3, 3, 1, 40}, rng)}, 1e-4);
  check_op("pointwise 1x1 with bias", [](const auto& v) { return conv2d(v[0], v[1], v[2]); },
           {random_tensor({2, 5, 6, 12}, rng), random_tensor({1, 1, 12, 7}, rng),
            random_tensor({7}, rng)});
  check_op("pointwise 1x1 stride 2 (cuDNN)",
           [](const auto& v) {
             return conv2d(v[0], v[1], Tensor(), {.strides = {2, 2}});
           },
           {random_tensor({2, 5, 6, 12}, rng), random_tensor({1, 1, 12, 7}, rng)});
}

TEST(DeviceOps, ShapeIndexAndCastOpsMatchCpu) {
  std::mt19937 rng(5);
  const Tensor x = random_tensor({4, 6}, rng);
  check_op("transpose", [](const auto& v) { return transpose(v[0]); }, {x});
  check_op("transpose 3-d",
           [](const auto& v) {
             return transpose(v[0], {2, 0, 1});
           },
           {random_tensor({2, 3, 4}, rng)});
  check_op("broadcast_to", [](const auto& v) { return broadcast_to(v[0], {3, 4, 6}); }, {x});
  check_op("sum_to", [](const auto& v) { return sum_to(v[0], {1, 6}); }, {x});
  check_op("reshape", [](const auto& v) { return reshape(v[0], {6, 4}); }, {x});
  const Tensor labels = Tensor::from_vector<std::int64_t>({5, 0, 3, 2}, {4, 1});
  check_op("take_along_axis", [](const auto& v) { return take_along_axis(v[0], v[1], 1); },
           {x, labels});
  check_op("one_hot", [](const auto& v) { return one_hot(v[0], 6); },
           {Tensor::from_vector<std::int64_t>({5, 0, 3, 2})});
  check_op("cast uint8 to float32", [](const auto& v) { return cast(v[0], DType::kFloat32); },
           {Tensor::from_vector<std::uint8_t>({0, 7, 255})});
  check_op("cast float32 to int64", [](const auto& v) { return cast(v[0], DType::kInt64); },
           {Tensor::from_vector<float>({-2.5f, 0.0f, 3.75f})});
  check_op("sparse crossentropy",
           [](const auto& v) {
             return losses::SparseCategoricalCrossentropy({.from_logits = true})(v[1], v[0]);
           },
           {x, Tensor::from_vector<std::uint8_t>({5, 0, 3, 2})});
  // A label out of range is an error on the device too, never a silent read.
  DeviceScope on(dev(), {.pin_thread = false});
  EXPECT_THROW(
      take_along_axis(x.copy_to(dev()), Tensor::from_vector<std::int64_t>({6, 0, 0, 0}, {4, 1}), 1),
      IndexError);
}

// `f` forward on the CPU and on the device, bit for bit.
void expect_same_bits(const std::string& name, const Fn& f, const std::vector<Tensor>& inputs) {
  const std::vector<float> want = f(inputs).to_vector<float>();
  std::vector<float> got;
  {
    DeviceScope on(dev(), {.pin_thread = false});
    std::vector<Tensor> moved;
    for (const Tensor& x : inputs) moved.push_back(x.copy_to(dev()));
    got = f(moved).cpu().to_vector<float>();
  }
  ASSERT_EQ(want.size(), got.size()) << name;
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(want[i]), std::bit_cast<std::uint32_t>(got[i]))
        << name << " element " << i << ": " << want[i] << " on the CPU, " << got[i]
        << " on the device";
}

// bfloat16 and float16 operands (mixed precision) on the device against the
// CPU, each op between casts from and to float32 so that both gradients flow
// back through them. On a GPU the elementwise ops run on the half types
// themselves — float32 arithmetic, one rounding — so their results are the
// CPU's bits; matmul runs cuBLAS's half-type product (float32 accumulation
// in its own order: within one rounding of the half type); the rest widen
// to float32 on the device, as the CPU emulates them.
TEST(DeviceOps, HalfTypeOpsMatchCpu) {
  std::mt19937 rng(21);
  for (const DType h : {DType::kBFloat16, DType::kFloat16}) {
    const std::string in = std::string(" in ") + std::string(dtype_name(h));
    // One rounding of h, relative: 8 significant bits, or 11.
    const double ulp = h == DType::kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
    const auto half = [h](const Tensor& t) { return cast(t, h); };
    const auto back = [](const Tensor& t) { return cast(t, DType::kFloat32); };
    const Tensor a = random_tensor({6, 5}, rng), b = random_tensor({5}, rng, 0.5f, 2.0f);
    const std::vector<std::pair<std::string, Fn>> exact_binary = {
        {"add", [&](const auto& x) { return back(add(half(x[0]), half(x[1]))); }},
        {"sub", [&](const auto& x) { return back(sub(half(x[0]), half(x[1]))); }},
        {"mul", [&](const auto& x) { return back(mul(half(x[0]), half(x[1]))); }},
        {"div", [&](const auto& x) { return back(div(half(x[0]), half(x[1]))); }},
        {"maximum", [&](const auto& x) { return back(maximum(half(x[0]), half(x[1]))); }},
        {"where",
         [&](const auto& x) {
           const Tensor p = half(x[0]), q = half(x[1]);
           return back(where(less(p, q), p, q));
         }},
    };
    const std::vector<std::pair<std::string, Fn>> exact_unary = {
        {"neg", [&](const auto& x) { return back(neg(half(x[0]))); }},
        {"abs", [&](const auto& x) { return back(abs(half(x[0]))); }},
        {"square", [&](const auto& x) { return back(square(half(x[0]))); }},
        {"relu", [&](const auto& x) { return back(relu(half(x[0]))); }},
        {"relu6", [&](const auto& x) { return back(relu(half(x[0]), {.max_value = 0.5f})); }},
        {"clip", [&](const auto& x) { return back(clip(half(x[0]), -0.5f, 0.25f)); }},
    };
    for (const auto& [ops, inputs] : {std::make_pair(&exact_binary, std::vector<Tensor>{a, b}),
                                      std::make_pair(&exact_unary, std::vector<Tensor>{a})}) {
      for (const auto& [name, f] : *ops) {
        expect_same_bits(name + in, f, inputs);
        check_op(name + in, f, inputs, ulp);
      }
    }
    check_op("greater" + in, [&](const auto& x) { return greater(half(x[0]), half(x[1])); },
             {a, b});
    check_op(
        "sigmoid" + in, [&](const auto& x) { return back(sigmoid(half(x[0]))); }, {a}, ulp);
    check_op(
        "tanh" + in, [&](const auto& x) { return back(tanh(half(x[0]))); }, {a}, ulp);
    check_op(
        "sum" + in, [&](const auto& x) { return back(sum(half(x[0]), {.axes = {0}})); }, {a}, ulp);
    check_op(
        "softmax" + in, [&](const auto& x) { return softmax(half(x[0]), -1); }, {a}, ulp);

    const Tensor w = random_tensor({5, 4}, rng), bias = random_tensor({4}, rng);
    check_op(
        "matmul" + in, [&](const auto& x) { return back(matmul(half(x[0]), half(x[1]))); }, {a, w},
        ulp);
    check_op(
        "matmul with a bias and relu" + in,
        [&](const auto& x) {
          return back(matmul(half(x[0]), half(x[1]), half(x[2]), {.relu = true}));
        },
        {a, w, bias}, ulp);
    // Native kernels (a GPU's, an avx512_bf16 CPU's) round the float32
    // operand to the half type first; the emulation widens the other: two
    // roundings apart.
    check_op(
        "matmul, a half operand beside a float32 one" + in,
        [&](const auto& x) { return back(matmul(half(x[0]), x[1])); }, {a, w}, 2 * ulp);
    check_op(
        "matmul transposed" + in,
        [&](const auto& x) {
          return back(matmul(half(x[0]), half(x[1]), {.transpose_a = true, .transpose_b = true}));
        },
        {random_tensor({5, 6}, rng), random_tensor({4, 5}, rng)}, ulp);
    check_op(
        "batched matmul" + in, [&](const auto& x) { return back(matmul(half(x[0]), half(x[1]))); },
        {random_tensor({2, 3, 5}, rng), random_tensor({5, 4}, rng)}, ulp);

    const Tensor images = random_tensor({2, 6, 6, 3}, rng);
    const Tensor gamma = random_tensor({3}, rng, 0.5f, 1.5f), beta = random_tensor({3}, rng);
    check_op(
        "batch_norm" + in,
        [&](const auto& x) { return back(batch_norm_training(half(x[0]), x[1], x[2], 1e-3f).y); },
        {images, gamma, beta}, ulp);
    check_op(
        "batch_norm_relu" + in,
        [&](const auto& x) {
          return back(batch_norm_relu_training(half(x[0]), x[1], x[2], 1e-3f, 6.0f).y);
        },
        {images, gamma, beta}, ulp);
    check_op(
        "conv2d" + in,
        [&](const auto& x) {
          return back(conv2d(half(x[0]), half(x[1]), half(x[2]), {.padding = Padding::kSame}));
        },
        {images, random_tensor({3, 3, 3, 4}, rng), random_tensor({4}, rng)}, 2 * ulp);
    check_op(
        "conv2d on 3 channels, stride 2 same (widened)" + in,
        [&](const auto& x) {
          return back(conv2d(half(x[0]), half(x[1]), Tensor(),
                             {.strides = {2, 2}, .padding = Padding::kSame}));
        },
        {images, random_tensor({3, 3, 3, 5}, rng)}, 2 * ulp);
    // Channels in eights: cuDNN's half-type algorithms (fewer: widened).
    const Tensor wide_images = random_tensor({2, 7, 7, 8}, rng);
    check_op(
        "conv2d on 8 channels, same" + in,
        [&](const auto& x) {
          return back(conv2d(half(x[0]), half(x[1]), half(x[2]), {.padding = Padding::kSame}));
        },
        {wide_images, random_tensor({3, 3, 8, 8}, rng), random_tensor({8}, rng)}, 2 * ulp);
    check_op(
        "conv2d on 8 channels, stride 2 same (the padded copy)" + in,
        [&](const auto& x) {
          return back(conv2d(half(x[0]), half(x[1]), Tensor(),
                             {.strides = {2, 2}, .padding = Padding::kSame}));
        },
        {random_tensor({2, 6, 6, 8}, rng), random_tensor({3, 3, 8, 16}, rng)}, 2 * ulp);
    check_op(
        "pointwise conv2d" + in,
        [&](const auto& x) { return back(conv2d(half(x[0]), half(x[1]), half(x[2]))); },
        {images, random_tensor({1, 1, 3, 4}, rng), random_tensor({4}, rng)}, ulp);
    check_op(
        "depthwise conv2d" + in,
        [&](const auto& x) {
          return back(conv2d(half(x[0]), half(x[1]), Tensor(),
                             {.strides = {2, 2}, .padding = Padding::kSame, .groups = 3}));
        },
        {images, random_tensor({3, 3, 1, 3}, rng)}, 2 * ulp);
    check_op(
        "depthwise conv2d, four channels a thread" + in,
        [&](const auto& x) {
          return back(
              conv2d(half(x[0]), half(x[1]), Tensor(), {.padding = Padding::kSame, .groups = 8}));
        },
        {random_tensor({2, 6, 6, 8}, rng), random_tensor({3, 3, 1, 8}, rng)}, 2 * ulp);
    check_op(
        "max_pool2d" + in, [&](const auto& x) { return back(max_pool2d(half(x[0]))); }, {images},
        ulp);
  }
}

// The image ops on the device against the CPU: forwards bit for bit (the
// same expressions in the same order, no fused multiply-adds on either),
// gradients (worked out on the host for a GPU) within float32 rounding.
TEST(DeviceOps, ImageOpsMatchCpu) {
  std::mt19937 rng(23);
  const Tensor images = random_tensor({2, 7, 9, 3}, rng);
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(images.numel()));
  for (std::uint8_t& v : pixels) v = static_cast<std::uint8_t>(rng() % 256);
  const Tensor bytes = Tensor::from_vector(pixels, images.shape());
  for (const char* how : {"bilinear", "nearest"}) {
    for (const std::array<std::int64_t, 2> size :
         {std::array<std::int64_t, 2>{4, 5}, std::array<std::int64_t, 2>{13, 16}}) {
      const std::string what = std::string("resize ") + how + " to " + std::to_string(size[0]) +
                               "x" + std::to_string(size[1]);
      const Fn f = [=](const auto& x) { return image::resize(x[0], size, {.interpolation = how}); };
      expect_same_bits(what, f, {images});
      expect_same_bits(what + " of uint8 images", f, {bytes});
      check_op(what, f, {images});
    }
  }
  // A rotation about the centre for one image; a shear, scale and
  // projective row for the other — points land outside on every side.
  const float c = std::cos(0.6f), s = std::sin(0.6f);
  const Tensor transforms = Tensor::from_vector<float>(
      {c, -s, 4.0f - 4.0f * c + 3.0f * s, s, c, 3.0f - 4.0f * s - 3.0f * c, 0.0f, 0.0f,  //
       1.3f, 0.4f, -2.5f, -0.2f, 0.8f, 2.0f, 0.02f, -0.03f},
      {2, 8});
  for (const char* fill : {"constant", "reflect", "wrap", "nearest"}) {
    for (const char* how : {"bilinear", "nearest"}) {
      const std::string what = std::string("affine_transform ") + how + ", fill " + fill;
      const Fn f = [=](const auto& x) {
        return image::affine_transform(
            x[0], transforms, {.interpolation = how, .fill_mode = fill, .fill_value = 0.5f});
      };
      expect_same_bits(what, f, {images});
      check_op(what, f, {images});
    }
  }
}

// random::uniform on the device draws the host's bits (on a GPU in its
// kernel: philox.h, one expression for both), from any first element and
// range; uniform_next advances its counter as on the host.
TEST(DeviceOps, RandomUniformOnTheDeviceIsTheHostsBits) {
  const random::UniformOptions o{
      .minval = -2.0f, .maxval = 3.0f, .seed = 77, .stream = 5, .first_index = 3};
  const Tensor want = random::uniform({1001}, o);
  std::uint64_t host_counter = 9, device_counter = 9;
  const Tensor want_next = random::uniform_next({3, 7}, 11, host_counter);
  DeviceScope on(dev(), {.pin_thread = false});
  const Tensor got = random::uniform({1001}, o);
  const Tensor got_next = random::uniform_next({3, 7}, 11, device_counter);
  EXPECT_EQ(&got.device(), &dev());
  testing_support::expect_bitwise({want.to_vector<float>()}, {got.cpu().to_vector<float>()},
                                  "random::uniform on " + dev().name());
  testing_support::expect_bitwise({want_next.to_vector<float>()},
                                  {got_next.cpu().to_vector<float>()},
                                  "random::uniform_next on " + dev().name());
  EXPECT_EQ(device_counter, 10u);
  EXPECT_EQ(host_counter, 10u);
}

// Keras's augmentation layers on the device, as on the CPU: the same draws
// (made on the device from the host's expression), the same flipped and
// rotated images, bit for bit.
TEST(DeviceOps, AugmentationLayersRunOnTheDeviceAsOnTheCpu) {
  std::mt19937 rng(24);
  const Tensor images = random_tensor({6, 12, 10, 3}, rng);
  auto augment = [&](Device& d) {
    DeviceScope on(d, {.pin_thread = false});
    layers::RandomFlip flip("horizontal_and_vertical", {.seed = 3});
    layers::RandomRotation rotate(0.2, {.seed = 4});
    layers::RandomRotation turn_constant(0.3, {.fill_mode = "constant", .seed = 5});
    const Tensor x = images.copy_to(d);
    return turn_constant(rotate(flip(x, {.training = true}), {.training = true}),
                         {.training = true})
        .cpu()
        .to_vector<float>();
  };
  const std::vector<float> want = augment(*logical_devices()[0]), got = augment(dev());
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(want[i]), std::bit_cast<std::uint32_t>(got[i]))
        << "element " << i;
}

TEST(DeviceOps, HostCodeGetsAClearErrorNotACrash) {
  DeviceScope on(dev(), {.pin_thread = false});
  const Tensor t = Tensor::ones({3});
  EXPECT_THROW((void)t.data<float>(), DeviceError);
  EXPECT_EQ(t.cpu().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(DeviceOps, RunningOutOfMemoryIsAnErrorNamingTheSize) {
  DeviceScope on(dev(), {.pin_thread = false});
  try {
    (void)Tensor::empty({std::int64_t{1} << 55});  // 128 PiB
    FAIL() << "a 128 PiB tensor was made";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  const Allocator::Stats before = dev().allocator().stats();
  {
    const Tensor t = Tensor::zeros({1024, 1024});
    EXPECT_GE(dev().allocator().stats().bytes_in_use, before.bytes_in_use + (4u << 20));
  }
  EXPECT_EQ(dev().allocator().stats().bytes_in_use, before.bytes_in_use);
}

// NCCL, where the device has a collective (GPUs): one rank sums to its own
// values on the device's stream, and two ranks on one GPU (the logical GPU
// beside it) are refused by name — NCCL takes one rank per GPU — never a
// hang. The fake accelerator has none: its replicas share memory and sum
// in the device.
TEST(DeviceOps, NcclSumsWithOneRankAndRefusesTwoOnOneGpu) {
  detail::DeviceKernels& k = *dev().kernels();
  if (k.runs_host_kernels()) {
    EXPECT_TRUE(k.make_collective({&dev()}).empty());
    EXPECT_EQ(k.collective_name(), "");
    return;
  }
  std::printf("collective: %s\n", k.collective_name().c_str());
  EXPECT_NE(k.collective_name().find("NCCL"), std::string::npos) << k.collective_name();
  std::mt19937 rng(5);
  const Tensor values = random_tensor({1000}, rng);
  DeviceScope on(dev(), {.pin_thread = false});
  const auto one = k.make_collective({&dev()});
  ASSERT_EQ(one.size(), 1u);
  Tensor buf = values.copy_to(dev());
  one[0]->all_reduce_sum(static_cast<float*>(detail::device_pointer(buf)), buf.numel());
  // The host's wait for the sum (its event), after which the watchdog's
  // poll sees nothing in flight.
  one[0]->wait();
  EXPECT_FALSE(one[0]->waiting_since().has_value()) << "a sum that ran still counts as waiting";
  testing_support::expect_bitwise({values.to_vector<float>()}, {buf.cpu().to_vector<float>()},
                                  "one rank's NCCL sum");
  try {
    (void)k.make_collective(devices());
    FAIL() << "NCCL joined two ranks on one GPU";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("one rank per GPU"), std::string::npos) << what;
    EXPECT_NE(what.find(dev().name()), std::string::npos) << what;
  }
}

// Dataset::prefetch_to_device: every byte arrives, through staging areas
// that grow and are reused (sizes up and down, three dtypes with odd byte
// counts), while the device computes on the element before; with
// `synchronize`, a second logical device reads the element on its own
// stream. On a GPU: page-locked memory, the copy stream and its events.
TEST(DeviceOps, PrefetchToDeviceDeliversEveryByteWhileTheDeviceComputes) {
  const std::vector<std::int64_t> rows = {1, 700, 3, 20000, 5, 20000, 90000, 2};
  auto element = [&](std::size_t i) {
    const std::int64_t n = rows[i];
    std::vector<float> f(static_cast<std::size_t>(n * 37));
    for (std::size_t k = 0; k < f.size(); ++k) f[k] = static_cast<float>(k % 1013) * 0.25f - 7.0f;
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n * 3 + 1));
    for (std::size_t k = 0; k < b.size(); ++k) b[k] = static_cast<std::uint8_t>(k * 7 + i);
    std::vector<std::int64_t> l(static_cast<std::size_t>(n));
    for (std::size_t k = 0; k < l.size(); ++k) l[k] = static_cast<std::int64_t>(k) - 3;
    return data::Element(
        {Tensor::from_vector(f, Shape{n, 37}), Tensor::from_vector(b), Tensor::from_vector(l)});
  };
  const data::Dataset ds = data::Dataset::from_generator([&]() -> data::Generator {
    auto i = std::make_shared<std::size_t>(0);
    return [&, i]() -> std::optional<data::Element> {
      if (*i == rows.size()) return std::nullopt;
      return element((*i)++);
    };
  });
  for (const bool two_devices : {false, true}) {
    const std::string what = two_devices ? "read on a second device" : "read on the device";
    std::size_t i = 0;
    Tensor busy;
    for (const data::Element& e :
         ds.prefetch_to_device(dev(), {.buffer_size = 2, .synchronize = two_devices})) {
      ASSERT_LT(i, rows.size());
      const data::Element want = element(i);
      for (std::size_t c = 0; c < 3; ++c) ASSERT_EQ(&e[c].device(), &dev()) << what << " " << i;
      DeviceScope on(*devices()[two_devices ? 1 : 0], {.pin_thread = false});
      // Work queued on the device while the next elements are sent.
      busy = matmul(random::uniform({512, 512}, {.seed = 1}), random::uniform({512, 512}));
      EXPECT_EQ(mul(e[0], Tensor::scalar(2.0f)).to_vector<float>(),
                mul(want[0], Tensor::scalar(2.0f)).to_vector<float>())
          << what << ", element " << i;
      EXPECT_EQ(e[1].to_vector<std::uint8_t>(), want[1].to_vector<std::uint8_t>()) << what;
      EXPECT_EQ(e[2].to_vector<std::int64_t>(), want[2].to_vector<std::int64_t>()) << what;
      ++i;
    }
    EXPECT_EQ(i, rows.size()) << what;
  }
}

// Each rule's update on the device gives the CPU's bits (same operations in
// the same order, no contraction on either side).
TEST(DeviceOps, OptimizerUpdatesAreBitwiseTheCpus) {
  std::mt19937 rng(6);
  const Tensor init = random_tensor({300}, rng);
  std::vector<Tensor> grads;
  for (int s = 0; s < 3; ++s) grads.push_back(random_tensor({300}, rng));
  const std::vector<std::pair<std::string, std::function<Optimizer()>>> rules = {
      {"SGD", [] { return optimizers::SGD({.learning_rate = 0.1}); }},
      {"SGD momentum", [] { return optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9}); }},
      {"SGD nesterov",
       [] { return optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true}); }},
      {"Adam", [] { return optimizers::Adam({.learning_rate = 0.01}); }},
      {"AdamW", [] { return optimizers::AdamW({.learning_rate = 0.01, .weight_decay = 0.1}); }},
      {"RMSprop", [] { return optimizers::RMSprop({.learning_rate = 0.01}); }},
      {"RMSprop momentum centered",
       [] {
         return optimizers::RMSprop({.learning_rate = 0.01, .momentum = 0.5, .centered = true});
       }},
      {"RMSprop centered",
       [] { return optimizers::RMSprop({.learning_rate = 0.01, .centered = true}); }},
      {"RMSprop momentum",
       [] { return optimizers::RMSprop({.learning_rate = 0.01, .momentum = 0.5}); }},
      {"Adagrad", [] { return optimizers::Adagrad({.learning_rate = 0.1}); }},
  };
  for (const auto& [name, make] : rules) {
    auto train = [&](Device& d) {
      DeviceScope on(d, {.pin_thread = false});
      Variable v(init.copy_to(d));
      Optimizer opt = make();
      for (const Tensor& g : grads) opt.apply_gradients({g.copy_to(d)}, {v});
      return v.value().to_vector<float>();
    };
    EXPECT_EQ(train(host_device()), train(dev())) << name;
  }
}

Model mlp() {
  set_random_seed(7);
  Model m = zoo::seed_mlp();
  m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.001}),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {metrics::SparseCategoricalAccuracy()}});
  return m;
}

// The seed MLP on the device trains as on the CPU (within float32 rounding
// of a different summation order), and two logical devices as one.
TEST(DeviceOps, SeedMlpTrainsOnTheDeviceAsOnTheCpu) {
  std::mt19937 rng(8);
  const Tensor x = random_tensor({512, 784}, rng, 0.0f, 1.0f);
  std::vector<std::uint8_t> labels(512);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i * 7 % 10);
  const Tensor y = Tensor::from_vector(labels);
  auto fit = [&](const distribute::Strategy& strategy) {
    Model model;
    {
      auto scope = strategy.scope();
      model = mlp();
    }
    const History h =
        model.fit(x, y, {.batch_size = 64, .epochs = 2, .verbose = 0, .shuffle = false});
    std::vector<double> loss;
    for (const auto& [name, values] : h.history())
      if (name == "loss") loss = values;
    return std::make_pair(testing_support::weights(model), loss);
  };
  const auto cpu = fit(OneDeviceStrategy(*logical_devices()[0]));
  const auto one = fit(OneDeviceStrategy(dev()));
  const auto two = fit(MirroredStrategy({.devices = devices()}));
  testing_support::expect_close(cpu.first, one.first, 1e-4, "1 device vs the CPU");
  testing_support::expect_close(one.first, two.first, 1e-4, "2 logical devices vs 1");
  ASSERT_EQ(cpu.second.size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(cpu.second[e], one.second[e], 1e-4) << "epoch " << e;
    EXPECT_NEAR(one.second[e], two.second[e], 1e-4) << "epoch " << e;
  }
}

// Keras's gradient clipping (clipnorm, global_clipnorm, clipvalue) on the
// device trains as on the CPU: on an accelerator the norms are device ops
// in float32 (on the host, double), so within float32 rounding; on two
// logical devices as on one. The limits are low enough that every step
// clips: without clipping the weights end far from these.
TEST(DeviceOps, ClippedGradientsTrainOnTheDeviceAsOnTheCpu) {
  const auto [x, y] = testing_support::mlp_examples(256, 12);
  const std::vector<std::pair<std::string, ClipOptions>> clips = {
      {"clipnorm", {.clipnorm = 0.05}},
      {"global_clipnorm", {.global_clipnorm = 0.05}},
      {"clipvalue", {.clipvalue = 0.002}}};
  auto fit = [&, &x = x, &y = y](const distribute::Strategy& strategy, const ClipOptions& clip) {
    Model model;
    {
      auto scope = strategy.scope();
      set_random_seed(6);
      model = zoo::seed_mlp();
      model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.5, .clip = clip}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    }
    model.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);
  };
  const auto unclipped = fit(OneDeviceStrategy(*logical_devices()[0]), {});
  for (const auto& [name, clip] : clips) {
    const auto cpu = fit(OneDeviceStrategy(*logical_devices()[0]), clip);
    const auto one = fit(OneDeviceStrategy(dev()), clip);
    const auto two = fit(MirroredStrategy({.devices = devices()}), clip);
    double clipped = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i)
      for (std::size_t j = 0; j < cpu[i].size(); ++j)
        clipped = std::max(clipped, std::abs(static_cast<double>(cpu[i][j]) - unclipped[i][j]));
    EXPECT_GT(clipped, 1e-2) << name << ": the limit must clip";
    testing_support::expect_close(cpu, one, 1e-5, name + ": 1 device vs the CPU");
    testing_support::expect_close(one, two, 1e-5, name + ": 2 logical devices vs 1");
  }
}

// The small CNN (convolutions, pooling, flatten, dense) likewise on one
// device.
TEST(DeviceOps, SmallCnnTrainsOnTheDeviceAsOnTheCpu) {
  std::mt19937 rng(10);
  const Tensor x = random_tensor({128, 28, 28, 1}, rng, 0.0f, 1.0f);
  std::vector<std::uint8_t> labels(128);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i * 3 % 10);
  const Tensor y = Tensor::from_vector(labels);
  auto fit = [&](const distribute::Strategy& strategy) {
    Model model;
    {
      auto scope = strategy.scope();
      set_random_seed(7);
      model = zoo::small_cnn();
      model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.001}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    }
    model.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);
  };
  testing_support::expect_close(fit(OneDeviceStrategy(*logical_devices()[0])),
                                fit(OneDeviceStrategy(dev())), 1e-4, "small CNN, device vs CPU");
}

// The seed MLP and the small CNN under Keras's mixed policies train on the
// device as on the CPU: float32 master weights, half-type activations, and
// under mixed_float16 the LossScaleOptimizer compile wraps the optimizer in.
// SGD with a large step, so that the weights move by far more than the
// tolerance, for two steps: a device's half-type matmuls and convolutions
// round their float32 sums once, natively, and the CPU's emulation rounds
// sums taken in another order, so a few results differ by one rounding of
// the half type — and at this step size such a difference grows step by
// step (on the emulated GPU the seed MLP's largest difference was 1.1e-3
// after two steps of mixed_bfloat16, 1.1e-2 after four, 3.6e-2 after 16).
// A global mixed-precision policy, back to float32 however the test ends.
struct PolicyScope {
  explicit PolicyScope(const char* name) { mixed_precision::set_global_policy(name); }
  ~PolicyScope() { mixed_precision::set_global_policy("float32"); }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;
};

TEST(DeviceOps, MixedPrecisionTrainsOnTheDeviceAsOnTheCpu) {
  std::mt19937 rng(12);
  const Tensor x = random_tensor({256, 784}, rng, 0.0f, 1.0f);
  const Tensor images = random_tensor({64, 28, 28, 1}, rng, 0.0f, 1.0f);
  std::vector<std::uint8_t> labels(256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i * 7 % 10);
  const Tensor y = Tensor::from_vector(labels);
  const Tensor image_labels = slice(y, {0}, {64});
  for (const char* policy : {"mixed_bfloat16", "mixed_float16"}) {
    const PolicyScope scope(policy);
    const double tol = std::string(policy) == "mixed_bfloat16" ? 5e-3 : 1e-3;
    auto fit = [&](const distribute::Strategy& strategy, bool cnn) {
      Model model;
      {
        auto scope = strategy.scope();
        set_random_seed(7);
        model = cnn ? zoo::small_cnn() : zoo::seed_mlp();
        model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.5}),
                       .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
      }
      const auto initial = testing_support::weights(model);
      // Two steps each: 256 rows in batches of 128, 64 images in batches of 32.
      model.fit(cnn ? images : x, cnn ? image_labels : y,
                {.batch_size = cnn ? 32 : 128, .epochs = 1, .verbose = 0, .shuffle = false});
      return std::make_pair(initial, testing_support::weights(model));
    };
    for (const bool cnn : {false, true}) {
      const std::string what = std::string(cnn ? "small CNN" : "seed MLP") + " under " + policy;
      const auto cpu = fit(OneDeviceStrategy(*logical_devices()[0]), cnn);
      const auto on_device = fit(OneDeviceStrategy(dev()), cnn);
      double moved = 0;
      for (std::size_t i = 0; i < cpu.first.size(); ++i)
        for (std::size_t j = 0; j < cpu.first[i].size(); ++j)
          moved =
              std::max(moved, std::abs(static_cast<double>(cpu.second[i][j]) - cpu.first[i][j]));
      EXPECT_GT(moved, 5 * tol) << what << ": the steps must move the weights";
      testing_support::expect_close(cpu.second, on_device.second, tol, what + ", device vs CPU");
    }
  }
}

// One training-mode forward and backward of MobileNetV2 on the device and on
// the CPU from the same weights: the loss, and every variable's gradient
// within 1e-3 of its largest element (floored at 1e-3 of the model's). Mismatches are listed from
// the output back, so the first named is nearest the op that differs.
TEST(DeviceOps, MobileNetV2GradientsMatchTheCpu) {
  std::mt19937 rng(14);
  const Tensor x = random_tensor({8, 32, 32, 3}, rng);
  const Tensor y = Tensor::from_vector<std::int64_t>({0, 3, 6, 9, 2, 5, 8, 1});
  struct Pass {
    double loss = 0;
    std::vector<std::string> names;
    std::vector<std::vector<float>> grads;
  };
  auto pass = [&](Device& d) {
    DeviceScope on(d, {.pin_thread = false});
    set_random_seed(5);
    Model model = applications::MobileNetV2({.input_shape = Shape{32, 32, 3},
                                             .alpha = 0.35,
                                             .classes = 10,
                                             .classifier_activation = ""});
    GradientTape tape;
    const Tensor logits = model(x, {.training = true});
    const Tensor loss = losses::SparseCategoricalCrossentropy({.from_logits = true})(y, logits);
    const std::vector<Variable> vars = model.trainable_weights();
    const std::vector<Tensor> grads = tape.gradient(loss, vars);
    Pass p;
    p.loss = loss.cpu().to_vector<double>()[0];
    for (std::size_t i = 0; i < vars.size(); ++i) {
      p.names.push_back(vars[i].name());
      p.grads.push_back(grads[i].cpu().to_vector<float>());
    }
    return p;
  };
  const Pass cpu = pass(*logical_devices()[0]), device = pass(dev());
  EXPECT_NEAR(cpu.loss, device.loss, 1e-5 * std::max(1.0, cpu.loss));
  ASSERT_EQ(cpu.grads.size(), device.grads.size());
  // A gradient that is zero but for rounding (a batch norm's beta before a
  // convolution and another batch norm) is compared against the model's
  // largest gradient, not its own noise.
  double largest = 0;
  for (const auto& g : cpu.grads)
    for (float v : g) largest = std::max(largest, static_cast<double>(std::abs(v)));
  std::string mismatches;
  for (std::size_t i = cpu.grads.size(); i-- > 0;) {
    ASSERT_EQ(cpu.grads[i].size(), device.grads[i].size()) << cpu.names[i];
    double scale = 1e-3 * largest, worst = 0;
    for (std::size_t j = 0; j < cpu.grads[i].size(); ++j) {
      scale = std::max(scale, static_cast<double>(std::abs(cpu.grads[i][j])));
      worst = std::max(worst, static_cast<double>(std::abs(cpu.grads[i][j] - device.grads[i][j])));
    }
    if (worst > 1e-3 * scale)
      mismatches += "  " + cpu.names[i] + ": max |difference| " + std::to_string(worst) +
                    " against max |gradient| " + std::to_string(scale) + "\n";
  }
  EXPECT_TRUE(mismatches.empty()) << "gradients that differ, from the output back:\n" << mismatches;
}

// MobileNetV2 (batch norm folded with ReLU6, depthwise convolutions, zero
// padding folded into them, global pooling) takes one training step through
// fit on the device as on the CPU, and evaluates (batch norm in inference
// mode, with the moving statistics that step updated) to the same loss.
// A deep ReLU6 network on a batch of 16 is chaotic at the float32 level: on
// the CPU alone, inputs scaled by 1 + 1e-6 move single elements of a step
// by up to ~10% (a ReLU mask flipping), so the step is compared as a whole
// per variable: the L2 norm of the difference within 20% of the step's
// (the perturbed CPU run differs by at most 1.6%)
// and the moving statistics, which need no backward pass, element by element.
TEST(DeviceOps, MobileNetV2TrainsOnTheDeviceAsOnTheCpu) {
  std::mt19937 rng(13);
  const Tensor x = random_tensor({16, 32, 32, 3}, rng);
  std::vector<std::uint8_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i * 3 % 10);
  const Tensor y = Tensor::from_vector(labels);
  struct Run {
    std::vector<std::vector<float>> before, after, statistics;
    std::vector<std::string> names;
    double loss = 0;
  };
  auto values = [](const std::vector<Variable>& vars) {
    std::vector<std::vector<float>> out;
    for (const Variable& v : vars) out.push_back(v.replica_value(0).cpu().to_vector<float>());
    return out;
  };
  auto fit = [&](const distribute::Strategy& strategy) {
    Model model;
    {
      auto scope = strategy.scope();
      set_random_seed(5);
      model = applications::MobileNetV2({.input_shape = Shape{32, 32, 3},
                                         .alpha = 0.35,
                                         .classes = 10,
                                         .classifier_activation = ""});
      model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.05}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    }
    Run run;
    run.before = values(model.trainable_weights());
    model.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
    run.after = values(model.trainable_weights());
    run.statistics = values(model.non_trainable_weights());
    for (const Variable& v : model.trainable_weights()) run.names.push_back(v.name());
    run.loss = model.evaluate(x, y, {.batch_size = 16, .verbose = 0}).at("loss");
    return run;
  };
  const Run cpu = fit(OneDeviceStrategy(*logical_devices()[0]));
  const Run device = fit(OneDeviceStrategy(dev()));
  testing_support::expect_bitwise(cpu.before, device.before, "the initial weights");
  testing_support::expect_close(cpu.statistics, device.statistics, 1e-4, "moving statistics");
  ASSERT_EQ(cpu.after.size(), device.after.size());
  std::vector<double> step(cpu.after.size()), difference(cpu.after.size());
  for (std::size_t i = 0; i < cpu.after.size(); ++i) {
    for (std::size_t j = 0; j < cpu.after[i].size(); ++j) {
      step[i] += std::pow(cpu.after[i][j] - cpu.before[i][j], 2);
      difference[i] += std::pow(cpu.after[i][j] - device.after[i][j], 2);
    }
  }
  // Floored at 1e-3 of the largest step: a variable whose gradient is zero
  // but for rounding (a batch norm's beta before a convolution and another
  // batch norm) takes a step of pure noise.
  const double largest = std::sqrt(*std::max_element(step.begin(), step.end()));
  for (std::size_t i = 0; i < step.size(); ++i) {
    EXPECT_LE(std::sqrt(difference[i]), 0.2 * std::sqrt(step[i]) + 1e-3 * largest)
        << cpu.names[i] << ": the device's step differs from the CPU's";
  }
  EXPECT_NEAR(cpu.loss, device.loss, 1e-3 * std::max(1.0, cpu.loss));
}

// A training step recorded as a graph (DeviceKernels::capture: a CUDA graph
// on a GPU) and replayed gives the eager steps' bits: 50 SGD steps of a
// two-layer network, each replay fed by copying the next batch into the
// recorded step's input. Its forward, loss and backward run through the
// ops and the tape; the update is the optimizers' device kernel, in place.
// A recording cut in parts (detail::RecordingHooks: what the replicas of
// logical GPUs need to meet between their packing and their sum): each
// replay runs the host's work before its first part, then each part and
// the work after it in order — the work between two parts sees the first
// part's result and not the second's. Recording ran nothing, and outside
// a recording there are no hooks.
TEST(DeviceOps, ARecordingCutInPartsDoesTheHostsWorkBetweenThemAtEachReplay) {
  DeviceScope on(dev(), {.pin_thread = false});
  detail::DeviceKernels& k = *dev().kernels();
  if (!k.can_capture()) GTEST_SKIP() << dev().name() << " runs host code: it records nothing";
  EXPECT_EQ(detail::recording_hooks(), nullptr);
  const Tensor a = Tensor::zeros({4}).copy_to(dev());
  std::vector<std::string> happened;
  const auto first_value = [&] {
    return std::to_string(static_cast<int>(a.cpu().to_vector<float>()[0]));
  };
  std::unique_ptr<detail::DeviceGraph> graph = k.capture(dev(), [&] {
    ASSERT_NE(detail::recording_hooks(), nullptr);
    detail::recording_hooks()->at_start([&] { happened.push_back("start " + first_value()); });
    detail::copy_into(a, a + 1.0f);
    detail::recording_hooks()->split([&] { happened.push_back("between " + first_value()); });
    detail::copy_into(a, a * 2.0f);
    detail::recording_hooks()->split([&] { happened.push_back("after " + first_value()); });
  });
  EXPECT_EQ(detail::recording_hooks(), nullptr);
  EXPECT_TRUE(happened.empty());
  EXPECT_EQ(a.cpu().to_vector<float>(), std::vector<float>(4, 0.0f)) << "recording ran nothing";
  graph->replay();
  graph->replay();
  EXPECT_EQ(happened, (std::vector<std::string>{"start 0", "between 1", "after 2", "start 2",
                                                "between 3", "after 6"}));
  EXPECT_EQ(a.cpu().to_vector<float>(), std::vector<float>(4, 6.0f));
}

TEST(DeviceOps, AStepReplayedAsAGraphGivesTheEagerStepsBits) {
  DeviceScope on(dev(), {.pin_thread = false});
  detail::DeviceKernels& k = *dev().kernels();
  if (!k.can_capture()) GTEST_SKIP() << dev().name() << " runs host code: it records nothing";
  constexpr int kSteps = 50;
  constexpr std::int64_t kBatch = 16;
  std::mt19937 rng(21);
  std::vector<Tensor> batches, targets;
  for (int i = 0; i < kSteps; ++i) {
    batches.push_back(random_tensor({kBatch, 24}, rng));
    std::vector<float> hot(kBatch * 5, 0.0f);
    for (std::int64_t r = 0; r < kBatch; ++r)
      hot[static_cast<std::size_t>(r * 5 + (r + i) % 5)] = 1;
    targets.push_back(Tensor::from_vector(hot, Shape{kBatch, 5}));
  }
  const std::vector<Tensor> initial = {random_tensor({24, 32}, rng), random_tensor({32}, rng),
                                       random_tensor({32, 5}, rng), random_tensor({5}, rng)};
  struct Net {
    std::vector<Tensor> weights;
    Tensor x, y, scale;  // the step's input, its targets, −1/batch
  };
  auto make = [&] {
    Net net;
    for (const Tensor& w : initial) net.weights.push_back(w.copy_to(dev()));
    net.x = Tensor::zeros({kBatch, 24});
    net.y = Tensor::zeros({kBatch, 5});
    net.scale = Tensor::full({}, -1.0f / kBatch);
    return net;
  };
  auto step = [&](Net& net) {
    std::vector<Tensor> grads;
    {
      GradientTape tape;
      for (const Tensor& w : net.weights) tape.watch(w);
      const Tensor h = matmul(net.x, net.weights[0], net.weights[1], {.relu = true});
      const Tensor logits = add(matmul(h, net.weights[2]), net.weights[3]);
      const Tensor loss = mul(sum(mul(log_softmax(logits), net.y)), net.scale);
      grads = tape.gradient(loss, net.weights);
    }
    for (std::size_t i = 0; i < grads.size(); ++i)
      k.apply_update({.rule = detail::DeviceUpdate::Rule::kSgd, .lr = 0.25f},
                     static_cast<float*>(detail::device_pointer(net.weights[i])),
                     static_cast<const float*>(detail::device_pointer(grads[i])), {},
                     net.weights[i].numel());
  };
  auto feed = [&](Net& net, int i) {
    detail::copy_into(net.x, batches[static_cast<std::size_t>(i)]);
    detail::copy_into(net.y, targets[static_cast<std::size_t>(i)]);
  };
  Net eager = make();
  for (int i = 0; i < kSteps; ++i) {
    feed(eager, i);
    step(eager);
  }
  // The first batch in place while recording: a recording that ran the
  // step too would take 51 steps.
  Net replayed = make();
  feed(replayed, 0);
  const std::unique_ptr<detail::DeviceGraph> graph = k.capture(dev(), [&] { step(replayed); });
  for (int i = 0; i < kSteps; ++i) {
    feed(replayed, i);
    graph->replay();
  }
  double moved = 0;
  for (std::size_t i = 0; i < initial.size(); ++i) {
    const std::vector<float> a = eager.weights[i].cpu().to_vector<float>(),
                             b = replayed.weights[i].cpu().to_vector<float>(),
                             w0 = initial[i].to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t j = 0; j < a.size(); ++j) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(a[j]), std::bit_cast<std::uint32_t>(b[j]))
          << "weight " << i << " element " << j << ": eager " << a[j] << ", replayed " << b[j];
      moved = std::max(moved, static_cast<double>(std::abs(a[j] - w0[j])));
    }
  }
  EXPECT_GT(moved, 1e-2) << "the steps must move the weights";
}

// What a recording cannot hold is refused by name, and nothing is recorded:
// a value read back to the host, a tensor made in host memory.
TEST(DeviceOps, ARecordedStepThatNeedsTheHostIsRefusedByName) {
  DeviceScope on(dev(), {.pin_thread = false});
  detail::DeviceKernels& k = *dev().kernels();
  if (!k.can_capture()) {
    EXPECT_THROW((void)k.capture(dev(), [] {}), DeviceError);
    GTEST_SKIP() << dev().name() << " runs host code: it records nothing";
  }
  const Tensor x = Tensor::full({4}, 2.0f);
  try {
    (void)k.capture(dev(), [&] { (void)mul(x, x).cpu(); });
    FAIL() << "a copy to the host was recorded";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("copy to the host"), std::string::npos) << e.what();
  }
  try {
    (void)k.capture(dev(), [&] {
      (void)mul(x, Tensor::from_vector(std::vector<float>{1, 2, 3, 4}));
    });
    FAIL() << "a copy from pageable host memory was recorded";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("pageable host memory"), std::string::npos) << e.what();
  }
  // The device works on as before.
  EXPECT_EQ(mul(x, x).cpu().to_vector<float>(), (std::vector<float>{4, 4, 4, 4}));
}

using testing_support::mlp_examples;

using testing_support::LogTexts;

// fit recorded its step on dev() and replayed it `replays` times.
void expect_replayed(const LogTexts& logged, int replays) {
  EXPECT_TRUE(logged.has("fit: the step is recorded as a graph on " + dev().name()))
      << "the step was not recorded: " << logged.all();
  EXPECT_TRUE(
      logged.has("fit: " + std::to_string(replays) + " steps replayed from the recorded step"))
      << logged.all();
}

// Adam with an exponentially decaying rate and decoupled weight decay: the
// numbers a replayed step must have staged anew at each step.
void compile_with_decaying_adam(Model& model, bool run_eagerly) {
  model.compile(
      {.optimizer = optimizers::Adam(
           {.learning_rate = schedules::ExponentialDecay(1e-3, 10, 0.5), .weight_decay = 0.004}),
       .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
       .metrics = {"accuracy"},
       .run_eagerly = run_eagerly});
}

// The largest change of any weight between two lists of a model's weights.
double largest_change(const std::vector<std::vector<float>>& before,
                      const std::vector<std::vector<float>>& after) {
  double moved = 0;
  for (std::size_t i = 0; i < before.size(); ++i)
    for (std::size_t j = 0; j < before[i].size(); ++j)
      moved = std::max(moved, static_cast<double>(std::abs(after[i][j] - before[i][j])));
  return moved;
}

// fit on one GPU records its step after the first and replays it for each
// batch of the same shapes (train/step_graph.h). 50 replays, then the last
// partial batch eagerly, give the eager fit's weights and logs bit for bit,
// with the numbers that change every step: Adam's bias correction, a
// learning rate that decays, and decoupled weight decay. On the device by
// a DeviceScope, by OneDeviceStrategy and by a MirroredStrategy of it alone
// (the guide's code on a machine with one GPU).
TEST(DeviceOps, FitReplaysItsRecordedStepWithTheEagerStepsBits) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(51 * 16 + 5, 9);  // 51 batches of 16, then 5
  LogTexts logged;
  enum class On { kScope, kOneDevice, kMirrored };
  auto fit = [&, &x = x, &y = y](On on, bool run_eagerly) {
    std::optional<DeviceScope> scope;
    distribute::Strategy strategy;
    if (on == On::kScope) scope.emplace(dev());
    if (on == On::kOneDevice) strategy = OneDeviceStrategy(dev());
    if (on == On::kMirrored) strategy = MirroredStrategy({.devices = {&dev()}});
    Model model;
    {
      const auto in = on != On::kScope ? strategy.scope() : nullptr;
      set_random_seed(7);
      model = zoo::seed_mlp();
      compile_with_decaying_adam(model, run_eagerly);
    }
    logged.clear();
    const History h =
        model.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
    return std::pair{testing_support::weights(model), h};
  };
  for (On on : {On::kScope, On::kOneDevice, On::kMirrored}) {
    const std::string where = on == On::kScope       ? "a DeviceScope"
                              : on == On::kOneDevice ? "OneDeviceStrategy"
                                                     : "MirroredStrategy of one device";
    const auto [eager, eager_history] = fit(on, true);
    EXPECT_TRUE(logged.has("not recorded as a graph: compile's run_eagerly is set")) << where;
    const auto [replayed, replayed_history] = fit(on, false);
    EXPECT_TRUE(logged.has("fit: the step is recorded as a graph on " + dev().name()))
        << where << ": the step was not recorded: " << logged.all();
    EXPECT_TRUE(logged.has("fit: 50 steps replayed from the recorded step")) << where;
    testing_support::expect_bitwise(eager, replayed, where + ": 50 replayed steps against eager");
    for (const char* name : {"loss", "accuracy"})
      EXPECT_EQ(eager_history[name], replayed_history[name]) << where << ": " << name;
    // The steps moved the weights (a replay that did nothing would not).
    set_random_seed(7);
    EXPECT_GT(largest_change(testing_support::weights(zoo::seed_mlp()), replayed), 1e-3) << where;
  }
}

// Under mixed_float16 with dynamic loss scaling the step is recorded too:
// the scale is staged before each replay, the gradients' check stays on the
// device and the recorded update kernels skip the update when it fails.
// A scale of 2^20 overflows float16's gradients, and growing every three
// finite steps overflows them again and again: steps are skipped and the
// scale halved in replayed steps as in eager ones. The first step is
// skipped, so it made no Adam slots, and the second runs eagerly too (a
// recording that made them would zero them at every replay). Batch by
// batch the scale and the step count are the eager fit's, and after 49
// replays the weights, loss and accuracy are its bits (Adam with a
// decaying rate: a skipped step that counted would move its bias
// correction).
TEST(DeviceOps, FitReplaysALossScaledStepSkippingOverflowsAsEager) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(51 * 16 + 5, 14);  // 51 batches of 16, then 5
  const PolicyScope policy("mixed_float16");
  LogTexts logged;
  struct Run {
    std::vector<std::vector<float>> weights;
    History history;
    std::vector<double> scales;  // after each batch
    std::vector<std::int64_t> counts;
  };
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const DeviceScope on(dev());
    set_random_seed(11);
    Model model = zoo::seed_mlp();
    const optimizers::LossScaleOptimizer optimizer(
        optimizers::Adam({.learning_rate = schedules::ExponentialDecay(1e-3, 10, 0.5)}),
        {.initial_scale = 1 << 20, .dynamic_growth_steps = 3});
    model.compile({.optimizer = optimizer,
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"},
                   .run_eagerly = run_eagerly});
    Run run;
    auto record = std::make_shared<LambdaCallback>(
        LambdaCallback::Functions{.on_train_batch_end = [&](std::int64_t, const Logs&) {
          run.scales.push_back(optimizer.dynamic_scale());
          run.counts.push_back(model.optimizer().iterations());
        }});
    logged.clear();
    run.history = model.fit(
        x, y,
        {.batch_size = 16, .epochs = 1, .verbose = 0, .callbacks = {record}, .shuffle = false});
    run.weights = testing_support::weights(model);
    return run;
  };
  const Run eager = fit(true);
  const Run replayed = fit(false);
  expect_replayed(logged, 49);
  ASSERT_EQ(eager.scales.size(), 52u);
  EXPECT_EQ(eager.counts[0], 0) << "the first step overflows";
  EXPECT_EQ(eager.scales, replayed.scales) << "the loss scale, batch by batch";
  EXPECT_EQ(eager.counts, replayed.counts) << "the step count, batch by batch";
  // Overflows in replayed steps (batches 2 to 50, 0-based): a step that was
  // skipped halved the scale and left the count.
  int skipped_in_replays = 0;
  for (std::size_t i = 2; i < 51; ++i) {
    if (replayed.counts[i] == replayed.counts[i - 1]) {
      ++skipped_in_replays;
      EXPECT_EQ(replayed.scales[i], replayed.scales[i - 1] / 2) << "batch " << i;
    }
  }
  EXPECT_GE(skipped_in_replays, 5) << "the scale must overflow in replayed steps";
  EXPECT_GT(replayed.counts.back(), 30) << "most steps must be applied";
  testing_support::expect_bitwise(eager.weights, replayed.weights,
                                  "loss-scaled steps, 49 replayed against eager");
  for (const char* name : {"loss", "accuracy"})
    EXPECT_EQ(eager.history[name], replayed.history[name]) << name;
}

// A recording keeps every block its step allocated for all its replays,
// and takes a block the step gave back again for a later allocation of the
// same recording (tensor/backend/cuda/graph_memory.h): it holds about the
// memory an eager step's peak takes above what stays between steps, not
// every byte the step ever asked for. The small CNN and a MobileNetV2 of
// 32×32 images, float32 and mixed_bfloat16.
TEST(DeviceOps, ARecordingHoldsAboutItsEagerStepsPeak) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  std::mt19937 rng(3);
  LogTexts logged;
  for (const char* policy : {"float32", "mixed_bfloat16"}) {
    const PolicyScope in(policy);
    for (const bool mobilenet : {false, true}) {
      const std::int64_t size = mobilenet ? 32 : 28, channels = mobilenet ? 3 : 1;
      const Tensor x = random_tensor({5 * 8, size, size, channels}, rng, 0.0f, 1.0f);
      std::vector<std::uint8_t> labels(5 * 8);
      for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i % 10);
      const Tensor y = Tensor::from_vector(labels);
      auto fit = [&](bool run_eagerly) {
        const DeviceScope on(dev());
        set_random_seed(4);
        Model model = mobilenet ? applications::MobileNetV2({.input_shape = Shape{size, size, 3},
                                                             .classes = 10,
                                                             .classifier_activation = ""})
                                : zoo::small_cnn();
        model.compile({.optimizer = optimizers::Adam(),
                       .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                       .run_eagerly = run_eagerly});
        // An eager step's peak above what is in use before it (the third
        // step: the optimizer's slots made, the pool's blocks warm).
        std::size_t before = 0, peak = 0;
        Allocator& memory = dev().allocator();
        auto watch = std::make_shared<LambdaCallback>(
            LambdaCallback::Functions{.on_train_batch_begin =
                                          [&](std::int64_t b, const Logs&) {
                                            if (b != 2) return;
                                            memory.reset_peak_stats();
                                            before = memory.stats().bytes_in_use;
                                          },
                                      .on_train_batch_end =
                                          [&](std::int64_t b, const Logs&) {
                                            if (b == 2)
                                              peak = memory.stats().peak_bytes_in_use - before;
                                          }});
        logged.clear();
        model.fit(
            x, y,
            {.batch_size = 8, .epochs = 1, .verbose = 0, .callbacks = {watch}, .shuffle = false});
        return peak;
      };
      const std::string what =
          std::string(mobilenet ? "MobileNetV2 32x32" : "small CNN") + ", " + policy;
      const double eager_peak = static_cast<double>(fit(true)) / 1e6;
      fit(false);
      const std::string text = logged.all();
      const std::size_t at = text.find("(it holds ");
      ASSERT_NE(at, std::string::npos) << what << ": not recorded: " << text;
      const double held = std::stod(text.substr(at + 10));
      std::printf("%s: the eager step's peak %.1f MB; the recording holds %.1f MB\n", what.c_str(),
                  eager_peak, held);
      // Without reuse 1.8 to 3.6 times the peak here; with it 1.3 to 1.55.
      EXPECT_LE(held, 1.6 * eager_peak + 0.3)
          << what << ": the recording holds " << held << " MB, the eager step's peak was "
          << eager_peak << " MB";
    }
  }
}

// A step with gradient clipping is recorded and replayed too (its norms are
// device ops): 50 replays give the eager fit's bits, for each of Keras's
// three kinds of clipping.
TEST(DeviceOps, FitReplaysAClippedStepWithTheEagerStepsBits) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(51 * 16, 8);
  LogTexts logged;
  for (const ClipOptions& clip :
       {ClipOptions{.clipnorm = 0.05}, ClipOptions{.global_clipnorm = 0.05},
        ClipOptions{.clipvalue = 0.002}}) {
    auto fit = [&, &x = x, &y = y](bool run_eagerly) {
      const DeviceScope on(dev());
      set_random_seed(2);
      Model model = zoo::seed_mlp();
      model.compile({.optimizer = optimizers::Adam({.clip = clip}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .run_eagerly = run_eagerly});
      logged.clear();
      model.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
      return testing_support::weights(model);
    };
    const auto eager = fit(true);
    const auto replayed = fit(false);
    expect_replayed(logged, 50);
    testing_support::expect_bitwise(eager, replayed, "clipped steps, 50 replayed against eager");
  }
}

// A replayed step's labels are checked on the host before the replay, as
// an eager step checks them: a label out of range is an error naming it,
// never a read out of range on the device, and the steps before it are
// all that counted — in the batch that is recorded (the second) and in a
// replayed one (the sixth).
TEST(DeviceOps, FitChecksAReplayedBatchsLabelsFirst) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  for (const std::int64_t batch : {1, 5}) {  // 0-based: the recorded batch, a replayed one
    auto [x, y] = mlp_examples(8 * 16, 2);
    std::vector<float> labels = y.to_vector<float>();
    labels[static_cast<std::size_t>(batch * 16 + 3)] = 10;  // 10 classes are 0 to 9
    y = Tensor::from_vector(std::vector<std::uint8_t>(labels.begin(), labels.end()));
    LogTexts logged;
    const DeviceScope on(dev());
    set_random_seed(7);
    Model model = zoo::seed_mlp();
    model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.01}),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    try {
      model.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
      ADD_FAILURE() << "a label out of range was trained on (batch " << batch << ")";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("label 10 at position 3 is out of range for 10 classes"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(model.optimizer().iterations(), batch) << "the steps before batch " << batch;
    if (batch > 1) {
      EXPECT_TRUE(logged.has("fit: the step is recorded as a graph"));
    }
  }
}

// Sequences: an Embedding of int32 token ids, then an LSTM or attention.
// The ids cannot be read on the host inside a recording, so their range
// check and the embedding gradient's grouping run before each replay on
// the batch's host copy, written where the recorded kernels read them.
// 15 replays give the eager fit's weights bit for bit (ids repeat within
// a batch, so the grouping's order matters); an id out of range in a
// replayed batch is an IndexError naming it, before that step runs.
TEST(DeviceOps, FitReplaysEmbeddingSequenceStepsWithTheEagerStepsBits) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  constexpr std::int64_t kBatches = 8, kBatch = 4, kSteps = 6, kVocab = 20;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kBatches * kBatch * kSteps));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(kBatches * kBatch));
  std::mt19937 rng(12);
  for (auto& id : ids) id = static_cast<std::int32_t>(rng() % kVocab);
  for (auto& label : labels) label = static_cast<std::int64_t>(rng() % 2);
  const Tensor y = Tensor::from_vector(labels);
  LogTexts logged;
  for (const std::string body : {"lstm", "attention"}) {
    auto fit = [&](const std::vector<std::int32_t>& tokens, bool run_eagerly) {
      const DeviceScope on(dev());
      set_random_seed(5);
      const KerasTensor in = Input({kSteps}, DType::kInt32);
      KerasTensor x = layers::Embedding(kVocab, 8)(in);
      if (body == "lstm") {
        x = layers::LSTM(8)(x);
      } else {
        x = layers::LayerNormalization()(
            layers::Add()({x, layers::MultiHeadAttention(2, 4)({x, x})}));
        x = layers::GlobalAveragePooling1D()(x);
      }
      Model model(in, layers::Dense(2)(x));
      model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .run_eagerly = run_eagerly});
      logged.clear();
      model.fit(Tensor::from_vector(tokens, Shape{kBatches * kBatch, kSteps}), y,
                {.batch_size = kBatch, .epochs = 2, .verbose = 0, .shuffle = false});
      return testing_support::weights(model);
    };
    const auto eager = fit(ids, true);
    const auto replayed = fit(ids, false);
    expect_replayed(logged, 15);
    testing_support::expect_bitwise(eager, replayed, body + ": 15 replayed steps against eager");
    std::vector<std::int32_t> bad = ids;
    bad[static_cast<std::size_t>(5 * kBatch * kSteps + 7)] = kVocab;  // batch 5, position 7
    try {
      (void)fit(bad, false);
      ADD_FAILURE() << body << ": an id out of range was trained on";
    } catch (const IndexError& e) {
      EXPECT_NE(std::string(e.what()).find("index 20 at position 7 is out of range"),
                std::string::npos)
          << e.what();
    }
  }
}

// Keras's augmentation layers in the model (the transfer-learning guide's
// RandomFlip and RandomRotation), recorded: the flip's mask is drawn on the
// device from a staged stream and its reversal is an exact nearest-pixel
// affine transform, the rotation's matrices are worked out on the host
// before each replay from the stream the eager step would draw. 15 replays
// give the eager fit's weights bit for bit.
TEST(DeviceOps, FitReplaysAugmentedImageStepsWithTheEagerStepsBits) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  std::mt19937 rng(31);
  const Tensor x = random_tensor({32, 6, 5, 3}, rng);
  std::vector<std::int64_t> labels(32);
  for (auto& label : labels) label = static_cast<std::int64_t>(rng() % 4);
  const Tensor y = Tensor::from_vector(labels);
  LogTexts logged;
  for (const std::string which : {"flip", "hflip", "vflip", "rotation", "both"}) {
    auto fit = [&](bool run_eagerly) {
      const DeviceScope on(dev());
      set_random_seed(9);
      std::vector<Layer> stack;
      if (which == "hflip") stack.push_back(layers::RandomFlip("horizontal", {.seed = 3}));
      if (which == "vflip") stack.push_back(layers::RandomFlip("vertical", {.seed = 3}));
      if (which == "flip" || which == "both")
        stack.push_back(layers::RandomFlip("horizontal_and_vertical", {.seed = 3}));
      if (which == "rotation" || which == "both")
        stack.push_back(layers::RandomRotation(0.2, {.seed = 4}));
      stack.push_back(layers::Flatten());
      stack.push_back(layers::Dense(4));
      Model model = Sequential(stack, {.input_shape = Shape{6, 5, 3}});
      model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.05}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .run_eagerly = run_eagerly});
      logged.clear();
      model.fit(x, y, {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
      return testing_support::weights(model);
    };
    const auto eager = fit(true);
    const auto replayed = fit(false);
    expect_replayed(logged, 15);
    testing_support::expect_bitwise(eager, replayed, which + ": 15 replayed steps against eager");
  }
}

// Sparse cross-entropy of labels the loss computes (a cast here): their
// range cannot be checked on the host before a replay, so the recording is
// not kept — after the step's host code ran once while recording — and
// the step runs eagerly, as under run_eagerly, bit for bit: the
// optimizer's step count (Adam's bias correction) put back.
class CastLabelsLoss : public LossImpl {
 public:
  CastLabelsLoss() : LossImpl("cast_labels", Reduction::kSumOverBatchSize) {}
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override {
    return inner_.per_example(cast(y_true, DType::kInt32), y_pred);
  }
  std::string class_name() const override { return "CastLabelsLoss"; }

 private:
  Loss inner_ = losses::SparseCategoricalCrossentropy({.from_logits = true});
};

TEST(DeviceOps, FitDropsARecordingItCannotCheckAndCountsEachStepOnce) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(6 * 16, 6);
  LogTexts logged;
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const DeviceScope on(dev());
    set_random_seed(5);
    Model model = zoo::seed_mlp();
    model.compile({.optimizer = optimizers::Adam(),
                   .loss = Loss(std::make_shared<CastLabelsLoss>()),
                   .run_eagerly = run_eagerly});
    logged.clear();
    model.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
    EXPECT_EQ(model.optimizer().iterations(), 6);
    return testing_support::weights(model);
  };
  const auto eager = fit(true);
  const auto dropped = fit(false);
  EXPECT_TRUE(logged.has("an op checks on the host a value the step computes")) << logged.all();
  testing_support::expect_bitwise(eager, dropped, "a dropped recording, then eager steps");
}

// Dense(32) → make() → Dense(10), compiled with SGD: a step that draws
// random numbers in the middle (made after the seed is set, as the rest).
Model mlp_drawing_between(const std::function<Layer()>& make, bool run_eagerly) {
  set_random_seed(3);
  Model model = Sequential({layers::Dense(32, {.activation = "relu"}), make(), layers::Dense(10)},
                           {.input_shape = Shape{784}});
  model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .run_eagerly = run_eagerly});
  return model;
}

// Dropout in a recorded step: its masks are drawn on the device from a
// stream staged before each replay, which advances the layer's counter as
// the eager step does — so a replay draws the eager step's mask, a fresh
// one each step (one mask replayed for ever would train otherwise). 2
// epochs of 8 batches: the first step runs eagerly, the other 15 are
// replays (the recording's first replay is the second step); then the
// weights are the eager fit's bit for bit, and so is the layer's counter
// (the next mask).
TEST(DeviceOps, FitReplaysAStepWithDropoutDrawingTheEagerStepsMasks) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(128, 4);
  LogTexts logged;
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const DeviceScope on(dev());
    Model model = mlp_drawing_between([] { return layers::Dropout(0.5); }, run_eagerly);
    logged.clear();
    model.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
    // The layer's next mask: its counter after the fit.
    const Tensor probe = Tensor::ones({1, 32}).copy_to(dev());
    const Tensor next = model.layers()[1](probe, {.training = true}).cpu();
    auto w = testing_support::weights(model);
    w.push_back(next.to_vector<float>());
    return w;
  };
  const auto eager = fit(true);
  const auto replayed = fit(false);
  expect_replayed(logged, 15);
  testing_support::expect_bitwise(eager, replayed, "Dropout's steps, replayed against eager");
}

// A layer of the user's that draws from a fixed stream it passes itself
// (random::uniform with .stream given) cannot be recorded — each replay
// would draw the same numbers — so the step stays eager, says so, and
// trains as under run_eagerly, bit for bit (nothing was drawn for a
// recording).
class FixedStreamNoise : public SingleInputLayerImpl {
 public:
  FixedStreamNoise() : SingleInputLayerImpl("FixedStreamNoise") {}
  Tensor call(const Tensor& x, const CallContext& ctx) override {
    if (!ctx.training) return x;
    return x + random::uniform(x.shape(),
                               {.minval = -0.1f, .maxval = 0.1f, .seed = 5, .stream = calls_++});
  }

 private:
  std::uint64_t calls_ = 0;
};

TEST(DeviceOps, FitKeepsAStepThatDrawsAFixedStreamEager) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(64, 4);
  LogTexts logged;
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const DeviceScope on(dev());
    Model model = mlp_drawing_between([] { return make_layer<FixedStreamNoise>(); }, run_eagerly);
    logged.clear();
    model.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);
  };
  const auto eager = fit(true);
  const auto not_recorded = fit(false);
  EXPECT_TRUE(
      logged.has("not recorded as a graph: the step draws random numbers of a fixed "
                 "stream"))
      << logged.all();
  testing_support::expect_bitwise(eager, not_recorded, "a fixed stream's steps, eager either way");
}

// fit under a MirroredStrategy of two logical GPUs of one GPU records each
// replica's step on its own stream and replays both together: the sum of
// their gradients in the device orders the streams between the
// recordings' parts (distribute/gradient_reduction.h). 51 batches of 32
// (16 per replica) replay 50 times, the last batch (3 and 2 rows) runs
// eagerly; weights, loss and accuracy are the eager fit's bit for bit, with
// Adam's bias correction, a decaying rate and weight decay staged per
// replica. Dropout between the layers draws each replica's own masks, as
// eagerly. A model whose step changes what the replicas average on the host
// after it (a BatchNormalization's moving statistics) runs eagerly and says
// so.
TEST(DeviceOps, FitReplaysTheStepsOfTwoLogicalGpusWithTheEagerStepsBits) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(51 * 32 + 5, 9);
  LogTexts logged;
  auto fit = [&, &x = x, &y = y](const std::function<Layer()>& between, bool run_eagerly) {
    const MirroredStrategy strategy({.devices = devices()});
    Model model;
    {
      const auto in = strategy.scope();
      set_random_seed(7);
      model = Sequential({layers::Dense(32, {.activation = "relu"}), between(), layers::Dense(10)},
                         {.input_shape = Shape{784}});
      compile_with_decaying_adam(model, run_eagerly);
    }
    logged.clear();
    const History h =
        model.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
    return std::pair{testing_support::weights(model), h};
  };
  const auto dropout = [] { return layers::Dropout(0.3); };
  const auto [eager, eager_history] = fit(dropout, true);
  const auto [replayed, replayed_history] = fit(dropout, false);
  testing_support::expect_each_replica_replayed(logged, devices(), 50);
  testing_support::expect_bitwise(eager, replayed, "two logical GPUs: 50 replays against eager");
  for (const char* name : {"loss", "accuracy"})
    EXPECT_EQ(eager_history[name], replayed_history[name]) << name;
  set_random_seed(7);
  const auto initial = testing_support::weights(
      Sequential({layers::Dense(32, {.activation = "relu"}), dropout(), layers::Dense(10)},
                 {.input_shape = Shape{784}}));
  EXPECT_GT(largest_change(initial, replayed), 1e-3) << "the replays moved the weights";

  const auto batch_norm = [] { return layers::BatchNormalization(); };
  const auto bn_eager = fit(batch_norm, true).first;
  const auto bn = fit(batch_norm, false).first;
  EXPECT_TRUE(logged.has("not recorded as a graph: the step changes '") &&
              logged.has("which the replicas average on the host after each step"))
      << logged.all();
  EXPECT_FALSE(logged.has("recorded as a graph on")) << logged.all();
  testing_support::expect_bitwise(bn_eager, bn, "BatchNormalization on two replicas, eager");
}

// Loss scaling on two logical GPUs, recorded: each replica stages its own
// scale and keeps its own check of the summed gradients on its device; both
// skip the same overflowing steps and move their scales as eagerly. Batch
// by batch the scale is the eager fit's, and so are the weights after it.
TEST(DeviceOps, FitReplaysLossScaledStepsOfTwoLogicalGpusAsEager) {
  if (!dev().kernels()->can_capture()) GTEST_SKIP() << dev().name() << " records nothing";
  const auto [x, y] = mlp_examples(41 * 32, 15);
  const PolicyScope policy("mixed_float16");
  LogTexts logged;
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const MirroredStrategy strategy({.devices = devices()});
    Model model;
    const optimizers::LossScaleOptimizer optimizer(
        optimizers::Adam({.learning_rate = 0.002}),
        {.initial_scale = 1 << 20, .dynamic_growth_steps = 3});
    {
      const auto in = strategy.scope();
      set_random_seed(12);
      model = zoo::seed_mlp();
      model.compile({.optimizer = optimizer,
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .run_eagerly = run_eagerly});
    }
    std::vector<double> scales;
    auto record = std::make_shared<LambdaCallback>(
        LambdaCallback::Functions{.on_train_batch_end = [&](std::int64_t, const Logs&) {
          scales.push_back(optimizer.dynamic_scale());
        }});
    logged.clear();
    model.fit(
        x, y,
        {.batch_size = 32, .epochs = 1, .verbose = 0, .callbacks = {record}, .shuffle = false});
    return std::pair{testing_support::weights(model), scales};
  };
  const auto [eager, eager_scales] = fit(true);
  const auto [replayed, replayed_scales] = fit(false);
  EXPECT_TRUE(logged.has("fit: the step is recorded as a graph on " + devices()[1]->name()))
      << logged.all();
  EXPECT_TRUE(logged.has("steps replayed from the recorded step on each replica")) << logged.all();
  EXPECT_EQ(eager_scales, replayed_scales) << "the loss scale, batch by batch";
  EXPECT_LT(*std::min_element(eager_scales.begin(), eager_scales.end()), 1 << 20)
      << "steps overflowed";
  testing_support::expect_bitwise(eager, replayed, "two logical GPUs, loss scaled");
}

}  // namespace
}  // namespace lockstep
