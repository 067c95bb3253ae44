// The CUDA adapter's interface: what liblockstep_cuda.so (this folder's .cu
// files, the only place CUDA headers appear) offers the library, which loads
// it with dlopen when a program first asks for GPUs — so CPU-only programs
// never pay CUDA's start-up (~0.15 s and ~220 MB per process here).
//
// Plain types only: pointers are device memory unless named `host`; every
// kernel is queued on `stream` (a logical GPU's) and returns at once, except
// copies to the host, which wait. Errors are thrown as std::runtime_error
// with CUDA's message (tensor/gpu_kernels.cc makes them DeviceErrors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::backend::cuda {

constexpr int kApiVersion = 15;
constexpr int kMaxRank = 8;
// The largest depthwise window (kh · kw) our own depthwise kernels take;
// larger ones go to cuDNN.
constexpr int kDepthwiseMaxTaps = 25;
// NCCL's unique id (NCCL_UNIQUE_ID_BYTES).
constexpr int kNcclIdBytes = 128;

// Element types, as lockstep::DType numbers them.
enum class Type : int {
  kFloat32 = 0,
  kInt32 = 1,
  kInt64 = 2,
  kUInt8 = 3,
  kBool = 4,
  kBf16 = 5,
  kF16 = 6
};

// out[i] over the broadcast: rank, out dims, each operand's element strides
// (0 along broadcast axes).
struct Broadcast {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t strides[3][kMaxRank] = {};
};

// detail::DeviceUpdate's numbers (lockstep/tensor/device_kernels.h).
// `step`, when set, is device memory holding {lr, alpha, decay}, read when
// the kernel runs instead of the fields (a recorded step's replays each
// read their own step's). `finite`, when set, is device memory holding a
// float that is not finite when the step's gradients were not (loss
// scaling's check): the kernel then changes nothing.
struct UpdateParams {
  int rule = 0;  // 0: SGD, 1: SGD with momentum, 2: Adam, 3: RMSprop, 4: Adagrad
  float lr = 0, momentum = 0, alpha = 0, c1 = 0, c2 = 0, epsilon = 0, decay = 1, rho = 0;
  bool nesterov = false;
  bool centered = false;
  const float* step = nullptr;
  const float* finite = nullptr;
};

// A convolution for cuDNN: NHWC data, a [oc, kh, kw, c / groups] filter
// (cuDNN's NHWC filter layout), symmetric padding; data and filter of
// `type` (float32, or bfloat16 / float16 accumulated in float32).
struct ConvParams {
  std::int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, oc = 0, oh = 0, ow = 0;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1, pad_h = 0, pad_w = 0, groups = 1;
  Type type = Type::kFloat32;
};

// Pooling for cuDNN: NHWC data, symmetric padding.
struct PoolParams {
  std::int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, oh = 0, ow = 0;
  std::int64_t sh = 1, sw = 1, pad_h = 0, pad_w = 0;
  bool max = true;
};

class GpuApi {
 public:
  virtual ~GpuApi() = default;

  // Physical GPUs; 0 with `why` set when there are none.
  virtual int device_count(std::string& why) = 0;
  // "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)".
  virtual std::string describe(int gpu) = 0;
  // "CUDA runtime 13.0, driver 13.0, cuBLAS 13.1".
  virtual std::string versions() = 0;
  virtual void* create_stream(int gpu) = 0;

