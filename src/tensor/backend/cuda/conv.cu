// Convolution and pooling on cuDNN (its legacy API, kept in cuDNN 9): NHWC
// data end to end, float32 without TF32 (CUDNN_FMA_MATH) — or, for
// bfloat16 and float16 data (mixed precision), the tensor cores with float32
// accumulation (CUDNN_TENSOR_OP_MATH) — and for each pass
// the fastest of cuDNN's deterministic algorithms, chosen once per shape and
// remembered with the shape's descriptors and workspace size. Workspaces come from the stream's
// pool (cudaMallocAsync).
//
// "Fastest" is timed, as PyTorch's cudnn.benchmark: cuDNN's Find runs every
// algorithm once on the shape. Its heuristic ranking (Get*_v7) picked
// grouped "direct" kernels for MobileNetV2's depthwise convolutions that
// took 45% of a step's GPU time on an H200 (docs/benchmarks.md, "GPUs").
// LOCKSTEP_CUDNN_AUTOTUNE=0 keeps the heuristic choice, which does not
// depend on timings: the same algorithm, so the same bits, on every run.
#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "tensor/backend/cuda/conv.h"
#include "tensor/backend/cuda/kernels.h"

namespace lockstep::backend::cuda {
namespace {

void check_cudnn(cudnnStatus_t s, const char* what) {
  if (s != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + cudnnGetErrorString(s));
}

// cuDNN's name for a convolution's element type.
cudnnDataType_t data_type(Type t) {
  switch (t) {
    case Type::kFloat32:
      return CUDNN_DATA_FLOAT;
    case Type::kBf16:
      return CUDNN_DATA_BFLOAT16;
    case Type::kF16:
      return CUDNN_DATA_HALF;
    default:
      throw std::runtime_error("cuDNN convolutions take float32, bfloat16 or float16 data");
  }
}

bool half(Type t) { return t == Type::kBf16 || t == Type::kF16; }

int i32(std::int64_t v) {
  if (v > 0x7fffffff) throw std::runtime_error("cuDNN: a dimension above 2^31");
  return static_cast<int>(v);
}

}  // namespace

// The descriptors of one convolution shape (cuDNN's host objects, read-only
// once set: replica threads may share them).
struct ConvDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  explicit ConvDescriptors(const ConvParams& p) {
    check_cudnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
    check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
    const cudnnDataType_t t = data_type(p.type);
    check_cudnn(
        cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, t, i32(p.n), i32(p.c), i32(p.h), i32(p.w)),
        "input descriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, t, i32(p.n), i32(p.oc), i32(p.oh),
                                           i32(p.ow)),
                "output descriptor");
    check_cudnn(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NHWC, i32(p.oc), i32(p.c / p.groups),
                                           i32(p.kh), i32(p.kw)),
                "filter descriptor");
    check_cudnn(cudnnSetConvolution2dDescriptor(conv, i32(p.pad_h), i32(p.pad_w), i32(p.sh),
                                                i32(p.sw), i32(p.dh), i32(p.dw),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "convolution descriptor");
    check_cudnn(cudnnSetConvolutionGroupCount(conv, i32(p.groups)), "group count");
    check_cudnn(
        cudnnSetConvolutionMathType(conv, half(p.type) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
        "math type");
  }
  ~ConvDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;
};

namespace {

using ShapeKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                            std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                            std::int64_t, std::int64_t, std::int64_t, int>;
ShapeKey key(const ConvParams& p) {
  return {p.n,      p.h,
          p.w,      p.c,
          p.kh,     p.kw,
          p.oc,     p.sh,
          p.sw,     p.dh,
          p.dw,     p.pad_h * 65536 + p.pad_w,
          p.groups, static_cast<int>(p.type)};
}

}  // namespace

// What a convolution shape needs at every call, made at its first: the
// descriptors, and per pass (forward, backward-data, backward-filter) the
// algorithm chosen and its workspace size. A MobileNetV2 step makes ~150
// convolution calls; making and destroying four descriptors and asking
// the workspace size at each was host time the GPU waited for.
struct ConvPlan {
  explicit ConvPlan(const ConvParams& p) : d(p) {}
  ConvDescriptors d;
  int algo[3] = {-1, -1, -1};
  std::size_t workspace[3] = {0, 0, 0};
};

struct CudnnState::Impl {
  std::mutex mutex;
  std::map<cudaStream_t, cudnnHandle_t> handles;
  std::map<ShapeKey, std::unique_ptr<ConvPlan>> plans;  // per shape, made once, never freed
};

