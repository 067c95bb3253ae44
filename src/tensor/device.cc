// Devices: logical CPU devices (discovery of physical cores, the device
// list), the fake accelerator's and the GPUs' lists, device names, and the
// thread-local current device.
#include "lockstep/tensor/device.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/tensor/device_kernels.h"
#include "tensor/accelerators.h"

namespace lockstep {
namespace {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
    }
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

int read_int_file(const std::string& path, int fallback) {
  std::ifstream in(path);
  int value = fallback;
  if (!(in >> value)) return fallback;
  return value;
}

std::string join(const std::vector<int>& values) {
  std::ostringstream os;
  for (std::size_t i = 0; i < values.size(); ++i) os << (i ? "," : "") << values[i];
  return os.str();
}

// Parses "0,1,4-6" into core ids.
std::vector<int> parse_core_list(const std::string& text, const std::string& spec,
                                 const std::string& source) {
  std::vector<int> cores;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto dash = item.find('-');
    try {
      std::size_t used = 0;
      if (dash == std::string::npos) {
        cores.push_back(std::stoi(item, &used));
        LOCKSTEP_CHECK(used == item.size(), "");
      } else {
        const int lo = std::stoi(item.substr(0, dash));
        const int hi = std::stoi(item.substr(dash + 1));
        LOCKSTEP_CHECK(lo <= hi, "");
        for (int c = lo; c <= hi; ++c) cores.push_back(c);
      }
    } catch (const std::exception&) {
      detail::throw_error<ValueError>(source, ": cannot parse core list '", text, "' in '", spec,
                                      "'; expected a device count like \"2\" or core lists "
                                      "like \"0,1;2-3\"");
    }
  }
  return cores;
}

struct DeviceRegistry {
  std::mutex mutex;
  bool frozen = false;
  std::vector<std::vector<int>> requested;  // from set_logical_cpu_devices
  bool has_request = false;
  std::vector<std::unique_ptr<Device>> owned;  // every device ever made: tensors refer to them
  std::vector<Device*> devices;
  // Read without the lock on every op's allocation (current_device()).
  std::atomic<Device*> host{nullptr};
};

DeviceRegistry& registry() {
  static DeviceRegistry* r = new DeviceRegistry();  // immortal: tensors may outlive main
  return *r;
}

// The device of the calling thread (DeviceScope): per thread, because each
// replica thread allocates on its own device.
thread_local Device* t_current_device = nullptr;

}  // namespace

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::kCPU:
      return "CPU";
    case DeviceType::kGPU:
      return "GPU";
    case DeviceType::kFake:
      return "FAKE";
  }
  return "?";
}

Device::Device(int index, std::vector<int> cores, int num_threads)
    : index_(index),
      cores_(std::move(cores)),
      num_threads_(std::max(1, num_threads)),
      allocator_(std::make_unique<CachingAllocator>()) {}

Device::Device(DeviceType type, int index, std::vector<int> cores, int num_threads,
               std::unique_ptr<Allocator> allocator, detail::DeviceKernels* kernels)
    : type_(type),
      index_(index),
      cores_(std::move(cores)),
      num_threads_(std::max(1, num_threads)),
      allocator_(std::move(allocator)),
      kernels_(kernels) {}

Device::~Device() = default;

std::string Device::description() const {
  return kernels_ ? kernels_->describe() : "oneDNN and Lockstep's loops";
}

std::string Device::name() const {
  if (index_ < 0) return "/device:CPU:host";
  return std::string("/device:") + device_type_name(type_) + ":" + std::to_string(index_);
}

std::vector<int> available_physical_cores() {
  // One logical CPU per (package, core) pair: hyperthread siblings share a core.
  std::set<std::pair<int, int>> seen;
  std::vector<int> cores;
  for (int cpu : allowed_cpus()) {
    const std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const int package = read_int_file(base + "physical_package_id", 0);
    const int core = read_int_file(base + "core_id", cpu);
    if (seen.insert({package, core}).second) cores.push_back(cpu);
  }
  return cores;
}

