// Device: a logical CPU device — a set of cores, a thread count and a
// caching allocator. One replica runs per logical device.
//
//   auto devices = lockstep::logical_devices();      // one per physical core
//   lockstep::DeviceScope scope(*devices[1]);        // this thread now runs on /cpu:1
//
// Devices live for the whole process (tensors refer to them); they are
// neither copyable nor movable. The device list is fixed on first use:
// from set_logical_cpu_devices() if it was called, else from
// LOCKSTEP_CPU_DEVICES, else one device per physical core.
#pragma once

#include <string>
#include <vector>

#include "lockstep/tensor/allocator.h"

namespace lockstep {

class Device {
 public:
  Device(int index, std::vector<int> cores, int num_threads);
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Position in logical_devices(); -1 for the host device.
  int index() const { return index_; }
  // Logical CPU ids (as the kernel numbers them) this device runs on.
  const std::vector<int>& cores() const { return cores_; }
  // Intra-op threads (oneDNN and our loops) used by work on this device.
  int num_threads() const { return num_threads_; }
  // "/device:CPU:0", or "/device:CPU:host" for the host device.
  std::string name() const;
  CachingAllocator& allocator() { return allocator_; }

 private:
  int index_;
  std::vector<int> cores_;
  int num_threads_;
  CachingAllocator allocator_;
};

// The logical devices replicas run on.
const std::vector<Device*>& logical_devices();

// Splits the machine into logical devices, one per core set. Must be called
// before anything reads the device list; throws ValueError for cores that do
// not exist, overlap, or when the list is already in use.
void set_logical_cpu_devices(const std::vector<std::vector<int>>& core_sets);

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
