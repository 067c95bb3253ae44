// Strategies: where replicas run and how they stay in lockstep
// (tf.distribute's Strategy).
//
//   ls::distribute::MirroredStrategy strategy;            // every logical device
//   std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());
//   ls::Model model;
//   {
//     auto scope = strategy.scope();   // variables made here are mirrored
//     model = get_compiled_model();
//   }
//   model.fit(train_dataset, {.epochs = 2});   // replicas train in lockstep
//
// MirroredStrategy runs one replica per device on its own thread, pinned to
// the device's cores. Variables created in scope() have one copy per replica
// (identically initialised). Model::fit splits each global batch into
// per-replica views, every replica runs the same train_step with its
// ReplicaContext (replica_context.h), which sums the gradients across
// replicas, and every replica applies the same update.
// OneDeviceStrategy and the default strategy (no scope) are the same code with
// one replica.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/tensor/device.h"

namespace lockstep::distribute {

// One value per replica, indexed by replica id (tf.distribute's PerReplica).
template <typename T>
class PerReplica {
 public:
  PerReplica() = default;
  explicit PerReplica(std::vector<T> values) : values_(std::move(values)) {}
  const T& operator[](int replica) const { return values_.at(static_cast<std::size_t>(replica)); }
  int size() const { return static_cast<int>(values_.size()); }
  const std::vector<T>& values() const { return values_; }

 private:
  std::vector<T> values_;
};

class StrategyImpl;
class StrategyExtended;
class WorkerBatches;

class Strategy {
 public:
  // The default strategy: one replica on the calling thread.
  Strategy();
  explicit Strategy(std::shared_ptr<StrategyImpl> impl) : impl_(std::move(impl)) {}

  // Replicas in lockstep across every worker (tf.distribute's meaning).
  int num_replicas_in_sync() const;
  // Replicas in this process (num_replicas_in_sync() / num_workers()); they
  // are replicas worker_index() * num_local_replicas() + 0, 1, ... in sync.
  int num_local_replicas() const;
  // Worker processes in sync (1 but for MultiWorkerMirroredStrategy) and
  // this one's rank among them (the chief is 0).
  int num_workers() const;
  int worker_index() const;
  // The worker that writes checkpoints and logs (always true with one worker).
  bool is_chief() const { return worker_index() == 0; }
  // The device of each local replica, by local replica id.
  const std::vector<Device*>& replica_devices() const;
  // "MirroredStrategy", "MultiWorkerMirroredStrategy", "OneDeviceStrategy"
  // or "DefaultStrategy".
  const std::string& name() const;
  bool is_default() const;
  // How the local replicas sum their gradients, in TensorFlow's
  // cross-device-ops words: "NcclAllReduce: NCCL 2.28.9 on the replicas'
  // streams" (distinct GPUs), "in the device: ..." (logical GPUs of one
  // GPU), "ReductionToOneDevice: through host memory (/cpu:0)",
  // "ReduceScatterAllGather: host collectives, in rank order" (CPUs), "none
  // (one replica)"; with other workers, how they join.
  const std::string& cross_device_reduction() const;

  // RAII: while alive (on this thread), variables are created mirrored
  // across this strategy's replicas and get_strategy() returns it.
  class Scope {
   public:
    explicit Scope(const Strategy& strategy);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    VariableCreatorScope creator_;
  };
  [[nodiscard]] std::unique_ptr<Scope> scope() const { return std::make_unique<Scope>(*this); }

  // strategy.run(fn): fn() on every local replica; its results, per local
  // replica. Like fit, a run is one replica step (StrategyExtended::run_step):
  // the BatchNormalization statistics the replicas moved become their mean.
  template <typename F>
  auto run(F&& fn) const {
    using R = std::invoke_result_t<F&>;
    if constexpr (std::is_void_v<R>) {
      run_step({}, [&](ReplicaContext&) { fn(); });
    } else {
      std::vector<R> results(static_cast<std::size_t>(num_local_replicas()));
      run_step({}, [&](ReplicaContext& ctx) {
        results[static_cast<std::size_t>(ctx.local_replica_id())] = fn();
      });
      return PerReplica<R>(std::move(results));
    }
  }

