// The seam between ops and accelerator devices (tensor/device_kernels.h):
// device code scopes, the op helpers' routing, and the kernels' defaults
// (an op with no kernel on a device says so, naming both).
#include "lockstep/tensor/device_kernels.h"

#include <algorithm>
#include <numeric>

#include "lockstep/core/error.h"

namespace lockstep::detail {
namespace {

thread_local bool t_device_code = false;
thread_local std::vector<HostCheck>* t_host_checks = nullptr;  // while a step is recorded
thread_local std::vector<ReplayStage>* t_stages = nullptr;     // likewise

[[noreturn]] void no_kernel(const char* op) {
  Device& d = current_device();
  throw_error<DeviceError>(op, ": no kernel on ", d.name(), " (", d.kernels()->describe(),
                           ") yet; run this op under a DeviceScope on a CPU device, with its "
                           "inputs copied there by .cpu()");
}

}  // namespace

void no_device_kernel(const char* op) { no_kernel(op); }

bool in_device_code() { return t_device_code; }

RecordingStepScope::RecordingStepScope(std::vector<HostCheck>& checks,
                                       std::vector<ReplayStage>& stages)
    : previous_checks_(t_host_checks), previous_stages_(t_stages) {
  t_host_checks = &checks;
  t_stages = &stages;
}
RecordingStepScope::~RecordingStepScope() {
  t_host_checks = previous_checks_;
  t_stages = previous_stages_;
}

bool recording_step() { return t_host_checks != nullptr; }

namespace {
thread_local RecordingHooks* t_recording_hooks = nullptr;  // while a capture records
}  // namespace

RecordingHooks* recording_hooks() { return t_recording_hooks; }
RecordingHooksScope::RecordingHooksScope(RecordingHooks& hooks) : previous_(t_recording_hooks) {
  t_recording_hooks = &hooks;
}
RecordingHooksScope::~RecordingHooksScope() { t_recording_hooks = previous_; }

void check_before_each_replay(const Tensor& input, std::function<void(const Tensor& host)> check) {
  LOCKSTEP_CHECK(t_host_checks != nullptr, "check_before_each_replay: no step is recorded");
  t_host_checks->push_back({device_pointer(input), input.shape(), std::move(check)});
}

namespace {
thread_local bool t_allocating_staged = false;
}  // namespace

Tensor staged_tensor(const Shape& shape, DType dtype) {
  t_allocating_staged = true;
  try {
    Tensor t = Tensor::empty(shape, dtype);
    t_allocating_staged = false;
    return t;
  } catch (...) {
    t_allocating_staged = false;
    throw;
  }
}

bool allocating_staged() { return t_allocating_staged; }

void before_each_replay(ReplayStage stage) {
  LOCKSTEP_CHECK(t_stages != nullptr, "before_each_replay: no step is recorded");
  t_stages->push_back(std::move(stage));
}

DeviceCodeScope::DeviceCodeScope() : previous_(t_device_code) { t_device_code = true; }
DeviceCodeScope::~DeviceCodeScope() { t_device_code = previous_; }

OnDevice::OnDevice() {
  if (t_device_code) return;
  DeviceKernels* k = current_device().kernels();
  if (k == nullptr) return;
  if (k->runs_host_kernels()) {
    scope_.emplace();
  } else {
    kernels_ = k;
  }
}

void* device_pointer(const Tensor& t) {
  DeviceCodeScope scope;
  return t.raw_data();
}

Tensor on_current_device(const Tensor& t) {
  if (!t.defined() || &t.device() == &current_device()) return t;
  return t.copy_to(current_device());
}

namespace {

// Bytes wait in host memory until the consumer copies them out with the
// device's copy_from_host.
class HostStagingArea final : public StagingArea {
 public:
  HostStagingArea(DeviceKernels& kernels, Device& device) : kernels_(kernels), device_(device) {}
  unsigned char* host(std::size_t bytes) override {
    if (buffer_.size() < bytes) buffer_.resize(bytes);
    return buffer_.data();
  }
  void send(std::size_t) override {}
  void copy_out(void* dst, std::size_t offset, std::size_t bytes) override {
    kernels_.copy_from_host(device_, dst, buffer_.data() + offset, bytes);
  }
  void copied_out() override {}

