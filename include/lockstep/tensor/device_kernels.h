// The seam between ops and accelerator devices (implementer-facing, as
// recording.h: ops, optimizers and the gradient reduction use it; users
// write DeviceScope and Tensor::cpu()).
//
// An op's own code is the CPU's kernel. Each op helper asks `OnDevice`
// first: on a GPU it hands the computation to the device's DeviceKernels
// (tensor/gpu_kernels.cc, which calls the CUDA adapter); on the fake
// accelerator it runs the op's CPU code as device code (DeviceCodeScope),
// where host code may touch the fake device's memory; on a CPU it does
// nothing. Outside device code, `Tensor::data()` and `raw_data()` refuse a
// tensor whose device is not host-accessible — so an op or a trainer that
// forgot its device path fails on the fake device in CI, and with the same
// error (never a segfault) on a GPU.
//
// Placement follows TensorFlow's eager rule: an op runs on the current
// device (DeviceScope) and its outputs are made there; an input on the host
// is copied to the accelerator first (a batch, a constant); an input on an
// accelerator given to an op on a CPU is an error that says to copy it with
// `.cpu()`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::detail {

enum class BinaryKind {
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
  kEqual,
  kNotEqual,
  kLess,
  kLessEqual,
  kGreater,
  kGreaterEqual,
};

enum class UnaryKind {
  kNeg,
  kExp,
  kLog,
  kLog1p,
  kSqrt,
  kSquare,
  kAbs,
  kRelu,
  kSigmoid,
  kTanh,
  kErf
};

// Same-shape maps of two float32 tensors (the fused backward kernels).
enum class Map2Kind {
  kReluGradFromOutput,  // y > 0 ? g : 0                  (g, y: the output)
  kLog1pGrad,           // g / (1 + x)                    (g, x)
  kSqrtGrad,            // 0.5 · g / y                    (g, y)
  kSquareGrad,          // 2 · x · g                      (g, x)
  kAbsGrad,             // x > 0 ? g : (x < 0 ? −g : 0)   (g, x)
  kSigmoidGrad,         // g · y · (1 − y)                (g, y)
  kTanhGrad,            // g · (1 − y²)                   (g, y)
  kErfGrad,             // g · 2/√π · exp(−x²)            (g, x)
};

enum class ReduceKind { kSum, kMean, kMax, kMin };

// The op families a device may run natively on bfloat16 or float16 operands
// (tensor/ops/bf16.h's native_half).
enum class HalfOp { kMatmul, kConv, kPool };

// One step of an update rule that has a device kernel, with the numbers the
// CPU's loop uses (optim/optimizers.cc), so both give the same bits:
//   kSgd:      var -= lr·g
//   kMomentum: m = momentum·m − lr·g; var += m (Nesterov: var += momentum·m − lr·g)
//   kAdam:     m += (g − m)·c1; v += (g² − v)·c2; var −= alpha·m/(√v + ε)
//   kRMSprop:  v = ρ·v + (1 − ρ)·g²; d = v + ε (centered: a = ρ·a + (1 − ρ)·g,
//              d = v − a² + ε); i = lr·g/√d; var −= i (momentum: m = momentum·m + i;
//              var −= m). Slots: v, then m when momentum > 0, then a when centered.
//   kAdagrad:  acc += g²; var −= lr·g/√(acc + ε)
// and first, when decay != 1, var *= decay (decoupled weight decay).
// `step_numbers`, when set, is the device's memory holding {lr, alpha,
// decay}, which the kernel reads when it runs instead of the fields: a
// recorded step (capture) then replays with each step's own numbers.
// `finite`, when set, is the device's memory holding a float that is not
// finite when the step's gradients were not (loss scaling's check on a
// recorded step): the kernel then changes nothing, as a skipped step.
struct DeviceUpdate {
  enum class Rule { kSgd, kMomentum, kAdam, kRMSprop, kAdagrad } rule = Rule::kSgd;
  float lr = 0, momentum = 0, alpha = 0, c1 = 0, c2 = 0, epsilon = 0, decay = 1, rho = 0;
  bool nesterov = false;
  bool centered = false;
  const float* step_numbers = nullptr;
  const float* finite = nullptr;
};

