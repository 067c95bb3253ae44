// Who decides whether an op runs natively on bfloat16 or float16 operands
// (tensor/ops/bf16.h's native_half): the current device's kernels, never
// the host's CPU. A recording device says which op families it takes in
// half types; the matmul, conv2d and pooling it is handed carry half-type
// operands exactly when it takes them — on every host (before, an
// avx512_bf16 host's oneDNN answered for a GPU too, and a GPU was handed
// bfloat16 convolutions it had no kernel for).
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"

namespace lockstep {
namespace {

using detail::HalfOp;

struct Seen {
  std::string op;
  DType a = DType::kFloat32;
  DType b = DType::kFloat32;
};

// Kernels that compute nothing: they record the dtypes each op is handed
// and return uninitialised tensors of its result's shape and dtype.
class RecordingKernels final : public detail::DeviceKernels {
 public:
  explicit RecordingKernels(std::set<HalfOp> takes) : takes_(std::move(takes)) {}
  std::string describe() const override { return "a recording device (tests)"; }
  bool takes_half(HalfOp op, DType) const override { return takes_.count(op) > 0; }
  void copy_from_host(Device&, void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_to_host(Device&, void* dst, const void* src, std::size_t bytes) override {
    std::memcpy(dst, src, bytes);
  }
  void copy_on_device(Device&, void* dst, const void* src, std::size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void synchronize(Device&) override {}
  Tensor cast(const Tensor& x, DType dtype) override { return Tensor::empty(x.shape(), dtype); }
  Tensor matmul(const Tensor& a, const Tensor& b, const Tensor&, const MatmulOptions&) override {
    seen.push_back({"matmul", a.dtype(), b.dtype()});
    return Tensor::empty({a.shape()[0], b.shape()[1]}, a.dtype());
  }
  Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor&,
                const detail::ConvGeometry& g) override {
    seen.push_back({"conv2d", x.dtype(), kernel.dtype()});
    return Tensor::empty({g.n, g.oh, g.ow, g.oc}, x.dtype());
  }
  Tensor pool2d(const Tensor& x, const detail::PoolGeometry& g) override {
    seen.push_back({"pool2d", x.dtype(), x.dtype()});
    return Tensor::empty({g.n, g.oh, g.ow, g.c}, x.dtype());
  }

  std::vector<Seen> seen;

 private:
  std::set<HalfOp> takes_;
};

// The dtypes matmul, conv2d and max_pool2d hand a device that takes the
// half-type ops in `takes`, given operands of `half` (and a float32 matmul
// operand beside a half one).
std::vector<Seen> dispatch(const std::set<HalfOp>& takes, DType half) {
  RecordingKernels kernels(takes);
  Device device(DeviceType::kFake, 90, {0}, 1, std::make_unique<CachingAllocator>(), &kernels);
  const Tensor a = Tensor::zeros({4, 3}, half).copy_to(device);
  const Tensor b = Tensor::zeros({3, 2}, half).copy_to(device);
  const Tensor b32 = Tensor::zeros({3, 2}).copy_to(device);
  const Tensor images = Tensor::zeros({1, 4, 4, 3}, half).copy_to(device);
  const Tensor kernel = Tensor::zeros({3, 3, 3, 2}, half).copy_to(device);
  DeviceScope scope(device, {.pin_thread = false});
  (void)matmul(a, b);
  (void)matmul(a, b32);
  (void)conv2d(images, kernel, Tensor(), {});
  (void)max_pool2d(images);
  return kernels.seen;
}

void expect_seen(const std::vector<Seen>& seen, const std::vector<Seen>& want,
                 const std::string& what) {
  ASSERT_EQ(seen.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(seen[i].op, want[i].op) << what;
    EXPECT_EQ(seen[i].a, want[i].a) << what << ": " << want[i].op << "'s first operand";
    EXPECT_EQ(seen[i].b, want[i].b) << what << ": " << want[i].op << "'s second operand";
  }
}

TEST(HalfDispatch, ADeviceThatTakesNoHalfOpsIsHandedFloat32WhateverTheHostCpu) {
  const DType f32 = DType::kFloat32;
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    expect_seen(
        dispatch({}, half),
        {{"matmul", f32, f32}, {"matmul", f32, f32}, {"conv2d", f32, f32}, {"pool2d", f32, f32}},
        std::string(dtype_name(half)));
  }
}

TEST(HalfDispatch, ADeviceThatTakesHalfMatmulsIsHandedThemInTheHalfType) {
  const DType f32 = DType::kFloat32;
  for (const DType half : {DType::kBFloat16, DType::kFloat16}) {
    // A float32 operand beside a half one is rounded to the half type, as
    // native kernels on a CPU take it.
    expect_seen(dispatch({HalfOp::kMatmul}, half),
                {{"matmul", half, half},
                 {"matmul", half, half},
                 {"conv2d", f32, f32},
                 {"pool2d", f32, f32}},
                std::string(dtype_name(half)));
    expect_seen(dispatch({HalfOp::kMatmul, HalfOp::kConv}, half),
                {{"matmul", half, half},
                 {"matmul", half, half},
                 {"conv2d", half, half},
                 {"pool2d", f32, f32}},
                std::string(dtype_name(half)) + ", convolutions taken too");
  }
}

}  // namespace
}  // namespace lockstep
