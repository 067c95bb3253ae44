// The CUDA adapter's entry point: GpuApi over the CUDA runtime and cuBLAS —
// devices, streams (one per logical GPU), the stream-ordered memory pool
// (cudaMallocAsync, kept between steps as PyTorch's caching allocator keeps
// its blocks), copies, and the matrix product. Kernels are in kernels.cu.
#include <cublas_v2.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tensor/backend/cuda/conv.h"
#include "tensor/backend/cuda/gpu_api.h"
#include "tensor/backend/cuda/graph_memory.h"
#include "tensor/backend/cuda/kernels.h"
#include "tensor/backend/cuda/nccl.h"

namespace lockstep::backend::cuda {
namespace {

const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    default:
      return "a cuBLAS error";
  }
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cublas_name(s));
}

// A captured graph: its parts' instantiations, in order (split_capture;
// its memory: Runtime's graph_memory_, graph_memory.h).
struct Graph {
  std::vector<cudaGraphExec_t> parts;
  cudaStream_t stream = nullptr;  // the stream it was captured on
};

// A logical GPU's stream as the library holds it: the stream, its GPU, its
// cuBLAS handle (made at its first matmul) and the graph it is capturing,
// if any. Immortal, as the devices.
struct Stream {
  cudaStream_t stream = nullptr;
  int gpu = 0;
  std::atomic<cublasHandle_t> blas{nullptr};
  Graph* capturing = nullptr;
};

Stream& as(void* s) { return *static_cast<Stream*>(s); }
cudaStream_t as_stream(void* s) { return as(s).stream; }

// cudaSetDevice only when the calling thread's GPU changes (each call is a
// driver round trip; replica threads keep to one GPU).
void use_gpu(int gpu) {
  thread_local int current = -1;
  if (current == gpu) return;
  check(cudaSetDevice(gpu), "cudaSetDevice");
  current = gpu;
}

