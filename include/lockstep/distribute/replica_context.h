// ReplicaContext: who a replica is and with whom it adds its gradients
// (tf.distribute.ReplicaContext).
//
// A strategy makes one per local replica and hands it to the code it runs on
// that replica's thread (Strategy::run_replicas); library code takes it as an
// argument. It holds the replica's place (its id among all replicas in sync
// and among its process's, the worker's), the batch of the step in flight,
// the communicators that join it to the other replicas, and its gradient
// arena; and it is the optimizer's GradientAggregator (optim/aggregation.h):
// it sums gradients across replicas and shares the update between the
// process's replicas.
//
// User code inside strategy.run asks for its context as in TensorFlow:
//
//   strategy.run([&] {
//     const auto& ctx = ls::distribute::get_replica_context();
//     int r = ctx.replica_id_in_sync_group();
//     Tensor total = ctx.all_reduce(ls::distribute::ReduceOp::kSum, value);
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/comm/communicator.h"
#include "lockstep/distribute/gradient_reduction.h"
#include "lockstep/optim/aggregation.h"

namespace lockstep::distribute {

// tf.distribute.ReduceOp (sum and mean), and the element-wise maximum and
// minimum that library code agrees with.
using ReduceOp = comm::ReduceOp;

// Gradient bucket size when a strategy does not set one: 0, automatic. For
// replica threads that is one bucket after backward: with every core busy
// computing there is no idle core to sum early buckets on, and measured on
// the seed MLP (docs/benchmarks.md) 64 KiB–1 MiB buckets overlapped with
// backward were 6–15% slower than one. Overlap pays where a collective waits
// on a network (multi-worker).
inline constexpr std::size_t kDefaultBytesPerPack = 0;

class ReplicaContext final : public GradientAggregator {
 public:
  // Where a replica sits; set by its strategy.
  struct Placement {
    // Among all replicas in sync (across workers), and among this process's
    // (which copy of a mirrored variable is this replica's).
    int replica_id = 0;
    int local_replica_id = 0;
    int num_replicas = 1;
    int num_local_replicas = 1;
    int worker_index = 0;
    int num_workers = 1;
    // Joins every replica in sync (null with one); joins this process's
    // replicas only (null with one).
    comm::Communicator* communicator = nullptr;
    comm::Communicator* local_communicator = nullptr;
    // Gradients are summed in buckets of at most this many bytes (0:
    // automatic), as tf.distribute's CommunicationOptions.bytes_per_pack.
    std::size_t bytes_per_pack = kDefaultBytesPerPack;
    // The optimizer update is split between this process's replicas: each
    // updates its share of the variables in every replica's copy, and the
    // optimizer keeps its slots once.
    bool shard_optimizer_update = true;
    // Gradients cross between workers as bfloat16
    // (MultiWorkerMirroredStrategyOptions::gradient_compression).
    bool compress_gradients = false;
    // The replicas are on accelerator devices that share one memory, in one
    // process: gradients are summed in the device (GradientReduction).
    bool in_device_reduction = false;
    // The replicas are on distinct GPUs of one process: gradients are summed
    // by this replica's member of their collective (NCCL), in the device too.
    detail::DeviceCollective* device_collective = nullptr;
  };

  ReplicaContext() = default;  // the cross-replica context: replica 0 of 1
  explicit ReplicaContext(Placement placement) : p_(placement) {}

  // ---- tf.distribute.ReplicaContext ----
  int replica_id_in_sync_group() const { return p_.replica_id; }
  int num_replicas_in_sync() const { return p_.num_replicas; }
  // Sum, mean, maximum or minimum of `value` (as float32) over the replicas
  // in sync; every replica gets bitwise the same result. Identity with one.
  Tensor all_reduce(ReduceOp op, const Tensor& value) const;

  // ---- For library code ----
  const Placement& placement() const { return p_; }
  int local_replica_id() const { return p_.local_replica_id; }
  int num_local_replicas() const override { return p_.num_local_replicas; }
  // The global batch of the step in flight (0: unknown) and this replica's
  // share of it, for scaling losses by the global batch size.
  std::int64_t global_batch_size() const { return global_batch_size_; }
  std::int64_t local_batch_size() const { return local_batch_size_; }
  void set_batch(std::int64_t global, std::int64_t local) {
    global_batch_size_ = global;
    local_batch_size_ = local;
  }
  // Starts summing this replica's gradients of `vars` across replicas while
  // backward runs (distribute/gradient_reduction.h); inactive with a single
  // replica in sync. One at a time per replica.
  GradientReduction start_gradient_reduction(const std::vector<Variable>& vars);
  // Non-trainable state that this step changed on some replica
  // (BatchNormalization's moving statistics; `versions_before` are the
  // variables' versions before the step) becomes the mean over the replicas
  // weighted by their examples, so every copy stays identical
  // (tf.distribute's ON_WRITE / MEAN aggregation).
  void sync_non_trainable(const std::vector<Variable>& vars,
                          const std::vector<std::uint64_t>& versions_before) const;

  // ---- GradientAggregator ----
  std::vector<Tensor> sum_gradients(std::vector<Tensor> grads,
                                    const std::vector<Variable>& vars) override;
  bool shares_update(const std::vector<Variable>& vars) const override;
  void run_update(const std::vector<Variable>& vars, const std::vector<UpdateSpan>& spans,
                  std::int64_t total, const UpdateRange& update) override;

 private:
  Placement p_;
  std::int64_t global_batch_size_ = 0;
  std::int64_t local_batch_size_ = 0;
  GradientBuckets buckets_;  // this replica's gradient arena
};

// The calling replica thread's context; outside replicas (the cross-replica
// context, where TensorFlow returns None) a context of replica 0 of 1.
const ReplicaContext& get_replica_context();
// Null outside replica threads.
ReplicaContext* current_replica_context();

// RAII, thread-local, nestable: the calling thread runs as `context`'s
// replica (its get_replica_context(), mirrored copy and aggregator). Used by
// strategies on their replica threads.
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContext* context);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContext* previous_;
  MirroredCopyScope copy_;
  std::optional<GradientAggregatorScope> aggregator_;
};

// A float32 tensor reduced over a communicator's ranks, in place (the
// Tensor face of comm's buffer-level collectives).
void all_reduce_tensor(comm::Communicator& comm, const Tensor& t, ReduceOp op);

}  // namespace lockstep::distribute
