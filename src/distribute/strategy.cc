// Strategies: replica threads, mirrored variable creation, reduce.
#include "lockstep/distribute/strategy.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "hierarchical_communicator.h"
#include "host_cores.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store.h"
#include "lockstep/core/env.h"
#include "lockstep/core/error.h"
#include "lockstep/core/hash.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::distribute {

using Clock = std::chrono::steady_clock;

// What joins a strategy's process to the other workers (one worker: nothing).
struct CrossWorker {
  int num_workers = 1;
  int worker_index = 0;
  ClusterResolver resolver = ClusterResolver::single_worker();
  std::shared_ptr<comm::StoreServer> store_server;  // on the chief (Gloo)
  std::shared_ptr<comm::StoreClient> store_client;  // rendezvous and heartbeats (Gloo)
  // Declared last, destroyed first: it uses the store.
  std::shared_ptr<comm::Communicator> comm;
};

class StrategyImpl {
 public:
  // `workers` joins this process to the others (MultiWorkerMirroredStrategy;
  // one worker: nothing). Given here, before the replica threads start, as
  // they read their contexts.
  StrategyImpl(std::string name, std::vector<Device*> devices, int replicas_per_device,
               comm::InProcessGroup::Options comm_options, bool is_default,
               CrossWorker workers = {})
      : name_(std::move(name)),
        comm_options_(comm_options),
        is_default_(is_default),
        replicas_per_device_(replicas_per_device),
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

  ~StrategyImpl() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  // Local replicas (threads of this process).
  int size() const { return static_cast<int>(devices_.size()); }
  int num_replicas_in_sync() const { return size() * workers_.num_workers; }
  const CrossWorker& workers() const { return workers_; }
  const std::vector<Device*>& devices() const { return devices_; }
  const std::string& name() const { return name_; }
  bool is_default() const { return is_default_; }

  void run(const std::function<void(ReplicaContext&)>& fn) {
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

  // Set before the first run.
  void set_shard_optimizer_update(bool shard) {
    shard_optimizer_update_ = shard;
    for (auto& ctx : contexts_) {
      ReplicaContext::Placement p = ctx.placement();
      p.shard_optimizer_update = shard;
      ctx = ReplicaContext(p);
    }
  }
  void set_bytes_per_pack(std::size_t bytes) {
    bytes_per_pack_ = bytes;
    for (auto& ctx : contexts_) {
      ReplicaContext::Placement p = ctx.placement();
      p.bytes_per_pack = bytes;
      ctx = ReplicaContext(p);
    }
  }

  Variable create_mirrored(const Tensor& initial_value, Variable::Options options) const {
    Tensor initial = initial_value;
    if (workers_.comm) initial = broadcast_from_chief(initial_value, options.name);
    if (size() == 1) {
      DeviceScope on(*devices_[0], {.pin_thread = false});
      return Variable(initial, std::move(options));
    }
    std::vector<Tensor> copies;
    for (Device* d : devices_) {
      DeviceScope on(*d, {.pin_thread = false});
      copies.push_back(initial.copy());
    }
    return Variable::mirrored(std::move(copies), std::move(options));
  }

  // Every worker starts from the chief's initial value (as tf.distribute's
  // MultiWorkerMirroredStrategy); a worker whose variable has another shape
  // or type is named on every worker.
  Tensor broadcast_from_chief(const Tensor& initial, const std::string& name) const {
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

 private:
  // Replica contexts and the communicators joining the replicas: the local
  // group, the cross-worker communicator, or (several of each) both in a
  // hierarchy.
  void reset_group() {
    const int k = size();
    if (k > 1) group_ = comm::InProcessGroup::create(k, comm_options_);
    hierarchical_.clear();
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
      p.bytes_per_pack = bytes_per_pack_;
      p.shard_optimizer_update = shard_optimizer_update_;
      // In place: replica threads hold a pointer to their context.
      contexts_[static_cast<std::size_t>(r)] = ReplicaContext(p);
    }
  }

  // Waits for a new task (polling briefly: steps follow each other closely).
  bool wait_start(std::uint64_t& seen) {
    const auto spin_until = Clock::now() + std::chrono::microseconds(50);
    while (Clock::now() < spin_until) {
      if (generation_.load(std::memory_order_acquire) != seen) break;
    }
    std::unique_lock lk(mu_);
    start_cv_.wait(lk, [&] { return stop_ || generation_.load() != seen; });
    if (stop_) return false;
    seen = generation_.load();
    return true;
  }

  void wait_done() {
    const auto spin_until = Clock::now() + std::chrono::microseconds(50);
    while (Clock::now() < spin_until) {
      if (remaining_.load(std::memory_order_acquire) == 0) return;
    }
    std::unique_lock lk(mu_);
    done_cv_.wait(lk, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
  }

  void replica_loop(int r) {
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

  // Runs the task for replica r; a failure is recorded and aborts the
  // group so that no other replica waits for this one.
  void run_one(int r) {
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
          // Release every replica blocked in (or about to enter) a collective.
          contexts_[static_cast<std::size_t>(r)].placement().communicator->abort(
              "replica " + std::to_string(r) + " failed: " + what);
        }
      }
    }
  }