class CudaApi final : public GpuApi {
 public:
  int device_count(std::string& why) override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      why = std::string("CUDA found no usable GPU: ") + cudaGetErrorString(e);
      return 0;
    }
    if (n == 0) why = "CUDA found no GPU";
    return n;
  }

  std::string describe(int gpu) override {
    cudaDeviceProp p{};
    check(cudaGetDeviceProperties(&p, gpu), "cudaGetDeviceProperties");
    char buf[400];
    std::snprintf(buf, sizeof buf, "%.256s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                  static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    return buf;
  }

  std::string versions() override {
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    int blas = 0;
    cublasGetProperty(MAJOR_VERSION, &blas);
    int blas_minor = 0;
    cublasGetProperty(MINOR_VERSION, &blas_minor);
    char buf[160];
    std::snprintf(buf, sizeof buf, "CUDA runtime %d.%d, driver %d.%d, cuBLAS %d.%d, ",
                  runtime / 1000, runtime % 1000 / 10, driver / 1000, driver % 1000 / 10, blas,
                  blas_minor);
    return buf + CudnnState::version() + ", " + nccl::version();
  }

  void* create_stream(int gpu) override {
    use_gpu(gpu);
    init_pool(gpu);
    auto* s = new Stream();
    check(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    s->gpu = gpu;
    return s;
  }

  // Out of memory is reported here, never at a later launch: a request
  // beyond the GPU's memory is refused before the driver sees it (a
  // stream-ordered allocation may otherwise fail late), and a failed call's
  // error is cleared so the next kernel does not inherit it.
  void* allocate(int gpu, void* stream, std::size_t bytes) override {
    return allocate_from(gpu, stream, bytes, true);
  }
  void* allocate_staged(int gpu, void* stream, std::size_t bytes) override {
    return allocate_from(gpu, stream, bytes, false);
  }
  void* allocate_from(int gpu, void* stream, std::size_t bytes, bool may_reuse) {
    use_gpu(gpu);
    if (Graph* g = as(stream).capturing) {
      // The graph's own memory, outside the pool: its address is fixed for
      // every launch (cudaMalloc is allowed in a relaxed-mode capture). A
      // block the recording was given back is taken again first (not for
      // staged values: an earlier kernel of the graph would write it).
      if (may_reuse) {
        std::lock_guard lock(graph_mutex_);
        if (void* p = graph_memory_.reuse(g, bytes)) return p;
      }
      void* p = nullptr;
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e != cudaSuccess || p == nullptr) {
        (void)cudaGetLastError();
        check(e == cudaSuccess ? cudaErrorMemoryAllocation : e, "cudaMalloc (a graph's memory)");
      }
      std::lock_guard lock(graph_mutex_);
      graph_memory_.add(g, p, bytes);
      return p;
    }
    if (bytes > (std::size_t{1} << 30)) {
      std::size_t free = 0, total = 0;
      check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
      if (bytes > total)
        throw std::runtime_error("cudaMallocAsync: more than the GPU's " + std::to_string(total) +
                                 " bytes");
    }
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, as_stream(stream));
    if (e != cudaSuccess || p == nullptr) {
      (void)cudaGetLastError();
      check(e == cudaSuccess ? cudaErrorMemoryAllocation : e, "cudaMallocAsync");
    }
    return p;
  }
  void deallocate(int gpu, void* stream, void* ptr) override {
    use_gpu(gpu);
    GraphMemory::GiveBack back;
    {
      std::lock_guard lock(graph_mutex_);
      back = graph_memory_.give_back(ptr, as(stream).capturing);
    }
    if (back == GraphMemory::GiveBack::kKept) return;  // reserved for a graph's launches
    if (back == GraphMemory::GiveBack::kFreeNow) {
      check(cudaFree(ptr), "cudaFree (a destroyed graph's memory)");
      return;
    }
    check(cudaFreeAsync(ptr, as_stream(stream)), "cudaFreeAsync");
  }
  void memory_info(int gpu, std::size_t& free, std::size_t& total) override {
    use_gpu(gpu);
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  }

  // From pageable host memory the call returns once the source is staged,
  // so the caller may free it at once.
  void copy_from_host(void* stream, void* dst, const void* host, std::size_t bytes) override {
    select(stream);
    if (as(stream).capturing) {
      cudaPointerAttributes a{};
      if (cudaPointerGetAttributes(&a, host) != cudaSuccess || a.type != cudaMemoryTypeHost) {
        (void)cudaGetLastError();
        throw std::runtime_error(
            "a copy from pageable host memory while the stream is captured as a graph (each "
            "launch would read those bytes again)");
      }
    }
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, as_stream(stream)),
          "copy to the GPU");
  }
  void copy_to_host(void* stream, void* host, const void* src, std::size_t bytes) override {
    select(stream);
    not_capturing(stream, "a copy to the host");
    check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, as_stream(stream)),
          "copy to the host");
    check(cudaStreamSynchronize(as_stream(stream)), "copy to the host");
  }
  void copy_on_device(void* stream, void* dst, const void* src, std::size_t bytes) override {
    select(stream);
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)),
          "copy on the GPU");
  }
  void synchronize(void* stream) override {
    select(stream);
    not_capturing(stream, "waiting for the stream");
    check(cudaStreamSynchronize(as_stream(stream)), "synchronize");
  }

  void* host_allocate(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess || p == nullptr) {
      (void)cudaGetLastError();
      check(e == cudaSuccess ? cudaErrorMemoryAllocation : e, "cudaHostAlloc");
    }
    return p;
  }
  void host_deallocate(void* host) override { check(cudaFreeHost(host), "cudaFreeHost"); }
  void* create_event(int gpu) override {
    use_gpu(gpu);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }
  void destroy_event(void* event) override {
    check(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  }
  void record_event(void* event, void* stream) override {
    check(cudaEventRecord(static_cast<cudaEvent_t>(event), on(stream)), "cudaEventRecord");
  }
  void stream_wait_event(void* stream, void* event) override {
    check(cudaStreamWaitEvent(on(stream), static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent");
  }
  void event_synchronize(void* event) override {
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  bool event_done(void* event) override {
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) return false;
    check(e, "cudaEventQuery");
    return true;
  }

  void profiler(int gpu, bool start) override {
    use_gpu(gpu);
    check(start ? cudaProfilerStart() : cudaProfilerStop(), "cudaProfilerStart/Stop");
  }

  void fill(void* stream, Type type, void* out, std::int64_t n, double value) override {
    launch_fill(on(stream), type, out, n, value);
  }
  void random_uniform(void* stream, float* out, std::int64_t n, std::uint64_t seed,
                      const std::uint64_t* stream_slot, std::uint64_t stream_value,
                      std::uint64_t first_index, float minval, float maxval) override {
    launch_random_uniform(on(stream), out, n, seed, stream_slot, stream_value, first_index, minval,
                          maxval);
  }
  void cast(void* stream, Type from, Type to, const void* x, void* out, std::int64_t n) override {
    launch_cast(on(stream), from, to, x, out, n);
  }
  void binary(void* stream, int kind, Type type, const Broadcast& b, const void* x, const void* y,
              void* out) override {
    launch_binary(on(stream), kind, type, b, x, y, out);
  }
  void unary(void* stream, int kind, Type type, const void* x, void* out, std::int64_t n) override {
    launch_unary(on(stream), kind, type, x, out, n);
  }
  void clip(void* stream, const float* x, float* out, std::int64_t n, float lo, float hi) override {
    launch_clip(on(stream), x, out, n, lo, hi);
  }
  void map2(void* stream, int kind, const float* x, const float* y, float* out,
            std::int64_t n) override {
    launch_map2(on(stream), kind, x, y, out, n);
  }
  void where(void* stream, const Broadcast& b, const bool* c, const float* x, const float* y,
             float* out) override {
    launch_where(on(stream), b, c, x, y, out);
  }
  void reduce(void* stream, int kind, const float* x, float* out, std::int64_t outer,
              std::int64_t n, std::int64_t inner) override {
    launch_reduce(on(stream), kind, x, out, outer, n, inner);
  }
  void argmax(void* stream, const float* x, std::int64_t* out, std::int64_t outer, std::int64_t n,
              std::int64_t inner) override {
    launch_argmax(on(stream), x, out, outer, n, inner);
  }
  void softmax(void* stream, const float* x, float* log_out, float* prob_out, std::int64_t outer,
               std::int64_t n, std::int64_t inner) override {
    launch_softmax(on(stream), x, log_out, prob_out, outer, n, inner);
  }

  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: cuBLAS
  // gets B first. TF32 only when asked (enable_tensor_float_32_execution).
  void gemm(int gpu, void* stream, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
            const float* a, const float* b, float* c, std::int64_t batch, std::int64_t stride_a,
            std::int64_t stride_b, const float* bias, bool relu, bool tf32) override {
    cudaStream_t s = on(stream);
    cublasHandle_t h = handle(gpu, as(stream));
    check_cublas(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH),
                 "cublasSetMathMode");
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto ldb = static_cast<int>(tb ? k : n);
    const auto lda = static_cast<int>(ta ? m : k);
    if (batch == 1) {
      check_cublas(
          cublasSgemm(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                      &one, b, ldb, a, lda, &zero, c, static_cast<int>(n)),
          "cublasSgemm");
    } else {
      check_cublas(
          cublasSgemmStridedBatched(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                    static_cast<int>(k), &one, b, ldb, stride_b, a, lda, stride_a,
                                    &zero, c, static_cast<int>(n), m * n, static_cast<int>(batch)),
          "cublasSgemmStridedBatched");
    }
    if (bias || relu) launch_bias_relu(s, c, bias, batch * m, n, relu);
  }

  // bfloat16 or float16 operands on the tensor cores, float32 accumulation
  // into a float32 product (cuBLAS's default math: the pedantic mode is a
  // float32 setting), then the bias, the relu and one rounding.
  void gemm_half(int gpu, void* stream, Type type, bool ta, bool tb, std::int64_t m, std::int64_t n,
                 std::int64_t k, const void* a, const void* b, void* c, std::int64_t batch,
                 std::int64_t stride_a, std::int64_t stride_b, const void* bias,
                 bool relu) override {
    cudaStream_t s = on(stream);
    cublasHandle_t h = handle(gpu, as(stream));
    check_cublas(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (type != Type::kBf16 && type != Type::kF16)
      throw std::runtime_error("gemm_half takes bfloat16 or float16 operands");
    const cudaDataType_t t = type == Type::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
    const float one = 1.0f, zero = 0.0f;
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto ldb = static_cast<int>(tb ? k : n);
    const auto lda = static_cast<int>(ta ? m : k);
    Scratch product(s, sizeof(float) * static_cast<std::size_t>(batch * m * n),
                    "matmul's float32 product");
    if (batch == 1) {
      check_cublas(
          cublasGemmEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                       &one, b, t, ldb, a, t, lda, &zero, product.as<float>(), CUDA_R_32F,
                       static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx");
    } else {
      check_cublas(cublasGemmStridedBatchedEx(
                       h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                       &one, b, t, ldb, stride_b, a, t, lda, stride_a, &zero, product.as<float>(),
                       CUDA_R_32F, static_cast<int>(n), m * n, static_cast<int>(batch),
                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx");
    }
    launch_bias_relu_round(s, type, product.as<float>(), bias, c, batch * m, n, relu);
  }

  void conv_forward(int, void* stream, const ConvParams& p, const void* x, const void* filter,
                    void* y) override {
    cudnn_.conv_forward(on(stream), p, x, filter, y);
  }
  void conv_backward_data(int, void* stream, const ConvParams& p, const void* dy,
                          const void* filter, void* dx) override {
    cudnn_.conv_backward_data(on(stream), p, dy, filter, dx);
  }
  void conv_backward_filter(int, void* stream, const ConvParams& p, const void* x, const void* dy,
                            void* dfilter) override {
    cudnn_.conv_backward_filter(on(stream), p, x, dy, dfilter);
  }
  void depthwise_forward(void* stream, Type type, const ConvParams& p, const void* x,
                         const void* filter, void* y) override {
    launch_depthwise_forward(on(stream), type, p, x, filter, y);
  }
  void depthwise_backward_data(void* stream, Type type, const ConvParams& p, const void* dy,
                               const void* filter, void* dx) override {
    launch_depthwise_backward_data(on(stream), type, p, dy, filter, dx);
  }
  void depthwise_backward_filter(void* stream, Type type, const ConvParams& p, const void* x,
                                 const void* dy, void* dfilter) override {
    launch_depthwise_backward_filter(on(stream), type, p, x, dy, dfilter);
  }
  void pool_forward(int, void* stream, const PoolParams& p, const float* x, float* y) override {
    cudnn_.pool_forward(on(stream), p, x, y);
  }
  void pool_backward(int, void* stream, const PoolParams& p, const float* x, const float* y,
                     const float* dy, float* dx) override {
    cudnn_.pool_backward(on(stream), p, x, y, dy, dx);
  }
  void nhwc_window(void* stream, int elem_bytes, const void* src, std::int64_t n, std::int64_t sh,
                   std::int64_t sw, std::int64_t c, void* dst, std::int64_t dh, std::int64_t dw,
                   std::int64_t off_h, std::int64_t off_w) override {
    launch_nhwc_window(on(stream), elem_bytes, src, n, sh, sw, c, dst, dh, dw, off_h, off_w);
  }
  void take_along_axis(void* stream, const float* x, const std::int64_t* idx, float* out,
                       std::int64_t outer, std::int64_t n, std::int64_t k,
                       std::int64_t inner) override {
    launch_take_along_axis(on(stream), x, idx, out, outer, n, k, inner);
  }
  void scatter_along_axis(void* stream, const float* g, const std::int64_t* idx, float* out,
                          std::int64_t outer, std::int64_t n, std::int64_t k,
                          std::int64_t inner) override {
    launch_scatter_along_axis(on(stream), g, idx, out, outer, n, k, inner);
  }
  void one_hot(void* stream, const std::int64_t* idx, float* out, std::int64_t count,
               std::int64_t depth, float on_value, float off_value) override {
    launch_one_hot(on(stream), idx, out, count, depth, on_value, off_value);
  }
  void transpose(void* stream, int elem_bytes, int rank, const std::int64_t* out_dims,
                 const std::int64_t* in_strides, const void* x, void* out) override {
    launch_transpose(on(stream), elem_bytes, rank, out_dims, in_strides, x, out);
  }
  void moving_average(void* stream, const float* moving, const float* value, float* out,
                      std::int64_t n, float momentum, float one_minus) override {
    launch_moving_average(on(stream), moving, value, out, n, momentum, one_minus);
  }
  void apply_update(void* stream, const UpdateParams& p, float* value, const float* grad,
                    float* const* slots, int num_slots, std::int64_t n) override {
    launch_update(on(stream), p, value, grad, slots, num_slots, n);
  }
  void relu_general(void* stream, const float* x, float* y, std::int64_t n, float slope, float top,
                    float threshold) override {
    launch_relu_general(on(stream), x, y, n, slope, top, threshold);
  }
  void relu_general_grad(void* stream, const float* g, const float* y, float* dx, std::int64_t n,
                         float slope, float top) override {
    launch_relu_general_grad(on(stream), g, y, dx, n, slope, top);
  }
  void gather_rows(void* stream, int elem_bytes, const void* x, const std::int64_t* idx, void* out,
                   std::int64_t outer, std::int64_t n, std::int64_t m,
                   std::int64_t inner) override {
    launch_gather_rows(on(stream), elem_bytes, x, idx, out, outer, n, m, inner);
  }
  void gather_rows_grad(void* stream, const float* g, const std::int64_t* order,
                        const std::int64_t* starts, const std::int64_t* targets,
                        std::int64_t unique, float* out, std::int64_t outer, std::int64_t n,
                        std::int64_t m, std::int64_t inner) override {
    launch_gather_rows_grad(on(stream), g, order, starts, targets, unique, out, outer, n, m, inner);
  }
  void batch_norm(void* stream, Type type, const void* x, void* y, std::int64_t rows,
                  std::int64_t c, const float* gamma, const float* beta, float* mean,
                  float* variance, bool batch_stats, float epsilon, float bottom,
                  float top) override {
    launch_batch_norm(on(stream), type, x, y, rows, c, gamma, beta, mean, variance, batch_stats,
                      epsilon, bottom, top);
  }
  void batch_norm_backward(void* stream, Type type, const void* x, const void* z, const void* dz,
                           std::int64_t rows, std::int64_t c, const float* gamma, const float* mean,
                           const float* variance, bool batch_stats, float epsilon, float bottom,
                           float top, void* dx, float* dgamma, float* dbeta) override {
    launch_batch_norm_backward(on(stream), type, x, z, dz, rows, c, gamma, mean, variance,
                               batch_stats, epsilon, bottom, top, dx, dgamma, dbeta);
  }
  void resize(void* stream, Type type, const void* in, void* out, std::int64_t n, std::int64_t h,
              std::int64_t w, std::int64_t c, std::int64_t oh, std::int64_t ow, bool bilinear,
              const std::int64_t* y_lower, const std::int64_t* y_upper, const float* y_lerp,
              const std::int64_t* x_lower, const std::int64_t* x_upper,
              const float* x_lerp) override {
    launch_resize(on(stream), type, in, out, n, h, w, c, oh, ow, bilinear, y_lower, y_upper, y_lerp,
                  x_lower, x_upper, x_lerp);
  }
  void affine_transform(void* stream, const float* in, float* out, const float* transforms,
                        std::int64_t rows, std::int64_t n, std::int64_t h, std::int64_t w,
                        std::int64_t c, int fill, bool bilinear, float fill_value) override {
    launch_affine_transform(on(stream), in, out, transforms, rows, n, h, w, c, fill, bilinear,
                            fill_value);
  }
  void sum_buffers(void* stream, const float* const* srcs, int count, float* dst,
                   std::int64_t n) override {
    launch_sum_buffers(on(stream), srcs, count, dst, n);
  }

  // Relaxed mode: the graph's memory is allocated with cudaMalloc while it
  // captures (GpuApi's contract).
  void begin_capture(void* stream) override {
    Stream& s = as(stream);
    if (s.capturing) throw std::runtime_error("begin_capture: the stream is capturing already");
    select(stream);
    check(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    s.capturing = new Graph();
    s.capturing->stream = s.stream;
  }
  void split_capture(void* stream) override {
    Stream& s = as(stream);
    if (!s.capturing) throw std::runtime_error("split_capture: the stream is not capturing");
    select(stream);
    // The capture stays the graph's (s.capturing) while it is cut: an error
    // here leaves it to abort_capture, which frees the parts made so far.
    end_part(s);
    check(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  }
  void* end_capture(void* stream) override {
    Stream& s = as(stream);
    if (!s.capturing) throw std::runtime_error("end_capture: the stream is not capturing");
    select(stream);
    Graph* g = s.capturing;
    {
      std::lock_guard lock(graph_mutex_);
      graph_memory_.recorded(g);
    }
    try {
      end_part(s);
    } catch (...) {
      s.capturing = nullptr;
      release(g);
      throw;
    }
    s.capturing = nullptr;
    return g;
  }
  void abort_capture(void* stream) override {
    Stream& s = as(stream);
    if (!s.capturing) return;
    select(stream);
    Graph* g = s.capturing;
    s.capturing = nullptr;
    cudaGraph_t recorded = nullptr;
    if (cudaStreamEndCapture(s.stream, &recorded) == cudaSuccess && recorded != nullptr)
      cudaGraphDestroy(recorded);
    (void)cudaGetLastError();
    release(g);
  }
  void launch_graph(void* graph, int part, void* stream) override {
    const auto& parts = static_cast<Graph*>(graph)->parts;
    if (part < 0 || static_cast<std::size_t>(part) >= parts.size())
      throw std::runtime_error("cudaGraphLaunch: the graph has no part " + std::to_string(part));
    check(cudaGraphLaunch(parts[static_cast<std::size_t>(part)], on(stream)), "cudaGraphLaunch");
  }
  std::size_t graph_bytes(void* graph) override {
    std::lock_guard lock(graph_mutex_);
    return graph_memory_.bytes(graph);
  }
  void destroy_graph(void* graph) override {
    auto* g = static_cast<Graph*>(graph);
    for (cudaGraphExec_t& part : g->parts) {
      if (part) check(cudaGraphExecDestroy(part), "cudaGraphExecDestroy");
      part = nullptr;
    }
    release(g);
  }

  std::string nccl_version() override { return nccl::version(); }
  void nccl_init_all(int count, const int* gpus, void** comms) override {
    nccl::init_all(count, gpus, comms);
  }
  void nccl_unique_id(char* id) override { nccl::unique_id(id); }
  void nccl_init_ranks(int count, const int* gpus, int nranks, int first_rank, const char* id,
                       double timeout_s, void** comms) override {
    nccl::init_ranks(count, gpus, nranks, first_rank, id, timeout_s, comms);
  }
  void nccl_all_reduce(void* comm, void* stream, float* buf, std::int64_t n) override {
    nccl::all_reduce(comm, on(stream), buf, n);
  }
  void nccl_abort(void* comm) override { nccl::abort(comm); }
  void nccl_destroy(void* comm) override { nccl::destroy(comm); }

 private:
  void not_capturing(void* stream, const char* what) {
    if (as(stream).capturing)
      throw std::runtime_error(std::string(what) + " while the stream is captured as a graph");
  }
  // Ends the capture of s's graph's current part and instantiates it.
  void end_part(Stream& s) {
    cudaGraph_t recorded = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaError_t e = cudaStreamEndCapture(s.stream, &recorded);
    if (e == cudaSuccess && recorded != nullptr) {
      e = cudaGraphInstantiate(&exec, recorded, 0);
      cudaGraphDestroy(recorded);
    }
    if (e != cudaSuccess || exec == nullptr) {
      (void)cudaGetLastError();
      check(e == cudaSuccess ? cudaErrorStreamCaptureInvalidated : e, "the graph's capture");
    }
    s.capturing->parts.push_back(exec);
  }
  // A graph's memory: what its tensors gave back is freed now (after the
  // device's work: cudaFree waits for it; a block from the pool that the
  // graph adopted goes back to the pool on the graph's stream, after its
  // launches), the rest when they give it back.
  void release(Graph* g) {
    for (cudaGraphExec_t part : g->parts) {
      if (part) (void)cudaGraphExecDestroy(part);  // a failed capture's parts
    }
    g->parts.clear();
    std::vector<GraphMemory::ToFree> now;
    {
      std::lock_guard lock(graph_mutex_);
      now = graph_memory_.destroyed(g);
    }
    for (const GraphMemory::ToFree& f : now) {
      if (f.adopted) {
        cudaFreeAsync(f.block, g->stream);
      } else {
        cudaFree(f.block);
      }
    }
    delete g;
  }

  // The stream's GPU made current on the calling thread (a replica thread
  // may run on any GPU).
  void select(void* stream) { use_gpu(as(stream).gpu); }
  cudaStream_t on(void* stream) {
    select(stream);
    return as_stream(stream);
  }
  // One cuBLAS handle per stream, made at its first matmul.
  cublasHandle_t handle(int gpu, Stream& s) {
    if (cublasHandle_t h = s.blas.load(std::memory_order_acquire)) return h;
    std::lock_guard lock(mutex_);
    if (cublasHandle_t h = s.blas.load(std::memory_order_relaxed)) return h;
    use_gpu(gpu);
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    check_cublas(cublasSetStream(h, s.stream), "cublasSetStream");
    s.blas.store(h, std::memory_order_release);
    return h;
  }
  // The pool keeps what a step freed for the next one instead of handing it
  // back to the driver at every synchronisation.
  void init_pool(int gpu) {
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, gpu), "cudaDeviceGetDefaultMemPool");
    std::uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute");
  }

  CudnnState cudnn_;
  std::mutex mutex_;  // cuBLAS handles' creation
  std::mutex graph_mutex_;
  GraphMemory graph_memory_;  // which blocks recorded graphs keep
};

}  // namespace
}  // namespace lockstep::backend::cuda

extern "C" __attribute__((visibility("default"))) lockstep::backend::cuda::GpuApi*
lockstep_cuda_api(int version) {
  if (version != lockstep::backend::cuda::kApiVersion) return nullptr;
  static auto* api = new lockstep::backend::cuda::CudaApi();  // immortal, as the devices
  return api;
}
