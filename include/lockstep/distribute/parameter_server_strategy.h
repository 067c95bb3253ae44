// ParameterServerStrategy: asynchronous data parallelism with a coordinator,
// parameter servers and workers (tf.distribute.ParameterServerStrategy).
//
//   // TF_CONFIG: {"cluster": {"chief": [...], "worker": [...], "ps": [...]},
//   //             "task": {"type": "chief", "index": 0}}
//   ls::distribute::ParameterServerStrategy strategy(
//       {.variable_partitioner = ls::distribute::MinSizePartitioner({.max_shards = 2})});
//   ls::Model model;
//   {
//     auto scope = strategy.scope();   // variables are created on the ps tasks
//     model = make_model();
//     model.compile({...});
//   }
//   model.fit(ls::distribute::DatasetCreator("my_dataset_fn"),
//             {.epochs = 5, .steps_per_epoch = 100});
//
// Roles. The chief runs the user's program (the coordinator); it alone
// constructs this strategy. Parameter servers hold the variables, placed
// round-robin, or split into shards along the first axis by a partitioner;
// their optimizer updates are atomic per variable (or shard), and each
// keeps the optimizer's slots beside its variables. Workers run functions
// the coordinator schedules (cluster_coordinator.h): each reads the current
// variables from the parameter servers, computes gradients on its own
// batch and sends them, without waiting for the other workers. Workers and
// parameter servers only serve (distribute::Server, `lockstep worker`,
// `lockstep ps`); they never talk to each other's kind of peer but the
// parameter servers.
//
// On the coordinator a variable made in scope() is an ordinary Variable
// holding the coordinator's copy of the value: its initial value when made,
// and the parameter servers' whenever the strategy is asked to pull
// (Model::fit does at the end of every epoch and before a checkpoint), so
// checkpoints and evaluation see the trained weights, and checkpoints hold
// the logical (whole) variable: a model trained here restores under
// MirroredStrategy and the reverse.
//
// The strategy is a handle (copies share it). When the last handle goes,
// the coordinator's threads stop and every task is told the job is over.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/partitioners.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::distribute {

struct ParameterServerStrategyOptions {
  // Who the tasks are; empty: ClusterResolver::from_environment() (TF_CONFIG).
  std::optional<ClusterResolver> cluster_resolver{};
  // Splits variables into shards along their first axis (partitioners.h);
  // empty: every variable whole.
  VariablePartitioner variable_partitioner{};
  // The job's shared secret; empty: LOCKSTEP_JOB_TOKEN.
  std::string job_token{};
  // Every call to a task but a scheduled function's run.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // How long to wait for the parameter servers at start-up.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // One scheduled function on a worker (a worker that hangs is found by
  // it; one that dies is found at once, its connection closing).
  std::chrono::milliseconds function_timeout{std::chrono::minutes(30)};
  // How long the coordinator goes on while no worker answers at all — at
  // start, or after every worker was lost — before the job fails with an
  // UnavailableError naming them. A worker that comes back within it is
  // set up again and the job goes on (TensorFlow waits for ever: a chief
  // whose workers were all gone hung, issue #41).
  std::chrono::milliseconds worker_timeout{std::chrono::minutes(5)};
  // Scheduled functions waiting for a worker; schedule() blocks while it
  // is full. 0: 256 per worker, TensorFlow's.
  int closure_queue_size = 0;
};

// What the parameter servers report, summed over them.
struct ParameterServerStats {
  std::int64_t updates = 0;     // variable (or shard) updates applied
  std::int64_t iterations = 0;  // optimizer steps applied (the optimizer's iterations)
  // Updates of the same variable that landed between a worker's read of it
  // and its update: the mean and the largest.
  double mean_staleness = 0;
  std::int64_t max_staleness = 0;
  std::int64_t bytes_applied = 0;  // gradient bytes
  double apply_seconds = 0;        // summed time in optimizer updates
};

class ParameterServerStrategyImpl;

// A variable split along its first axis over parameter servers
// (tf.distribute.ShardedVariable), read as one tensor. A variable made
// whole is one shard.
class ShardedVariable {
 public:
  const std::string& name() const;
  const Shape& shape() const;
  int num_shards() const;
  // Rows of each shard, and the ps task each lives on.
  std::vector<std::int64_t> shard_rows() const;
  std::vector<int> ps_tasks() const;
  // The shards' current values from their parameter servers (the
  // variables of TensorFlow's ShardedVariable), and all of them as one
  // tensor of shape().
  std::vector<Tensor> variables() const;
  Tensor read_value() const;
  // Writes `value` (of shape()) into the shards.
  void assign(const Tensor& value) const;

 private:
  friend class ParameterServerStrategy;
  std::shared_ptr<ParameterServerStrategyImpl> impl_;
  std::int64_t index_ = 0;
  std::string name_;
  Shape shape_;
};

class ParameterServerStrategy : public Strategy {
 public:
  // Connects to the parameter servers (waiting up to connect_timeout). The
  // cluster must have a chief (this process: the coordinator), workers and
  // ps tasks and no evaluator (each breach a ValueError naming the
  // TF_CONFIG key).
  explicit ParameterServerStrategy(ParameterServerStrategyOptions options = {});
  // The strategy a handle holds (ValueError if it is another kind).
  explicit ParameterServerStrategy(const Strategy& strategy);

  const ClusterResolver& cluster_resolver() const;
  int num_ps() const;
  // The worker tasks of the cluster (Strategy::num_workers() counts the
  // processes that train in sync: here the coordinator alone).
  int num_worker_tasks() const;
  // `v`, made in this strategy's scope, as the shards it lives in.
  ShardedVariable sharded_variable(const Variable& v) const;
  // Where `v` (made in scope) is in the order the coordinator made its
  // variables: what WorkerContext::bind_variables takes.
  std::int64_t variable_index(const Variable& v) const;
  ParameterServerStats stats() const;

 private:
  friend class ClusterCoordinator;
  std::shared_ptr<ParameterServerStrategyImpl> ps_impl() const;
};

}  // namespace lockstep::distribute