  // strategy.run(fn, args=(a, b, ...)): fn(a_r, b_r, ...) on local replica
  // r, where a PerReplica argument gives replica r its own value (a
  // distributed dataset's element, say) and any other argument is passed to
  // every replica as it is. The first PerReplica of tensors or elements
  // gives each replica's examples (its rows): the weights of the replicas'
  // BatchNormalization statistics in their mean.
  template <typename F, typename... A>
  requires(sizeof...(A) > 0) auto run(F&& fn, const A&... args) const {
    (check_replica_arg(args), ...);
    std::vector<std::int64_t> rows(static_cast<std::size_t>(num_local_replicas()), -1);
    for (int r = 0; r < num_local_replicas(); ++r) {
      for (std::int64_t n : {replica_rows(args, r)...}) {
        if (rows[static_cast<std::size_t>(r)] < 0) rows[static_cast<std::size_t>(r)] = n;
      }
    }
    if (std::find(rows.begin(), rows.end(), -1) != rows.end()) rows.clear();
    using R = std::invoke_result_t<F&, decltype(replica_arg(args, 0))...>;
    if constexpr (std::is_void_v<R>) {
      run_step(rows,
               [&](ReplicaContext& ctx) { fn(replica_arg(args, ctx.local_replica_id())...); });
    } else {
      std::vector<R> results(static_cast<std::size_t>(num_local_replicas()));
      run_step(rows, [&](ReplicaContext& ctx) {
        const int r = ctx.local_replica_id();
        results[static_cast<std::size_t>(r)] = fn(replica_arg(args, r)...);
      });
      return PerReplica<R>(std::move(results));
    }
  }

  // Sum or mean across replicas (in replica order); with `axis`, also over
  // that axis of every value (the mean is then over all the elements). The
  // result is on the host, as TensorFlow reduces to the CPU (replicas on
  // GPUs: their values copied first). kMax and kMin are a ValueError
  // (tf.distribute's ReduceOp has SUM and MEAN).
  Tensor reduce(ReduceOp op, const PerReplica<Tensor>& value,
                std::optional<int> axis = std::nullopt) const;

  // For implementers of training loops and strategies: running replicas
  // with their contexts, splitting batches, agreeing across workers
  // (strategy_extended.h; tf.distribute's Strategy.extended).
  StrategyExtended extended() const;

  friend bool operator==(const Strategy& a, const Strategy& b) { return a.impl_ == b.impl_; }

 private:
  friend class StrategyExtended;
  friend class MultiWorkerMirroredStrategy;
  friend class ParameterServerStrategy;
  // Runs fn(context) on every local replica (StrategyExtended::run_replicas).
  void run_replicas(const std::function<void(ReplicaContext&)>& fn) const;
  // One replica step of run(): each local replica's rows (empty: not known).
  void run_step(const std::vector<std::int64_t>& rows,
                const std::function<void(ReplicaContext&)>& fn) const;
  // A PerReplica argument's rows on replica r (its dim 0; an element's first
  // component's), or -1 where an argument says nothing of examples.
  static std::int64_t replica_rows(const PerReplica<Tensor>& arg, int r) {
    const Tensor& t = arg[r];
    return t.defined() && t.rank() >= 1 ? t.dim(0) : -1;
  }
  static std::int64_t replica_rows(const PerReplica<data::Element>& arg, int r) {
    const data::Element& e = arg[r];
    return e.size() > 0 && e[0].defined() && e[0].rank() >= 1 ? e[0].dim(0) : -1;
  }
  template <typename T>
  static std::int64_t replica_rows(const T&, int) {
    return -1;
  }

  // run()'s arguments: a PerReplica gives each replica its value, anything
  // else is shared.
  template <typename T>
  static const T& replica_arg(const PerReplica<T>& arg, int r) {
    return arg[r];
  }
  template <typename T>
  static const T& replica_arg(const T& arg, int) {
    return arg;
  }
  template <typename T>
  void check_replica_arg(const PerReplica<T>& arg) const {
    check_per_replica_size(arg.size());
  }
  template <typename T>
  void check_replica_arg(const T&) const {}
  void check_per_replica_size(int size) const;