CudnnState::CudnnState() : impl_(new Impl()) {}
CudnnState::~CudnnState() = default;

cudnnHandle_t CudnnState::handle(cudaStream_t s) {
  std::lock_guard lock(impl_->mutex);
  auto it = impl_->handles.find(s);
  if (it != impl_->handles.end()) return it->second;
  cudnnHandle_t h = nullptr;
  check_cudnn(cudnnCreate(&h), "cudnnCreate");
  check_cudnn(cudnnSetStream(h, s), "cudnnSetStream");
  impl_->handles[s] = h;
  return h;
}

bool autotune() {
  static const bool on = [] {
    const char* v = std::getenv("LOCKSTEP_CUDNN_AUTOTUNE");  // NOLINT(concurrency-mt-unsafe)
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// The plan of this shape, with pass `pass`'s algorithm chosen: the fastest
// of the algorithms cuDNN ranks for it that is deterministic and, for
// float32 data, keeps float32 (no tensor-op math), found once and
// remembered.
// `rank(descriptors, perf, count, &found)` is the pass's Find*Algorithm
// (timed; the heuristic where Find fails) or Get*Algorithm_v7 (heuristic),
// both sorted fastest first; `size(descriptors, algo, &bytes)` its
// workspace query. Returns the algorithm and its workspace size.
template <typename Perf, typename Rank, typename Size>
std::pair<int, std::size_t> CudnnState::choose(int pass, const ConvParams& p, int count,
                                               const char* what, const ConvPlan*& plan, Rank&& rank,
                                               Size&& size) {
  ConvPlan* mine = nullptr;
  {
    std::lock_guard lock(impl_->mutex);
    std::unique_ptr<ConvPlan>& slot = impl_->plans[key(p)];
    if (!slot) slot = std::make_unique<ConvPlan>(p);
    mine = slot.get();
    plan = mine;
    if (mine->algo[pass] >= 0) return {mine->algo[pass], mine->workspace[pass]};
  }
  // Found outside the lock (Find runs every algorithm once); two threads
  // may both find, and agree or not: the first to store wins.
  std::vector<Perf> perf(static_cast<std::size_t>(count));
  int found = 0;
  check_cudnn(rank(mine->d, perf.data(), count, &found), what);
  int algo = -1;
  for (int i = 0; i < found && algo < 0; ++i) {
    const Perf& c = perf[static_cast<std::size_t>(i)];
    if (c.status == CUDNN_STATUS_SUCCESS && c.determinism == CUDNN_DETERMINISTIC &&
        (half(p.type) || c.mathType != CUDNN_TENSOR_OP_MATH))
      algo = static_cast<int>(c.algo);
  }
  if (algo < 0)
    throw std::runtime_error(std::string(what) + ": cuDNN offers no deterministic algorithm here");
  std::size_t bytes = 0;
  check_cudnn(size(mine->d, algo, &bytes), what);
  std::lock_guard lock(impl_->mutex);
  if (mine->algo[pass] < 0) {
    mine->algo[pass] = algo;
    mine->workspace[pass] = bytes;
  }
  return {mine->algo[pass], mine->workspace[pass]};
}

void CudnnState::conv_forward(cudaStream_t s, const ConvParams& p, const void* x,
                              const void* filter, void* y) {
  cudnnHandle_t h = handle(s);
  const ConvPlan* plan = nullptr;
  const auto [algo, bytes] = choose<cudnnConvolutionFwdAlgoPerf_t>(
      0, p, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "choosing a convolution algorithm", plan,
      [&](const ConvDescriptors& d, cudnnConvolutionFwdAlgoPerf_t* perf, int n, int* found) {
        if (autotune() && cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, n, found,
                                                               perf) == CUDNN_STATUS_SUCCESS)
          return CUDNN_STATUS_SUCCESS;
        return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, found, perf);
      },
      [&](const ConvDescriptors& d, int a, std::size_t* out) {
        return cudnnGetConvolutionForwardWorkspaceSize(
            h, d.x, d.w, d.conv, d.y, static_cast<cudnnConvolutionFwdAlgo_t>(a), out);
      });
  const ConvDescriptors& d = plan->d;
  const Scratch ws(s, bytes, "cuDNN workspace");
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnConvolutionForward(h, &one, d.x, x, d.w, filter, d.conv,
                                      static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws.as<void>(),
                                      bytes, &zero, d.y, y),
              "cudnnConvolutionForward");
}

