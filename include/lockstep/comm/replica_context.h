// The replica context of the calling thread: which replica it is, how many
// run in sync, and the communicator that joins them. Strategies install it
// on their replica threads; library code that must act across replicas
// (the optimizer all-reducing gradients, the loss scaling by the global
// batch) reads it — the same division of labour as tf.distribute's
// ReplicaContext and merge_call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lockstep/comm/communicator.h"
#include "lockstep/core/replica.h"

namespace lockstep::comm {

// Gradient bucket size when a strategy does not set one: 0, automatic. For
// replica threads that is one bucket after backward: with every core busy
// computing there is no idle core to sum early buckets on, and measured on
// the seed MLP (docs/benchmarks.md) 64 KiB–1 MiB buckets overlapped with
// backward were 6–15% slower than one. Overlap pays where a collective waits
// on a network (multi-worker).
inline constexpr std::size_t kDefaultBytesPerPack = 0;

struct ReplicaContextInfo {
  // Among all replicas in sync (across workers), and among this process's
  // (which copy of a mirrored variable is this replica's).
  int replica_id = 0;
  int local_replica_id = 0;
  int num_replicas = 1;
  Communicator* communicator = nullptr;  // null when num_replicas == 1
  // The global batch of the step in flight (0: unknown) and this replica's
  // share of it, for scaling losses by the global batch size.
  std::int64_t global_batch_size = 0;
  std::int64_t local_batch_size = 0;
  // Gradients are all-reduced in buckets of at most this many bytes (0:
  // automatic), as tf.distribute's CommunicationOptions.bytes_per_pack.
  std::size_t bytes_per_pack = kDefaultBytesPerPack;
  // This process's replicas (a multi-worker strategy's local ones) and the
  // communicator joining only them (null when there is one).
  int num_local_replicas = 1;
  Communicator* local_communicator = nullptr;
  // The optimizer update is split between this process's replicas: each
  // updates its share of the variables in every replica's copy, and keeps
  // the optimizer's slots once (optimizers.h).
  bool shard_optimizer_update = true;
};

// Null outside replica threads (cross-replica context).
ReplicaContextInfo* current_replica_context();

// RAII, thread-local: also sets current_replica_id() (the local id).
class ReplicaContextScope {
 public:
  explicit ReplicaContextScope(ReplicaContextInfo* info);
  ~ReplicaContextScope();
  ReplicaContextScope(const ReplicaContextScope&) = delete;
  ReplicaContextScope& operator=(const ReplicaContextScope&) = delete;

 private:
  ReplicaContextInfo* previous_;
  ReplicaIdScope id_scope_;
};

}  // namespace lockstep::comm
