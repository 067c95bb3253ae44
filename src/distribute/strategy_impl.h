// StrategyImpl: what every strategy is underneath — its local replicas
// (devices and the threads that run them, replica_pool.cc), their replica
// contexts and the communicators that join them, and, with several workers,
// what joins this process to the others (multi_worker.cc). Internal to
// distribute/; the Strategy classes are handles to one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collective_watchdog.h"
#include "hierarchical_communicator.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/comm/store.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"

namespace lockstep::distribute {

using OptimizerState = StrategyExtended::OptimizerState;

// What joins a strategy's process to the other workers (one worker: nothing).
struct CrossWorker {
  int num_workers = 1;
  int worker_index = 0;
  ClusterResolver resolver = ClusterResolver::single_worker();
  std::shared_ptr<comm::StoreServer> store_server;  // on the chief (Gloo)
  std::shared_ptr<comm::StoreClient> store_client;  // rendezvous and heartbeats (Gloo)
  // Elastic shrink (a job that went on without some of its workers): on
  // the chief, the list of those waiting to come back ("" when none waits;
  // always "" off the chief), each called back to start again. Unset: the
  // job has all its workers.
  std::function<std::string()> waiting_to_rejoin;
  // Who the chief's store says the job lost, described ("" when nobody),
  // and the diagnosis of a collective's deadline (multi_worker.cc): what
  // the GPUs' collective watchdog says. Asked once a heartbeat interval.
  std::function<std::string()> lost;
  std::function<std::string()> diagnose;
  std::chrono::milliseconds heartbeat_interval{0};
  // Declared after the store, destroyed before it: it uses the store.
  std::shared_ptr<comm::Communicator> comm;
  // Aborts `comm` when the chief names a lost worker (multi_worker.cc);
  // declared last, destroyed first: it uses both.
  std::shared_ptr<void> liveness;
};

// How the replicas sum their gradients and apply the update (the strategy
// options of the same names).
struct ReplicaOptions {
  std::size_t bytes_per_pack = kDefaultBytesPerPack;
  bool shard_optimizer_update = true;
  // The cross-worker stage of the gradients' all-reduce in bfloat16.
  bool compress_gradients = false;
};

class StrategyImpl {
 public:
  // `workers` joins this process to the others (MultiWorkerMirroredStrategy;
  // one worker: nothing). Everything is given here, before the replica
  // threads start, as they read their contexts.
  StrategyImpl(std::string name, std::vector<Device*> devices, int replicas_per_device,
               comm::InProcessGroup::Options comm_options, bool is_default,
               ReplicaOptions replica_options = {}, CrossWorker workers = {});
  virtual ~StrategyImpl();
  StrategyImpl(const StrategyImpl&) = delete;
  StrategyImpl& operator=(const StrategyImpl&) = delete;

  // Local replicas (threads of this process).
  int size() const { return static_cast<int>(devices_.size()); }
  int num_replicas_in_sync() const { return size() * workers_.num_workers; }
  const CrossWorker& workers() const { return workers_; }
  const std::vector<Device*>& devices() const { return devices_; }
  const std::string& name() const { return name_; }
  bool is_default() const { return is_default_; }
  // How the local replicas sum gradients (Strategy::cross_device_reduction).
  const std::string& cross_device_reduction() const { return reduction_; }
  // StrategyExtended::sums_on_devices.
  bool sums_on_devices() const;

  // Runs fn on every local replica (Strategy::run_replicas).
  void run(const std::function<void(ReplicaContext&)>& fn);

  // One copy per local replica, each on its replica's device, all from the
  // chief's initial value. A variable with VariableAggregation::kMean is
  // also listed among those kept in sync.
  Variable create_mirrored(const Tensor& initial_value, Variable::Options options) const;
  // The live variables made in this strategy with VariableAggregation::kMean,
  // in the order they were made (the same on every worker): what a replica
  // step of strategy.run averages.
  std::vector<Variable> variables_kept_in_sync() const;

  // ---- What another execution model overrides (docs/architecture.md,
  // "What a new strategy plugs into"; ParameterServerStrategy's is
  // ps/ps_strategy.h) ----
  // The variable creator of scope(): mirrored copies here.
  virtual Variable create_variable(const Tensor& initial_value, Variable::Options options) const {
    return create_mirrored(initial_value, std::move(options));
  }
  // Variables held elsewhere (StrategyExtended's operations of the same
  // names): nothing to do when they are held here.
  virtual bool uses_parameter_servers() const { return false; }
  virtual void pull_variables(const std::vector<Variable>&) const {}
  virtual void push_variables(const std::vector<Variable>&) const {}
  virtual OptimizerState read_optimizer_state(const std::vector<Variable>&) const { return {}; }
  virtual void write_optimizer_state(const std::vector<Variable>&, const OptimizerState&) const {}

 private:
  // Every worker starts from the chief's initial value (as tf.distribute's
  // MultiWorkerMirroredStrategy); a worker whose variable has another shape
  // or type is named on every worker.
  Tensor broadcast_from_chief(const Tensor& initial, const std::string& name) const;
  // Replica contexts and the communicators joining the replicas: the local
  // group, the cross-worker communicator, or (several of each) both in a
  // hierarchy. Made again after a failure (an aborted group is done).
  void reset_group();
  // Every replica's device is an accelerator and all share one memory.
  bool devices_share_accelerator_memory() const;
  // Waits for a new task (polling briefly: steps follow each other closely).
  bool wait_start(std::uint64_t& seen);
  void wait_done();
  void replica_loop(int r);
  // Runs the task for replica r; a failure is recorded and aborts the
  // group so that no other replica waits for this one.
  void run_one(int r);
  void make_collectives();
  void join_collectives_across_workers();
  // A watchdog over the collectives just made (none without them).
  void watch_collectives();
  std::string describe_reduction() const;
  [[noreturn]] static void rethrow_with_replica(const std::exception_ptr& e, int r);

  std::string name_;
  comm::InProcessGroup::Options comm_options_;
  bool is_default_;
  int replicas_per_device_;
  ReplicaOptions replica_options_;
  std::vector<Device*> devices_;
  std::shared_ptr<comm::InProcessGroup> group_;
  CrossWorker workers_;
  std::vector<std::unique_ptr<HierarchicalCommunicator>> hierarchical_;
  // Replicas on distinct GPUs: their NCCL members, by local replica.
  std::vector<std::unique_ptr<detail::DeviceCollective>> collectives_;
  bool collectives_tried_ = false;  // across workers: joined once, at the start
  // Aborts their sums that wait too long; declared after them, destroyed
  // before them.
  std::unique_ptr<CollectiveWatchdog> watchdog_;
  std::string reduction_;
  std::vector<ReplicaContext> contexts_;  // replica threads hold pointers: never resized

  mutable std::mutex kept_mu_;
  mutable std::vector<WeakVariable> kept_in_sync_;

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

}  // namespace lockstep::distribute