  [[noreturn]] static void rethrow_with_replica(const std::exception_ptr& e, int r) {
    try {
      std::rethrow_exception(e);
    } catch (...) {
      detail::rethrow_with_prefix("replica " + std::to_string(r) + ": ");
    }
  }

  std::string name_;
  comm::InProcessGroup::Options comm_options_;
  bool is_default_;
  int replicas_per_device_;
  std::vector<Device*> devices_;
  std::shared_ptr<comm::InProcessGroup> group_;
  CrossWorker workers_;
  std::vector<std::unique_ptr<HierarchicalCommunicator>> hierarchical_;
  std::size_t bytes_per_pack_ = kDefaultBytesPerPack;
  bool shard_optimizer_update_ = true;
  std::vector<ReplicaContext> contexts_;

  std::mutex run_mu_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> remaining_{0};
  bool stop_ = false;
  const std::function<void(ReplicaContext&)>* task_ = nullptr;
  std::vector<std::exception_ptr> errors_;
  int first_failure_ = -1;
  std::vector<std::thread> threads_;
};

namespace {

thread_local std::vector<Strategy> t_strategies;

std::shared_ptr<StrategyImpl> default_impl() {
  static auto impl =
      std::make_shared<StrategyImpl>("DefaultStrategy", std::vector<Device*>{&host_device()}, 1,
                                     comm::InProcessGroup::Options{}, true);
  return impl;
}

}  // namespace

Strategy::Strategy() : impl_(default_impl()) {}

int Strategy::num_replicas_in_sync() const { return impl_->num_replicas_in_sync(); }
int Strategy::num_local_replicas() const { return impl_->size(); }
int Strategy::num_workers() const { return impl_->workers().num_workers; }
int Strategy::worker_index() const { return impl_->workers().worker_index; }
comm::Communicator* Strategy::cross_worker_communicator() const {
  return impl_->workers().comm.get();
}
const std::vector<Device*>& Strategy::replica_devices() const { return impl_->devices(); }
const std::string& Strategy::name() const { return impl_->name(); }
bool Strategy::is_default() const { return impl_->is_default(); }

Strategy::Scope::Scope(const Strategy& strategy)
    : creator_([impl = strategy.impl()](const Tensor& initial, Variable::Options options) {
        return impl->create_mirrored(initial, std::move(options));
      }) {
  t_strategies.push_back(strategy);
}

Strategy::Scope::~Scope() { t_strategies.pop_back(); }

void Strategy::run_replicas(const std::function<void(ReplicaContext&)>& fn) const {
  impl_->run(fn);
}

void Strategy::check_per_replica_size(int size) const {
  LOCKSTEP_CHECK(size == num_local_replicas(), "Strategy::run: a PerReplica argument holds ", size,
                 " values for ", num_local_replicas(),
                 " local replicas (make it with this strategy's distributed dataset or run)");
}

std::vector<std::int64_t> even_split(std::int64_t rows, int parts) {
  LOCKSTEP_CHECK(parts >= 1 && rows >= 0, "even_split: cannot cut ", rows, " rows into ", parts,
                 " parts");
  std::vector<std::int64_t> sizes(static_cast<std::size_t>(parts), rows / parts);
  for (std::int64_t r = 0; r < rows % parts; ++r) ++sizes[static_cast<std::size_t>(r)];
  return sizes;
}