// A convolution as conv2d checked it (NHWC input, HWIO kernel, TensorFlow's
// padding worked out: before and after may differ).
struct ConvGeometry {
  std::int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, oc = 0, groups = 1;
  std::int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  std::int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0, oh = 0, ow = 0;
};

// A pooling window as max_pool2d / avg_pool2d checked it (NHWC).
struct PoolGeometry {
  std::int64_t n = 0, h = 0, w = 0, c = 0, kh = 0, kw = 0, sh = 1, sw = 1;
  std::int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0, oh = 0, ow = 0;
  bool max = true;
};

// image::resize's sampling, worked out on the host as the CPU's kernels use
// it (half-pixel centres): for each output row and column its source rows
// or columns and, for bilinear, its lerp weight. Offsets are in pixels.
struct ResizePlan {
  std::int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
  bool bilinear = true;
  std::vector<std::int64_t> y_lower{}, y_upper{}, x_lower{}, x_upper{};  // nearest: *_lower
  std::vector<float> y_lerp{}, x_lerp{};                                 // bilinear only
};

// image::affine_transform's numbers: the batch, one transform row per image
// (rows = n) or one for all (rows = 1), TensorFlow's fill mode (0 constant,
// 1 reflect, 2 wrap, 3 nearest) and interpolation.
struct AffineGeometry {
  std::int64_t n = 0, h = 0, w = 0, c = 0, rows = 1;
  int fill = 0;
  bool bilinear = true;
  float fill_value = 0.0f;
};

// A copy from the host to a device that travels ahead of its use (the input
// pipeline's prefetch_to_device, data/device_prefetch.cc). A producer thread
// packs bytes into the area's host memory and sends them to its device
// memory — on a GPU from page-locked memory, on a copy stream of the
// device's own, while the device's stream computes; the consumer then
// queues, on the device's stream, copies out of the area into tensors of
// the device's pool (one pass over device memory, ~10 µs for a 38.5 MB
// batch on an H200, against ~10 ms for the same batch sent from pageable
// memory while the GPU waits). The next send waits, on the device, for
// those copies out. One producer and one consumer thread per area.
class StagingArea {
 public:
  virtual ~StagingArea() = default;
  // Producer: host memory for at least `bytes` (grown when needed).
  virtual unsigned char* host(std::size_t bytes) = 0;
  // Producer: sends the host memory's first `bytes` to the area's device
  // memory; returns when they are there.
  virtual void send(std::size_t bytes) = 0;
  // Consumer: queues on the device's stream a copy of the area's device
  // bytes [offset, offset + bytes) into `dst` (the device's memory).
  virtual void copy_out(void* dst, std::size_t offset, std::size_t bytes) = 0;
  // Consumer, after its copies out: the next send waits for them.
  virtual void copied_out() = 0;
};

// The kernels and copies a device ran for a piece of work, recorded (a CUDA
// graph on a GPU): replay() runs them again on the device's stream — the
// same kernels with the same arguments on the same memory — without the
// host's work of issuing them. The memory the work allocated stays the
// recording's while it lives. Destroying it waits for its replays.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  virtual void replay() = 0;
  // The device memory it holds for its replays: what the work allocated,
  // each block a tensor gave back during the work taken again by later
  // allocations of it.
  virtual std::size_t bytes() const = 0;
};

// A mark in a device's stream (a CUDA event): record_event sets it after
// the work queued so far, and wait_event makes another stream (another
// logical GPU's) wait for that work without the host waiting
// (DeviceKernels::make_event).
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

