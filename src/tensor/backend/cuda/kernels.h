// The CUDA adapter's kernels, each queued on a stream (kernels.cu,
// batch_norm.cu, depthwise.cu, image.cu); runtime.cu's GpuApi calls them.
// Every launch is checked: a failure throws std::runtime_error with CUDA's
// message.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "tensor/backend/cuda/gpu_api.h"

namespace lockstep::backend::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" +
                             cudaGetErrorString(e) + ")");
}
// After a launch: a bad configuration shows here, a fault at the next sync.
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }

// Stream-ordered scratch (cuDNN's workspaces, partial sums): taken from the
// stream's pool, freed once the kernels queued before the free have run.
// Zero bytes take nothing.
class Scratch {
 public:
  Scratch(cudaStream_t s, std::size_t bytes, const char* what) : s_(s) {
    if (bytes > 0) check(cudaMallocAsync(&p_, bytes, s), what);
  }
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, s_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  cudaStream_t s_;
  void* p_ = nullptr;
};

// The adapter's elementwise launch shape: blocks of kThreads over n items,
// at most 2^20 blocks, each kernel a grid-stride loop (LOCKSTEP_FOR_EACH).
constexpr int kThreads = 256;

inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 16 ? 65535 * 16 : b));
}

#define LOCKSTEP_FOR_EACH(i, n)                                                                    \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

void launch_fill(cudaStream_t s, Type type, void* out, std::int64_t n, double value);
void launch_random_uniform(cudaStream_t s, float* out, std::int64_t n, std::uint64_t seed,
                           const std::uint64_t* stream_slot, std::uint64_t stream_value,
                           std::uint64_t first_index, float minval, float maxval);
void launch_cast(cudaStream_t s, Type from, Type to, const void* x, void* out, std::int64_t n);
void launch_binary(cudaStream_t s, int kind, Type type, const Broadcast& b, const void* x,
                   const void* y, void* out);
void launch_unary(cudaStream_t s, int kind, Type type, const void* x, void* out, std::int64_t n);
void launch_clip(cudaStream_t s, const float* x, float* out, std::int64_t n, float lo, float hi);
void launch_map2(cudaStream_t s, int kind, const float* x, const float* y, float* out,
                 std::int64_t n);
void launch_where(cudaStream_t s, const Broadcast& b, const bool* c, const float* x, const float* y,
                  float* out);
void launch_reduce(cudaStream_t s, int kind, const float* x, float* out, std::int64_t outer,
                   std::int64_t n, std::int64_t inner);
void launch_argmax(cudaStream_t s, const float* x, std::int64_t* out, std::int64_t outer,
                   std::int64_t n, std::int64_t inner);
void launch_softmax(cudaStream_t s, const float* x, float* log_out, float* prob_out,
                    std::int64_t outer, std::int64_t n, std::int64_t inner);
void launch_bias_relu(cudaStream_t s, float* c, const float* bias, std::int64_t rows,
                      std::int64_t n, bool relu);
// out (bfloat16 or float16: `type`) = round(c + bias, relu'd), c float32
// [rows, n], bias null or `type` [n].
void launch_bias_relu_round(cudaStream_t s, Type type, const float* c, const void* bias, void* out,
                            std::int64_t rows, std::int64_t n, bool relu);
// Elements of `elem_bytes` bytes, copied as the widest word that divides a
// pixel's bytes.
void launch_nhwc_window(cudaStream_t s, int elem_bytes, const void* src, std::int64_t n,
                        std::int64_t sh, std::int64_t sw, std::int64_t c, void* dst,
                        std::int64_t dh, std::int64_t dw, std::int64_t off_h, std::int64_t off_w);
void launch_take_along_axis(cudaStream_t s, const float* x, const std::int64_t* idx, float* out,
                            std::int64_t outer, std::int64_t n, std::int64_t k, std::int64_t inner);
void launch_scatter_along_axis(cudaStream_t s, const float* g, const std::int64_t* idx, float* out,
                               std::int64_t outer, std::int64_t n, std::int64_t k,
                               std::int64_t inner);
void launch_one_hot(cudaStream_t s, const std::int64_t* idx, float* out, std::int64_t count,
                    std::int64_t depth, float on, float off);
void launch_transpose(cudaStream_t s, int elem_bytes, int rank, const std::int64_t* out_dims,
                      const std::int64_t* in_strides, const void* x, void* out);
void launch_relu_general(cudaStream_t s, const float* x, float* y, std::int64_t n, float slope,
                         float top, float threshold);
void launch_relu_general_grad(cudaStream_t s, const float* g, const float* y, float* dx,
                              std::int64_t n, float slope, float top);
void launch_gather_rows(cudaStream_t s, int elem_bytes, const void* x, const std::int64_t* idx,
                        void* out, std::int64_t outer, std::int64_t n, std::int64_t m,
                        std::int64_t inner);
void launch_gather_rows_grad(cudaStream_t s, const float* g, const std::int64_t* order,
                             const std::int64_t* starts, const std::int64_t* targets,
                             std::int64_t unique, float* out, std::int64_t outer, std::int64_t n,
                             std::int64_t m, std::int64_t inner);
// depthwise.cu: data and kernels of `type` (float32, bfloat16, float16).
void launch_depthwise_forward(cudaStream_t s, Type type, const ConvParams& p, const void* x,
                              const void* f, void* y);
void launch_depthwise_backward_data(cudaStream_t s, Type type, const ConvParams& p, const void* dy,
                                    const void* f, void* dx);
void launch_depthwise_backward_filter(cudaStream_t s, Type type, const ConvParams& p, const void* x,
                                      const void* dy, void* df);
// image.cu
void launch_resize(cudaStream_t s, Type type, const void* in, void* out, std::int64_t n,
                   std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oh, std::int64_t ow,
                   bool bilinear, const std::int64_t* y_lower, const std::int64_t* y_upper,
                   const float* y_lerp, const std::int64_t* x_lower, const std::int64_t* x_upper,
                   const float* x_lerp);
void launch_affine_transform(cudaStream_t s, const float* in, float* out, const float* transforms,
                             std::int64_t rows, std::int64_t n, std::int64_t h, std::int64_t w,
                             std::int64_t c, int fill, bool bilinear, float fill_value);
// batch_norm.cu: x, y, z, dz, dx of `type` (float32, bfloat16, float16).
void launch_batch_norm(cudaStream_t s, Type type, const void* x, void* y, std::int64_t rows,
                       std::int64_t c, const float* gamma, const float* beta, float* mean,
                       float* variance, bool batch_stats, float epsilon, float bottom, float top);
void launch_batch_norm_backward(cudaStream_t s, Type type, const void* x, const void* z,
                                const void* dz, std::int64_t rows, std::int64_t c,
                                const float* gamma, const float* mean, const float* variance,
                                bool batch_stats, float epsilon, float bottom, float top, void* dx,
                                float* dgamma, float* dbeta);
void launch_moving_average(cudaStream_t s, const float* moving, const float* value, float* out,
                           std::int64_t n, float momentum, float one_minus);
void launch_update(cudaStream_t s, const UpdateParams& p, float* value, const float* grad,
                   float* const* slots, int num_slots, std::int64_t n);
void launch_sum_buffers(cudaStream_t s, const float* const* srcs, int count, float* dst,
                        std::int64_t n);

}  // namespace lockstep::backend::cuda
