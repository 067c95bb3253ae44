// Internal: how the device lists of tensor/device.cc get their accelerator
// devices — the fake accelerator (tensor/fake_accelerator.cc) and the GPUs
// that the CUDA adapter finds (tensor/gpu_kernels.cc).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/device.h"

namespace lockstep::detail {

std::unique_ptr<Device> make_fake_device(int index, const std::vector<int>& cores, int num_threads);

struct GpuDiscovery {
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devices;  // logical GPUs, `per_physical` per physical GPU
  int physical_count = 0;
  std::string unavailable;  // why there are none
};

// Loads the CUDA adapter (liblockstep_cuda.so) and makes the logical GPUs;
// never throws: a machine without a driver or a build without CUDA gets an
// empty list and the reason.
GpuDiscovery discover_gpus(int per_physical, const std::vector<int>& cores);

}  // namespace lockstep::detail