std::vector<std::vector<int>> parse_cpu_devices(const std::string& spec,
                                                const std::vector<int>& available_cores,
                                                const std::string& source) {
  LOCKSTEP_CHECK(!available_cores.empty(), source, ": no cores available");
  std::vector<std::vector<int>> sets;
  if (spec.find_first_of(",;-") == std::string::npos) {
    // A device count: split the cores into that many contiguous groups. More
    // devices than cores is allowed (replica threads then share cores), as
    // TensorFlow allows several logical devices on one CPU.
    int count = 0;
    try {
      std::size_t used = 0;
      count = std::stoi(spec, &used);
      LOCKSTEP_CHECK(used == spec.size(), "");
    } catch (const std::exception&) {
      count = 0;
    }
    LOCKSTEP_CHECK(count >= 1, source,
                   ": expected a device count >= 1 or core lists "
                   "like \"0,1;2-3\", got '",
                   spec, "'");
    const int n = static_cast<int>(available_cores.size());
    for (int d = 0; d < count; ++d) {
      std::vector<int> cores;
      if (count <= n) {
        for (int i = d * n / count; i < (d + 1) * n / count; ++i)
          cores.push_back(available_cores[i]);
      } else {
        cores.push_back(available_cores[d % n]);
      }
      sets.push_back(cores);
    }
    return sets;
  }
  std::stringstream ss(spec);
  std::string group;
  while (std::getline(ss, group, ';')) {
    if (group.empty()) continue;
    sets.push_back(parse_core_list(group, spec, source));
  }
  LOCKSTEP_CHECK(!sets.empty(), source, ": no devices in '", spec, "'");
  return sets;
}

namespace {

void validate_core_sets(const std::vector<std::vector<int>>& sets) {
  LOCKSTEP_CHECK(!sets.empty(), "set_logical_cpu_devices: expected at least one core set");
  const std::vector<int> allowed = allowed_cpus();
  std::map<int, std::size_t> owner;
  for (std::size_t d = 0; d < sets.size(); ++d) {
    LOCKSTEP_CHECK(!sets[d].empty(), "set_logical_cpu_devices: device ", d, " has no cores");
    for (int core : sets[d]) {
      LOCKSTEP_CHECK(std::find(allowed.begin(), allowed.end(), core) != allowed.end(),
                     "set_logical_cpu_devices: device ", d, " names core ", core,
                     ", which this process cannot run on (available cores: ", join(allowed), ")");
      auto [it, inserted] = owner.emplace(core, d);
      LOCKSTEP_CHECK(inserted, "set_logical_cpu_devices: core ", core, " is in device ", it->second,
                     " and device ", d, "; logical devices must not overlap");
    }
  }
}

void make_devices_locked(DeviceRegistry& r, const std::vector<std::vector<int>>& sets) {
  r.devices.clear();
  for (std::size_t d = 0; d < sets.size(); ++d) {
    const int threads = static_cast<int>(sets[d].size());
    r.owned.push_back(std::make_unique<Device>(static_cast<int>(d), sets[d], threads));
    r.devices.push_back(r.owned.back().get());
  }
}

void freeze_locked(DeviceRegistry& r) {
  if (r.frozen) return;
  std::vector<std::vector<int>> sets;
  if (r.has_request) {
    sets = r.requested;
  } else if (auto spec = env::cpu_devices()) {
    sets = parse_cpu_devices(*spec, available_physical_cores());
    // Explicit core lists must name real, disjoint cores; a count may exceed them.
    if (spec->find_first_of(",;-") != std::string::npos) validate_core_sets(sets);
  } else {
    for (int core : available_physical_cores()) sets.push_back({core});
  }
  make_devices_locked(r, sets);
  r.frozen = true;
}

}  // namespace

const std::vector<Device*>& logical_devices() {
  DeviceRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  freeze_locked(r);
  return r.devices;
}

bool logical_devices_configured() {
  DeviceRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.has_request || env::cpu_devices().has_value();
}

void set_logical_cpu_devices(const std::vector<std::vector<int>>& core_sets) {
  DeviceRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  LOCKSTEP_CHECK(!r.frozen,
                 "set_logical_cpu_devices: the logical devices are already initialised; call it "
                 "before any strategy or DeviceScope reads them");
  validate_core_sets(core_sets);
  r.requested = core_sets;
  r.has_request = true;
}

void set_logical_cpu_device_count(int count) {
  LOCKSTEP_CHECK(count >= 1, "set_logical_cpu_device_count: expected a count >= 1, got ", count);
  // The count form of LOCKSTEP_CPU_DEVICES: the cores split into `count`
  // groups, or shared round-robin when there are more devices than cores.
  const std::vector<std::vector<int>> sets =
      parse_cpu_devices(std::to_string(count), available_physical_cores());
  DeviceRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  LOCKSTEP_CHECK(!r.frozen,
                 "set_logical_cpu_device_count: the logical devices are already initialised; "
                 "call it before any strategy or DeviceScope reads them");
  r.requested = sets;
  r.has_request = true;
}

Device& host_device() {
  DeviceRegistry& r = registry();
  if (Device* host = r.host.load(std::memory_order_acquire)) return *host;
  std::lock_guard lock(r.mutex);
  if (r.host.load(std::memory_order_relaxed) == nullptr) {
    r.owned.push_back(std::make_unique<Device>(
        -1, allowed_cpus(), static_cast<int>(available_physical_cores().size())));
    r.host.store(r.owned.back().get(), std::memory_order_release);
  }
  return *r.host.load(std::memory_order_relaxed);
}