  std::shared_ptr<StrategyImpl> impl_;
};

struct MirroredStrategyOptions {
  // Empty: every logical GPU when there is one (as TensorFlow), else every
  // logical CPU device — one per physical core unless the program chose
  // them (set_logical_cpu_devices, LOCKSTEP_CPU_DEVICES). One replica
  // on every core: {.devices = {&host_device()}} (docs/distribute.md
  // compares the two layouts). Devices may share cores (more devices than
  // cores): their replicas then take turns, and the strategy says so.
  std::vector<Device*> devices{};
  // Several replicas on each device's cores: for testing replica counts
  // above the core count (each replica then gets a share of the threads).
  int replicas_per_device = 1;
  comm::Algorithm cross_device_ops = comm::Algorithm::kReduceScatterAllGather;
  // Gradients are summed in buckets of at most this many bytes, each as soon
  // as backward has produced it, as tf.distribute.experimental.
  // CommunicationOptions(bytes_per_pack=...). 0: automatic (for replica
  // threads, one bucket after backward: see replica_context.h).
  std::size_t bytes_per_pack = kDefaultBytesPerPack;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Each replica applies the optimizer to its share of the variables and
  // writes the result into every replica's copy; the optimizer's slots are
  // kept once instead of once per replica (as PyTorch's
  // ZeroRedundancyOptimizer, within the process). Bitwise the same weights
  // as every replica updating everything (false).
  bool shard_optimizer_update = true;
};

// `options` with device(name) of each name as its devices (a ValueError for
// an empty list, a name that does not parse, or devices also in options).
MirroredStrategyOptions with_named_devices(const std::vector<std::string>& names,
                                           MirroredStrategyOptions options);

class MirroredStrategy : public Strategy {
 public:
  explicit MirroredStrategy(MirroredStrategyOptions options = {});
  // By name, as tf.distribute.MirroredStrategy(["/gpu:0", "/gpu:1"]):
  // MirroredStrategy({"/cpu:0", "/cpu:1"}), device(name) of each;
  // `options.devices` stays empty. (A list, not a vector: a vector<string>
  // parameter makes GCC 12 call MirroredStrategy({.field = x}) ambiguous.)
  template <typename Name, typename = std::enable_if_t<std::is_convertible_v<Name, std::string>>>
  explicit MirroredStrategy(std::initializer_list<Name> devices,
                            MirroredStrategyOptions options = {})
      : MirroredStrategy(with_named_devices(
            std::vector<std::string>(devices.begin(), devices.end()), std::move(options))) {}
};

// How the workers of a MultiWorkerMirroredStrategy talk
// (tf.distribute.experimental.CommunicationImplementation).
enum class CommunicationImplementation {
  kAuto,  // MPI when started by an MPI launcher, else Gloo
  kGloo,  // TCP, addresses from TF_CONFIG, rendezvous at the chief
  kMpi,   // the ranks mpirun / srun started
};

// What the gradients' all-reduce sends between workers (Horovod's
// hvd.Compression): float32 as they are, or bfloat16 — half the bytes, each
// partial sum added in float32 and rounded to bfloat16's 8 significant
// bits. Only the traffic between workers is compressed: replicas inside a
// worker sum in float32, and every other collective (losses, metric
// states, moving statistics) stays exact.
enum class GradientCompression { kNone, kBfloat16 };

struct MultiWorkerMirroredStrategyOptions {
  CommunicationImplementation communication = CommunicationImplementation::kAuto;
  GradientCompression gradient_compression = GradientCompression::kNone;
  // Who the workers are; empty: ClusterResolver::from_environment() (no
  // TF_CONFIG and no MPI launch: a single worker).
  std::optional<ClusterResolver> cluster_resolver{};
  // The devices of this worker's replicas, one replica each (/gpu:0 and
  // /gpu:1, or a fake accelerator's devices). Empty: every GPU this worker
  // has (as TensorFlow's MultiWorkerMirroredStrategy) unless
  // local_replicas asks for several CPU replicas, else the CPU.
  std::vector<Device*> devices{};
  // Replicas in each worker on the CPU (no GPUs or devices): each on a logical
  // device (LOCKSTEP_CPU_DEVICES) when there are that many, else sharing
  // the host's cores. TensorFlow's CPU workers have one.
  int local_replicas = 1;
  std::size_t bytes_per_pack = kDefaultBytesPerPack;
  // As MirroredStrategyOptions::shard_optimizer_update, among each worker's
  // local replicas.
  bool shard_optimizer_update = true;
  // Deadline of every collective across workers (CommunicationOptions'
  // timeout_seconds): a lost worker is reported by then at the latest.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // How long to wait for every worker to join at start-up.
  std::chrono::milliseconds join_timeout{std::chrono::seconds(60)};
  // The job's shared secret for the rendezvous store (Gloo); empty: the
  // LOCKSTEP_JOB_TOKEN environment variable (`lockstep launch` sets it).
  std::string job_token{};
  // Elastic shrink (Gloo; issue #40). On a restart the chief waits
  // rejoin_timeout for every worker, then, if at least min_workers have
  // come (itself included), re-forms the job with them alone: fewer
  // replicas take the same global batches in the same order, so training
  // resumes from the backup with the same arithmetic, summed in another
  // order. 0 (or the worker count): every worker must come, as on a first
  // start, which always waits for all of them (join_timeout). The chief
  // cannot be left out: the rendezvous store lives in it.
  int min_workers = 0;
  std::chrono::milliseconds rejoin_timeout{std::chrono::seconds(30)};
  // Whether this start is a restart after a failure (a worker may be gone);
  // empty: LOCKSTEP_RESTART_COUNT >= 1 without LOCKSTEP_REJOIN=1, as
  // `lockstep launch` and `lockstep supervise` set them (a start to take
  // back the workers left out waits for all, join_timeout).
  std::optional<bool> restarted{};
};

// Synchronous training across worker processes (and hosts): every worker
// runs num_local_replicas() replicas; gradients are reduced inside the
// worker, all-reduced across workers (Gloo or MPI) and broadcast back.
// Initial variable values are broadcast from the chief. Model::fit gives each
// worker its replicas' rows of every global batch (auto-shard policy DATA:
// every worker reads the whole input), agrees on the end of every epoch, and
// checks at start-up that every worker has the same model, optimizer and
// input; only the chief writes checkpoints and logs.
class MultiWorkerMirroredStrategy : public Strategy {
 public:
  explicit MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions options = {});
  // The cluster this strategy was made for (a single local worker when the
  // environment named none).
  const ClusterResolver& cluster_resolver() const;
};