void CudnnState::conv_backward_data(cudaStream_t s, const ConvParams& p, const void* dy,
                                    const void* filter, void* dx) {
  cudnnHandle_t h = handle(s);
  const ConvPlan* plan = nullptr;
  const auto [algo, bytes] = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      1, p, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "choosing a backward-data algorithm", plan,
      [&](const ConvDescriptors& d, cudnnConvolutionBwdDataAlgoPerf_t* perf, int n, int* found) {
        if (autotune() && cudnnFindConvolutionBackwardDataAlgorithm(
                              h, d.w, d.y, d.conv, d.x, n, found, perf) == CUDNN_STATUS_SUCCESS)
          return CUDNN_STATUS_SUCCESS;
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, found,
                                                           perf);
      },
      [&](const ConvDescriptors& d, int a, std::size_t* out) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, d.w, d.y, d.conv, d.x, static_cast<cudnnConvolutionBwdDataAlgo_t>(a), out);
      });
  const ConvDescriptors& d = plan->d;
  const Scratch ws(s, bytes, "cuDNN workspace");
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnConvolutionBackwardData(h, &one, d.w, filter, d.y, dy, d.conv,
                                           static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                           ws.as<void>(), bytes, &zero, d.x, dx),
              "cudnnConvolutionBackwardData");
}

void CudnnState::conv_backward_filter(cudaStream_t s, const ConvParams& p, const void* x,
                                      const void* dy, void* dfilter) {
  cudnnHandle_t h = handle(s);
  const ConvPlan* plan = nullptr;
  const auto [algo, bytes] = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      2, p, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "choosing a backward-filter algorithm", plan,
      [&](const ConvDescriptors& d, cudnnConvolutionBwdFilterAlgoPerf_t* perf, int n, int* found) {
        if (autotune() && cudnnFindConvolutionBackwardFilterAlgorithm(
                              h, d.x, d.y, d.conv, d.w, n, found, perf) == CUDNN_STATUS_SUCCESS)
          return CUDNN_STATUS_SUCCESS;
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, found,
                                                             perf);
      },
      [&](const ConvDescriptors& d, int a, std::size_t* out) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            h, d.x, d.y, d.conv, d.w, static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), out);
      });
  const ConvDescriptors& d = plan->d;
  const Scratch ws(s, bytes, "cuDNN workspace");
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnConvolutionBackwardFilter(h, &one, d.x, x, d.y, dy, d.conv,
                                             static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                             ws.as<void>(), bytes, &zero, d.w, dfilter),
              "cudnnConvolutionBackwardFilter");
}

namespace {

struct PoolDescriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  explicit PoolDescriptors(const PoolParams& p) {
    check_cudnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
    check_cudnn(cudnnCreatePoolingDescriptor(&pool), "cudnnCreatePoolingDescriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i32(p.n),
                                           i32(p.c), i32(p.h), i32(p.w)),
                "pooling input descriptor");
    check_cudnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, i32(p.n),
                                           i32(p.c), i32(p.oh), i32(p.ow)),
                "pooling output descriptor");
    // Average pooling leaves the padding out of the count, as TensorFlow.
    check_cudnn(cudnnSetPooling2dDescriptor(pool,
                                            p.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                                            CUDNN_NOT_PROPAGATE_NAN, i32(p.kh), i32(p.kw),
                                            i32(p.pad_h), i32(p.pad_w), i32(p.sh), i32(p.sw)),
                "pooling descriptor");
  }
  ~PoolDescriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyPoolingDescriptor(pool);
  }
  PoolDescriptors(const PoolDescriptors&) = delete;
  PoolDescriptors& operator=(const PoolDescriptors&) = delete;
};

}  // namespace

void CudnnState::pool_forward(cudaStream_t s, const PoolParams& p, const float* x, float* y) {
  PoolDescriptors d(p);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(cudnnPoolingForward(handle(s), d.pool, &one, d.x, x, &zero, d.y, y),
              "cudnnPoolingForward");
}

void CudnnState::pool_backward(cudaStream_t s, const PoolParams& p, const float* x, const float* y,
                               const float* dy, float* dx) {
  PoolDescriptors d(p);
  const float one = 1.0f, zero = 0.0f;
  check_cudnn(
      cudnnPoolingBackward(handle(s), d.pool, &one, d.y, y, d.y, dy, d.x, x, &zero, d.x, dx),
      "cudnnPoolingBackward");
}

std::string CudnnState::version() {
  const std::size_t v = cudnnGetVersion();
  return "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100);
}

}  // namespace lockstep::backend::cuda
