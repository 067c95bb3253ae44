// GPUs: finding them (loading the CUDA adapter, liblockstep_cuda.so, with
// dlopen on first use), their logical devices (each with its own stream and
// memory statistics), their stream-ordered memory pool, and the DeviceKernels
// that turn ops into the adapter's kernels (tensor/backend/cuda/gpu_api.h).
// No CUDA header is included here: the adapter is the only place.
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/tensor/device_kernels.h"
#include "tensor/accelerators.h"
#include "tensor/backend/cuda/gpu_api.h"

namespace lockstep::detail {
namespace {

using backend::cuda::Broadcast;
using backend::cuda::GpuApi;
using backend::cuda::Type;

Type type_of(DType d) { return static_cast<Type>(static_cast<int>(d)); }

// Runs an adapter call, turning its failure into a DeviceError naming the
// device and the op.
template <typename F>
auto guarded(const Device& device, const char* op, F&& f) {
  try {
    return f();
  } catch (const std::runtime_error& e) {
    if (dynamic_cast<const Error*>(&e)) throw;
    throw_error<DeviceError>(op, " on ", device.name(), ": ", e.what());
  }
}

Broadcast broadcast_of(const Shape& out, std::initializer_list<const Shape*> inputs) {
  Broadcast b;
  b.rank = out.rank();
  LOCKSTEP_CHECK_AS(DeviceError, b.rank <= backend::cuda::kMaxRank,
                    "GPU kernels take rank <= ", backend::cuda::kMaxRank, ", got shape ", out);
  for (int i = 0; i < b.rank; ++i) b.dims[i] = out[i];
  int k = 0;
  for (const Shape* s : inputs) {
    std::int64_t stride = 1;
    for (int i = b.rank - 1; i >= 0; --i) {
      const int j = i - (b.rank - s->rank());
      if (j < 0) {
        b.strides[k][i] = 0;
        continue;
      }
      const std::int64_t d = (*s)[j];
      b.strides[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
    ++k;
  }
  return b;
}

class GpuAllocator final : public Allocator {
 public:
  GpuAllocator(GpuApi* api, int gpu, void* stream, std::string name)
      : api_(api), gpu_(gpu), stream_(stream), name_(std::move(name)) {}
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    try {
      const std::size_t asked = bytes == 0 ? 1 : bytes;
      p = allocating_staged() ? api_->allocate_staged(gpu_, stream_, asked)
                              : api_->allocate(gpu_, stream_, asked);
    } catch (const std::runtime_error& e) {
      std::size_t free = 0, total = 0;
      try {
        api_->memory_info(gpu_, free, total);
      } catch (const std::runtime_error&) {
      }
      throw_error<DeviceError>("out of memory on ", name_, ": asked for ", bytes, " bytes with ",
                               free, " of ", total, " bytes free (", stats().bytes_in_use,
                               " in use by this device's tensors): ", e.what());
    }
    std::lock_guard lock(mutex_);
    ++stats_.allocations;
    ++stats_.system_allocations;
    stats_.bytes_in_use += bytes;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
  }
  void deallocate(void* ptr, std::size_t bytes) noexcept override {
    try {
      api_->deallocate(gpu_, stream_, ptr);
    } catch (const std::runtime_error&) {  // a context torn down at exit: nothing to free
    }
    std::lock_guard lock(mutex_);
    ++stats_.system_frees;
    stats_.bytes_in_use -= bytes;
  }
  Stats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void reset_peak_stats() override {
    std::lock_guard lock(mutex_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }
  // The pool of cudaMallocAsync keeps freed memory for the next step; it is
  // trimmed by the driver, not here.
  void empty_cache() override {}

 private:
  GpuApi* api_;
  int gpu_;
  void* stream_;
  std::string name_;
  mutable std::mutex mutex_;
  Stats stats_;
};

// Page-locked host memory → the area's device memory on the GPU's copy
// stream; copies out on the logical GPU's stream, which the next send's copy
// waits for through an event (tensor/device_kernels.h's StagingArea).
class GpuStagingArea final : public StagingArea {
 public:
  GpuStagingArea(GpuApi* api, Device& device, int gpu, void* stream, void* copy_stream)
      : api_(api), device_(device), gpu_(gpu), stream_(stream), copy_stream_(copy_stream) {
    event_ = guarded(device_, "prefetch_to_device", [&] { return api_->create_event(gpu_); });
  }
  ~GpuStagingArea() override {
    try {
      // Stream-ordered: freed after the copies out queued before.
      if (device_memory_) api_->deallocate(gpu_, stream_, device_memory_);
      api_->synchronize(copy_stream_);
      if (host_memory_) api_->host_deallocate(host_memory_);
      api_->destroy_event(event_);
    } catch (const std::runtime_error&) {  // a context torn down at exit
    }
  }
  GpuStagingArea(const GpuStagingArea&) = delete;
  GpuStagingArea& operator=(const GpuStagingArea&) = delete;

  unsigned char* host(std::size_t bytes) override {
    if (bytes > host_bytes_) {
      // The last send has finished with it: sends return when done.
      guarded(device_, "prefetch_to_device's page-locked memory", [&] {
        if (host_memory_) api_->host_deallocate(host_memory_);
        host_memory_ = nullptr;
        host_memory_ = static_cast<unsigned char*>(api_->host_allocate(bytes));
      });
      host_bytes_ = bytes;
    }
    return host_memory_;
  }
  void send(std::size_t bytes) override {
    guarded(device_, "prefetch_to_device", [&] {
      if (bytes > device_bytes_) {
        if (device_memory_) api_->deallocate(gpu_, stream_, device_memory_);
        device_memory_ = nullptr;
        device_memory_ = static_cast<unsigned char*>(api_->allocate(gpu_, stream_, bytes));
        // Its allocation is ordered on the logical GPU's stream.
        api_->record_event(event_, stream_);
        device_bytes_ = bytes;
      }
      api_->stream_wait_event(copy_stream_, event_);
      api_->copy_from_host(copy_stream_, device_memory_, host_memory_, bytes);
      api_->synchronize(copy_stream_);
    });
  }
  void copy_out(void* dst, std::size_t offset, std::size_t bytes) override {
    guarded(device_, "prefetch_to_device",
            [&] { api_->copy_on_device(stream_, dst, device_memory_ + offset, bytes); });
  }
  void copied_out() override {
    guarded(device_, "prefetch_to_device", [&] { api_->record_event(event_, stream_); });
  }

 private:
  GpuApi* api_;
  Device& device_;
  int gpu_;
  void* stream_;
  void* copy_stream_;
  void* event_ = nullptr;
  unsigned char* host_memory_ = nullptr;
  std::size_t host_bytes_ = 0;
  unsigned char* device_memory_ = nullptr;
  std::size_t device_bytes_ = 0;
};

// A CUDA graph of this device's stream (GpuKernels::capture), in parts
// with the host's work before and between them (RecordingHooks).
class GpuGraph final : public DeviceGraph {
 public:
  GpuGraph(GpuApi* api, Device& device, void* stream, void* graph,
           std::vector<std::function<void()>> first, std::vector<std::function<void()>> between)
      : api_(api),
        device_(device),
        stream_(stream),
        graph_(graph),
        first_(std::move(first)),
        between_(std::move(between)) {}
  ~GpuGraph() override {
    try {
      api_->synchronize(stream_);  // its launches done
      api_->destroy_graph(graph_);
    } catch (const std::runtime_error&) {  // a context torn down at exit
    }
  }
  GpuGraph(const GpuGraph&) = delete;
  GpuGraph& operator=(const GpuGraph&) = delete;
  void replay() override {
    for (const auto& f : first_) f();
    for (std::size_t part = 0; part <= between_.size(); ++part) {
      guarded(device_, "replaying a graph",
              [&] { api_->launch_graph(graph_, static_cast<int>(part), stream_); });
      if (part < between_.size()) between_[part]();
    }
  }
  std::size_t bytes() const override { return api_->graph_bytes(graph_); }

 private:
  GpuApi* api_;
  Device& device_;
  void* stream_;
  void* graph_;
  std::vector<std::function<void()>> first_;    // before part 0
  std::vector<std::function<void()>> between_;  // after part k, before part k + 1
};

// A CUDA event of one GPU (DeviceKernels::make_event).
class GpuEvent final : public DeviceEvent {
 public:
  GpuEvent(GpuApi* api, void* event) : api_(api), event_(event) {}
  ~GpuEvent() override {
    try {
      api_->destroy_event(event_);
    } catch (const std::runtime_error&) {  // a context torn down at exit
    }
  }
  GpuEvent(const GpuEvent&) = delete;
  GpuEvent& operator=(const GpuEvent&) = delete;
  void* handle() const { return event_; }

 private:
  GpuApi* api_;
  void* event_;
};

// NCCL's communicators for this process's replicas on distinct GPUs, made
// together (ncclCommInitAll, or this process's ranks of several processes'
// communicator); each member sums on its logical GPU's stream. An abort
// from any member aborts all of this process's: a replica that failed
// leaves the others' NCCL kernels waiting for it on their GPUs.
class NcclGroup {
 public:
  NcclGroup(GpuApi* api, std::vector<void*> comms) : api_(api), comms_(std::move(comms)) {}
  ~NcclGroup() {
    for (void* c : comms_) {
      try {
        api_->nccl_destroy(c);
      } catch (const std::runtime_error&) {  // a context torn down at exit
      }
    }
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void abort(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      if (!reason_) reason_ = reason.empty() ? "aborted" : reason;
    }
    for (void* c : comms_) api_->nccl_abort(c);
  }
  // Why the group was aborted; nullopt while it was not.
  std::optional<std::string> aborted_because() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }
  GpuApi* api() const { return api_; }
  void* comm(std::size_t rank) const { return comms_[rank]; }

 private:
  GpuApi* api_;
  std::vector<void*> comms_;
  mutable std::mutex mutex_;
  std::optional<std::string> reason_;
};

// One replica's NCCL rank. Events recorded before and after each sum tell
// when it began — its stream reached it: the step's kernels before it have
// run — and when it ended; in between it is in flight (waiting_since), as
// a host collective is from the moment it is entered. On a GPU the call
// returns at once and the sum runs later; the emulated adapter runs it
// inside the call, which then counts as in flight.
class NcclMember final : public DeviceCollective {
 public:
  NcclMember(std::shared_ptr<NcclGroup> group, std::size_t rank, Device& device, int gpu,
             void* stream)
      : group_(std::move(group)), rank_(rank), device_(device), stream_(stream) {
    guarded(device_, "NCCL's events", [&] {
      before_ = group_->api()->create_event(gpu);
      after_ = group_->api()->create_event(gpu);
    });
  }
  ~NcclMember() override {
    for (void* e : {before_, after_}) {
      try {
        if (e != nullptr) group_->api()->destroy_event(e);
      } catch (const std::runtime_error&) {  // a context torn down at exit
      }
    }
  }
  NcclMember(const NcclMember&) = delete;
  NcclMember& operator=(const NcclMember&) = delete;

  // Only the last sum is tracked: the stream runs them in order, so when
  // it has begun the ones before have ended.
  void all_reduce_sum(float* buf, std::int64_t n) override {
    begin_sum();
    queue_sum(buf, n);
    end_sum();
  }
  void begin_sum() override {
    {
      std::lock_guard lock(mutex_);
      in_call_ = true;
      called_ = Clock::now();
      began_.reset();
      queued_ = false;
    }
    call("the replicas' NCCL all-reduce", [&] { group_->api()->record_event(before_, stream_); });
  }
  void queue_sum(float* buf, std::int64_t n) override {
    call("the replicas' NCCL all-reduce",
         [&] { group_->api()->nccl_all_reduce(group_->comm(rank_), stream_, buf, n); });
  }
  void end_sum() override {
    call("the replicas' NCCL all-reduce", [&] { group_->api()->record_event(after_, stream_); });
    std::lock_guard lock(mutex_);
    in_call_ = false;
    queued_ = true;
  }

  void wait() override {
    bool queued = false;
    {
      std::lock_guard lock(mutex_);
      queued = queued_;
    }
    if (queued) {
      try {
        group_->api()->event_synchronize(after_);
      } catch (const std::runtime_error& e) {
        fail("waiting for the replicas' NCCL all-reduce", e);
      }
    }
    // On a GPU an aborted sum's kernel ends as if it had run: its buffer
    // holds a partial sum.
    throw_if_aborted("");
  }

  // A failed query (the GPU's context broken) counts as not waiting:
  // wait() reports it.
  std::optional<Clock::time_point> waiting_since() override {
    std::lock_guard lock(mutex_);
    if (in_call_) return called_;
    if (!queued_) return std::nullopt;
    try {
      if (group_->api()->event_done(after_)) {
        queued_ = false;
        return std::nullopt;
      }
      if (!began_) {
        if (!group_->api()->event_done(before_)) return std::nullopt;  // still computing
        began_ = Clock::now();  // first seen begun: within a poll of it
      }
    } catch (const std::runtime_error&) {
      return std::nullopt;
    }
    return began_;
  }

  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  // `f`, an adapter's call of the sum: on its failure the sum is not in a
  // call any more, and the error is fail()'s.
  template <typename F>
  void call(const char* op, F&& f) {
    try {
      f();
    } catch (const std::runtime_error& e) {
      {
        std::lock_guard lock(mutex_);
        in_call_ = false;
      }
      fail(op, e);
    }
  }
  // The adapter's failure: the abort's reason where the group was aborted
  // (what ended the call), else a DeviceError as guarded() makes.
  [[noreturn]] void fail(const char* op, const std::runtime_error& e) const {
    if (dynamic_cast<const Error*>(&e)) throw;
    throw_if_aborted(e.what());
    throw_error<DeviceError>(op, " on ", device_.name(), ": ", e.what());
  }
  void throw_if_aborted(const std::string& detail) const {
    const std::optional<std::string> reason = group_->aborted_because();
    if (!reason) return;
    throw_error<DistributedError>("the replicas' NCCL all-reduce on ", device_.name(),
                                  " was aborted: ", *reason,
                                  detail.empty() ? "" : " (" + detail + ")");
  }

  std::shared_ptr<NcclGroup> group_;
  std::size_t rank_;
  Device& device_;
  void* stream_;
  void* before_ = nullptr;
  void* after_ = nullptr;
  std::mutex mutex_;  // the state below, read by a watchdog's thread
  bool in_call_ = false;
  Clock::time_point called_{};
  bool queued_ = false;  // the last sum queued, not yet seen ended
  std::optional<Clock::time_point> began_;
};

class GpuKernels final : public DeviceKernels {
 public:
  GpuKernels(GpuApi* api, int gpu, void* stream, std::string what)
      : api_(api), gpu_(gpu), stream_(stream), what_(std::move(what)) {}
  std::string describe() const override { return what_; }
  bool shares_memory_with(const DeviceKernels& other) const override {
    const auto* g = dynamic_cast<const GpuKernels*>(&other);
    return g != nullptr && g->api_ == api_ && g->gpu_ == gpu_;
  }
  // bfloat16 and float16 on the tensor cores: matmuls and the 1×1
  // convolutions that are matmuls on cuBLAS, the other convolutions on
  // cuDNN (float32 accumulation), depthwise ones on our kernels; pooling
  // is widened at the op.
  bool takes_half(HalfOp op, DType) const override {
    return op == HalfOp::kMatmul || op == HalfOp::kConv;
  }

  void copy_from_host(Device& d, void* dst, const void* src, std::size_t bytes) override {
    guarded(d, "copy to the device", [&] { api_->copy_from_host(stream_, dst, src, bytes); });
  }
  void copy_to_host(Device& d, void* dst, const void* src, std::size_t bytes) override {
    guarded(d, "copy to the host", [&] { api_->copy_to_host(stream_, dst, src, bytes); });
  }
  void copy_on_device(Device& d, void* dst, const void* src, std::size_t bytes) override {
    guarded(d, "copy on the device", [&] { api_->copy_on_device(stream_, dst, src, bytes); });
  }
  void synchronize(Device& d) override {
    guarded(d, "synchronize", [&] { api_->synchronize(stream_); });
  }
  std::unique_ptr<StagingArea> make_staging_area(Device& d) override {
    void* copy_stream = guarded(d, "prefetch_to_device's copy stream", [&] {
      std::lock_guard lock(copy_stream_mutex_);
      if (copy_stream_ == nullptr) copy_stream_ = api_->create_stream(gpu_);
      return copy_stream_;
    });
    return std::make_unique<GpuStagingArea>(api_, d, gpu_, stream_, copy_stream);
  }
  void set_profiling(bool on) override {
    api_->synchronize(stream_);
    api_->profiler(gpu_, on);
  }
  std::shared_ptr<DeviceEvent> make_event(Device& d) override {
    return guarded(d, "making an event",
                   [&] { return std::make_shared<GpuEvent>(api_, api_->create_event(gpu_)); });
  }
  void record_event(Device& d, DeviceEvent& event) override {
    guarded(d, "recording an event",
            [&] { api_->record_event(dynamic_cast<const GpuEvent&>(event).handle(), stream_); });
  }
  void wait_event(Device& d, const DeviceEvent& event) override {
    guarded(d, "waiting for an event", [&] {
      api_->stream_wait_event(stream_, dynamic_cast<const GpuEvent&>(event).handle());
    });
  }
  bool can_capture() const override { return true; }
  std::unique_ptr<DeviceGraph> capture(Device& d, const std::function<void()>& work) override {
    // The host's work of each replay, as the recorded code asks for it.
    struct Hooks final : RecordingHooks {
      Hooks(GpuApi* api, Device& device, void* stream) : api(api), device(device), stream(stream) {}
      void split(std::function<void()> between_parts) override {
        guarded(device, "recording a graph", [&] { api->split_capture(stream); });
        between.push_back(std::move(between_parts));
      }
      void at_start(std::function<void()> f) override { first.push_back(std::move(f)); }
      GpuApi* api;
      Device& device;
      void* stream;
      std::vector<std::function<void()>> first, between;
    } hooks(api_, d, stream_);
    guarded(d, "recording a graph", [&] { api_->begin_capture(stream_); });
    try {
      const RecordingHooksScope in(hooks);
      work();
    } catch (...) {
      try {
        api_->abort_capture(stream_);
      } catch (const std::runtime_error&) {  // the error that stopped the work says more
      }
      throw;
    }
    void* graph = guarded(d, "recording a graph", [&] { return api_->end_capture(stream_); });
    return std::make_unique<GpuGraph>(api_, d, stream_, graph, std::move(hooks.first),
                                      std::move(hooks.between));
  }

  Tensor fill(const Shape& shape, DType dtype, double value) override {
    Tensor out = Tensor::empty(shape, dtype);
    run("fill", [&] { api_->fill(stream_, type_of(dtype), p(out), out.numel(), value); });
    return out;
  }
  Tensor random_uniform(const Shape& shape, std::uint64_t seed, std::uint64_t stream,
                        const Tensor* stream_slot, std::uint64_t first_index, float minval,
                        float maxval) override {
    Tensor out = Tensor::empty(shape);
    const std::uint64_t* slot = nullptr;
    if (stream_slot != nullptr) {
      LOCKSTEP_CHECK_AS(DeviceError,
                        stream_slot->dtype() == DType::kInt64 && stream_slot->numel() == 1 &&
                            &stream_slot->device() == &current_device(),
                        "random::uniform: the stream's slot must be one int64 on ",
                        current_device().name(), ", got ", stream_slot->dtype(), " ",
                        stream_slot->shape(), " on ", stream_slot->device().name());
      slot = static_cast<const std::uint64_t*>(p(*stream_slot));
    }
    run("random::uniform", [&] {
      api_->random_uniform(stream_, f(out), out.numel(), seed, slot, stream, first_index, minval,
                           maxval);
    });
    return out;
  }
  Tensor cast(const Tensor& x_in, DType dtype) override {
    const Tensor x = on_current_device(x_in);
    Tensor out = Tensor::empty(x.shape(), dtype);
    if (x.numel() == 0) return out;
    if (x.dtype() == dtype) {
      run("copy", [&] { api_->copy_on_device(stream_, p(out), p(x), x.nbytes()); });
    } else {
      run("cast", [&] {
        api_->cast(stream_, type_of(x.dtype()), type_of(dtype), p(x), p(out), x.numel());
      });
    }
    return out;
  }
  Tensor binary(BinaryKind kind, const Tensor& a_in, const Tensor& b_in,
                const Shape& out_shape) override {
    const Tensor a = on_current_device(a_in), b = on_current_device(b_in);
    const bool compare = kind >= BinaryKind::kEqual;
    Tensor out = Tensor::empty(out_shape, compare ? DType::kBool : a.dtype());
    if (out.numel() == 0) return out;
    const Broadcast plan = broadcast_of(out_shape, {&a.shape(), &b.shape()});
    run("binary op", [&] {
      api_->binary(stream_, static_cast<int>(kind), type_of(a.dtype()), plan, p(a), p(b), p(out));
    });
    return out;
  }
  Tensor unary(UnaryKind kind, const Tensor& x_in) override {
    const Tensor x = on_current_device(x_in);
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    if (x.numel() == 0) return out;
    run("unary op", [&] {
      api_->unary(stream_, static_cast<int>(kind), type_of(x.dtype()), p(x), p(out), x.numel());
    });
    return out;
  }
  Tensor clip(const Tensor& x_in, float lo, float hi) override {
    const Tensor x = on_current_device(x_in);
    if (is_half(x)) return cast(clip(wide(x), lo, hi), x.dtype());
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    run("clip", [&] { api_->clip(stream_, f(x), f(out), x.numel(), lo, hi); });
    return out;
  }
  Tensor map2(Map2Kind kind, const Tensor& x_in, const Tensor& y_in) override {
    const Tensor x = on_current_device(x_in), y = on_current_device(y_in);
    if (is_half(x) || is_half(y)) {
      // The CPU's rule: two operands of one half type give that type; a
      // half beside a float32 gives float32.
      const Tensor out = map2(kind, wide(x), wide(y));
      return x.dtype() == y.dtype() ? cast(out, x.dtype()) : out;
    }
    Tensor out = Tensor::empty(x.shape());
    run("map2",
        [&] { api_->map2(stream_, static_cast<int>(kind), f(x), f(y), f(out), x.numel()); });
    return out;
  }
  Tensor where(const Tensor& c_in, const Tensor& x_in, const Tensor& y_in,
               const Shape& out_shape) override {
    const Tensor c = on_current_device(c_in), x = on_current_device(x_in),
                 y = on_current_device(y_in);
    if (is_half(x) && x.dtype() == y.dtype())  // a selection: exact through float32
      return cast(where(c, wide(x), wide(y), out_shape), x.dtype());
    Tensor out = Tensor::empty(out_shape, x.dtype());
    if (out.numel() == 0) return out;
    const Broadcast plan = broadcast_of(out_shape, {&c.shape(), &x.shape(), &y.shape()});
    run("where",
        [&] { api_->where(stream_, plan, static_cast<const bool*>(p(c)), f(x), f(y), f(out)); });
    return out;
  }
  Tensor reduce(ReduceKind kind, const Tensor& x_in, int begin, int end,
                const Shape& out_shape) override {
    const Tensor x = on_current_device(x_in);
    Tensor out = Tensor::empty(out_shape);
    std::int64_t outer = 1, n = 1, inner = 1;
    for (int i = 0; i < x.rank(); ++i) (i < begin ? outer : i < end ? n : inner) *= x.shape()[i];
    if (out.numel() == 0) return out;
    run("reduce",
        [&] { api_->reduce(stream_, static_cast<int>(kind), f(x), f(out), outer, n, inner); });
    return out;
  }
  Tensor argmax(const Tensor& x_in, int axis) override {
    const Tensor x = on_current_device(x_in);
    std::int64_t outer = 1, inner = 1;
    std::vector<std::int64_t> dims;
    for (int i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.shape()[i];
      if (i > axis) inner *= x.shape()[i];
      if (i != axis) dims.push_back(x.shape()[i]);
    }
    Tensor out = Tensor::empty(Shape(dims), DType::kInt64);
    if (out.numel() == 0) return out;
    run("argmax", [&] {
      api_->argmax(stream_, f(x), static_cast<std::int64_t*>(p(out)), outer, x.shape()[axis],
                   inner);
    });
    return out;
  }
  void softmax(const Tensor& x_in, int axis, Tensor* log_out, Tensor* prob_out) override {
    const Tensor x = on_current_device(x_in);
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.shape()[i];
      if (i > axis) inner *= x.shape()[i];
    }
    if (log_out) *log_out = Tensor::empty(x.shape());
    if (prob_out) *prob_out = Tensor::empty(x.shape());
    if (x.numel() == 0) return;
    run("softmax", [&] {
      api_->softmax(stream_, f(x), log_out ? f(*log_out) : nullptr,
                    prob_out ? f(*prob_out) : nullptr, outer, x.shape()[axis], inner);
    });
  }
  Tensor matmul(const Tensor& a_in, const Tensor& b_in, const Tensor& bias_in,
                const MatmulOptions& o) override {
    const Tensor a = on_current_device(a_in), b = on_current_device(b_in),
                 bias = on_current_device(bias_in);
    const bool half = is_half(a);
    LOCKSTEP_CHECK_AS(
        DeviceError, b.dtype() == a.dtype() && (!bias.defined() || bias.dtype() == a.dtype()),
        "matmul on ", current_device().name(), ": operands of one dtype expected, got ", a.dtype(),
        " and ", b.dtype(), bias.defined() ? " with a bias of " : "",
        bias.defined() ? dtype_name(bias.dtype()) : std::string_view());
    const int ra = a.rank(), rb = b.rank();
    const std::int64_t batch = ra == 3 ? a.shape()[0] : 1;
    const std::int64_t m = o.transpose_a ? a.shape()[ra - 1] : a.shape()[ra - 2];
    const std::int64_t k = o.transpose_a ? a.shape()[ra - 2] : a.shape()[ra - 1];
    const std::int64_t n = o.transpose_b ? b.shape()[rb - 2] : b.shape()[rb - 1];
    const Shape out_shape = ra == 3 ? Shape{batch, m, n} : Shape{m, n};
    Tensor out = Tensor::empty(out_shape, a.dtype());
    if (out.numel() == 0) return out;
    if (half) {
      run("matmul", [&] {
        api_->gemm_half(gpu_, stream_, type_of(a.dtype()), o.transpose_a, o.transpose_b, m, n, k,
                        p(a), p(b), p(out), batch, ra == 3 ? m * k : 0, rb == 3 ? k * n : 0,
                        bias.defined() ? p(bias) : nullptr, o.relu);
      });
      return out;
    }
    run("matmul", [&] {
      api_->gemm(gpu_, stream_, o.transpose_a, o.transpose_b, m, n, k, f(a), f(b), f(out), batch,
                 ra == 3 ? m * k : 0, rb == 3 ? k * n : 0, bias.defined() ? f(bias) : nullptr,
                 o.relu, tensor_float_32_execution_enabled());
    });
    return out;
  }
  // cuDNN pads symmetrically: TensorFlow's asymmetric "same" padding is an
  // explicit zero-padded copy of the input (and a crop of its gradient).
  static bool symmetric(const ConvGeometry& g) { return g.pad_t == g.pad_b && g.pad_l == g.pad_r; }
  // `dtype`: the data's and the filter's (float32, bfloat16 or float16).
  static backend::cuda::ConvParams params(const ConvGeometry& g, DType dtype) {
    backend::cuda::ConvParams p;
    p.type = type_of(dtype);
    const bool sym = symmetric(g);
    p.n = g.n, p.c = g.c, p.kh = g.kh, p.kw = g.kw, p.oc = g.oc, p.oh = g.oh, p.ow = g.ow;
    p.h = sym ? g.h : g.h + g.pad_t + g.pad_b;
    p.w = sym ? g.w : g.w + g.pad_l + g.pad_r;
    p.pad_h = sym ? g.pad_t : 0;
    p.pad_w = sym ? g.pad_l : 0;
    p.sh = g.sh, p.sw = g.sw, p.dh = g.dh, p.dw = g.dw, p.groups = g.groups;
    return p;
  }
  Tensor padded_input(const Tensor& x, const ConvGeometry& g) {
    if (symmetric(g)) return x;
    const backend::cuda::ConvParams cp = params(g, x.dtype());
    Tensor out = Tensor::empty({g.n, cp.h, cp.w, g.c}, x.dtype());
    run("conv2d's padding", [&] {
      api_->nhwc_window(stream_, elem_bytes(x), p(x), g.n, g.h, g.w, g.c, p(out), cp.h, cp.w,
                        -g.pad_t, -g.pad_l);
    });
    return out;
  }
  // Which path a convolution takes: a 1×1 stride-1 unpadded convolution
  // is a matrix product over the pixels (cuBLAS, no layout change); a
  // depthwise one runs our own kernels (backend/cuda/depthwise.cu); the
  // rest runs cuDNN. Measured on MobileNetV2 (docs/benchmarks.md, "GPUs").
  enum class ConvPath { kCudnn, kMatmul, kDepthwise };
  static ConvPath path(const ConvGeometry& g) {
    if (g.kh == 1 && g.kw == 1 && g.sh == 1 && g.sw == 1 && g.groups == 1 && g.pad_t == 0 &&
        g.pad_b == 0 && g.pad_l == 0 && g.pad_r == 0 && g.n * g.h * g.w < 0x7fffffff &&
        g.c < 0x7fffffff && g.oc < 0x7fffffff)
      return ConvPath::kMatmul;
    if (g.groups > 1 && g.groups == g.c && g.kh * g.kw <= backend::cuda::kDepthwiseMaxTaps)
      return ConvPath::kDepthwise;
    return ConvPath::kCudnn;
  }
  // Our depthwise kernels read TensorFlow's padding in place: pad_h / pad_w
  // are the top and left.
  static backend::cuda::ConvParams depthwise_params(const ConvGeometry& g) {
    backend::cuda::ConvParams p;
    p.n = g.n, p.h = g.h, p.w = g.w, p.c = g.c, p.kh = g.kh, p.kw = g.kw, p.oc = g.oc;
    p.oh = g.oh, p.ow = g.ow, p.sh = g.sh, p.sw = g.sw, p.dh = g.dh, p.dw = g.dw;
    p.pad_h = g.pad_t, p.pad_w = g.pad_l, p.groups = g.groups;
    return p;
  }
  // Row-major C[m, n] = op(A)·op(B) (+ bias) on this device's stream, in
  // float32 or in one half type throughout (float32 accumulation).
  void gemm(const char* op, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k,
            const Tensor& a, const Tensor& b, Tensor& c, const Tensor& bias) {
    LOCKSTEP_CHECK_AS(DeviceError,
                      b.dtype() == a.dtype() && c.dtype() == a.dtype() &&
                          (!bias.defined() || bias.dtype() == a.dtype()),
                      op, " on ", current_device().name(), ": operands of one dtype expected, got ",
                      a.dtype(), " and ", b.dtype());
    run(op, [&] {
      if (is_half(a)) {
        api_->gemm_half(gpu_, stream_, type_of(a.dtype()), ta, tb, m, n, k, p(a), p(b), p(c), 1, 0,
                        0, bias.defined() ? p(bias) : nullptr, false);
      } else {
        api_->gemm(gpu_, stream_, ta, tb, m, n, k, f(a), f(b), f(c), 1, 0, 0,
                   bias.defined() ? f(bias) : nullptr, false, tensor_float_32_execution_enabled());
      }
    });
  }
  // cuDNN's half-type convolutions want channel counts in eights per group
  // (its tensor-core kernels' alignment; with fewer it may offer no
  // deterministic algorithm): others — MobileNetV2's first, on 3 channels —
  // widen to float32 and round their result once.
  static bool widen_for_cudnn(const Tensor& t, const ConvGeometry& g) {
    return is_half(t) && ((g.c / g.groups) % 8 != 0 || (g.oc / g.groups) % 8 != 0);
  }
  Tensor conv2d(const Tensor& x_in, const Tensor& kernel_in, const Tensor& bias_in,
                const ConvGeometry& g) override {
    const ConvPath how = path(g);
    if (how == ConvPath::kCudnn && widen_for_cudnn(x_in, g))
      return cast(conv2d(wide(on_current_device(x_in)), wide(on_current_device(kernel_in)),
                         wide(on_current_device(bias_in)), g),
                  x_in.dtype());
    Tensor out = Tensor::empty({g.n, g.oh, g.ow, g.oc}, x_in.dtype());
    if (out.numel() == 0) return out;
    const Tensor bias = bias_in.defined() ? on_current_device(bias_in) : Tensor();
    if (how == ConvPath::kMatmul) {
      // y[pixels, oc] = x[pixels, c] · kernel[c, oc] + bias
      gemm("conv2d", false, false, g.n * g.h * g.w, g.oc, g.c, on_current_device(x_in),
           on_current_device(kernel_in), out, bias);
      return out;
    }
    if (how == ConvPath::kDepthwise) {
      const Tensor x = on_current_device(x_in), kernel = on_current_device(kernel_in);
      check_same_dtype("conv2d", x, kernel);
      run("conv2d", [&] {
        api_->depthwise_forward(stream_, floating(x), depthwise_params(g), p(x), p(kernel), p(out));
      });
    } else {
      const Tensor x = padded_input(on_current_device(x_in), g);
      // HWIO (Keras's kernel) to cuDNN's [oc, kh, kw, c / groups].
      const Tensor filter = transpose(on_current_device(kernel_in), {3, 0, 1, 2});
      check_same_dtype("conv2d", x, filter);
      const backend::cuda::ConvParams cp = params(g, x.dtype());
      run("conv2d", [&] { api_->conv_forward(gpu_, stream_, cp, p(x), p(filter), p(out)); });
    }
    if (bias.defined()) return binary(BinaryKind::kAdd, out, bias, out.shape());
    return out;
  }
  Tensor conv2d_backward_data(const Tensor& dy_in, const Tensor& kernel_in,
                              const ConvGeometry& g) override {
    const Tensor dy = on_current_device(dy_in);
    const ConvPath how = path(g);
    if (how == ConvPath::kCudnn && widen_for_cudnn(dy, g))
      return cast(conv2d_backward_data(wide(dy), wide(on_current_device(kernel_in)), g),
                  dy.dtype());
    if (how != ConvPath::kCudnn) {
      const Tensor kernel = on_current_device(kernel_in);
      Tensor dx = Tensor::empty({g.n, g.h, g.w, g.c}, dy.dtype());
      if (dx.numel() == 0) return dx;
      if (how == ConvPath::kMatmul) {
        // dx[pixels, c] = dy[pixels, oc] · kernel[c, oc]ᵀ
        gemm("conv2d's input gradient", false, true, g.n * g.h * g.w, g.c, g.oc, dy, kernel, dx,
             Tensor());
      } else {
        check_same_dtype("conv2d's input gradient", dy, kernel);
        run("conv2d's input gradient", [&] {
          api_->depthwise_backward_data(stream_, floating(dy), depthwise_params(g), p(dy),
                                        p(kernel), p(dx));
        });
      }
      return dx;
    }
    const Tensor filter = transpose(on_current_device(kernel_in), {3, 0, 1, 2});
    check_same_dtype("conv2d's input gradient", dy, filter);
    const backend::cuda::ConvParams cp = params(g, dy.dtype());
    Tensor dxp = Tensor::empty({g.n, cp.h, cp.w, g.c}, dy.dtype());
    run("conv2d's input gradient",
        [&] { api_->conv_backward_data(gpu_, stream_, cp, p(dy), p(filter), p(dxp)); });
    if (symmetric(g)) return dxp;
    Tensor dx = Tensor::empty({g.n, g.h, g.w, g.c}, dy.dtype());
    run("conv2d's input gradient", [&] {
      api_->nhwc_window(stream_, elem_bytes(dxp), p(dxp), g.n, cp.h, cp.w, g.c, p(dx), g.h, g.w,
                        g.pad_t, g.pad_l);
    });
    return dx;
  }
  Tensor conv2d_backward_kernel(const Tensor& x_in, const Tensor& dy_in,
                                const ConvGeometry& g) override {
    const Tensor dy = on_current_device(dy_in);
    const ConvPath how = path(g);
    if (how == ConvPath::kCudnn && widen_for_cudnn(dy, g))
      return cast(conv2d_backward_kernel(wide(on_current_device(x_in)), wide(dy), g), dy.dtype());
    if (how != ConvPath::kCudnn) {
      const Tensor x = on_current_device(x_in);
      Tensor dkernel = Tensor::empty({g.kh, g.kw, g.c / g.groups, g.oc}, dy.dtype());
      if (dkernel.numel() == 0) return dkernel;
      if (how == ConvPath::kMatmul) {
        // dkernel[c, oc] = x[pixels, c]ᵀ · dy[pixels, oc]
        gemm("conv2d's kernel gradient", true, false, g.c, g.oc, g.n * g.h * g.w, x, dy, dkernel,
             Tensor());
      } else {
        check_same_dtype("conv2d's kernel gradient", x, dy);
        run("conv2d's kernel gradient", [&] {
          api_->depthwise_backward_filter(stream_, floating(x), depthwise_params(g), p(x), p(dy),
                                          p(dkernel));
        });
      }
      return dkernel;
    }
    const Tensor x = padded_input(on_current_device(x_in), g);
    check_same_dtype("conv2d's kernel gradient", x, dy);
    const backend::cuda::ConvParams cp = params(g, x.dtype());
    Tensor dfilter = Tensor::empty({g.oc, g.kh, g.kw, g.c / g.groups}, x.dtype());
    run("conv2d's kernel gradient",
        [&] { api_->conv_backward_filter(gpu_, stream_, cp, p(x), p(dy), p(dfilter)); });
    return transpose(dfilter, {1, 2, 3, 0});
  }
  static backend::cuda::PoolParams params(const PoolGeometry& g) {
    LOCKSTEP_CHECK_AS(DeviceError, g.pad_t == g.pad_b && g.pad_l == g.pad_r,
                      "pooling with TensorFlow's asymmetric 'same' padding (", g.pad_t, "/",
                      g.pad_b, ", ", g.pad_l, "/", g.pad_r, ") has no GPU kernel yet");
    backend::cuda::PoolParams p;
    p.n = g.n, p.h = g.h, p.w = g.w, p.c = g.c, p.kh = g.kh, p.kw = g.kw, p.oh = g.oh, p.ow = g.ow;
    p.sh = g.sh, p.sw = g.sw, p.pad_h = g.pad_t, p.pad_w = g.pad_l, p.max = g.max;
    return p;
  }
  Tensor pool2d(const Tensor& x_in, const PoolGeometry& g) override {
    const Tensor x = on_current_device(x_in);
    const backend::cuda::PoolParams p = params(g);
    Tensor out = Tensor::empty({g.n, g.oh, g.ow, g.c});
    if (out.numel() == 0) return out;
    run("pooling", [&] { api_->pool_forward(gpu_, stream_, p, f(x), f(out)); });
    return out;
  }
  Tensor pool2d_backward(const Tensor& x_in, const Tensor& y_in, const Tensor& dy_in,
                         const PoolGeometry& g) override {
    const Tensor x = on_current_device(x_in), y = on_current_device(y_in),
                 dy = on_current_device(dy_in);
    const backend::cuda::PoolParams p = params(g);
    Tensor dx = Tensor::empty(x.shape());
    run("pooling's gradient",
        [&] { api_->pool_backward(gpu_, stream_, p, f(x), f(y), f(dy), f(dx)); });
    return dx;
  }
  Tensor take_along_axis(const Tensor& x_in, const Tensor& idx_in, int axis) override {
    const Tensor x = on_current_device(x_in), idx = on_current_device(idx_in);
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < x.rank(); ++i) {
      if (i < axis) outer *= x.shape()[i];
      if (i > axis) inner *= x.shape()[i];
    }
    Tensor out = Tensor::empty(idx.shape());
    if (out.numel() == 0) return out;
    run("take_along_axis", [&] {
      api_->take_along_axis(stream_, f(x), static_cast<const std::int64_t*>(p(idx)), f(out), outer,
                            x.shape()[axis], idx.shape()[axis], inner);
    });
    return out;
  }
  Tensor scatter_along_axis(const Tensor& g_in, const Tensor& idx_in, int axis,
                            const Shape& shape) override {
    const Tensor g = on_current_device(g_in), idx = on_current_device(idx_in);
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < shape.rank(); ++i) {
      if (i < axis) outer *= shape[i];
      if (i > axis) inner *= shape[i];
    }
    Tensor out = Tensor::empty(shape);
    if (out.numel() == 0) return out;
    run("take_along_axis's gradient", [&] {
      api_->scatter_along_axis(stream_, f(g), static_cast<const std::int64_t*>(p(idx)), f(out),
                               outer, shape[axis], idx.shape()[axis], inner);
    });
    return out;
  }
  Tensor one_hot(const Tensor& idx_in, std::int64_t depth, float on, float off) override {
    const Tensor idx = on_current_device(idx_in);
    std::vector<std::int64_t> dims(idx.shape().dims().begin(), idx.shape().dims().end());
    dims.push_back(depth);
    Tensor out = Tensor::empty(Shape(dims));
    if (out.numel() == 0) return out;
    run("one_hot", [&] {
      api_->one_hot(stream_, static_cast<const std::int64_t*>(p(idx)), f(out), idx.numel(), depth,
                    on, off);
    });
    return out;
  }
  // The host's indices and grouping copied to the device, then as a
  // recorded step's.
  Tensor gather(const Tensor& params, const std::vector<std::int64_t>& indices, int axis,
                const Shape& out_shape) override {
    return gather(params,
                  GatherOnDevice{.indices = on_current_device(Tensor::from_vector(indices))}, axis,
                  out_shape);
  }
  Tensor gather_grad(const Tensor& g, const std::vector<std::int64_t>& indices, int axis,
                     const Shape& shape) override {
    const GatherGrouping grouping = group_by_target(indices);
    return gather_grad(
        g,
        GatherOnDevice{.order = on_current_device(Tensor::from_vector(grouping.order)),
                       .starts = on_current_device(Tensor::from_vector(grouping.starts)),
                       .targets = on_current_device(Tensor::from_vector(grouping.targets))},
        axis, shape);
  }
  Tensor gather(const Tensor& params_in, const GatherOnDevice& at, int axis,
                const Shape& out_shape) override {
    const Tensor params = on_current_device(params_in);
    Tensor out = Tensor::empty(out_shape, params.dtype());
    if (out.numel() == 0) return out;
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < params.rank(); ++i) {
      if (i < axis) outer *= params.shape()[i];
      if (i > axis) inner *= params.shape()[i];
    }
    run("gather", [&] {
      api_->gather_rows(stream_, static_cast<int>(dtype_size(params.dtype())), p(params),
                        indices64(at.indices), p(out), outer, params.shape()[axis],
                        at.indices.numel(), inner);
    });
    return out;
  }
  Tensor gather_grad(const Tensor& g_in, const GatherOnDevice& at, int axis,
                     const Shape& shape) override {
    const Tensor g = on_current_device(g_in);
    Tensor out = Tensor::empty(shape);
    if (out.numel() == 0) return out;
    std::int64_t outer = 1, inner = 1;
    for (int i = 0; i < shape.rank(); ++i) {
      if (i < axis) outer *= shape[i];
      if (i > axis) inner *= shape[i];
    }
    run("gather's gradient", [&] {
      api_->gather_rows_grad(stream_, f(g), indices64(at.order), indices64(at.starts),
                             indices64(at.targets), at.targets.numel(), f(out), outer, shape[axis],
                             at.order.numel(), inner);
    });
    return out;
  }
  Tensor moving_average(const Tensor& moving_in, const Tensor& value_in, float momentum) override {
    const Tensor moving = on_current_device(moving_in), value = on_current_device(value_in);
    Tensor out = Tensor::empty(moving.shape());
    if (out.numel() == 0) return out;
    run("moving_average", [&] {
      api_->moving_average(stream_, f(moving), f(value), f(out), out.numel(), momentum,
                           1.0f - momentum);
    });
    return out;
  }
  Tensor relu_general(const Tensor& x_in, float slope, float top, float threshold) override {
    const Tensor x = on_current_device(x_in);
    if (is_half(x)) return cast(relu_general(wide(x), slope, top, threshold), x.dtype());
    Tensor out = Tensor::empty(x.shape());
    if (x.numel() == 0) return out;
    run("relu",
        [&] { api_->relu_general(stream_, f(x), f(out), x.numel(), slope, top, threshold); });
    return out;
  }
  Tensor relu_general_grad(const Tensor& g_in, const Tensor& y_in, float slope,
                           float top) override {
    // The CPU's rule: the upstream gradient in y's type first (rounded when
    // y is bfloat16 or float16), dx in y's type.
    const Tensor y = on_current_device(y_in), g_any = on_current_device(g_in);
    const Tensor g = g_any.dtype() == y.dtype() ? g_any : cast(g_any, y.dtype());
    if (is_half(y)) return cast(relu_general_grad(wide(g), wide(y), slope, top), y.dtype());
    Tensor dx = Tensor::empty(y.shape());
    if (y.numel() == 0) return dx;
    run("relu's gradient",
        [&] { api_->relu_general_grad(stream_, f(g), f(y), f(dx), y.numel(), slope, top); });
    return dx;
  }
  Tensor batch_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, Tensor& mean,
                    Tensor& variance, bool batch_stats, float epsilon, float bottom,
                    float top) override {
    const Tensor x = on_current_device(x_in), gamma = on_current_device(gamma_in),
                 beta = on_current_device(beta_in);
    const std::int64_t c = x.shape()[x.rank() - 1], rows = c == 0 ? 0 : x.numel() / c;
    if (batch_stats) {
      mean = Tensor::empty({c});
      variance = Tensor::empty({c});
    } else {
      mean = on_current_device(mean);
      variance = on_current_device(variance);
    }
    // x and y in x's type (float32, bfloat16 or float16), the statistics float32.
    Tensor y = Tensor::empty(x.shape(), x.dtype());
    if (x.numel() == 0) return y;
    run("batch_norm", [&] {
      api_->batch_norm(stream_, floating(x), p(x), p(y), rows, c, f(gamma), f(beta), f(mean),
                       f(variance), batch_stats, epsilon, bottom, top);
    });
    return y;
  }
  std::vector<Tensor> batch_norm_backward(const Tensor& x_in, const Tensor& z_in,
                                          const Tensor& g_in, const Tensor& gamma_in,
                                          const Tensor& mean_in, const Tensor& variance_in,
                                          bool batch_stats, float epsilon, float bottom,
                                          float top) override {
    const Tensor x = on_current_device(x_in), g = on_current_device(g_in),
                 gamma = on_current_device(gamma_in), mean = on_current_device(mean_in),
                 variance = on_current_device(variance_in);
    const Tensor z = z_in.defined() ? on_current_device(z_in) : Tensor();
    // The CPU's rule: the upstream gradient in x's type (rounded when x is
    // bfloat16 or float16), x, z and dx in that type; dγ, dβ float32.
    const Tensor gx = g.dtype() == x.dtype() ? g : cast(g, x.dtype());
    LOCKSTEP_CHECK_AS(DeviceError, !z.defined() || z.dtype() == x.dtype(),
                      "batch_norm's gradient: the output is ", z.dtype(), " but x is ", x.dtype());
    const std::int64_t c = x.shape()[x.rank() - 1], rows = c == 0 ? 0 : x.numel() / c;
    Tensor dx = Tensor::empty(x.shape(), x.dtype()), dgamma = Tensor::empty({c}),
           dbeta = Tensor::empty({c});
    run("batch_norm's gradient", [&] {
      api_->batch_norm_backward(stream_, floating(x), p(x), z.defined() ? p(z) : nullptr, p(gx),
                                rows, c, f(gamma), f(mean), f(variance), batch_stats, epsilon,
                                bottom, top, p(dx), f(dgamma), f(dbeta));
    });
    return {dx, dgamma, dbeta};
  }
  Tensor transpose(const Tensor& x_in, const std::vector<int>& perm) override {
    const Tensor x = on_current_device(x_in);
    std::vector<std::int64_t> in_strides(static_cast<std::size_t>(x.rank()));
    std::int64_t s = 1;
    for (int i = x.rank() - 1; i >= 0; --i) {
      in_strides[static_cast<std::size_t>(i)] = s;
      s *= x.shape()[i];
    }
    std::vector<std::int64_t> out_dims, strides;
    for (int d : perm) {
      out_dims.push_back(x.shape()[d]);
      strides.push_back(in_strides[static_cast<std::size_t>(d)]);
    }
    Tensor out = Tensor::empty(Shape(out_dims), x.dtype());
    if (out.numel() == 0) return out;
    run("transpose", [&] {
      api_->transpose(stream_, static_cast<int>(dtype_size(x.dtype())), x.rank(), out_dims.data(),
                      strides.data(), p(x), p(out));
    });
    return out;
  }
  Tensor resize(const Tensor& images_in, const ResizePlan& r) override {
    const Tensor images = on_current_device(images_in);
    LOCKSTEP_CHECK_AS(DeviceError,
                      images.dtype() == DType::kFloat32 || images.dtype() == DType::kUInt8,
                      "image::resize on ", current_device().name(),
                      ": expected float32 or uint8 images, got ", images.dtype());
    Tensor out =
        Tensor::empty({r.n, r.oh, r.ow, r.c}, r.bilinear ? DType::kFloat32 : images.dtype());
    if (out.numel() == 0) return out;
    // The host's tables on the device (a few KB).
    auto table = [](const auto& v) {
      return v.empty() ? Tensor() : on_current_device(Tensor::from_vector(v));
    };
    const Tensor y_lo = table(r.y_lower), y_hi = table(r.y_upper), y_l = table(r.y_lerp),
                 x_lo = table(r.x_lower), x_hi = table(r.x_upper), x_l = table(r.x_lerp);
    auto i64 = [](const Tensor& t) {
      return t.defined() ? static_cast<const std::int64_t*>(p(t)) : nullptr;
    };
    auto f32 = [](const Tensor& t) { return t.defined() ? f(t) : nullptr; };
    run("image::resize", [&] {
      api_->resize(stream_, type_of(images.dtype()), p(images), p(out), r.n, r.h, r.w, r.c, r.oh,
                   r.ow, r.bilinear, i64(y_lo), i64(y_hi), f32(y_l), i64(x_lo), i64(x_hi),
                   f32(x_l));
    });
    return out;
  }
  Tensor affine_transform(const Tensor& images_in, const Tensor& transforms_in,
                          const AffineGeometry& g) override {
    const Tensor images = on_current_device(images_in),
                 transforms = on_current_device(transforms_in);
    Tensor out = Tensor::empty(images.shape());
    if (out.numel() == 0) return out;
    run("image::affine_transform", [&] {
      api_->affine_transform(stream_, f(images), f(out), f(transforms), g.rows, g.n, g.h, g.w, g.c,
                             g.fill, g.bilinear, g.fill_value);
    });
    return out;
  }
  void apply_update(const DeviceUpdate& u, float* value, const float* grad,
                    const std::vector<float*>& slots, std::int64_t n) override {
    backend::cuda::UpdateParams params;
    params.rule = static_cast<int>(u.rule);
    params.lr = u.lr;
    params.momentum = u.momentum;
    params.alpha = u.alpha;
    params.c1 = u.c1;
    params.c2 = u.c2;
    params.epsilon = u.epsilon;
    params.decay = u.decay;
    params.nesterov = u.nesterov;
    params.rho = u.rho;
    params.centered = u.centered;
    params.step = u.step_numbers;
    params.finite = u.finite;
    run("the optimizer's update", [&] {
      api_->apply_update(stream_, params, value, grad, slots.data(), static_cast<int>(slots.size()),
                         n);
    });
  }
  void sum_buffers(Device& d, const std::vector<const float*>& srcs, float* dst,
                   std::int64_t n) override {
    guarded(d, "the replicas' gradient sum", [&] {
      api_->sum_buffers(stream_, srcs.data(), static_cast<int>(srcs.size()), dst, n);
    });
  }
  std::vector<std::unique_ptr<DeviceCollective>> make_collective(
      const std::vector<Device*>& devices) override {
    return nccl_members(devices, [&](const std::vector<int>& gpus, std::vector<void*>& comms) {
      api_->nccl_init_all(static_cast<int>(gpus.size()), gpus.data(), comms.data());
    });
  }
  std::string new_collective_id() override {
    std::string id(static_cast<std::size_t>(backend::cuda::kNcclIdBytes), '\0');
    try {
      api_->nccl_unique_id(id.data());
    } catch (const std::runtime_error& e) {
      throw_error<DeviceError>("making NCCL's unique id: ", e.what());
    }
    return id;
  }
  std::vector<std::unique_ptr<DeviceCollective>> join_collective(
      const std::vector<Device*>& devices, int nranks, int first_rank, const std::string& id,
      std::chrono::milliseconds timeout) override {
    LOCKSTEP_CHECK_AS(
        DeviceError, id.size() == static_cast<std::size_t>(backend::cuda::kNcclIdBytes),
        "NCCL's unique id has ", backend::cuda::kNcclIdBytes, " bytes, got ", id.size());
    return nccl_members(devices, [&](const std::vector<int>& gpus, std::vector<void*>& comms) {
      api_->nccl_init_ranks(static_cast<int>(gpus.size()), gpus.data(), nranks, first_rank,
                            id.data(), std::chrono::duration<double>(timeout).count(),
                            comms.data());
    });
  }
  std::string collective_name() const override { return api_->nccl_version(); }

 private:
  // One member per device, each on its logical GPU's stream, over the
  // communicators `init` makes (one per device, in order).
  template <typename Init>
  std::vector<std::unique_ptr<DeviceCollective>> nccl_members(const std::vector<Device*>& devices,
                                                              Init&& init) {
    LOCKSTEP_CHECK_AS(DeviceError, !devices.empty(), "NCCL: no devices to join");
    std::vector<GpuKernels*> members;
    std::vector<int> gpus;
    for (Device* d : devices) {
      auto* k = d == nullptr ? nullptr : dynamic_cast<GpuKernels*>(d->kernels());
      LOCKSTEP_CHECK_AS(DeviceError, k != nullptr && k->api_ == api_,
                        "NCCL joins GPUs only: ", d == nullptr ? "a null device" : d->name(),
                        " is not one");
      members.push_back(k);
      gpus.push_back(k->gpu_);
    }
    std::vector<void*> comms(devices.size(), nullptr);
    guarded(*devices.front(), "making NCCL's communicators", [&] { init(gpus, comms); });
    auto group = std::make_shared<NcclGroup>(api_, std::move(comms));
    std::vector<std::unique_ptr<DeviceCollective>> out;
    for (std::size_t r = 0; r < devices.size(); ++r)
      out.push_back(std::make_unique<NcclMember>(group, r, *devices[r], members[r]->gpu_,
                                                 members[r]->stream_));
    return out;
  }
  template <typename F>
  void run(const char* op, F&& fn) {
    guarded(current_device(), op, std::forward<F>(fn));
  }
  static void* p(const Tensor& t) { return device_pointer(t); }
  // An int64 index operand on this device.
  static const std::int64_t* indices64(const Tensor& t) {
    LOCKSTEP_CHECK_AS(DeviceError, t.dtype() == DType::kInt64 && &t.device() == &current_device(),
                      "a GPU index kernel takes int64 indices on ", current_device().name(),
                      ", got ", t.dtype(), " on ", t.device().name());
    return static_cast<const std::int64_t*>(device_pointer(t));
  }
  // A float32 kernel's operand. Anything else reaching one is an op that
  // forgot to widen it: an error, never its bytes read as floats.
  static float* f(const Tensor& t) {
    LOCKSTEP_CHECK_AS(DeviceError, t.dtype() == DType::kFloat32, "a ", t.dtype(),
                      " tensor reached a float32-only GPU kernel on ", current_device().name(),
                      " (internal: the op should have widened it to float32)");
    return static_cast<float*>(device_pointer(t));
  }
  // A float kernel's element type: float32, bfloat16 or float16, else an error.
  static Type floating(const Tensor& t) {
    LOCKSTEP_CHECK_AS(DeviceError, is_floating(t.dtype()), "a ", t.dtype(),
                      " tensor reached a floating-point GPU kernel on ", current_device().name());
    return type_of(t.dtype());
  }
  static int elem_bytes(const Tensor& t) { return static_cast<int>(dtype_size(t.dtype())); }
  static void check_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
    LOCKSTEP_CHECK_AS(DeviceError, a.dtype() == b.dtype(), op, " on ", current_device().name(),
                      ": operands of one dtype expected, got ", a.dtype(), " and ", b.dtype());
  }
  static bool is_half(const Tensor& t) {
    return t.defined() && (t.dtype() == DType::kBFloat16 || t.dtype() == DType::kFloat16);
  }
  // A bfloat16 or float16 tensor widened to float32 on this device (exact),
  // for the kernels that have no half-type version; others as they are.
  Tensor wide(const Tensor& t) { return is_half(t) ? cast(t, DType::kFloat32) : t; }

  GpuApi* api_;
  int gpu_;
  void* stream_;
  std::string what_;
  // The stream prefetch_to_device's sends run on, made at the first one.
  std::mutex copy_stream_mutex_;
  void* copy_stream_ = nullptr;
};

