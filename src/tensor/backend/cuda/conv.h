// cuDNN's convolutions and pooling for runtime.cu's GpuApi (conv.cu): a
// handle per stream and the deterministic algorithm chosen per shape.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <utility>

#include "tensor/backend/cuda/gpu_api.h"

namespace lockstep::backend::cuda {

struct ConvPlan;  // a convolution shape's descriptors and algorithms (conv.cu)

class CudnnState {
 public:
  CudnnState();
  ~CudnnState();
  CudnnState(const CudnnState&) = delete;
  CudnnState& operator=(const CudnnState&) = delete;

  // Data and filter of p.type.
  void conv_forward(cudaStream_t s, const ConvParams& p, const void* x, const void* filter,
                    void* y);
  void conv_backward_data(cudaStream_t s, const ConvParams& p, const void* dy, const void* filter,
                          void* dx);
  void conv_backward_filter(cudaStream_t s, const ConvParams& p, const void* x, const void* dy,
                            void* dfilter);
  void pool_forward(cudaStream_t s, const PoolParams& p, const float* x, float* y);
  void pool_backward(cudaStream_t s, const PoolParams& p, const float* x, const float* y,
                     const float* dy, float* dx);
  // "cuDNN 9.19".
  static std::string version();

 private:
  cudnnHandle_t handle(cudaStream_t s);
  template <typename Perf, typename Rank, typename Size>
  std::pair<int, std::size_t> choose(int pass, const ConvParams& p, int count, const char* what,
                                     const ConvPlan*& plan, Rank&& rank, Size&& size);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::backend::cuda