class OneDeviceStrategy : public Strategy {
 public:
  explicit OneDeviceStrategy(Device& device);
};

// ---- Input for custom loops ----

// What distribute_datasets_from_function tells the dataset function.
struct InputContext {
  int num_input_pipelines = 1;
  int input_pipeline_id = 0;
  int num_replicas_in_sync = 1;
  // global / replicas; the global batch must divide evenly.
  std::int64_t get_per_replica_batch_size(std::int64_t global_batch_size) const;
};

// Sizes of `rows` cut into `parts` nearly equal parts: rows / parts each, one
// more for the first rows % parts (tf.distribute's split). Every batch split
// of replicas and workers uses it.
std::vector<std::int64_t> even_split(std::int64_t rows, int parts);

// Iterates per-replica elements: for (const PerReplica<data::Element>& batch : dist).
// Every worker takes a step only when every worker has input for it (the
// workers vote at each step, as fit's do), so uneven inputs never leave one
// in a collective alone.
class DistributedDataset {
 public:
  // Global batches split along dim 0 into each replica's share; across
  // workers, as the dataset's auto-shard policy says
  // (StrategyExtended::auto_shard and WorkerBatches, the same as fit's).
  static DistributedDataset from_global(const Strategy& strategy, data::Dataset global_batches);
  // One dataset per replica, each yielding that replica's batches.
  static DistributedDataset from_function(
      const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn);
  // One dataset per worker, whose successive elements go to the worker's
  // replicas in turn, each a replica's batch (TensorFlow's
  // make_input_fn_iterator with InputReplicationMode.PER_WORKER: the
  // Estimator's input_fn).
  static DistributedDataset from_worker_function(
      const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn);