  // As allocate, but while the stream captures never a block the recording
  // gave back earlier: memory the host writes between launches (a recorded
  // step's staged values), which no earlier kernel of the graph may use.
  virtual void* allocate_staged(int gpu, void* stream, std::size_t bytes) = 0;
  virtual void* allocate(int gpu, void* stream, std::size_t bytes) = 0;
  virtual void deallocate(int gpu, void* stream, void* ptr) = 0;
  virtual void memory_info(int gpu, std::size_t& free, std::size_t& total) = 0;
  virtual void copy_from_host(void* stream, void* dst, const void* host, std::size_t bytes) = 0;
  virtual void copy_to_host(void* stream, void* host, const void* src, std::size_t bytes) = 0;
  virtual void copy_on_device(void* stream, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void synchronize(void* stream) = 0;

  // Page-locked host memory (cudaHostAlloc, portable to every GPU): copies
  // from it run at the bus's speed and leave the host free at once.
  virtual void* host_allocate(std::size_t bytes) = 0;
  virtual void host_deallocate(void* host) = 0;
  // Events order one stream after another without the host waiting:
  // record on one stream, wait on another (or on the host).
  virtual void* create_event(int gpu) = 0;
  virtual void destroy_event(void* event) = 0;
  virtual void record_event(void* event, void* stream) = 0;
  virtual void stream_wait_event(void* stream, void* event) = 0;
  virtual void event_synchronize(void* event) = 0;
  // Whether the work before the event's last record has run (cudaEventQuery;
  // never waits; any thread): what a watchdog polls.
  virtual bool event_done(void* event) = 0;
  // cudaProfilerStart / Stop on `gpu`: what a profiler started with
  // "profile from start off" (ncu --profile-from-start off) records.
  virtual void profiler(int gpu, bool start) = 0;

  virtual void fill(void* stream, Type type, void* out, std::int64_t n, double value) = 0;
  // out[i] (float32) ← random::uniform's value for element first_index + i
  // of (seed, stream) in [minval, maxval): the host's bits (philox.h). With
  // stream_slot (device memory) the stream is read from it when the kernel
  // runs — a recorded graph's, staged before each launch — else it is
  // stream_value.
  virtual void random_uniform(void* stream, float* out, std::int64_t n, std::uint64_t seed,
                              const std::uint64_t* stream_slot, std::uint64_t stream_value,
                              std::uint64_t first_index, float minval, float maxval) = 0;
  virtual void cast(void* stream, Type from, Type to, const void* x, void* out, std::int64_t n) = 0;
  // kind: detail::BinaryKind's number; comparisons write bool.
  virtual void binary(void* stream, int kind, Type type, const Broadcast& b, const void* x,
                      const void* y, void* out) = 0;
  virtual void unary(void* stream, int kind, Type type, const void* x, void* out,
                     std::int64_t n) = 0;
  virtual void clip(void* stream, const float* x, float* out, std::int64_t n, float lo,
                    float hi) = 0;
  virtual void map2(void* stream, int kind, const float* x, const float* y, float* out,
                    std::int64_t n) = 0;
  virtual void where(void* stream, const Broadcast& b, const bool* cond, const float* x,
                     const float* y, float* out) = 0;
  // Over the middle of [outer, n, inner].
  virtual void reduce(void* stream, int kind, const float* x, float* out, std::int64_t outer,
                      std::int64_t n, std::int64_t inner) = 0;
  virtual void argmax(void* stream, const float* x, std::int64_t* out, std::int64_t outer,
                      std::int64_t n, std::int64_t inner) = 0;
  virtual void softmax(void* stream, const float* x, float* log_out, float* prob_out,
                       std::int64_t outer, std::int64_t n, std::int64_t inner) = 0;
  // Row-major C[batch][m][n] = op(A)·op(B) (+ bias[n]) (relu), strides in
  // elements between batch entries (0: shared). TF32 when `tf32`.
  virtual void gemm(int gpu, void* stream, bool ta, bool tb, std::int64_t m, std::int64_t n,
                    std::int64_t k, const float* a, const float* b, float* c, std::int64_t batch,
                    std::int64_t stride_a, std::int64_t stride_b, const float* bias, bool relu,
                    bool tf32) = 0;
  // The same product of bfloat16 or float16 (`type`) a and b, accumulated in
  // float32; bias (null, or `type`) and relu added in float32, c rounded to
  // `type` once.
  virtual void gemm_half(int gpu, void* stream, Type type, bool ta, bool tb, std::int64_t m,
                         std::int64_t n, std::int64_t k, const void* a, const void* b, void* c,
                         std::int64_t batch, std::int64_t stride_a, std::int64_t stride_b,
                         const void* bias, bool relu) = 0;
  // cuDNN's deterministic algorithms only: float32 without TF32; bfloat16
  // and float16 (p.type) on the tensor cores, accumulated in float32.
  virtual void conv_forward(int gpu, void* stream, const ConvParams& p, const void* x,
                            const void* filter, void* y) = 0;
  virtual void conv_backward_data(int gpu, void* stream, const ConvParams& p, const void* dy,
                                  const void* filter, void* dx) = 0;
  virtual void conv_backward_filter(int gpu, void* stream, const ConvParams& p, const void* x,
                                    const void* dy, void* dfilter) = 0;
  // Depthwise convolution (groups = c, oc = c · multiplier, kh · kw ≤
  // kDepthwiseMaxTaps) on our own kernels (depthwise.cu): Keras's HWIO
  // filter [kh, kw, 1, oc] as it is; pad_h / pad_w are the top and left
  // padding (the bottom and right follow from oh, ow: TensorFlow's
  // asymmetric "same" needs no padded copy). Deterministic. Data and filter
  // of `type`: float32, or bfloat16 / float16 computed in float32, each
  // result rounded once.
  virtual void depthwise_forward(void* stream, Type type, const ConvParams& p, const void* x,
                                 const void* filter, void* y) = 0;
  virtual void depthwise_backward_data(void* stream, Type type, const ConvParams& p, const void* dy,
                                       const void* filter, void* dx) = 0;
  virtual void depthwise_backward_filter(void* stream, Type type, const ConvParams& p,
                                         const void* x, const void* dy, void* dfilter) = 0;
  virtual void pool_forward(int gpu, void* stream, const PoolParams& p, const float* x,
                            float* y) = 0;
  virtual void pool_backward(int gpu, void* stream, const PoolParams& p, const float* x,
                             const float* y, const float* dy, float* dx) = 0;
  // dst[b, i, j, ch] = src[b, i + off_h, j + off_w, ch], 0 outside src: a
  // padded copy (negative offsets) or a crop (positive ones).
  // Elements of `elem_bytes` (any type: the padding is zero bits).
  virtual void nhwc_window(void* stream, int elem_bytes, const void* src, std::int64_t n,
                           std::int64_t sh, std::int64_t sw, std::int64_t c, void* dst,
                           std::int64_t dh, std::int64_t dw, std::int64_t off_h,
                           std::int64_t off_w) = 0;
  // [outer, n, inner] gathered at [outer, k, inner] int64 indices along n.
  virtual void take_along_axis(void* stream, const float* x, const std::int64_t* idx, float* out,
                               std::int64_t outer, std::int64_t n, std::int64_t k,
                               std::int64_t inner) = 0;
  virtual void scatter_along_axis(void* stream, const float* g, const std::int64_t* idx, float* out,
                                  std::int64_t outer, std::int64_t n, std::int64_t k,
                                  std::int64_t inner) = 0;
  virtual void one_hot(void* stream, const std::int64_t* idx, float* out, std::int64_t count,
                       std::int64_t depth, float on, float off) = 0;
  virtual void transpose(void* stream, int elem_bytes, int rank, const std::int64_t* out_dims,
                         const std::int64_t* in_strides, const void* x, void* out) = 0;
  // relu with a slope, threshold and cap, as the CPU's (tensor/ops/elementwise.cc):
  // y = x > threshold ? min(x, top) : slope · (x − threshold); its gradient
  // from the output: y > 0 ? (y < top ? g : 0) : slope · g.
  virtual void relu_general(void* stream, const float* x, float* y, std::int64_t n, float slope,
                            float top, float threshold) = 0;
  virtual void relu_general_grad(void* stream, const float* g, const float* y, float* dx,
                                 std::int64_t n, float slope, float top) = 0;
  // out[outer, m, inner] = x[outer, idx[j], inner] (any element size).
  virtual void gather_rows(void* stream, int elem_bytes, const void* x, const std::int64_t* idx,
                           void* out, std::int64_t outer, std::int64_t n, std::int64_t m,
                           std::int64_t inner) = 0;
  // gather's gradient without atomics: out (zeroed here) [outer, n, inner];
  // target row targets[u] gets the g rows order[starts[u] .. starts[u + 1])
  // added in that (ascending) order — the CPU's order. A group whose target
  // is -1 is skipped (padding: a recorded graph's groups are a fixed count).
  virtual void gather_rows_grad(void* stream, const float* g, const std::int64_t* order,
                                const std::int64_t* starts, const std::int64_t* targets,
                                std::int64_t unique, float* out, std::int64_t outer, std::int64_t n,
                                std::int64_t m, std::int64_t inner) = 0;
  // Batch normalisation over the rows of [rows, c] (batch_norm.cu), x and y
  // of `type` (float32, bfloat16 or float16: widened as loaded, y rounded
  // once), the rest float32. With `batch_stats`, mean and variance (biased)
  // are computed first, from float64 sums in an order fixed by `rows` alone;
  // else they are given. Then y = clip(a·x + b, bottom, top) with
  // a = γ/√(σ² + ε), b = β − μ·a.
  virtual void batch_norm(void* stream, Type type, const void* x, void* y, std::int64_t rows,
                          std::int64_t c, const float* gamma, const float* beta, float* mean,
                          float* variance, bool batch_stats, float epsilon, float bottom,
                          float top) = 0;
  // Its gradient (x, z, dz and dx of `type`); dy = dz where bottom < z < top
  // (z the output; null: no clip).
  virtual void batch_norm_backward(void* stream, Type type, const void* x, const void* z,
                                   const void* dz, std::int64_t rows, std::int64_t c,
                                   const float* gamma, const float* mean, const float* variance,
                                   bool batch_stats, float epsilon, float bottom, float top,
                                   void* dx, float* dgamma, float* dbeta) = 0;
  // image::resize's forward (image.cu): [n, h, w, c] float32 or uint8
  // (`type`) to [n, oh, ow, c] — bilinear: float32, from the host's tables of
  // source rows, columns and lerps (device arrays of oh and ow entries);
  // nearest: `type`, rows y_lower and columns x_lower (the rest null).
  virtual void resize(void* stream, Type type, const void* in, void* out, std::int64_t n,
                      std::int64_t h, std::int64_t w, std::int64_t c, std::int64_t oh,
                      std::int64_t ow, bool bilinear, const std::int64_t* y_lower,
                      const std::int64_t* y_upper, const float* y_lerp, const std::int64_t* x_lower,
                      const std::int64_t* x_upper, const float* x_lerp) = 0;
  // image::affine_transform's forward (image.cu): float32 [n, h, w, c],
  // transforms [rows, 8]; fill 0 constant, 1 reflect, 2 wrap, 3 nearest.
  virtual void affine_transform(void* stream, const float* in, float* out, const float* transforms,
                                std::int64_t rows, std::int64_t n, std::int64_t h, std::int64_t w,
                                std::int64_t c, int fill, bool bilinear, float fill_value) = 0;
  // out = moving · momentum + value · one_minus (two products, one sum).
  virtual void moving_average(void* stream, const float* moving, const float* value, float* out,
                              std::int64_t n, float momentum, float one_minus) = 0;
  virtual void apply_update(void* stream, const UpdateParams& p, float* value, const float* grad,
                            float* const* slots, int num_slots, std::int64_t n) = 0;
  virtual void sum_buffers(void* stream, const float* const* srcs, int count, float* dst,
                           std::int64_t n) = 0;

  // Stream capture (CUDA graphs). Between begin_capture and end_capture
  // the kernels and copies this thread queues on `stream` are recorded, not
  // run; end_capture returns the recording instantiated, and launch_graph
  // runs it again on `stream`: the same kernels with the same arguments on
  // the same memory. While a stream captures, memory allocated on it is the
  // graph's: freed, it stays reserved for the graph's launches until
  // destroy_graph, and a later allocation of the same recording may take it
  // again (graph_memory.h). A copy to the host, a copy from pageable host memory (its
  // bytes would be read again at each launch) or a synchronize of the
  // stream is an error (std::runtime_error) that ends the capture:
  // end_capture then throws. abort_capture ends a capture and discards it.
  // split_capture, while `stream` captures, ends the graph's part recorded
  // so far and records what follows as its next part (its memory still the
  // graph's): the host may then do work between launching one part and the
  // next (logical GPUs' replicas meet there). launch_graph runs part `part`
  // (0 first; a graph never split has one).
  virtual void begin_capture(void* stream) = 0;
  virtual void split_capture(void* stream) = 0;
  virtual void* end_capture(void* stream) = 0;
  virtual void abort_capture(void* stream) = 0;
  virtual void launch_graph(void* graph, int part, void* stream) = 0;
  virtual void destroy_graph(void* graph) = 0;
  // The device memory `graph` holds for its launches.
  virtual std::size_t graph_bytes(void* graph) = 0;

  // NCCL: collectives among GPUs, queued on streams (no host waits).
  // "NCCL 2.28.9", or why there is none.
  virtual std::string nccl_version() = 0;
  // One communicator per entry of gpus[0 .. count), rank i on gpus[i], all
  // in this process (ncclCommInitAll), into comms[0 .. count). A GPU named
  // twice is refused (NCCL takes one rank per GPU).
  virtual void nccl_init_all(int count, const int* gpus, void** comms) = 0;
  // A communicator's id for nccl_init_ranks, kNcclIdBytes into `id`
  // (ncclGetUniqueId: one process makes it, every process joins with it).
  virtual void nccl_unique_id(char* id) = 0;
  // This process's ranks of a communicator of `nranks` ranks across
  // processes: rank first_rank + i on gpus[i], i < count, joined by `id`
  // (ncclCommInitRank, grouped). Returns once every rank has joined; after
  // `timeout_s` seconds it aborts what it made and throws. A GPU that two
  // ranks name, in any process, is refused.
  virtual void nccl_init_ranks(int count, const int* gpus, int nranks, int first_rank,
                               const char* id, double timeout_s, void** comms) = 0;
  // buf (n float32 on the communicator's GPU) becomes the sum of every
  // rank's buf, in place, queued on `stream` (which may be capturing: the
  // collective is then part of the graph). Every rank gets the same bits.
  virtual void nccl_all_reduce(void* comm, void* stream, float* buf, std::int64_t n) = 0;
  // Ends the communicator's collectives in flight and refuses later ones
  // (ncclCommAbort): a rank waiting for a peer that failed is released.
  // Safe while another thread queues on the communicator; nccl_destroy
  // still frees it.
  virtual void nccl_abort(void* comm) = 0;
  virtual void nccl_destroy(void* comm) = 0;
};

}  // namespace lockstep::backend::cuda

// The adapter's one exported symbol; null when `version` is not its own.
extern "C" lockstep::backend::cuda::GpuApi* lockstep_cuda_api(int version);