Device& confine_process_to_cores(const std::vector<int>& cores) {
  LOCKSTEP_CHECK(!cores.empty(), "confine_process_to_cores: no cores");
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cores) CPU_SET(c, &set);
  // Every thread of the process (sched_setaffinity(0) would set only this
  // one): communication threads and thread pools made earlier included.
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    sched_setaffinity(tid, sizeof(set), &set);  // a thread that just ended: nothing to do
  }
  LOCKSTEP_CHECK_AS(IOError, sched_setaffinity(0, sizeof(set), &set) == 0,
                    "confine_process_to_cores: cannot run on cores ", join(cores), ": ",
                    std::strerror(errno));
  DeviceRegistry& r = registry();
  std::lock_guard lock(r.mutex);
  r.owned.push_back(std::make_unique<Device>(-1, cores, static_cast<int>(cores.size())));
  r.host.store(r.owned.back().get(), std::memory_order_release);
  if (!r.has_request && !env::cpu_devices()) {
    std::vector<std::vector<int>> sets;
    for (int c : cores) sets.push_back({c});
    make_devices_locked(r, sets);
    r.frozen = true;
  }
  omp_set_num_threads(static_cast<int>(cores.size()));
  return *r.host.load(std::memory_order_relaxed);
}

namespace {

struct AcceleratorRegistry {
  std::mutex mutex;
  bool fake_frozen = false;
  int fake_requested = -1;
  std::vector<std::unique_ptr<Device>> fake_owned;
  std::vector<Device*> fake;
  bool gpu_frozen = false;
  int gpu_per_physical = 0;  // 0: LOCKSTEP_LOGICAL_GPUS or 1
  detail::GpuDiscovery gpus;
};

AcceleratorRegistry& accelerators() {
  static AcceleratorRegistry* r = new AcceleratorRegistry();  // immortal: tensors may outlive main
  return *r;
}

int parse_count(const std::optional<std::string>& text, const char* what, int fallback) {
  if (!text) return fallback;
  int n = -1;
  try {
    std::size_t used = 0;
    n = std::stoi(*text, &used);
    if (used != text->size()) n = -1;
  } catch (const std::exception&) {
    n = -1;
  }
  LOCKSTEP_CHECK(n >= 0 && n <= 64, what, ": expected a count from 0 to 64, got '", *text, "'");
  return n;
}

}  // namespace

const std::vector<Device*>& fake_devices() {
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  if (!r.fake_frozen) {
    const int n = r.fake_requested >= 0
                      ? r.fake_requested
                      : parse_count(env::fake_devices(), "LOCKSTEP_FAKE_DEVICES", 0);
    const std::vector<Device*>& cpus = logical_devices();
    for (int i = 0; i < n; ++i) {
      // The host side of fake device i runs on CPU device i's cores (the CPU
      // kernels run there too).
      const Device& cpu = *cpus[static_cast<std::size_t>(i) % cpus.size()];
      r.fake_owned.push_back(detail::make_fake_device(i, cpu.cores(), cpu.num_threads()));
      r.fake.push_back(r.fake_owned.back().get());
    }
    r.fake_frozen = true;
  }
  return r.fake;
}

void set_fake_devices(int count) {
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  LOCKSTEP_CHECK(count >= 0 && count <= 64, "set_fake_devices: expected 0 to 64, got ", count);
  LOCKSTEP_CHECK(!r.fake_frozen || static_cast<int>(r.fake.size()) == count, "set_fake_devices(",
                 count, "): the fake devices are already made (", r.fake.size(), " of them)");
  r.fake_requested = count;
}

namespace {
detail::GpuDiscovery& gpus_locked(AcceleratorRegistry& r) {
  if (!r.gpu_frozen) {
    const int per = r.gpu_per_physical > 0
                        ? r.gpu_per_physical
                        : std::max(1, parse_count(env::logical_gpus(), "LOCKSTEP_LOGICAL_GPUS", 1));
    r.gpus = detail::discover_gpus(per, allowed_cpus());
    r.gpu_frozen = true;
  }
  return r.gpus;
}
}  // namespace

const std::vector<Device*>& gpu_devices() {
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  return gpus_locked(r).devices;
}

std::string gpu_unavailable_reason() {
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  return gpus_locked(r).unavailable;
}