 private:
  DeviceKernels& kernels_;
  Device& device_;
  std::vector<unsigned char> buffer_;
};

}  // namespace

std::unique_ptr<StagingArea> DeviceKernels::make_staging_area(Device& device) {
  return std::make_unique<HostStagingArea>(*this, device);
}

std::shared_ptr<DeviceEvent> DeviceKernels::make_event(Device&) { return nullptr; }
void DeviceKernels::record_event(Device& device, DeviceEvent&) {
  throw_error<DeviceError>(device.name(), " (", describe(), ") has no events");
}
void DeviceKernels::wait_event(Device& device, const DeviceEvent&) {
  throw_error<DeviceError>(device.name(), " (", describe(), ") has no events");
}

std::unique_ptr<DeviceGraph> DeviceKernels::capture(Device& device, const std::function<void()>&) {
  throw_error<DeviceError>(device.name(), " (", describe(),
                           ") cannot record its kernels as a graph: run the work as it is");
}

Tensor DeviceKernels::fill(const Shape&, DType, double) { no_kernel("fill"); }
Tensor DeviceKernels::random_uniform(const Shape&, std::uint64_t, std::uint64_t, const Tensor*,
                                     std::uint64_t, float, float) {
  no_kernel("random::uniform");
}
Tensor DeviceKernels::cast(const Tensor&, DType) { no_kernel("cast"); }
Tensor DeviceKernels::binary(BinaryKind, const Tensor&, const Tensor&, const Shape&) {
  no_kernel("a binary elementwise op");
}
Tensor DeviceKernels::unary(UnaryKind, const Tensor&) { no_kernel("a unary elementwise op"); }
Tensor DeviceKernels::clip(const Tensor&, float, float) { no_kernel("clip"); }
Tensor DeviceKernels::map2(Map2Kind, const Tensor&, const Tensor&) {
  no_kernel("a fused backward map");
}
Tensor DeviceKernels::where(const Tensor&, const Tensor&, const Tensor&, const Shape&) {
  no_kernel("where");
}
Tensor DeviceKernels::reduce(ReduceKind, const Tensor&, int, int, const Shape&) {
  no_kernel("a reduction");
}
Tensor DeviceKernels::argmax(const Tensor&, int) { no_kernel("argmax"); }
void DeviceKernels::softmax(const Tensor&, int, Tensor*, Tensor*) { no_kernel("softmax"); }
Tensor DeviceKernels::matmul(const Tensor&, const Tensor&, const Tensor&, const MatmulOptions&) {
  no_kernel("matmul");
}
Tensor DeviceKernels::conv2d(const Tensor&, const Tensor&, const Tensor&, const ConvGeometry&) {
  no_kernel("conv2d");
}
Tensor DeviceKernels::conv2d_backward_data(const Tensor&, const Tensor&, const ConvGeometry&) {
  no_kernel("conv2d's input gradient");
}
Tensor DeviceKernels::conv2d_backward_kernel(const Tensor&, const Tensor&, const ConvGeometry&) {
  no_kernel("conv2d's kernel gradient");
}
Tensor DeviceKernels::pool2d(const Tensor&, const PoolGeometry&) { no_kernel("pooling"); }
Tensor DeviceKernels::pool2d_backward(const Tensor&, const Tensor&, const Tensor&,
                                      const PoolGeometry&) {
  no_kernel("pooling's gradient");
}
Tensor DeviceKernels::take_along_axis(const Tensor&, const Tensor&, int) {
  no_kernel("take_along_axis");
}
Tensor DeviceKernels::scatter_along_axis(const Tensor&, const Tensor&, int, const Shape&) {
  no_kernel("take_along_axis's gradient");
}
Tensor DeviceKernels::one_hot(const Tensor&, std::int64_t, float, float) { no_kernel("one_hot"); }
Tensor DeviceKernels::gather(const Tensor&, const std::vector<std::int64_t>&, int, const Shape&) {
  no_kernel("gather");
}
Tensor DeviceKernels::gather_grad(const Tensor&, const std::vector<std::int64_t>&, int,
                                  const Shape&) {
  no_kernel("gather's gradient");
}
Tensor DeviceKernels::gather(const Tensor&, const GatherOnDevice&, int, const Shape&) {
  no_kernel("gather");
}
Tensor DeviceKernels::gather_grad(const Tensor&, const GatherOnDevice&, int, const Shape&) {
  no_kernel("gather's gradient");
}

GatherGrouping group_by_target(const std::vector<std::int64_t>& indices, std::size_t padded_to) {
  GatherGrouping out;
  out.order.resize(indices.size());
  std::iota(out.order.begin(), out.order.end(), 0);
  std::stable_sort(out.order.begin(), out.order.end(), [&](std::int64_t a, std::int64_t b) {
    return indices[static_cast<std::size_t>(a)] < indices[static_cast<std::size_t>(b)];
  });
  for (std::size_t k = 0; k < out.order.size(); ++k) {
    const std::int64_t t = indices[static_cast<std::size_t>(out.order[k])];
    if (out.targets.empty() || out.targets.back() != t) {
      out.targets.push_back(t);
      out.starts.push_back(static_cast<std::int64_t>(k));
    }
  }
  const auto end = static_cast<std::int64_t>(out.order.size());
  while (out.targets.size() < padded_to) {
    out.targets.push_back(-1);
    out.starts.push_back(end);
  }
  out.starts.push_back(end);
  return out;
}
Tensor DeviceKernels::moving_average(const Tensor&, const Tensor&, float) {
  no_kernel("moving_average");
}
Tensor DeviceKernels::relu_general(const Tensor&, float, float, float) {
  no_kernel("relu with a slope, threshold or max_value");
}
Tensor DeviceKernels::relu_general_grad(const Tensor&, const Tensor&, float, float) {
  no_kernel("relu's gradient with a slope, threshold or max_value");
}
Tensor DeviceKernels::batch_norm(const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&,
                                 bool, float, float, float) {
  no_kernel("batch_norm");
}
std::vector<Tensor> DeviceKernels::batch_norm_backward(const Tensor&, const Tensor&, const Tensor&,
                                                       const Tensor&, const Tensor&, const Tensor&,
                                                       bool, float, float, float) {
  no_kernel("batch_norm's gradient");
}
Tensor DeviceKernels::transpose(const Tensor&, const std::vector<int>&) { no_kernel("transpose"); }
Tensor DeviceKernels::resize(const Tensor&, const ResizePlan&) { no_kernel("image::resize"); }
Tensor DeviceKernels::affine_transform(const Tensor&, const Tensor&, const AffineGeometry&) {
  no_kernel("image::affine_transform");
}
void DeviceKernels::apply_update(const DeviceUpdate&, float*, const float*,
                                 const std::vector<float*>&, std::int64_t) {
  no_kernel("the optimizer's update");
}
void DeviceKernels::sum_buffers(Device&, const std::vector<const float*>&, float*, std::int64_t) {
  no_kernel("the replicas' gradient sum");
}
std::vector<std::unique_ptr<DeviceCollective>> DeviceKernels::make_collective(
    const std::vector<Device*>&) {
  return {};
}
std::vector<std::unique_ptr<DeviceCollective>> DeviceKernels::join_collective(
    const std::vector<Device*>&, int, int, const std::string&, std::chrono::milliseconds) {
  return {};
}

}  // namespace lockstep::detail