GpuApi* load_api(std::string& why) {
  // No driver, no dlopen: CPU-only machines never load CUDA's libraries —
  // unless LOCKSTEP_CUDA_LIBRARY names an adapter (the tests' emulated one,
  // tests/support/emulated_cuda, needs no driver).
  const std::optional<std::string> named = env::cuda_library();
  struct stat st {};
  if (!named && ::stat("/dev/nvidiactl", &st) != 0 &&
      ::stat("/proc/driver/nvidia/version", &st) != 0) {
    why = "no CUDA driver (no /dev/nvidiactl)";
    return nullptr;
  }
  // LOCKSTEP_CUDA_LIBRARY, else lib/ beside the program's folder (the build
  // tree's layout) or an install's library folder, else the loader's path.
  std::vector<std::string> candidates;
  if (named) {
    candidates.push_back(*named);
  } else {
    std::error_code ec;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      candidates.push_back((exe.parent_path() / "liblockstep_cuda.so").string());
      candidates.push_back(
          (exe.parent_path().parent_path() / "lib" / "liblockstep_cuda.so").string());
      candidates.push_back(
          (exe.parent_path().parent_path() / LOCKSTEP_LIBDIR / "liblockstep_cuda.so").string());
    }
    candidates.push_back("liblockstep_cuda.so");
  }
  void* handle = nullptr;
  std::string path, first_error;
  for (const std::string& c : candidates) {
    if (c.find('/') != std::string::npos && !std::filesystem::exists(c)) continue;
    handle = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path = c;
      break;
    }
    if (first_error.empty()) first_error = ::dlerror();
  }
  if (handle == nullptr) {
    why = str_cat(
        "the CUDA adapter liblockstep_cuda.so could not be loaded (Lockstep built "
        "without CUDA, or cuBLAS not on the loader's path; LOCKSTEP_CUDA_LIBRARY "
        "names the adapter)",
        first_error.empty() ? "" : ": ", first_error);
    return nullptr;
  }
  using Entry = GpuApi* (*)(int);
  auto entry = reinterpret_cast<Entry>(::dlsym(handle, "lockstep_cuda_api"));
  GpuApi* api = entry ? entry(backend::cuda::kApiVersion) : nullptr;
  if (api == nullptr) why = str_cat(path, " is not a CUDA adapter of this Lockstep version");
  return api;
}

}  // namespace

