// The emulated CUDA adapter (emulated.h): liblockstep_cuda_emulated.so
// exports lockstep_cuda_api as the real adapter does, so a test process
// that sets LOCKSTEP_CUDA_LIBRARY to it gets GPUs through the same dlopen,
// the same GpuKernels and the same logical devices as on a real one
// (LOCKSTEP_EMULATED_GPUS of them: 1 unless set). This file: memory (host
// memory, never touched by Lockstep's host code: Tensor::data refuses a GPU
// tensor), streams and events (the kernels run at once, in call order:
// every stream is in order already), copies, and kernels.cu's kernels with
// their per-element rules (element_rules.h), NCCL's all-reduce among
// threads (emulated_nccl.h). A stream that captures
// records its kernels and copies instead, as CUDA graphs do: arguments
// taken when queued, the memory allocated meanwhile the graph's
// (graph_memory.h), a copy to the host or from pageable memory refused. Fresh memory is filled with
// NaN bytes, so a kernel that leaves part of its output unwritten shows.
#include <unistd.h>  // gethostname

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulated.h"
#include "emulated_nccl.h"
#include "tensor/backend/cuda/element_rules.h"
#include "tensor/backend/cuda/graph_memory.h"

namespace lockstep::backend::cuda::emulated {
namespace {

// What the emulated GPU offers: more than any test asks for, less than a
// 128 PiB tensor.
constexpr std::size_t kCapacity = std::size_t{64} << 30;
constexpr std::size_t kAlignment = 256;  // cudaMalloc's
constexpr int kMaxGpus = 8;

std::int64_t count_of(const Broadcast& b) {
  std::int64_t n = 1;
  for (int d = 0; d < b.rank; ++d) n *= b.dims[d];
  return n;
}

template <int K>
void offsets(const Broadcast& b, std::int64_t i, std::int64_t (&off)[K]) {
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = b.rank - 1; d >= 0; --d) {
    const std::int64_t c = i % b.dims[d];
    i /= b.dims[d];
    for (int k = 0; k < K; ++k) off[k] += c * b.strides[k][d];
  }
}

// How many GPUs: LOCKSTEP_EMULATED_GPUS (1 to 8, else 1), of which those
// CUDA_VISIBLE_DEVICES lists by number, as CUDA counts them.
int emulated_gpus() {
  const char* named = std::getenv("LOCKSTEP_EMULATED_GPUS");  // NOLINT(concurrency-mt-unsafe)
  const int n = named ? std::atoi(named) : 1;
  const int all = n >= 1 && n <= kMaxGpus ? n : 1;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  if (visible == nullptr) return all;
  int count = 0;
  for (const char* p = visible; *p != '\0';) {
    char* end = nullptr;
    const long id = std::strtol(p, &end, 10);
    if (end == p) break;  // CUDA stops at the first entry it cannot read
    if (id < 0 || id >= all) break;
    ++count;
    p = *end == ',' ? end + 1 : end;
  }
  return count;
}

// Which of the machine's emulated GPUs this process's `gpu` is: the
// gpu-th entry of CUDA_VISIBLE_DEVICES when set, as CUDA maps them, named
// with the host so that ranks of several processes compare them.
std::string machine_gpu(int gpu) {
  int physical = gpu;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {  // NOLINT(concurrency-mt-unsafe)
    const char* p = visible;
    for (int k = 0; k < gpu && *p != '\0'; ++k) {
      while (*p != '\0' && *p != ',') ++p;
      if (*p == ',') ++p;
    }
    physical = std::atoi(p);
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return std::string(host) + ":emulated GPU " + std::to_string(physical);
}

class EmulatedApi final : public GpuApi {
 public:
  int device_count(std::string& why) override {
    const int n = emulated_gpus();
    if (n == 0) why = "CUDA_VISIBLE_DEVICES names none of the emulated GPUs";
    return n;
  }
  std::string describe(int) override {
    return "an emulated GPU (host memory and host loops of tests/support/emulated_cuda; no CUDA)";
  }
  std::string versions() override {
    return "emulated CUDA adapter, interface version " + std::to_string(kApiVersion);
  }
  void* create_stream(int) override { return new Stream(); }

  void* allocate(int gpu, void* stream, std::size_t bytes) override {
    return allocate_from(gpu, stream, bytes, true);
  }
  void* allocate_staged(int gpu, void* stream, std::size_t bytes) override {
    return allocate_from(gpu, stream, bytes, false);
  }
  void* allocate_from(int gpu, void* stream, std::size_t bytes, bool may_reuse) {
    std::lock_guard lock(mutex_);
    std::size_t& in_use = in_use_[index(gpu)];
    if (bytes > kCapacity - in_use)
      throw std::runtime_error("emulated GPU " + std::to_string(gpu) + " has " +
                               std::to_string(kCapacity - in_use) + " of its " +
                               std::to_string(kCapacity) + " bytes free");
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    Graph* recording = as(stream).capturing;
    if (recording != nullptr && may_reuse) {
      if (void* p = graph_memory_.reuse(recording, rounded)) return p;
    }
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) throw std::runtime_error("the emulated GPU's host allocation failed");
    std::memset(p, 0xff, rounded);  // NaN in every float type: unwritten outputs show
    allocations_[p] = {gpu, rounded};
    if (recording != nullptr) graph_memory_.add(recording, p, rounded);
    in_use += rounded;
    return p;
  }
  void deallocate(int gpu, void* stream, void* ptr) override {
    std::lock_guard lock(mutex_);
    const auto it = allocations_.find(ptr);
    if (it == allocations_.end() || it->second.gpu != gpu)
      throw std::runtime_error("cudaFreeAsync: not an allocation of GPU " + std::to_string(gpu));
    if (graph_memory_.give_back(ptr, as(stream).capturing) == GraphMemory::GiveBack::kKept)
      return;  // reserved for a graph's launches
    free_locked(it);
  }
  void memory_info(int gpu, std::size_t& free, std::size_t& total) override {
    std::lock_guard lock(mutex_);
    free = kCapacity - in_use_[index(gpu)];
    total = kCapacity;
  }
  // From page-locked memory a graph's copy reads the bytes at each launch;
  // from pageable memory a capture refuses it (CUDA's rule).
  void copy_from_host(void* stream, void* dst, const void* host, std::size_t bytes) override {
    if (as(stream).capturing && !page_locked(host))
      throw std::runtime_error(
          "a copy from pageable host memory while the stream is captured as a graph (each launch "
          "would read those bytes again)");
    run(stream, [=, this] { std::memcpy(dst, host, bytes); });
  }
  void copy_to_host(void* stream, void* host, const void* src, std::size_t bytes) override {
    not_capturing(stream, "a copy to the host");
    std::memcpy(host, src, bytes);
  }
  void copy_on_device(void* stream, void* dst, const void* src, std::size_t bytes) override {
    run(stream, [=, this] { std::memmove(dst, src, bytes); });
  }
  void synchronize(void* stream) override { not_capturing(stream, "waiting for the stream"); }
  void* host_allocate(std::size_t bytes) override {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::runtime_error("cudaHostAlloc: out of host memory");
    std::lock_guard lock(mutex_);
    page_locked_[p] = bytes;
    return p;
  }
  void host_deallocate(void* host) override {
    {
      std::lock_guard lock(mutex_);
      page_locked_.erase(host);
    }
    std::free(host);
  }
  void* create_event(int) override { return new int(0); }
  void destroy_event(void* event) override { delete static_cast<int*>(event); }
  // Refused while the stream captures: a recording orders its streams
  // between its parts (RecordingHooks), where CUDA would make a capture's
  // event a node of its own graph, or fail to wait on one from outside.
  void record_event(void*, void* stream) override { not_capturing(stream, "recording an event"); }
  void stream_wait_event(void* stream, void*) override {
    not_capturing(stream, "waiting for an event");
  }
  void event_synchronize(void*) override {}
  bool event_done(void*) override { return true; }  // its work ran as it was queued
  void profiler(int, bool) override {}

  void fill(void* stream, Type type, void* out, std::int64_t n, double value) override {
    run(stream, [=, this] {
      visit(type, [&]<typename T>() {
        T v;
        if constexpr (std::is_same_v<T, Bf16> || std::is_same_v<T, F16>) {
          v = convert<T>(static_cast<float>(value));
        } else {
          v = static_cast<T>(value);
        }
        std::fill_n(static_cast<T*>(out), n, v);
      });
    });
  }
  void random_uniform(void* stream, float* out, std::int64_t n, std::uint64_t seed,
                      const std::uint64_t* stream_slot, std::uint64_t stream_value,
                      std::uint64_t first_index, float minval, float maxval) override {
    run(stream, [=] {
      // Read when it runs: a recorded graph's slot holds each launch's stream.
      const std::uint64_t s = stream_slot != nullptr ? *stream_slot : stream_value;
      for (std::int64_t i = 0; i < n; ++i)
        out[i] =
            uniform_element(seed, s, first_index + static_cast<std::uint64_t>(i), minval, maxval);
    });
  }
  void cast(void* stream, Type from, Type to, const void* x, void* out, std::int64_t n) override {
    run(stream, [=, this] {
      visit(from, [&]<typename S>() {
        visit(to, [&]<typename D>() {
          for (std::int64_t i = 0; i < n; ++i)
            static_cast<D*>(out)[i] = convert<D>(static_cast<const S*>(x)[i]);
        });
      });
    });
  }
  void binary(void* stream, int kind, Type type, const Broadcast& b, const void* x, const void* y,
              void* out) override {
    run(stream, [=, this] {
      visit(type, [&]<typename T>() {
        using C = typename Compute<T>::type;
        const auto* xs = static_cast<const T*>(x);
        const auto* ys = static_cast<const T*>(y);
        for (std::int64_t i = 0, n = count_of(b); i < n; ++i) {
          std::int64_t off[2];
          offsets<2>(b, i, off);
          const C xv = convert<C>(xs[off[0]]), yv = convert<C>(ys[off[1]]);
          if (kind >= 7) {
            static_cast<bool*>(out)[i] = compare(kind, xv, yv);
          } else {
            static_cast<T*>(out)[i] = convert<T>(arith(kind, xv, yv));
          }
        }
      });
    });
  }
  void unary(void* stream, int kind, Type type, const void* x, void* out, std::int64_t n) override {
    run(stream, [=, this] {
      visit(type, [&]<typename T>() {
        if constexpr (std::is_same_v<T, bool>) {
          throw std::runtime_error("bool has no GPU kernel for unary ops");
        } else {
          using C = typename Compute<T>::type;
          for (std::int64_t i = 0; i < n; ++i)
            static_cast<T*>(out)[i] =
                convert<T>(unary_op(kind, convert<C>(static_cast<const T*>(x)[i])));
        }
      });
    });
  }
  void clip(void* stream, const float* x, float* out, std::int64_t n, float lo, float hi) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        out[i] = v < lo ? lo : (v > hi ? hi : v);
      }
    });
  }
  void map2(void* stream, int kind, const float* x, const float* y, float* out,
            std::int64_t n) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) out[i] = map2_op(kind, x[i], y[i]);
    });
  }
  void where(void* stream, const Broadcast& b, const bool* cond, const float* x, const float* y,
             float* out) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0, n = count_of(b); i < n; ++i) {
        std::int64_t off[3];
        offsets<3>(b, i, off);
        out[i] = cond[off[0]] ? x[off[1]] : y[off[2]];
      }
    });
  }
  // Sums in float64, each output's elements in order (the real kernels'
  // trees give the same float32 but for a rounding of the float64 sum).
  void reduce(void* stream, int kind, const float* x, float* out, std::int64_t outer,
              std::int64_t n, std::int64_t inner) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < outer * inner; ++t) {
        if (n == 0) {
          out[t] = 0.0f;
          continue;
        }
        const std::int64_t o = t / inner, i = t % inner;
        const float* base = x + o * n * inner + i;
        double acc = kind <= 1 ? 0.0 : static_cast<double>(base[0]);
        for (std::int64_t j = 0; j < n; ++j) acc = combine(kind, acc, base[j * inner]);
        if (kind == 1) acc /= static_cast<double>(n);
        out[t] = static_cast<float>(acc);
      }
    });
  }
  void argmax(void* stream, const float* x, std::int64_t* out, std::int64_t outer, std::int64_t n,
              std::int64_t inner) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < outer * inner; ++t) {
        const float* base = x + t / inner * n * inner + t % inner;
        std::int64_t best = 0;
        for (std::int64_t r = 1; r < n; ++r)
          if (base[r * inner] > base[best * inner]) best = r;
        out[t] = best;
      }
    });
  }
  void softmax(void* stream, const float* x, float* log_out, float* prob_out, std::int64_t outer,
               std::int64_t n, std::int64_t inner) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < outer * inner; ++t)
        softmax_row(x, log_out, prob_out, t / inner * n * inner + t % inner, n, inner);
    });
  }
  void gemm(int, void* stream, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
            const float* a, const float* b, float* c, std::int64_t batch, std::int64_t stride_a,
            std::int64_t stride_b, const float* bias, bool relu, bool) override {
    run(stream, [=, this] {
      emulated::gemm(ta, tb, m, n, k, a, b, c, batch, stride_a, stride_b, bias, relu);
    });
  }
  void gemm_half(int, void* stream, Type type, bool ta, bool tb, std::int64_t m, std::int64_t n,
                 std::int64_t k, const void* a, const void* b, void* c, std::int64_t batch,
                 std::int64_t stride_a, std::int64_t stride_b, const void* bias,
                 bool relu) override {
    run(stream, [=, this] {
      emulated::gemm_half(type, ta, tb, m, n, k, a, b, c, batch, stride_a, stride_b, bias, relu);
    });
  }
  void conv_forward(int, void* stream, const ConvParams& p, const void* x, const void* filter,
                    void* y) override {
    run(stream, [=, this] { emulated::conv_forward(p, x, filter, y); });
  }
  void conv_backward_data(int, void* stream, const ConvParams& p, const void* dy,
                          const void* filter, void* dx) override {
    run(stream, [=, this] { emulated::conv_backward_data(p, dy, filter, dx); });
  }
  void conv_backward_filter(int, void* stream, const ConvParams& p, const void* x, const void* dy,
                            void* dfilter) override {
    run(stream, [=, this] { emulated::conv_backward_filter(p, x, dy, dfilter); });
  }
  void depthwise_forward(void* stream, Type type, const ConvParams& p, const void* x,
                         const void* filter, void* y) override {
    run(stream, [=, this] { emulated::depthwise_forward(type, p, x, filter, y); });
  }
  void depthwise_backward_data(void* stream, Type type, const ConvParams& p, const void* dy,
                               const void* filter, void* dx) override {
    run(stream, [=, this] { emulated::depthwise_backward_data(type, p, dy, filter, dx); });
  }
  void depthwise_backward_filter(void* stream, Type type, const ConvParams& p, const void* x,
                                 const void* dy, void* dfilter) override {
    run(stream, [=, this] { emulated::depthwise_backward_filter(type, p, x, dy, dfilter); });
  }
  void pool_forward(int, void* stream, const PoolParams& p, const float* x, float* y) override {
    run(stream, [=, this] { emulated::pool_forward(p, x, y); });
  }
  void pool_backward(int, void* stream, const PoolParams& p, const float* x, const float* y,
                     const float* dy, float* dx) override {
    run(stream, [=, this] { emulated::pool_backward(p, x, y, dy, dx); });
  }
  void nhwc_window(void* stream, int elem_bytes, const void* src, std::int64_t n, std::int64_t sh,
                   std::int64_t sw, std::int64_t c, void* dst, std::int64_t dh, std::int64_t dw,
                   std::int64_t off_h, std::int64_t off_w) override {
    run(stream, [=, this] {
      const auto bytes = static_cast<std::size_t>(c * elem_bytes);  // a pixel's
      const auto* s = static_cast<const unsigned char*>(src);
      auto* d = static_cast<unsigned char*>(dst);
      for (std::int64_t b = 0; b < n; ++b) {
        for (std::int64_t i = 0; i < dh; ++i) {
          for (std::int64_t j = 0; j < dw; ++j) {
            unsigned char* to = d + static_cast<std::size_t>((b * dh + i) * dw + j) * bytes;
            const std::int64_t si = i + off_h, sj = j + off_w;
            if (si >= 0 && si < sh && sj >= 0 && sj < sw) {
              std::memcpy(to, s + static_cast<std::size_t>((b * sh + si) * sw + sj) * bytes, bytes);
            } else {
              std::memset(to, 0, bytes);
            }
          }
        }
      }
    });
  }
  void take_along_axis(void* stream, const float* x, const std::int64_t* idx, float* out,
                       std::int64_t outer, std::int64_t n, std::int64_t k,
                       std::int64_t inner) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < outer * k * inner; ++t)
        out[t] = x[(t / (k * inner) * n + idx[t]) * inner + t % inner];
    });
  }
  void scatter_along_axis(void* stream, const float* g, const std::int64_t* idx, float* out,
                          std::int64_t outer, std::int64_t n, std::int64_t k,
                          std::int64_t inner) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < outer * inner; ++t) {
        const std::int64_t o = t / inner, i = t % inner;
        for (std::int64_t r = 0; r < n; ++r) out[(o * n + r) * inner + i] = 0.0f;
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t at = (o * k + j) * inner + i;
          out[(o * n + idx[at]) * inner + i] += g[at];
        }
      }
    });
  }
  void one_hot(void* stream, const std::int64_t* idx, float* out, std::int64_t count,
               std::int64_t depth, float on, float off) override {
    run(stream, [=, this] {
      for (std::int64_t t = 0; t < count * depth; ++t)
        out[t] = idx[t / depth] == t % depth ? on : off;
    });
  }
  void transpose(void* stream, int elem_bytes, int rank, const std::int64_t* out_dims,
                 const std::int64_t* in_strides, const void* x, void* out) override {
    const std::vector<std::int64_t> dims(out_dims, out_dims + rank),  // taken now, as a kernel's
        strides(in_strides, in_strides + rank);
    run(stream, [=, this] {
      std::int64_t n = 1;
      for (int a = 0; a < rank; ++a) n *= dims[static_cast<std::size_t>(a)];
      const auto bytes = static_cast<std::size_t>(elem_bytes);
      for (std::int64_t t = 0; t < n; ++t) {
        std::int64_t rest = t, src = 0;
        for (int a = rank - 1; a >= 0; --a) {
          const auto k = static_cast<std::size_t>(a);
          src += rest % dims[k] * strides[k];
          rest /= dims[k];
        }
        std::memcpy(static_cast<unsigned char*>(out) + static_cast<std::size_t>(t) * bytes,
                    static_cast<const unsigned char*>(x) + static_cast<std::size_t>(src) * bytes,
                    bytes);
      }
    });
  }
  void relu_general(void* stream, const float* x, float* y, std::int64_t n, float slope, float top,
                    float threshold) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        y[i] = v > threshold ? (top < v ? top : v) : slope * (v - threshold);
      }
    });
  }
  void relu_general_grad(void* stream, const float* g, const float* y, float* dx, std::int64_t n,
                         float slope, float top) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) {
        const float v = y[i];
        dx[i] = v > 0.0f ? (v < top ? g[i] : 0.0f) : slope * g[i];
      }
    });
  }
  void gather_rows(void* stream, int elem_bytes, const void* x, const std::int64_t* idx, void* out,
                   std::int64_t outer, std::int64_t n, std::int64_t m,
                   std::int64_t inner) override {
    run(stream, [=, this] {
      const auto row = static_cast<std::size_t>(inner * elem_bytes);
      for (std::int64_t o = 0; o < outer; ++o)
        for (std::int64_t j = 0; j < m; ++j)
          std::memcpy(
              static_cast<unsigned char*>(out) + static_cast<std::size_t>(o * m + j) * row,
              static_cast<const unsigned char*>(x) + static_cast<std::size_t>(o * n + idx[j]) * row,
              row);
    });
  }
  void gather_rows_grad(void* stream, const float* g, const std::int64_t* order,
                        const std::int64_t* starts, const std::int64_t* targets,
                        std::int64_t unique, float* out, std::int64_t outer, std::int64_t n,
                        std::int64_t m, std::int64_t inner) override {
    run(stream, [=, this] {
      std::fill_n(out, outer * n * inner, 0.0f);
      for (std::int64_t t = 0; t < outer * unique * inner; ++t) {
        const std::int64_t i = t % inner, u = t / inner % unique, o = t / (inner * unique);
        if (targets[u] < 0) continue;  // a recorded kernel's padding
        float acc = 0.0f;
        for (std::int64_t q = starts[u]; q < starts[u + 1]; ++q)
          acc += g[(o * m + order[q]) * inner + i];
        out[(o * n + targets[u]) * inner + i] = acc;
      }
    });
  }
  void batch_norm(void* stream, Type type, const void* x, void* y, std::int64_t rows,
                  std::int64_t c, const float* gamma, const float* beta, float* mean,
                  float* variance, bool batch_stats, float epsilon, float bottom,
                  float top) override {
    run(stream, [=, this] {
      emulated::batch_norm(type, x, y, rows, c, gamma, beta, mean, variance, batch_stats, epsilon,
                           bottom, top);
    });
  }
  void batch_norm_backward(void* stream, Type type, const void* x, const void* z, const void* dz,
                           std::int64_t rows, std::int64_t c, const float* gamma, const float* mean,
                           const float* variance, bool batch_stats, float epsilon, float bottom,
                           float top, void* dx, float* dgamma, float* dbeta) override {
    run(stream, [=, this] {
      emulated::batch_norm_backward(type, x, z, dz, rows, c, gamma, mean, variance, batch_stats,
                                    epsilon, bottom, top, dx, dgamma, dbeta);
    });
  }
  void resize(void* stream, Type type, const void* in, void* out, std::int64_t n, std::int64_t h,
              std::int64_t w, std::int64_t c, std::int64_t oh, std::int64_t ow, bool bilinear,
              const std::int64_t* y_lower, const std::int64_t* y_upper, const float* y_lerp,
              const std::int64_t* x_lower, const std::int64_t* x_upper,
              const float* x_lerp) override {
    run(stream, [=, this] {
      emulated::resize(type, in, out, n, h, w, c, oh, ow, bilinear, y_lower, y_upper, y_lerp,
                       x_lower, x_upper, x_lerp);
    });
  }
  void affine_transform(void* stream, const float* in, float* out, const float* transforms,
                        std::int64_t rows, std::int64_t n, std::int64_t h, std::int64_t w,
                        std::int64_t c, int fill, bool bilinear, float fill_value) override {
    run(stream, [=, this] {
      emulated::affine_transform(in, out, transforms, rows, n, h, w, c, fill, bilinear, fill_value);
    });
  }
  void moving_average(void* stream, const float* moving, const float* value, float* out,
                      std::int64_t n, float momentum, float one_minus) override {
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) out[i] = moving[i] * momentum + value[i] * one_minus;
    });
  }
  void apply_update(void* stream, const UpdateParams& p, float* var, const float* g,
                    float* const* slots, int num_slots, std::int64_t n) override {
    // The slots' pointers taken now, as a kernel's arguments are.
    const UpdateSlots u = update_slots(p, slots, num_slots);
    run(stream, [=, this] {
      if (skips_update(p)) return;                  // read when it runs, as the kernel does
      const UpdateParams q = with_step_numbers(p);  // the same
      for (std::int64_t i = 0; i < n; ++i) update_element(q, i, var, g, u.m, u.v, u.a);
    });
  }
  void sum_buffers(void* stream, const float* const* srcs, int count, float* dst,
                   std::int64_t n) override {
    if (count < 1 || count > 16) throw std::runtime_error("sum_buffers: 1 to 16 buffers");
    const std::vector<const float*> from(srcs, srcs + count);  // taken now, as a kernel's
    run(stream, [=, this] {
      for (std::int64_t i = 0; i < n; ++i) {
        float acc = from[0][i];
        for (int r = 1; r < count; ++r) acc += from[static_cast<std::size_t>(r)][i];
        dst[i] = acc;
      }
    });
  }

  void begin_capture(void* stream) override {
    Stream& s = as(stream);
    if (s.capturing) throw std::runtime_error("begin_capture: the stream is capturing already");
    s.capturing = new Graph();
  }
  void split_capture(void* stream) override {
    Stream& s = as(stream);
    if (!s.capturing) throw std::runtime_error("split_capture: the stream is not capturing");
    s.capturing->parts.emplace_back();
  }
  void* end_capture(void* stream) override {
    Stream& s = as(stream);
    if (!s.capturing) throw std::runtime_error("end_capture: the stream is not capturing");
    Graph* g = s.capturing;
    s.capturing = nullptr;
    std::lock_guard lock(mutex_);
    graph_memory_.recorded(g);
    return g;
  }
  void abort_capture(void* stream) override {
    Stream& s = as(stream);
    if (Graph* g = s.capturing) {
      s.capturing = nullptr;
      destroy_graph(g);
    }
  }
  void launch_graph(void* graph, int part, void* stream) override {
    not_capturing(stream, "launching a graph");
    const auto& parts = static_cast<Graph*>(graph)->parts;
    if (part < 0 || static_cast<std::size_t>(part) >= parts.size())
      throw std::runtime_error("launching a graph: it has no part " + std::to_string(part));
    for (const auto& op : parts[static_cast<std::size_t>(part)]) op();
  }
  std::size_t graph_bytes(void* graph) override {
    std::lock_guard lock(mutex_);
    return graph_memory_.bytes(graph);
  }
  std::string nccl_version() override { return "the emulated adapter's NCCL (emulated_nccl.h)"; }
  void nccl_init_all(int count, const int* gpus, void** comms) override {
    for (int i = 0; i < count; ++i) (void)index(gpus[i]);
    emulated::nccl_init_all(count, gpus, comms);
  }
  void nccl_unique_id(char* id) override { emulated::nccl_unique_id(id); }
  void nccl_init_ranks(int count, const int* gpus, int nranks, int first_rank, const char* id,
                       double timeout_s, void** comms) override {
    std::vector<std::string> named;
    for (int i = 0; i < count; ++i) named.push_back(machine_gpu(static_cast<int>(index(gpus[i]))));
    emulated::nccl_init_ranks(count, named.data(), nranks, first_rank, id, timeout_s, comms);
  }
  void nccl_all_reduce(void* comm, void* stream, float* buf, std::int64_t n) override {
    nccl_check(comm);
    run(stream, [=] { emulated::nccl_all_reduce(comm, buf, n); });
  }
  void nccl_abort(void* comm) override { emulated::nccl_abort(comm); }
  void nccl_destroy(void* comm) override { emulated::nccl_destroy(comm); }

  // The graph's memory that its tensors gave back is freed; the rest is
  // freed when they give it back.
  void destroy_graph(void* graph) override {
    auto* g = static_cast<Graph*>(graph);
    {
      std::lock_guard lock(mutex_);
      for (const GraphMemory::ToFree& f : graph_memory_.destroyed(g))
        free_locked(allocations_.find(f.block));
    }
    delete g;
  }

 private:
  // A recording: each kernel or copy with its arguments taken when it was
  // queued, as a CUDA graph's nodes hold theirs (its memory: graph_memory_).
  struct Graph {
    std::vector<std::vector<std::function<void()>>> parts{1};  // split_capture's
  };
  struct Stream {
    Graph* capturing = nullptr;
  };
  struct Allocation {
    int gpu = 0;
    std::size_t bytes = 0;
  };
  static Stream& as(void* stream) { return *static_cast<Stream*>(stream); }
  // A kernel or copy: run now, or recorded while the stream captures.
  void run(void* stream, std::function<void()> op) {
    if (Graph* g = as(stream).capturing) {
      g->parts.back().push_back(std::move(op));
    } else {
      op();
    }
  }
  static void not_capturing(void* stream, const char* what) {
    if (as(stream).capturing)
      throw std::runtime_error(std::string(what) + " while the stream is captured as a graph");
  }
  bool page_locked(const void* host) {
    std::lock_guard lock(mutex_);
    const auto* h = static_cast<const unsigned char*>(host);
    for (const auto& [p, bytes] : page_locked_) {
      const auto* b = static_cast<const unsigned char*>(p);
      if (h >= b && h < b + bytes) return true;
    }
    return false;
  }
  void free_locked(std::unordered_map<void*, Allocation>::iterator it) {
    in_use_[index(it->second.gpu)] -= it->second.bytes;
    void* p = it->first;
    allocations_.erase(it);
    std::free(p);
  }
  static std::size_t index(int gpu) {
    if (gpu < 0 || gpu >= kMaxGpus)
      throw std::runtime_error("no emulated GPU " + std::to_string(gpu));
    return static_cast<std::size_t>(gpu);
  }
  std::mutex mutex_;
  std::unordered_map<void*, Allocation> allocations_;
  GraphMemory graph_memory_;  // which blocks recorded graphs keep
  std::size_t in_use_[kMaxGpus] = {};
  std::unordered_map<void*, std::size_t> page_locked_;  // host_allocate's blocks
};

}  // namespace
}  // namespace lockstep::backend::cuda::emulated

extern "C" __attribute__((visibility("default"))) lockstep::backend::cuda::GpuApi*
lockstep_cuda_api(int version) {
  if (version != lockstep::backend::cuda::kApiVersion) return nullptr;
  static auto* api = new lockstep::backend::cuda::emulated::EmulatedApi();
  return api;
}
