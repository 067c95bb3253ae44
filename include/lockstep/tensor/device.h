// Device: where tensors live and ops run. A logical CPU device is a set of
// cores, a thread count and a caching allocator; a GPU (a logical GPU: one
// or several per physical GPU, each with its own stream) holds device
// memory that host code never touches; the fake accelerator is host memory
// that only device code paths may touch, so CI finds every forgotten host
// access without a GPU (docs/distribute.md, "GPUs"). One replica runs per
// device.
//
//   auto devices = lockstep::logical_devices();      // one per physical core
//   lockstep::DeviceScope scope(*devices[1]);        // this thread now runs on /cpu:1
//   lockstep::Device& gpu = lockstep::device("/gpu:0");
//
// Devices live for the whole process (tensors refer to them); they are
// neither copyable nor movable. The device list is fixed on first use:
// from set_logical_cpu_devices() if it was called, else from
// LOCKSTEP_CPU_DEVICES, else one device per physical core.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/allocator.h"

namespace lockstep {

namespace detail {
class DeviceKernels;
}

enum class DeviceType {
  kCPU,
  kGPU,
  // Host memory reached only through device kernels and explicit copies,
  // run by the CPU's kernels: the GPU's rules, tested where there is no GPU.
  kFake,
};

// "CPU", "GPU", "FAKE".
const char* device_type_name(DeviceType type);

class Device {
 public:
  // A logical CPU device.
  Device(int index, std::vector<int> cores, int num_threads);
  // An accelerator device (GPU or fake): `kernels` run its ops, `allocator`
  // holds its memory; host code reaches neither. `cores`: where the host
  // side of its replica runs.
  Device(DeviceType type, int index, std::vector<int> cores, int num_threads,
         std::unique_ptr<Allocator> allocator, detail::DeviceKernels* kernels);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device();

  DeviceType type() const { return type_; }
  // Position among the devices of its type; -1 for the host device.
  int index() const { return index_; }
  // Logical CPU ids (as the kernel numbers them) this device runs on.
  const std::vector<int>& cores() const { return cores_; }
  // Intra-op threads (oneDNN and our loops) used by work on this device.
  int num_threads() const { return num_threads_; }
  // "/device:CPU:0", "/device:GPU:1", "/device:FAKE:0", or "/device:CPU:host"
  // for the host device.
  std::string name() const;
  Allocator& allocator() { return *allocator_; }
  // What runs its ops, in words: "CUDA on NVIDIA H100 80GB HBM3 (sm_90,
  // 79.1 GiB); CUDA runtime 13.0, ...", or oneDNN for CPUs.
  std::string description() const;
  // True when host code may read and write this device's memory (CPUs).
  bool host_accessible() const { return type_ == DeviceType::kCPU; }
  // The device's kernels; null for CPUs (the ops' own code runs there).
  detail::DeviceKernels* kernels() const { return kernels_; }