void set_visible_gpus(const std::vector<std::string>& cuda_ids) {
  std::string list;
  for (const std::string& id : cuda_ids) {
    LOCKSTEP_CHECK(!id.empty() && id.find_first_of(", ") == std::string::npos,
                   "set_visible_gpus: expected CUDA device numbers or UUIDs, got \"", id, "\"");
    list += (list.empty() ? "" : ",") + id;
  }
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  const char* now = std::getenv("CUDA_VISIBLE_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  if (r.gpu_frozen) {
    LOCKSTEP_CHECK(now != nullptr && list == now, "set_visible_gpus(", list,
                   "): the GPUs were already listed (CUDA_VISIBLE_DEVICES=", now ? now : "unset",
                   "); make the strategy, or call this, before anything reads the GPUs, or set "
                   "CUDA_VISIBLE_DEVICES=",
                   list, " before the program starts");
    return;
  }
  ::setenv("CUDA_VISIBLE_DEVICES", list.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
}

void set_logical_gpu_devices(int per_gpu) {
  AcceleratorRegistry& r = accelerators();
  std::lock_guard lock(r.mutex);
  LOCKSTEP_CHECK(!r.gpu_frozen,
                 "set_logical_gpu_devices: the GPUs are already initialised; call it before "
                 "anything reads them");
  LOCKSTEP_CHECK(per_gpu >= 1 && per_gpu <= 64,
                 "set_logical_gpu_devices: expected 1 to 64 logical GPUs per GPU, got ", per_gpu);
  r.gpu_per_physical = per_gpu;
}

std::vector<std::string> list_physical_devices(const std::string& type) {
  std::vector<std::string> out;
  if (type.empty() || type == "CPU") out.push_back("/physical_device:CPU:0");
  if (type.empty() || type == "GPU") {
    AcceleratorRegistry& r = accelerators();
    std::lock_guard lock(r.mutex);
    for (int i = 0; i < gpus_locked(r).physical_count; ++i)
      out.push_back("/physical_device:GPU:" + std::to_string(i));
  }
  return out;
}

Device& device(const std::string& name) {
  // The part after the last "device:" (TensorFlow's long names), or after a
  // leading '/': "GPU:0", "gpu:0", "CPU:1".
  std::string spec = name;
  if (const auto at = spec.rfind("device:"); at != std::string::npos) {
    spec = spec.substr(at + 7);
  } else if (!spec.empty() && spec[0] == '/') {
    spec = spec.substr(1);
  }
  const auto colon = spec.find(':');
  std::string type = spec.substr(0, colon);
  for (char& c : type) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int index = -1;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      index = std::stoi(spec.substr(colon + 1), &used);
      if (used != spec.size() - colon - 1) index = -1;
    } catch (const std::exception&) {
      index = -1;
    }
  }
  LOCKSTEP_CHECK(index >= 0 && (type == "CPU" || type == "GPU" || type == "FAKE"),
                 "device: cannot parse '", name,
                 "'; expected a name like \"/device:GPU:0\", \"/gpu:0\", \"GPU:0\" or "
                 "\"/cpu:1\"");
  const std::vector<Device*>& list = type == "CPU"   ? logical_devices()
                                     : type == "GPU" ? gpu_devices()
                                                     : fake_devices();
  if (index < static_cast<int>(list.size())) return *list[static_cast<std::size_t>(index)];
  if (type == "GPU" && list.empty())
    detail::throw_error<DeviceError>("device '", name, "': no GPU: ", gpu_unavailable_reason());
  detail::throw_error<DeviceError>("device '", name, "': there are ", list.size(), " ", type,
                                   " devices (", type, ":0 to ", type, ":",
                                   static_cast<int>(list.size()) - 1, ")");
}

Device& current_device() { return t_current_device ? *t_current_device : host_device(); }

DeviceScope::DeviceScope(Device& device, Options options)
    : previous_(t_current_device), previous_threads_(omp_get_max_threads()), pinned_(false) {
  if (options.pin_thread) {
    cpu_set_t old_set;
    CPU_ZERO(&old_set);
    if (sched_getaffinity(0, sizeof(old_set), &old_set) == 0) {
      for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (CPU_ISSET(cpu, &old_set)) previous_affinity_.push_back(cpu);
      }
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int core : device.cores()) CPU_SET(core, &set);
      pinned_ = sched_setaffinity(0, sizeof(set), &set) == 0;
    }
  }
  t_current_device = &device;
  omp_set_num_threads(device.num_threads());
}

DeviceScope::~DeviceScope() {
  t_current_device = previous_;
  omp_set_num_threads(previous_threads_);
  if (pinned_) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int core : previous_affinity_) CPU_SET(core, &set);
    sched_setaffinity(0, sizeof(set), &set);
  }
}

}  // namespace lockstep
