// The fake accelerator: host memory that only device code may touch, run by
// the CPU's kernels (tensor/device_kernels.h). CI has no GPU; on this device
// every host access that a GPU would refuse is refused the same way, so a
// trainer or an op that forgot its device path fails on every push.
#include <cstring>

#include "lockstep/tensor/device_kernels.h"
#include "tensor/accelerators.h"

namespace lockstep::detail {
namespace {

class FakeKernels final : public DeviceKernels {
 public:
  std::string describe() const override {
    return "the fake accelerator: the CPU's kernels on memory host code may not touch";
  }
  bool runs_host_kernels() const override { return true; }
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
  void sum_buffers(Device&, const std::vector<const float*>& srcs, float* dst,
                   std::int64_t n) override {
    // In rank order, as the GPU's kernel.
    for (std::int64_t i = 0; i < n; ++i) {
      float s = srcs[0][i];
      for (std::size_t r = 1; r < srcs.size(); ++r) s += srcs[r][i];
      dst[i] = s;
    }
  }
};

FakeKernels& fake_kernels() {
  static FakeKernels* k = new FakeKernels();  // immortal, as the devices
  return *k;
}

}  // namespace

std::unique_ptr<Device> make_fake_device(int index, const std::vector<int>& cores,
                                         int num_threads) {
  return std::make_unique<Device>(DeviceType::kFake, index, cores, num_threads,
                                  std::make_unique<CachingAllocator>(), &fake_kernels());
}

}  // namespace lockstep::detail