// While DeviceKernels::capture records on this thread, the host work each
// replay of the recording does between its kernels (the adapter's capture
// installs them; GradientReduction uses them when the replicas of logical
// GPUs sum in the device).
class RecordingHooks {
 public:
  virtual ~RecordingHooks() = default;
  // Ends the part recorded so far and records what follows as the next
  // part: each replay queues the part, runs `between` on the host, then
  // queues the next.
  virtual void split(std::function<void()> between) = 0;
  // `first` runs on the host at each replay before its first part is queued.
  virtual void at_start(std::function<void()> first) = 0;
};
// The hooks of the capture recording on this thread; null when none does.
RecordingHooks* recording_hooks();
class RecordingHooksScope {
 public:
  explicit RecordingHooksScope(RecordingHooks& hooks);
  ~RecordingHooksScope();
  RecordingHooksScope(const RecordingHooksScope&) = delete;
  RecordingHooksScope& operator=(const RecordingHooksScope&) = delete;

 private:
  RecordingHooks* previous_;
};

// The replicas' accelerators summing together on their own streams (NCCL
// on GPUs): one member per replica, made together by
// DeviceKernels::make_collective. A call is queued on the member's device's
// stream and returns at once; every member makes the same calls in the
// same order (a replica thread each). A sum whose peer never comes waits on
// the device for ever: waiting_since is what a watchdog polls, and abort
// what it calls (distribute/collective_watchdog.h).
class DeviceCollective {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~DeviceCollective() = default;
  // buf (n float32 in this member's device memory) becomes the sum of
  // every member's, in place: the same bits on every member.
  virtual void all_reduce_sum(float* buf, std::int64_t n) = 0;
  // all_reduce_sum in three calls, for a step recorded as a graph: the
  // sum's marks on the stream and its watch are the host's work before and
  // after the recording's part in which queue_sum was recorded
  // (RecordingHooks), while only the sum itself is recorded.
  virtual void begin_sum() = 0;
  virtual void queue_sum(float* buf, std::int64_t n) = 0;
  virtual void end_sum() = 0;
  // Returns once this member's sums queued so far have run on its device.
  // A sum the group's abort ended is a DistributedError saying the abort's
  // reason: never its partial sum taken for the result.
  virtual void wait() = 0;
  // Since when this member's sum has been running — its device reached it
  // (the work queued before it has run) and it has not ended; nullopt when
  // none is. Any thread; never waits.
  virtual std::optional<Clock::time_point> waiting_since() = 0;
  // Every member's collectives in flight end with an error that says
  // `reason`, and later ones are refused (a replica failed, or a peer
  // never came: nobody waits for it). Any thread; the first reason stays.
  virtual void abort(const std::string& reason) = 0;
};