  class Iterator {
   public:
    Iterator();
    ~Iterator();
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    // The next per-replica batch, or nullopt at the end: when any replica's
    // input ends, on any worker, or when any worker passes `stop` (a stop
    // asked on one worker, as a hook's, ends the input for all at the same
    // step).
    std::optional<PerReplica<data::Element>> next(bool stop = false);
    // The rows of the last step's batches over every replica of every
    // worker (the global batch).
    std::int64_t global_rows() const { return global_rows_; }
    // Evaluation's rule, for inputs with one dataset per replica or per
    // worker: the next batch of each local replica that has one (nullopt
    // for those whose input has ended), until no replica of any worker has
    // one, so that every example is counted.
    std::optional<std::vector<std::optional<data::Element>>> next_partial();
    // The first element this worker will hand out (its first replica's
    // batch, or the global batch or its part before the split), read ahead
    // but not taken: for looking at shapes before the first step. Null when
    // this worker's input is empty. Takes no vote.
    const data::Element* peek();

   private:
    friend class DistributedDataset;
    struct Local;
    Local read_local(bool partial);
    Strategy strategy_;
    int mode_ = 0;
    std::unique_ptr<WorkerBatches> global_;  // from_global
    std::vector<data::Iterator> its_;        // one per replica, or one per worker
    std::unique_ptr<Local> pending_;         // read by peek(), not yet taken
    std::int64_t global_rows_ = 0;
  };
  Iterator make_iterator(std::uint64_t epoch = 0) const;

  class RangeIterator {
   public:
    using value_type = PerReplica<data::Element>;
    using difference_type = std::ptrdiff_t;
    RangeIterator() = default;
    explicit RangeIterator(std::shared_ptr<Iterator> it) : it_(std::move(it)) {
      current_ = it_->next();
    }
    const PerReplica<data::Element>& operator*() const { return *current_; }
    RangeIterator& operator++() {
      current_ = it_->next();
      return *this;
    }
    bool operator==(const RangeIterator& o) const { return !current_ == !o.current_; }

   private:
    std::shared_ptr<Iterator> it_;
    std::optional<PerReplica<data::Element>> current_;
  };
  RangeIterator begin() const { return RangeIterator(std::make_shared<Iterator>(make_iterator())); }
  RangeIterator end() const { return {}; }

 private:
  enum Mode { kGlobal, kPerReplica, kPerWorker };
  Strategy strategy_;
  Mode mode_ = kGlobal;
  std::shared_ptr<const WorkerBatches> global_;  // kGlobal: sharded, never started
  std::vector<data::Dataset> datasets_;          // one per replica, or this worker's
};

inline DistributedDataset experimental_distribute_dataset(const Strategy& strategy,
                                                          data::Dataset global_batches) {
  return DistributedDataset::from_global(strategy, std::move(global_batches));
}
inline DistributedDataset distribute_datasets_from_function(
    const Strategy& strategy, const std::function<data::Dataset(const InputContext&)>& fn) {
  return DistributedDataset::from_function(strategy, fn);
}

// The strategy whose scope is open on this thread, else the default one.
Strategy get_strategy();

// sum(per_example_loss) / global_batch_size. global_batch_size 0: the global
// batch of the step in flight (inside fit), else this replica's examples ×
// the replica count.
Tensor compute_average_loss(const Tensor& per_example_loss, std::int64_t global_batch_size = 0);
// loss / num_replicas_in_sync: a regularisation term added on every replica.
Tensor scale_regularization_loss(const Tensor& loss);

}  // namespace lockstep::distribute