std::vector<std::int64_t> Strategy::split_sizes(std::int64_t global_batch) const {
  return even_split(global_batch, num_replicas_in_sync());
}

Strategy::LocalShare Strategy::local_share(std::int64_t global_batch) const {
  const std::vector<std::int64_t> all = split_sizes(global_batch);
  const int k = num_local_replicas();
  const int first = worker_index() * k;
  LocalShare share;
  for (int r = 0; r < first; ++r) share.begin += all[static_cast<std::size_t>(r)];
  share.sizes.assign(all.begin() + first, all.begin() + first + k);
  return share;
}

Strategy::LocalBatches Strategy::split_batch(const std::vector<Tensor>& batch, bool worker_part,
                                             std::int64_t global_rows) const {
  LOCKSTEP_CHECK(!batch.empty() && batch[0].defined() && batch[0].rank() >= 1,
                 "split_batch: a batch needs at least one tensor with a batch dimension");
  const std::int64_t rows = batch[0].dim(0);
  LocalBatches out;
  LocalShare local;
  if (worker_part) {
    out.global_rows = global_rows;
    local.sizes = even_split(rows, num_local_replicas());
  } else {
    out.global_rows = rows;
    local = local_share(rows);
  }
  out.sizes = local.sizes;
  out.parts.resize(out.sizes.size());
  std::int64_t begin = local.begin;
  for (std::size_t r = 0; r < out.sizes.size(); ++r) {
    for (const Tensor& t : batch) out.parts[r].push_back(t.view_rows(begin, begin + out.sizes[r]));
    begin += out.sizes[r];
  }
  return out;
}

Strategy::StepAgreement Strategy::agree_on_step(bool have_batch, std::int64_t rows) const {
  comm::Communicator* workers = cross_worker_communicator();
  if (!workers) return {have_batch, rows};
  // How many workers are out of data, and the rows of this step's parts.
  double agree[2] = {have_batch ? 0.0 : 1.0, static_cast<double>(rows)};
  workers->all_reduce(agree, 2, ReduceOp::kSum);
  return {agree[0] == 0.0, static_cast<std::int64_t>(agree[1])};
}

void Strategy::check_workers_agree(
    const std::string& op, const std::vector<std::pair<std::string, std::string>>& facts) const {
  comm::Communicator* workers = cross_worker_communicator();
  if (!workers) return;
  const std::size_t n = facts.size();
  std::vector<std::uint64_t> mine;
  for (const auto& [what, text] : facts) mine.push_back(fnv1a64(text));
  std::vector<std::uint64_t> all(n * static_cast<std::size_t>(workers->size()));
  workers->all_gather(mine.data(), n * sizeof(std::uint64_t), all.data());
  for (std::size_t k = 0; k < n; ++k) {
    std::string differ;
    for (int w = 1; w < workers->size(); ++w) {
      if (all[n * static_cast<std::size_t>(w) + k] != all[k])
        differ += (differ.empty() ? "worker " : ", worker ") + std::to_string(w);
    }
    LOCKSTEP_CHECK_AS(DistributedError, differ.empty(), op, ": ", differ, " has another ",
                      facts[k].first,
                      " than the chief (worker 0); every worker must run the same program on the "
                      "same input");
  }
}