namespace {
// enable_tensor_float_32_execution's setting: process-wide, as TensorFlow's.
std::atomic<bool> g_tf32{false};

// Every logical GPU's kernels, kept as long as the devices (for ever).
std::vector<std::unique_ptr<GpuKernels>>& all_kernels() {
  static auto* kernels = new std::vector<std::unique_ptr<GpuKernels>>();
  return *kernels;
}
}  // namespace

GpuDiscovery discover_gpus(int per_physical, const std::vector<int>& cores) {
  GpuDiscovery out;
  GpuApi* api = load_api(out.unavailable);
  if (api == nullptr) return out;
  try {
    out.physical_count = api->device_count(out.unavailable);
    for (int gpu = 0; gpu < out.physical_count; ++gpu) {
      const std::string what = str_cat(api->describe(gpu), "; ", api->versions());
      for (int k = 0; k < per_physical; ++k) {
        const int index = static_cast<int>(out.devices.size());
        void* stream = api->create_stream(gpu);
        all_kernels().push_back(std::make_unique<GpuKernels>(api, gpu, stream, what));
        out.owned.push_back(
            std::make_unique<Device>(DeviceType::kGPU, index, cores, 1,
                                     std::make_unique<GpuAllocator>(
                                         api, gpu, stream, "/device:GPU:" + std::to_string(index)),
                                     all_kernels().back().get()));
        out.devices.push_back(out.owned.back().get());
      }
    }
  } catch (const std::runtime_error& e) {
    out.devices.clear();
    out.physical_count = 0;
    out.unavailable = e.what();
  }
  return out;
}

}  // namespace lockstep::detail

namespace lockstep {

void enable_tensor_float_32_execution(bool enabled) { detail::g_tf32.store(enabled); }
bool tensor_float_32_execution_enabled() { return detail::g_tf32.load(); }

}  // namespace lockstep