// gather's gradient without atomics: the positions of `indices` grouped by
// their target row, ascending within a group (a stable sort), so that each
// target's sum is added in the CPU's order. targets[u] gets the positions
// order[starts[u] .. starts[u + 1]); with padded_to, the groups run on to
// that many, each empty with target -1 (a recorded kernel's fixed size).
struct GatherGrouping {
  std::vector<std::int64_t> order{}, starts{}, targets{};
};
GatherGrouping group_by_target(const std::vector<std::int64_t>& indices, std::size_t padded_to = 0);
// A recorded gather's indices and its gradient's grouping (int64, on the
// device; m positions: indices [m], order [m], starts [m + 1], targets
// [m], padded), written before each replay from the batch's host copy.
struct GatherOnDevice {
  Tensor indices{}, order{}, starts{}, targets{};
};

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;

  // What runs: "CUDA (cuBLAS 13.1, sm_90)", "the CPU's kernels (fake accelerator)".
  virtual std::string describe() const = 0;
  // True for the fake accelerator: ops run their CPU code as device code.
  virtual bool runs_host_kernels() const { return false; }
  // True when this backend's kernels may read `other`'s memory directly
  // (two logical GPUs of one GPU; the fake devices, all host memory).
  virtual bool shares_memory_with(const DeviceKernels& other) const { return this == &other; }
  // Whether `op` runs here on `half` operands natively: kernels that read
  // and write `half` and accumulate in float32. Else the op widens its
  // operands to float32 and rounds its result once (tensor/ops/bf16.h).
  virtual bool takes_half(HalfOp /*op*/, DType /*half*/) const { return false; }

  // Memory. `device` is this backend's; pointers are its memory or the host's.
  virtual void copy_from_host(Device& device, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(Device& device, void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_on_device(Device& device, void* dst, const void* src, std::size_t bytes) = 0;
  // Waits for everything queued on `device`.
  virtual void synchronize(Device& device) = 0;
  // A staging area for copies ahead to `device`. The default sends from
  // ordinary host memory with copy_from_host when the consumer copies out
  // (the fake accelerator's: its copies are the host's memcpy).
  virtual std::unique_ptr<StagingArea> make_staging_area(Device& device);
  // Marks where an external profiler records (GPUs: cudaProfilerStart /
  // Stop, for `ncu --profile-from-start off`); nothing elsewhere. The
  // benchmarks use it to profile steady steps, past start-up and autotuning.
  virtual void set_profiling(bool /*on*/) {}
  // An event of `device`'s stream (DeviceEvent); null where the device
  // runs its work as it is queued (the fake accelerator: nothing to order).
  virtual std::shared_ptr<DeviceEvent> make_event(Device& device);
  // On `device`'s stream: marks the work queued so far; waits for the
  // work before `event`'s last mark (queued before this call, on any
  // stream of this GPU). Neither may be called while the stream records:
  // a recording orders its streams through RecordingHooks.
  virtual void record_event(Device& device, DeviceEvent& event);
  virtual void wait_event(Device& device, const DeviceEvent& event);
  // Whether capture() records here (GPUs; not the fake accelerator, whose
  // ops run host code).
  virtual bool can_capture() const { return false; }
  // Runs `work` on this thread with the kernels and copies it queues on
  // `device` recorded instead of run (CUDA stream capture): nothing has run
  // when it returns; replay the recording to run it. A copy to the host, a
  // copy from pageable host memory (a tensor made on the host) or a wait
  // for the device inside `work` is a DeviceError naming it, and nothing is
  // recorded. While `work` runs, recording_hooks() are the recording's.
  // The default throws DeviceError (can_capture() is false).
  virtual std::unique_ptr<DeviceGraph> capture(Device& device, const std::function<void()>& work);

  // Computation (GPU). Inputs are on the current device (the caller copied
  // them there); outputs are made there. Each default throws DeviceError
  // naming the op: it has no kernel on this device yet.
  virtual Tensor fill(const Shape& shape, DType dtype, double value);
  // random::uniform's values (float32) of (seed, stream) from global
  // element first_index: the host's bits. With `stream_slot` (int64 [1] on
  // this device) the stream is read from it as the kernel runs: a recorded
  // step's, written before each replay.
  virtual Tensor random_uniform(const Shape& shape, std::uint64_t seed, std::uint64_t stream,
                                const Tensor* stream_slot, std::uint64_t first_index, float minval,
                                float maxval);
  virtual Tensor cast(const Tensor& x, DType dtype);
  virtual Tensor binary(BinaryKind kind, const Tensor& a, const Tensor& b, const Shape& out_shape);
  virtual Tensor unary(UnaryKind kind, const Tensor& x);
  virtual Tensor clip(const Tensor& x, float lo, float hi);
  virtual Tensor map2(Map2Kind kind, const Tensor& x, const Tensor& y);
  virtual Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y,
                       const Shape& out_shape);
  // Over axes [begin, end) of x, which must be consecutive once size-1 axes
  // are dropped; `out_shape` as the op makes it (keepdims or not).
  virtual Tensor reduce(ReduceKind kind, const Tensor& x, int begin, int end,
                        const Shape& out_shape);
  virtual Tensor argmax(const Tensor& x, int axis);
  // log-softmax and/or softmax along `axis`, float64 row sums as the CPU's.
  virtual void softmax(const Tensor& x, int axis, Tensor* log_out, Tensor* prob_out);
  virtual Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias,
                        const MatmulOptions& options);
  // conv2d's forward (with the bias, when defined) and its gradients.
  virtual Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                        const ConvGeometry& g);
  virtual Tensor conv2d_backward_data(const Tensor& dy, const Tensor& kernel,
                                      const ConvGeometry& g);
  virtual Tensor conv2d_backward_kernel(const Tensor& x, const Tensor& dy, const ConvGeometry& g);
  virtual Tensor pool2d(const Tensor& x, const PoolGeometry& g);
  virtual Tensor pool2d_backward(const Tensor& x, const Tensor& y, const Tensor& dy,
                                 const PoolGeometry& g);
  virtual Tensor take_along_axis(const Tensor& x, const Tensor& indices, int axis);
  // The backward of take_along_axis: zeros of `shape` with g added at the indices.
  virtual Tensor scatter_along_axis(const Tensor& g, const Tensor& indices, int axis,
                                    const Shape& shape);
  virtual Tensor one_hot(const Tensor& indices, std::int64_t depth, float on, float off);
  // gather along `axis` at host-checked indices (any dtype), and its
  // gradient (float32): zeros of `shape` with g's rows added at the indices.
  virtual Tensor gather(const Tensor& params, const std::vector<std::int64_t>& indices, int axis,
                        const Shape& out_shape);
  virtual Tensor gather_grad(const Tensor& g, const std::vector<std::int64_t>& indices, int axis,
                             const Shape& shape);
  // The same at indices and a grouping in device memory (a recorded step's,
  // written before each replay: GatherOnDevice).
  virtual Tensor gather(const Tensor& params, const GatherOnDevice& at, int axis,
                        const Shape& out_shape);
  virtual Tensor gather_grad(const Tensor& g, const GatherOnDevice& at, int axis,
                             const Shape& shape);
  // relu with a slope, threshold or cap (float32), and its gradient from
  // the output y.
  virtual Tensor relu_general(const Tensor& x, float slope, float top, float threshold);
  virtual Tensor relu_general_grad(const Tensor& g, const Tensor& y, float slope, float top);
  // Batch normalisation over the last axis of float32 x, clipped to [bottom,
  // top] (a folded ReLU; ±∞: none). With `batch_stats` the batch's mean and
  // variance are computed and returned in `mean` / `variance`; else they
  // are the given moving statistics.
  virtual Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& mean,
                            Tensor& variance, bool batch_stats, float epsilon, float bottom,
                            float top);
  // Its gradient, given the output z when clipped (else undefined); returns
  // {dx, dgamma, dbeta}.
  virtual std::vector<Tensor> batch_norm_backward(const Tensor& x, const Tensor& z, const Tensor& g,
                                                  const Tensor& gamma, const Tensor& mean,
                                                  const Tensor& variance, bool batch_stats,
                                                  float epsilon, float bottom, float top);
  // moving · momentum + value · (1 − momentum), float32 (ops.h's moving_average).
  virtual Tensor moving_average(const Tensor& moving, const Tensor& value, float momentum);
  virtual Tensor transpose(const Tensor& x, const std::vector<int>& perm);
  // image::resize's forward: float32 or uint8 images [n, h, w, c]; bilinear
  // gives float32, nearest the images' dtype.
  virtual Tensor resize(const Tensor& images, const ResizePlan& plan);
  // image::affine_transform's forward: float32 images [n, h, w, c],
  // transforms [rows, 8].
  virtual Tensor affine_transform(const Tensor& images, const Tensor& transforms,
                                  const AffineGeometry& g);
  // One optimizer step on `n` float32 values: value, gradient, slots (m, v).
  virtual void apply_update(const DeviceUpdate& update, float* value, const float* grad,
                            const std::vector<float*>& slots, std::int64_t n);
  // dst = Σ srcs (in their order, so every replica gets the same bits).
  virtual void sum_buffers(Device& device, const std::vector<const float*>& srcs, float* dst,
                           std::int64_t n);
  // One member for each of `devices` (this backend's, on distinct
  // accelerators that share no memory), in that order, or none where this
  // backend has no collectives (the replicas then sum through the host).
  // Throws DeviceError when the collective cannot be made.
  virtual std::vector<std::unique_ptr<DeviceCollective>> make_collective(
      const std::vector<Device*>& devices);
  // "NCCL 2.28.9": what make_collective's members run ("" without one).
  virtual std::string collective_name() const { return ""; }
  // Across processes: an id one process makes ("" where this backend has
  // no collectives) and every process joins with, its `devices` being
  // ranks first_rank, first_rank + 1, ... of `nranks`. Returns once every
  // rank has joined; throws DeviceError when they cannot (a GPU named
  // twice, the deadline passed).
  virtual std::string new_collective_id() { return ""; }
  virtual std::vector<std::unique_ptr<DeviceCollective>> join_collective(
      const std::vector<Device*>& devices, int nranks, int first_rank, const std::string& id,
      std::chrono::milliseconds timeout);
};