void Strategy::sum_across_workers(std::vector<double>& values) const {
  if (comm::Communicator* workers = cross_worker_communicator())
    workers->all_reduce(values.data(), values.size(), ReduceOp::kSum);
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica<Tensor>& value,
                        std::optional<int> axis) const {
  LOCKSTEP_CHECK(value.size() == num_local_replicas(), "Strategy::reduce: ", value.size(),
                 " values for ", num_local_replicas(), " local replicas");
  LOCKSTEP_CHECK(op == ReduceOp::kSum || op == ReduceOp::kMean,
                 "Strategy::reduce: expected ReduceOp::kSum or kMean (tf.distribute.ReduceOp), "
                 "got kMax or kMin");
  Tensor total;
  std::int64_t count = 0;
  for (const Tensor& v : value.values()) {
    check_defined(v, "Strategy::reduce", "value");
    Tensor part = v;
    if (axis) {
      const int a = *axis < 0 ? *axis + v.rank() : *axis;
      LOCKSTEP_CHECK(a >= 0 && a < v.rank(), "Strategy::reduce: axis ", *axis,
                     " is out of range for a value of shape ", v.shape());
      count += v.dim(a);
      part = sum(v, {.axes = {a}});
    }
    total = total.defined() ? add(total, part) : part.copy();
  }
  if (comm::Communicator* workers = cross_worker_communicator()) {
    // The other workers' replicas: sum in float32 (as the values are), the
    // element count in float64.
    total = total.to(DType::kFloat32).copy();
    all_reduce_tensor(*workers, total, ReduceOp::kSum);
    double c = static_cast<double>(count);
    workers->all_reduce(&c, 1, ReduceOp::kSum);
    count = static_cast<std::int64_t>(c);
  }
  if (op == ReduceOp::kMean) {
    const double d = axis ? static_cast<double>(count) : num_replicas_in_sync();
    total = div(total, Tensor::scalar(static_cast<float>(d)));
  }
  return total;
}

MirroredStrategy::MirroredStrategy(MirroredStrategyOptions o) {
  // Every logical device, one per physical core unless the program chose
  // them (DESIGN.md; the guide prints "Number of devices: 2" here).
  std::vector<Device*> devices = o.devices.empty() ? logical_devices() : o.devices;
  LOCKSTEP_CHECK(!devices.empty(), "MirroredStrategy: no devices");
  LOCKSTEP_CHECK(o.replicas_per_device >= 1,
                 "MirroredStrategy: replicas_per_device must be >= 1, got ", o.replicas_per_device);
  int shared_core = -1;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    LOCKSTEP_CHECK(devices[i] != nullptr, "MirroredStrategy: device ", i, " is null");
    for (std::size_t j = 0; j < i; ++j) {
      LOCKSTEP_CHECK(devices[i] != devices[j], "MirroredStrategy: device ", devices[i]->name(),
                     " is listed twice (use replicas_per_device to run several replicas on one "
                     "device)");
      for (int c : devices[i]->cores()) {
        for (int d : devices[j]->cores()) shared_core = c == d ? c : shared_core;
      }
    }
  }
  if (shared_core >= 0) {
    // More logical devices than cores (LOCKSTEP_CPU_DEVICES=3 on 2 cores), as
    // TensorFlow allows: their replicas take turns on the shared cores.
    std::fprintf(stderr,
                 "MirroredStrategy: %zu devices share %zu cores (core %d is in several); their "
                 "replicas take turns on them\n",
                 devices.size(), available_physical_cores().size(), shared_core);
  }
  auto impl = std::make_shared<StrategyImpl>(
      "MirroredStrategy", std::move(devices), o.replicas_per_device,
      comm::InProcessGroup::Options{.algorithm = o.cross_device_ops, .timeout = o.timeout}, false);
  impl->set_bytes_per_pack(o.bytes_per_pack);
  impl->set_shard_optimizer_update(o.shard_optimizer_update);
  static_cast<Strategy&>(*this) = Strategy(std::move(impl));
}

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The rendezvous store's secret: given, or LOCKSTEP_JOB_TOKEN. A cluster on
// loopback alone may go without (derived from the cluster spec, said once).
std::string job_token(const MultiWorkerMirroredStrategyOptions& o, const ClusterResolver& r) {
  if (!o.job_token.empty()) return o.job_token;
  if (const auto token = env::job_token()) return *token;
  bool loopback = true;
  for (int w = 0; w < r.num_workers(); ++w) loopback &= is_loopback(r.worker_address(w).host);
  LOCKSTEP_CHECK(loopback,
                 "MultiWorkerMirroredStrategy: set LOCKSTEP_JOB_TOKEN to the same secret on "
                 "every worker (or pass job_token): the chief's rendezvous store admits only "
                 "processes that know it");
  static std::once_flag said;
  std::call_once(said, [] {
    std::fprintf(stderr,
                 "MultiWorkerMirroredStrategy: LOCKSTEP_JOB_TOKEN is not set; on this loopback "
                 "cluster the store's token is derived from the cluster spec\n");
  });
  return "lockstep-loopback-job:" + r.canonical_cluster_spec();
}