 private:
  DeviceType type_ = DeviceType::kCPU;
  int index_;
  std::vector<int> cores_;
  int num_threads_;
  std::unique_ptr<Allocator> allocator_;
  detail::DeviceKernels* kernels_ = nullptr;
};

// The device a name means: TensorFlow's forms ("/device:GPU:0", "/gpu:0",
// "GPU:0", "/job:localhost/replica:0/task:0/device:CPU:0") and ours
// ("/device:FAKE:1"). CPU:N is logical_devices()[N]; GPU:N the N-th logical
// GPU. Throws ValueError for a name it cannot parse and DeviceError for a
// device that does not exist, saying why (no CUDA driver, fewer GPUs).
Device& device(const std::string& name);

// The physical devices of a type ("CPU", "GPU"), by name, as TensorFlow's
// tf.config.list_physical_devices: one CPU; every GPU the CUDA driver shows
// (none without one: gpu_unavailable_reason() says why).
std::vector<std::string> list_physical_devices(const std::string& type = "");

// Every logical GPU (one per physical GPU unless set_logical_gpu_devices
// said otherwise); empty without a usable GPU.
const std::vector<Device*>& gpu_devices();

// Why gpu_devices() is empty ("no CUDA driver", "Lockstep was built without
// CUDA", ...); empty when there are GPUs.
std::string gpu_unavailable_reason();

// Limits the GPUs this process uses to `cuda_ids` (CUDA's numbers, as
// CUDA_VISIBLE_DEVICES lists them) by setting CUDA_VISIBLE_DEVICES. Call it
// before anything reads the GPU list: after, it is a ValueError unless the
// list is already that. MultiWorkerMirroredStrategy calls it with a Slurm
// task's share of its node's GPUs (ClusterResolver::task_gpus).
void set_visible_gpus(const std::vector<std::string>& cuda_ids);

// Splits each physical GPU into `per_gpu` logical GPUs, each with its own
// stream and memory statistics (tf.config.set_logical_device_configuration).
// Call before anything reads the GPU list; also LOCKSTEP_LOGICAL_GPUS.
void set_logical_gpu_devices(int per_gpu);

// TF32 (10-bit mantissa inputs, float32 accumulation) for float32 matrix
// products on GPUs, as tf.config.experimental.enable_tensor_float_32_execution.
// Off by default: float32 means float32 here (TensorFlow's default is on).
void enable_tensor_float_32_execution(bool enabled);
bool tensor_float_32_execution_enabled();

// The fake accelerator's devices (LOCKSTEP_FAKE_DEVICES, or
// set_fake_devices); empty unless asked for.
const std::vector<Device*>& fake_devices();
// Makes `count` fake devices; call before fake_devices() is first read (or
// again with the same count).
void set_fake_devices(int count);

// The logical devices replicas run on.
const std::vector<Device*>& logical_devices();

// Splits the machine into logical devices, one per core set. Must be called
// before anything reads the device list; throws ValueError for cores that do
// not exist, overlap, or when the list is already in use.
void set_logical_cpu_devices(const std::vector<std::vector<int>>& core_sets);
// `count` logical devices over the cores (LOCKSTEP_CPU_DEVICES="N"): the
// cores split into `count` groups, or shared round-robin when `count`
// exceeds them (as TensorFlow's logical devices on one CPU).
void set_logical_cpu_device_count(int count);

// True when the program chose the device list: set_logical_cpu_devices() was
// called or LOCKSTEP_CPU_DEVICES is set (as tf.config.
// set_logical_device_configuration). MirroredStrategy's default follows it.
bool logical_devices_configured();

// Parses the LOCKSTEP_CPU_DEVICES syntax ("2", or "0,1;2-3") against the
// cores this process may run on. Exposed for tests and the CLI.
// `source` names the setting in errors (the CLI's "--devices").
std::vector<std::vector<int>> parse_cpu_devices(const std::string& spec,
                                                const std::vector<int>& available_cores,
                                                const std::string& source = "LOCKSTEP_CPU_DEVICES");

// Logical CPU ids this process may run on, one per physical core.
std::vector<int> available_physical_cores();

// The device for work outside any replica: all the process's cores, one
// intra-op thread per physical core.
Device& host_device();

// Confines this process to `cores` (CPUs it may run on): every thread's
// affinity, host_device() (a device on these cores from now on; earlier
// references keep the old one) and, unless the program chose them, the
// logical devices (one per core of the set). For workers that share a host:
// MultiWorkerMirroredStrategy splits its cores among them, as `lockstep
// launch` does. Returns the new host device.
Device& confine_process_to_cores(const std::vector<int>& cores);

// The device of the calling thread: the innermost DeviceScope, else host.
Device& current_device();

// RAII: makes `device` current on this thread, sets the intra-op thread count
// to the device's, and (by default) pins the thread to the device's cores.
// Ops then run on `device`, and new tensors are made there.
// Restores everything on destruction. Not copyable or movable.
class DeviceScope {
 public:
  struct Options {
    bool pin_thread = true;
  };
  explicit DeviceScope(Device& device) : DeviceScope(device, Options{}) {}
  DeviceScope(Device& device, Options options);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Device* previous_;
  int previous_threads_;
  bool pinned_;
  std::vector<int> previous_affinity_;
};

}  // namespace lockstep