// Throws DeviceError: `op` has no kernel on the current device yet.
[[noreturn]] void no_device_kernel(const char* op);

// True while the calling thread runs device code (an op's kernel on the
// fake accelerator): host-inaccessible memory may then be touched.
bool in_device_code();

class DeviceCodeScope {
 public:
  DeviceCodeScope();
  ~DeviceCodeScope();
  DeviceCodeScope(const DeviceCodeScope&) = delete;
  DeviceCodeScope& operator=(const DeviceCodeScope&) = delete;

 private:
  bool previous_;
};

// What an op helper does on the current device. `kernels()` is non-null on
// a GPU (call it); on the fake accelerator the scope runs the CPU code that
// follows as device code; on a CPU, nothing.
class OnDevice {
 public:
  OnDevice();
  DeviceKernels* kernels() const { return kernels_; }

 private:
  DeviceKernels* kernels_ = nullptr;
  std::optional<DeviceCodeScope> scope_;
};

// dst's buffer ← src's values (same shape and dtype), whatever their devices.
void copy_into(const Tensor& dst, const Tensor& src);

// A check an op makes on the host of one of its inputs (a label in range),
// which a recorded step cannot make: while a step is recorded on this
// thread (fit's step graph, train/step_graph.h) the op hands it over
// instead, and the recorder runs it before each replay on the host's copy
// of the input the step was fed.
struct HostCheck {
  const void* input = nullptr;  // the input's device memory (device_pointer)
  Shape shape{};                // as the op sees it
  std::function<void(const Tensor& host)> check{};
};
// Host work a recorded step needs before each replay, in the order the
// eager step would do it, writing device memory its kernels read: the
// stream of a draw from a layer's own counter (random::uniform_next:
// Dropout's masks), advancing the counter as the eager step would;
// RandomRotation's matrices, worked out on the host from that stream.
using ReplayStage = std::function<void()>;
// Collects the checks and the stages of the ops recorded on this thread
// while it lives.
class RecordingStepScope {
 public:
  RecordingStepScope(std::vector<HostCheck>& checks, std::vector<ReplayStage>& stages);
  ~RecordingStepScope();
  RecordingStepScope(const RecordingStepScope&) = delete;
  RecordingStepScope& operator=(const RecordingStepScope&) = delete;

 private:
  std::vector<HostCheck>* previous_checks_;
  std::vector<ReplayStage>* previous_stages_;
};
// Whether a step is being recorded on this thread.
bool recording_step();
// While recording: `check` runs before each replay on `input`'s host copy.
void check_before_each_replay(const Tensor& input, std::function<void(const Tensor& host)> check);
// While recording: `stage` runs on the host before each replay.
void before_each_replay(ReplayStage stage);
// A tensor on the current device for a value a stage or a HostCheck writes
// before each replay. Made while recording, it is memory of its own: the
// recording hands blocks its step gave back to later allocations (each
// launch runs in order, so the earlier kernels are done with them), but a
// staged value is written before the launch, and an earlier kernel of the
// step would write over it.
Tensor staged_tensor(const Shape& shape, DType dtype);
// Whether this thread is allocating a staged tensor (the GPU's allocator).
bool allocating_staged();

// `t` on the current accelerator: itself when it is there, else a copy
// (a host batch, a constant). Used by GPU kernels on their inputs.
Tensor on_current_device(const Tensor& t);

// Host memory's pointer of a tensor on any device, unchecked: for device
// kernels and copies only.
void* device_pointer(const Tensor& t);

}  // namespace lockstep::detail