std::string format_lost(const std::vector<comm::LostWorker>& lost, const ClusterResolver& r) {
  std::string s;
  for (const auto& l : lost)
    s += (s.empty() ? "" : "; ") + r.describe_worker(l.rank) + " was lost: " + l.reason;
  return s.empty() ? s : "the chief reports " + s;
}

// Waits until every worker has joined through the store; names those that
// did not, and those given another cluster spec.
void join_through_store(comm::StoreClient& store, const ClusterResolver& r,
                        std::chrono::milliseconds join_timeout) {
  const int rank = r.worker_rank();
  const std::string spec = r.canonical_cluster_spec();
  std::vector<std::string> keys;
  for (int w = 0; w < r.num_workers(); ++w) keys.push_back("lockstep/joined/" + std::to_string(w));
  // A worker reads the chief's spec first: one given another cluster list
  // (one with a worker more, say) hears it at once instead of waiting for a
  // worker that will never come. It reads it before it announces itself:
  // once it has, the chief may see the difference and exit, taking the
  // store with it. The chief names the difference from its side below.
  std::optional<std::string> chiefs_spec;
  if (rank != 0) {
    try {
      store.wait({keys[0]}, join_timeout);
    } catch (const TimeoutError&) {
      throw TimeoutError(lockstep::detail::str_cat(
          "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": the chief, ",
          r.describe_worker(0), ", did not join within ", join_timeout.count() / 1000.0, " s"));
    }
    const std::vector<char> chiefs = store.get(keys[0]);
    chiefs_spec.emplace(chiefs.begin(), chiefs.end());
  }
  const std::vector<char> mine(spec.begin(), spec.end());
  if (chiefs_spec && *chiefs_spec != spec) {
    // Announced all the same, so that the chief names the difference too;
    // it may exit before it answers.
    try {
      store.set(keys[static_cast<std::size_t>(rank)], mine);
    } catch (const Error&) {
    }
    throw DistributedError(lockstep::detail::str_cat(
        "MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
        " was given another cluster spec than the chief: \"", spec, "\" here, \"", *chiefs_spec,
        "\" on the chief"));
  }
  store.set(keys[static_cast<std::size_t>(rank)], mine);
  try {
    store.wait(keys, join_timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int w = 0; w < r.num_workers(); ++w) {
      try {
        store.wait({keys[static_cast<std::size_t>(w)]}, std::chrono::milliseconds(1));
      } catch (const TimeoutError&) {
        missing += (missing.empty() ? "" : ", ") + r.describe_worker(w);
      }
    }
    throw TimeoutError(lockstep::detail::str_cat(
        "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": ", missing,
        " did not join within ", join_timeout.count() / 1000.0, " s"));
  }
  for (int w = 0; w < r.num_workers(); ++w) {
    const std::vector<char> theirs = store.get(keys[static_cast<std::size_t>(w)]);
    LOCKSTEP_CHECK_AS(DistributedError, std::string(theirs.begin(), theirs.end()) == spec,
                      "MultiWorkerMirroredStrategy: ", r.describe_worker(w),
                      " was given another cluster spec than ", r.describe_worker(rank), ": \"",
                      std::string(theirs.begin(), theirs.end()), "\" vs \"", spec, "\"");
  }
}

