// StrategyExtended: a strategy's face for the code that implements training
// loops and strategies (fit, custom-loop helpers, callbacks that act across
// workers), as tf.distribute's Strategy.extended. User code needs only
// strategy.h: scope, run, reduce, num_replicas_in_sync.
//
//   auto ext = strategy.extended();
//   auto local = ext.split_batch(batch);          // one list of views per local replica
//   ext.run_replicas([&](ReplicaContext& ctx) {   // each replica with its context
//     train_step(ctx, local.parts[ctx.local_replica_id()]);
//   });
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

class StrategyExtended {
 public:
  explicit StrategyExtended(Strategy strategy) : strategy_(std::move(strategy)) {}

  // Runs fn(context) on every local replica's thread with that replica's
  // context (also its get_replica_context()), and returns when all have
  // finished. If one throws, the others are released from their
  // collectives and the first failure is rethrown with "replica <id>: " in
  // front of its message (same exception type).
  void run_replicas(const std::function<void(ReplicaContext&)>& fn) const {
    strategy_.run_replicas(fn);
  }

  // ---- The replica step: the one place where fit, the Estimator and
  // strategy.run run a training step on the replicas ----
  struct ReplicaStep {
    // The step's global batch (every worker's replicas) and each local
    // replica's share, by local replica id, as the contexts report them
    // (global_batch_size, local_batch_size); 0 and empty where the caller
    // does not know them (strategy.run without per-replica tensors).
    std::int64_t global_rows = 0;
    std::vector<std::int64_t> sizes{};
    // The non-trainable state the step may change (fit's and the
    // Estimator's: the model's non-trainable weights). Null: the variables
    // made in this strategy's scope with VariableAggregation::kMean.
    const std::vector<Variable>* sync = nullptr;
  };
  // Runs fn(context) on every local replica as run_replicas does, with the
  // step's batch sizes set on each context first; then every variable of
  // `step.sync` that the step assigned on some replica becomes, in every
  // copy on every worker, the mean of the replicas' copies weighted by their
  // examples (equal weights where the examples are not known).
  void run_step(const ReplicaStep& step, const std::function<void(ReplicaContext&)>& fn) const;
  // Whether the local replicas sum their gradients on their devices, never
  // through the host: in the device (logical GPUs of one GPU) or with their
  // devices' collective (NCCL), in one worker. fit then records their steps
  // (train/step_graph.h).
  bool sums_on_devices() const;

  // ---- Splitting batches (every split goes through even_split) ----
  // Splits a global batch along dim 0: replica r gets global / N examples,
  // one more for the first global % N replicas (tf.distribute's split). One
  // size per replica in sync (all workers').
  std::vector<std::int64_t> split_sizes(std::int64_t global_batch) const;
  // This worker's part of a global batch: the first row and the size of
  // each local replica's share (all of it with a single worker).
  struct LocalShare {
    std::int64_t begin = 0;
    std::vector<std::int64_t> sizes{};
  };
  LocalShare local_share(std::int64_t global_batch) const;
  // A batch cut into zero-copy views, one list per local replica: `batch` is
  // the global batch that every worker holds (this worker keeps its
  // replicas' rows), or, with `worker_part`, this worker's own part of a
  // global batch of `global_rows` (all of its rows go to its replicas). The
  // one batch splitter of fit, custom loops and DistributedDataset.
  struct LocalBatches {
    std::int64_t global_rows = 0;
    std::vector<std::int64_t> sizes{};
    std::vector<std::vector<Tensor>> parts{};
  };
  LocalBatches split_batch(const std::vector<Tensor>& batch, bool worker_part = false,
                           std::int64_t global_rows = 0) const;

  // ---- Input across workers (fit and custom loops alike) ----
  // The auto-shard policy of `dataset`'s options
  // (experimental_distribute.auto_shard_policy) under this strategy's
  // workers: DATA leaves the dataset whole (every worker reads the global
  // batches and keeps its replicas' rows: `parts` 1); FILE shards its file
  // list by worker; AUTO is FILE where the pipeline reads a file list it
  // can shard, else DATA; FILE and OFF cut every batch of this worker's
  // pipeline into `parts` (one per worker), taken one per step
  // (tf.distribute's rebatching). FILE on a pipeline without a file list to
  // shard is a ValueError naming `op`. One worker: the dataset, 1 part.
  struct AutoShard {
    data::Dataset dataset{};
    int parts = 1;
  };
  AutoShard auto_shard(data::Dataset dataset, const std::string& op) const;
  // Part `part` of `parts` of a batch's rows (even_split), as zero-copy
  // views: under FILE and OFF a step takes one part of a batch.
  static data::Element batch_part(const data::Element& batch, int parts, int part);

  // ---- Agreement across workers (one worker: nothing to agree on) ----
  // Whether every worker has a next batch (an epoch ends for all when one
  // runs out, so uneven input never hangs), and the sum of `rows` over the
  // workers (the global batch when each holds only its part).
  struct StepAgreement {
    bool all_have_batch = true;
    std::int64_t total_rows = 0;
  };
  StepAgreement agree_on_step(bool have_batch, std::int64_t rows) const;
  // Every worker must state the same facts (the model's config, the
  // optimizer's, the steps per epoch, ...: pairs of what and its text); a
  // mismatch is a DistributedError naming the workers that differ from the
  // chief and what, on every worker. Compared by a 64-bit hash.
  void check_workers_agree(const std::string& op,
                           const std::vector<std::pair<std::string, std::string>>& facts) const;
  // Element-wise sum over the workers, in place (metric states, votes).
  void sum_across_workers(std::vector<double>& values) const;
  // Returns when every worker has called it (the chief's checkpoint is
  // written before any worker reads it).
  void barrier_across_workers() const;
  // Elastic shrink: on a job that went on without some of its workers, the
  // chief asks its store whether any of them waits to come back, and tells
  // the others. Collective: every worker calls it at the same step (after a
  // backup). A description of those waiting ("worker 2 (10.0.0.3:2222)"),
  // empty when none is (always on a job with all its workers, without a
  // word across them). When it is not empty the chief has told them to
  // start again; the job is to re-form with them from the last backup.
  std::string workers_waiting_to_rejoin() const;
  // ---- Variables held elsewhere (ParameterServerStrategy; with every
  // other strategy the variables are here and these do nothing) ----
  // Whether training runs as functions scheduled on workers, the variables
  // living on parameter servers.
  bool uses_parameter_servers() const;
  // The coordinator's copies of `vars` (made in the strategy's scope) take
  // the parameter servers' values: before a checkpoint, an evaluation, a
  // callback that reads weights.
  void pull_variables(const std::vector<Variable>& vars) const;
  // The parameter servers take the coordinator's values (after a restore).
  void push_variables(const std::vector<Variable>& vars) const;
  // The optimizer's state kept beside `trainable` on the parameter servers:
  // its slots named "<index in trainable>/<slot>" (as
  // OptimizerImpl::slot_values) and its iterations; and the reverse.
  struct OptimizerState {
    std::vector<std::pair<std::string, Tensor>> slots{};
    std::int64_t iterations = 0;
  };
  OptimizerState read_optimizer_state(const std::vector<Variable>& trainable) const;
  void write_optimizer_state(const std::vector<Variable>& trainable,
                             const OptimizerState& state) const;

  // The communicator joining the workers (one rank per process), or null
  // with a single worker: for what the operations above do not cover
  // (sending the chief's checkpoint to every worker).
  comm::Communicator* cross_worker_communicator() const;

 private:
  Strategy strategy_;
};

}  // namespace lockstep::distribute
