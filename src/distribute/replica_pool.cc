// The replica threads of a strategy: one per local replica but the first
// (which runs on the caller's thread), each pinned to its device and running
// in its ReplicaContext; a run hands every replica the same task and waits
// for all; a failure releases the others from their collectives. Also the
// creation of mirrored variables (the chief's values on every worker).
#include <omp.h>

#include <algorithm>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"
#include "lockstep/core/spin_wait.h"
#include "lockstep/tensor/device_kernels.h"
#include "strategy_impl.h"

namespace lockstep::distribute {

using Clock = std::chrono::steady_clock;

StrategyImpl::StrategyImpl(std::string name, std::vector<Device*> devices, int replicas_per_device,
                           comm::InProcessGroup::Options comm_options, bool is_default,
                           ReplicaOptions replica_options, CrossWorker workers)
    : name_(std::move(name)),
      comm_options_(comm_options),
      is_default_(is_default),
      replicas_per_device_(replicas_per_device),
      replica_options_(replica_options),
      workers_(std::move(workers)) {
  for (Device* d : devices) {
    for (int k = 0; k < replicas_per_device; ++k) devices_.push_back(d);
  }
  const int n = static_cast<int>(devices_.size());
  contexts_.resize(static_cast<std::size_t>(n));
  reset_group();
  errors_.resize(static_cast<std::size_t>(n));
  if (n > 1) {
    // Replica 0 runs on the calling thread (no hand-off, no idle waiter);
    // the others on their own threads.
    for (int r = 1; r < n; ++r) threads_.emplace_back([this, r] { replica_loop(r); });
  }
}

StrategyImpl::~StrategyImpl() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void StrategyImpl::run(const std::function<void(ReplicaContext&)>& fn) {
  if (size() == 1) {
    // One replica: on the calling thread (pinned to its device unless this
    // is the default strategy), in a replica context all the same.
    std::optional<DeviceScope> device;
    if (!is_default_) device.emplace(*devices_[0], DeviceScope::Options{.pin_thread = false});
    ReplicaContextScope context(&contexts_[0]);
    fn(contexts_[0]);
    return;
  }
  std::unique_lock run_lock(run_mu_);  // one run at a time
  {
    std::lock_guard lk(mu_);
    task_ = &fn;
    remaining_.store(size() - 1, std::memory_order_release);
    first_failure_ = -1;
    for (auto& e : errors_) e = nullptr;
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  start_cv_.notify_all();
  {
    Device& device = *devices_[0];
    DeviceScope on(device);
    if (replicas_per_device_ > 1)
      omp_set_num_threads(std::max(1, device.num_threads() / replicas_per_device_));
    ReplicaContextScope context(&contexts_[0]);
    run_one(0);
  }
  wait_done();
  task_ = nullptr;
  if (first_failure_ >= 0) {
    const int r = first_failure_;
    const std::exception_ptr error = errors_[static_cast<std::size_t>(r)];
    reset_group();  // the aborted group cannot be used again
    rethrow_with_replica(error, r);
  }
}

Variable StrategyImpl::create_mirrored(const Tensor& initial_value,
                                       Variable::Options options) const {
  Tensor initial = initial_value;
  if (workers_.comm) initial = broadcast_from_chief(initial_value, options.name);
  Variable v;
  if (size() == 1) {
    DeviceScope on(*devices_[0], {.pin_thread = false});
    v = Variable(initial, std::move(options));
  } else {
    // Through the host: the value may be on one replica's GPU, and GPUs
    // need not share memory.
    const Tensor source = initial.cpu();
    std::vector<Tensor> copies;
    for (Device* d : devices_) {
      DeviceScope on(*d, {.pin_thread = false});
      copies.push_back(source.copy());
    }
    v = Variable::mirrored(std::move(copies), std::move(options));
  }
  if (v.aggregation() == VariableAggregation::kMean) {
    std::lock_guard lk(kept_mu_);
    std::erase_if(kept_in_sync_, [](const WeakVariable& w) { return w.expired(); });
    kept_in_sync_.emplace_back(v);
  }
  return v;
}

std::vector<Variable> StrategyImpl::variables_kept_in_sync() const {
  std::lock_guard lk(kept_mu_);
  std::vector<Variable> out;
  for (const WeakVariable& w : kept_in_sync_) {
    if (Variable v = w.lock(); v.defined()) out.push_back(v);
  }
  return out;
}

Tensor StrategyImpl::broadcast_from_chief(const Tensor& initial, const std::string& name) const {
  comm::Communicator& c = *workers_.comm;
  const std::int64_t mine[2] = {initial.numel(), static_cast<std::int64_t>(initial.dtype())};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(c.size()));
  c.all_gather(mine, sizeof mine, all.data());
  for (int w = 0; w < c.size(); ++w) {
    const auto i = 2 * static_cast<std::size_t>(w);
    LOCKSTEP_CHECK_AS(DistributedError, all[i] == all[0] && all[i + 1] == all[1],
                      "MultiWorkerMirroredStrategy: variable '", name, "' has ", all[i],
                      " elements of type ", static_cast<DType>(all[i + 1]), " on ",
                      workers_.resolver.describe_worker(w), " but ", all[0], " of type ",
                      static_cast<DType>(all[1]),
                      " on the chief; every worker must build the same model");
  }
  Tensor value = initial.copy();
  c.broadcast(value.raw_data(), value.nbytes(), 0);
  return value;
}

bool StrategyImpl::devices_share_accelerator_memory() const {
  for (const Device* d : devices_) {
    if (d->kernels() == nullptr || !d->kernels()->shares_memory_with(*devices_[0]->kernels()))
      return false;
  }
  return true;
}

// Asked between runs (fit's start), when no replica remakes the group.
bool StrategyImpl::sums_on_devices() const {
  if (workers_.comm || size() <= 1) return false;
  return !collectives_.empty() || devices_share_accelerator_memory();
}

std::string StrategyImpl::describe_reduction() const {
  const int k = size();
  if (workers_.comm) {
    return detail::str_cat("across ", workers_.num_workers, " workers",
                           k > 1 ? detail::str_cat(" of ", k, " replicas each") : "",
                           ": through host memory and the workers' communicator");
  }
  if (k == 1) return "none (one replica)";
  if (devices_share_accelerator_memory())
    return "in the device: each replica sums every replica's arena in rank order";
  if (devices_[0]->kernels() != nullptr && !devices_[0]->kernels()->runs_host_kernels())
    return "ReductionToOneDevice: through host memory (/cpu:0)";
  return comm_options_.algorithm == comm::Algorithm::kReductionToOneDevice
             ? "ReductionToOneDevice: host collectives, in rank order"
             : "ReduceScatterAllGather: host collectives, in rank order";
}

// Replicas on distinct accelerators that share no memory, in one process,
// sum with their backend's collective (NCCL on GPUs, TensorFlow's default
// NcclAllReduce there) unless the strategy asked for ReductionToOneDevice.
// Made anew with the group (after a failure, the aborted one cannot serve).
void StrategyImpl::make_collectives() {
  watchdog_.reset();  // it polls the members cleared below
  collectives_.clear();
  const int k = size();
  const bool accelerators = k > 1 && std::all_of(devices_.begin(), devices_.end(), [](Device* d) {
                              return d->kernels() != nullptr && !d->kernels()->runs_host_kernels();
                            });
  bool distinct = accelerators;
  for (int i = 0; distinct && i < k; ++i) {
    for (int j = 0; j < i; ++j) {
      if (devices_[static_cast<std::size_t>(i)]->kernels()->shares_memory_with(
              *devices_[static_cast<std::size_t>(j)]->kernels()))
        distinct = false;
    }
  }
  // A worker's single replica on a GPU joins the other workers' too.
  const bool one_accelerator =
      k == 1 && devices_[0]->kernels() != nullptr && !devices_[0]->kernels()->runs_host_kernels();
  // (Not with bfloat16 compression between workers, which the host path
  // does: the user's choice.)
  if (workers_.comm && (distinct || one_accelerator) && !replica_options_.compress_gradients) {
    join_collectives_across_workers();
    return;
  }
  if (!distinct || workers_.comm ||
      comm_options_.algorithm == comm::Algorithm::kReductionToOneDevice)
    return;
  detail::DeviceKernels& kernels = *devices_[0]->kernels();
  try {
    collectives_ = kernels.make_collective(devices_);
  } catch (const DeviceError& e) {
    log(LogLevel::kWarning,
        detail::str_cat(name_, ": the GPUs' collective could not be made (", e.what(),
                        "); their gradients are summed through host memory\n"));
    collectives_.clear();
    return;
  }
  if (!collectives_.empty())
    reduction_ =
        detail::str_cat("NcclAllReduce: ", kernels.collective_name(), " on the replicas' streams");
}

// The workers' replicas on GPUs join one NCCL communicator, ranks in
// replica order: the chief makes its id, which reaches the others by the
// workers' communicator; every worker then says whether it joined, and
// they use NCCL only if all did (else each warns and they all sum through
// host memory, as before). Once, when the strategy is made: a failed run
// aborts the workers' communicator too (the hierarchy's abort), which ends
// the job's collectives; a restarted job joins at its start.
void StrategyImpl::join_collectives_across_workers() {
  if (collectives_tried_) return;
  collectives_tried_ = true;
  detail::DeviceKernels& kernels = *devices_[0]->kernels();
  const int k = size();
  // The chief's id, its length first ("" where its GPUs have no collective).
  std::string id;
  std::string why;
  if (workers_.worker_index == 0) {
    try {
      id = kernels.new_collective_id();
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  std::int64_t length = static_cast<std::int64_t>(id.size());
  workers_.comm->broadcast(&length, sizeof length, 0);
  id.resize(static_cast<std::size_t>(length));
  if (length > 0) workers_.comm->broadcast(id.data(), id.size(), 0);
  if (why.empty() && id.empty()) why = "the chief's GPUs have no collective";
  if (why.empty()) {
    try {
      collectives_ = kernels.join_collective(devices_, k * workers_.num_workers,
                                             workers_.worker_index * k, id, comm_options_.timeout);
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  float joined = why.empty() && !collectives_.empty() ? 1.0f : 0.0f;
  workers_.comm->all_reduce(&joined, 1, comm::ReduceOp::kMin);
  if (joined < 1.0f) {
    if (!collectives_.empty()) collectives_[0]->abort("not every worker joined");
    collectives_.clear();
    log(LogLevel::kWarning, detail::str_cat(name_, ": the workers' GPUs did not all join NCCL (",
                                            why.empty() ? "another worker's could not" : why,
                                            "); their gradients are summed through host memory\n"));
    return;
  }
  reduction_ =
      detail::str_cat("NcclAllReduce: ", kernels.collective_name(),
                      " on the replicas' streams, across ", workers_.num_workers, " workers");
}

// The deadline is the strategy's collective timeout, as for its host
// collectives; across workers the watchdog also asks the chief's store
// whom the job lost, once a heartbeat interval.
void StrategyImpl::watch_collectives() {
  if (collectives_.empty()) return;
  CollectiveWatchdog::Options o;
  o.name = name_;
  o.deadline = comm_options_.timeout;
  o.every = std::clamp(comm_options_.timeout / 16, std::chrono::milliseconds(10),
                       std::chrono::milliseconds(1000));
  if (workers_.lost) {
    o.lost = workers_.lost;
    o.diagnose = workers_.diagnose;
    o.every = workers_.heartbeat_interval;
  }
  std::vector<detail::DeviceCollective*> members;
  for (const auto& c : collectives_) members.push_back(c.get());
  watchdog_ = std::make_unique<CollectiveWatchdog>(std::move(members), std::move(o));
}

void StrategyImpl::reset_group() {
  const int k = size();
  if (k > 1) group_ = comm::InProcessGroup::create(k, comm_options_);
  hierarchical_.clear();
  reduction_ = describe_reduction();
  make_collectives();
  watch_collectives();
  for (int r = 0; r < k; ++r) {
    ReplicaContext::Placement p;
    p.replica_id = workers_.worker_index * k + r;
    p.local_replica_id = r;
    p.num_replicas = num_replicas_in_sync();
    p.num_local_replicas = k;
    p.worker_index = workers_.worker_index;
    p.num_workers = workers_.num_workers;
    p.local_communicator = k > 1 ? &group_->communicator(r) : nullptr;
    if (!workers_.comm) {
      p.communicator = p.local_communicator;
    } else if (k == 1) {
      p.communicator = workers_.comm.get();
    } else {
      hierarchical_.push_back(std::make_unique<HierarchicalCommunicator>(
          group_->communicator(r), r == 0 ? workers_.comm.get() : nullptr, workers_.worker_index,
          workers_.num_workers));
      p.communicator = hierarchical_.back().get();
    }
    p.bytes_per_pack = replica_options_.bytes_per_pack;
    p.shard_optimizer_update = replica_options_.shard_optimizer_update;
    p.compress_gradients = replica_options_.compress_gradients && workers_.num_workers > 1;
    p.in_device_reduction =
        !collectives_.empty() || (!workers_.comm && k > 1 && devices_share_accelerator_memory());
    if (!collectives_.empty())
      p.device_collective = collectives_[static_cast<std::size_t>(r)].get();
    // In place: replica threads hold a pointer to their context.
    contexts_[static_cast<std::size_t>(r)] = ReplicaContext(p);
  }
}

bool StrategyImpl::wait_start(std::uint64_t& seen) {
  const auto spin_until = Clock::now() + kSpinBeforeSleep;
  while (Clock::now() < spin_until) {
    if (generation_.load(std::memory_order_acquire) != seen) break;
  }
  std::unique_lock lk(mu_);
  start_cv_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
  if (stop_) return false;
  seen = generation_.load();
  return true;
}

void StrategyImpl::wait_done() {
  const auto spin_until = Clock::now() + kSpinBeforeSleep;
  while (Clock::now() < spin_until) {
    if (remaining_.load(std::memory_order_acquire) == 0) return;
  }
  std::unique_lock lk(mu_);
  done_cv_.wait(lk, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
}

void StrategyImpl::replica_loop(int r) {
  Device& device = *devices_[static_cast<std::size_t>(r)];
  DeviceScope on(device);
  if (replicas_per_device_ > 1)
    omp_set_num_threads(std::max(1, device.num_threads() / replicas_per_device_));
  ReplicaContextScope context(&contexts_[static_cast<std::size_t>(r)]);
  std::uint64_t seen = 0;
  while (wait_start(seen)) {
    run_one(r);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(mu_);  // so the notification cannot slip past a waiter
      done_cv_.notify_all();
    }
  }
}

void StrategyImpl::run_one(int r) {
  {
    try {
      (*task_)(contexts_[static_cast<std::size_t>(r)]);
    } catch (...) {
      std::lock_guard lk(mu_);
      errors_[static_cast<std::size_t>(r)] = std::current_exception();
      if (first_failure_ < 0) {
        first_failure_ = r;
        std::string what = "unknown error";
        try {
          std::rethrow_exception(errors_[static_cast<std::size_t>(r)]);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        // Release every replica blocked in (or about to enter) a collective,
        // on the host or on its GPU.
        const std::string reason = "replica " + std::to_string(r) + " failed: " + what;
        contexts_[static_cast<std::size_t>(r)].placement().communicator->abort(reason);
        if (!collectives_.empty()) collectives_[0]->abort(reason);
      }
    }
  }
}

void StrategyImpl::rethrow_with_replica(const std::exception_ptr& e, int r) {
  try {
    std::rethrow_exception(e);
  } catch (...) {
    detail::rethrow_with_prefix("replica " + std::to_string(r) + ": ");
  }
}

}  // namespace lockstep::distribute