CrossWorker join_workers(const MultiWorkerMirroredStrategyOptions& o, const ClusterResolver& r) {
  CrossWorker cw;
  cw.resolver = r;
  cw.num_workers = r.num_workers();
  cw.worker_index = r.worker_rank();
  LOCKSTEP_CHECK(cw.worker_index >= 0, "MultiWorkerMirroredStrategy: this task is a ",
                 r.task_type(), "; only chief and worker tasks train in sync");
  if (cw.num_workers == 1) return cw;
  const bool mpi_launch = r.launcher() == Launcher::kMpi;
  CommunicationImplementation how = o.communication;
  if (how == CommunicationImplementation::kAuto)
    how = mpi_launch ? CommunicationImplementation::kMpi : CommunicationImplementation::kGloo;
  comm::ProcessGroupOptions po{
      .rank = cw.worker_index, .size = cw.num_workers, .timeout = o.timeout};
  if (how == CommunicationImplementation::kMpi) {
    LOCKSTEP_CHECK(mpi_launch,
                   "MultiWorkerMirroredStrategy: communication = MPI needs processes started by "
                   "mpirun or srun; this one was configured by TF_CONFIG (use Gloo)");
    cw.comm = comm::create_mpi_communicator(po);
    return cw;
  }
  LOCKSTEP_CHECK(!mpi_launch,
                 "MultiWorkerMirroredStrategy: communication = Gloo needs the workers' "
                 "addresses from TF_CONFIG; under mpirun use MPI (or Auto)");
  const TaskAddress chief = r.worker_address(0);
  comm::StoreOptions so;
  so.host = chief.host;
  so.port = chief.port;
  so.token = job_token(o, r);
  so.timeout = o.join_timeout;
  // A lost link is noticed well within the collective deadline.
  so.heartbeat_timeout =
      std::clamp(o.timeout / 2, std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
  so.heartbeat_interval = so.heartbeat_timeout / 8;
  if (cw.worker_index == 0) cw.store_server = comm::StoreServer::start(so);
  cw.store_client = comm::StoreClient::connect(so);
  cw.store_client->start_heartbeat(cw.worker_index);
  join_through_store(*cw.store_client, r, o.join_timeout);
  comm::StoreServer* server = cw.store_server.get();
  comm::StoreClient* client = cw.store_client.get();
  // After a failed collective: ask the chief whom it lost. A dead process's
  // heartbeat connection closes at once, but the collective may notice
  // first, so ask again for up to a heartbeat timeout.
  const auto patience = so.heartbeat_timeout + std::chrono::milliseconds(500);
  po.diagnose = [server, client, r, patience]() -> std::string {
    const auto until = Clock::now() + patience;
    for (;;) {
      std::vector<comm::LostWorker> lost;
      try {
        lost = server ? server->lost_workers() : client->lost_workers();
      } catch (const Error& e) {
        return "lost contact with the chief, " + r.describe_worker(0) + ": " + e.what();
      }
      if (!lost.empty() || Clock::now() >= until) return format_lost(lost, r);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  cw.comm = comm::create_gloo_communicator(*cw.store_client, r.worker_address(cw.worker_index).host,
                                           "lockstep/gloo/", po);
  return cw;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions o) {
  LOCKSTEP_CHECK(o.local_replicas >= 1,
                 "MultiWorkerMirroredStrategy: local_replicas must be >= 1, got ",
                 o.local_replicas);
  const ClusterResolver resolver =
      o.cluster_resolver
          ? *o.cluster_resolver
          : ClusterResolver::from_environment().value_or(ClusterResolver::single_worker());
  CrossWorker workers = join_workers(o, resolver);
  // Workers started by hand on one host split its cores (as launch does),
  // before the devices are chosen from them.
  if (workers.comm) split_host_cores(*workers.comm, resolver);
  // Local replicas: the logical devices when there are enough, else replicas
  // sharing the host's cores; one replica uses every core of the process.
  std::vector<Device*> devices;
  int replicas_per_device = 1;
  const std::vector<Device*> logical = logical_devices();
  if (o.local_replicas > 1 && static_cast<int>(logical.size()) >= o.local_replicas) {
    devices.assign(logical.begin(), logical.begin() + o.local_replicas);
  } else {
    devices = {&host_device()};
    replicas_per_device = o.local_replicas;
  }
  auto impl = std::make_shared<StrategyImpl>(
      "MultiWorkerMirroredStrategy", std::move(devices), replicas_per_device,
      comm::InProcessGroup::Options{.timeout = o.timeout}, false, std::move(workers));
  impl->set_bytes_per_pack(o.bytes_per_pack);
  impl->set_shard_optimizer_update(o.shard_optimizer_update);
  static_cast<Strategy&>(*this) = Strategy(std::move(impl));
}

const ClusterResolver& MultiWorkerMirroredStrategy::cluster_resolver() const {
  return impl()->workers().resolver;
}

OneDeviceStrategy::OneDeviceStrategy(Device& device) {
  static_cast<Strategy&>(*this) =
      Strategy(std::make_shared<StrategyImpl>("OneDeviceStrategy", std::vector<Device*>{&device}, 1,
                                              comm::InProcessGroup::Options{}, false));
}

std::int64_t InputContext::get_per_replica_batch_size(std::int64_t global_batch_size) const {
  LOCKSTEP_CHECK(global_batch_size % num_replicas_in_sync == 0,
                 "get_per_replica_batch_size: ", "the global batch size ", global_batch_size,
                 " does not divide evenly over ", num_replicas_in_sync, " replicas");
  return global_batch_size / num_replicas_in_sync;
}

DistributedDataset DistributedDataset::from_global(const Strategy& strategy,
                                                   data::Dataset global_batches) {
  LOCKSTEP_CHECK(global_batches.defined(), "experimental_distribute_dataset: undefined dataset");
  DistributedDataset d;
  d.strategy_ = strategy;
  d.datasets_ = {std::move(global_batches)};
  return d;
}

DistributedDataset DistributedDataset::from_function(
    const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn) {
  DistributedDataset d;
  d.strategy_ = strategy;
  const int n = strategy.num_replicas_in_sync();
  const int local = strategy.num_local_replicas();
  for (int r = 0; r < local; ++r) {
    // One pipeline per replica (tf.distribute gives one per worker): the
    // pipelines of all workers' replicas are numbered 0 .. n-1, so that
    // sharding by input_pipeline_id splits the input across workers too.
    const int id = strategy.worker_index() * local + r;
    data::Dataset ds = fn(
        InputContext{.num_input_pipelines = n, .input_pipeline_id = id, .num_replicas_in_sync = n});
    LOCKSTEP_CHECK(ds.defined(),
                   "distribute_datasets_from_function: the function returned an "
                   "undefined dataset for pipeline ",
                   r);
    d.datasets_.push_back(std::move(ds));
  }
  return d;
}

DistributedDataset::Iterator DistributedDataset::make_iterator(std::uint64_t epoch) const {
  Iterator it;
  it.strategy_ = strategy_;
  for (const auto& ds : datasets_) it.its_.push_back(ds.make_iterator({.epoch = epoch}));
  return it;
}

std::optional<PerReplica<data::Element>> DistributedDataset::Iterator::next() {
  const int n = strategy_.num_replicas_in_sync();
  std::vector<data::Element> parts;
  if (its_.size() == 1 && n > 1) {
    // Every worker reads the global batches and keeps its replicas' rows
    // (auto-shard policy DATA).
    auto e = its_[0].next();
    if (!e) return std::nullopt;
    Strategy::LocalBatches local = strategy_.split_batch(e->components());
    for (auto& views : local.parts) parts.emplace_back(std::move(views), e->names());
  } else {
    for (auto& it : its_) {
      auto e = it.next();
      if (!e) return std::nullopt;
      parts.push_back(std::move(*e));
    }
  }
  return PerReplica<data::Element>(std::move(parts));
}

Strategy get_strategy() { return t_strategies.empty() ? Strategy() : t_strategies.back(); }

Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size) {
  check_defined(per_example_loss, "compute_average_loss", "per_example_loss");
  const ReplicaContext& ctx = get_replica_context();
  std::int64_t b = global_batch_size;
  if (b == 0 && ctx.global_batch_size() > 0) b = ctx.global_batch_size();
  if (b == 0) {
    const std::int64_t local = per_example_loss.rank() > 0 ? per_example_loss.dim(0) : 1;
    b = local * ctx.num_replicas_in_sync();
  }
  LOCKSTEP_CHECK(b > 0, "compute_average_loss: global_batch_size must be > 0");
  return div(sum(per_example_loss), Tensor::scalar(static_cast<float>(b)));
}

Tensor scale_regularization_loss(const Tensor& loss) {
  const int n = get_replica_context().num_replicas_in_sync();
  return n == 1 ? loss : div(loss, Tensor::scalar(static_cast<float>(n)));
}

}  // namespace lockstep::distribute
