// The replica context of the calling thread: which replica it is, how many
// run in sync, and the communicator that joins them. Strategies install it
// on their replica threads; library code that must act across replicas
// (the optimizer all-reducing gradients, the loss scaling by the global
// batch) reads it — the same division of labour as tf.distribute's
// ReplicaContext and merge_call.
#pragma once

#include <cstdint>

#include "lockstep/comm/communicator.h"
#include "lockstep/core/replica.h"

namespace lockstep::comm {

struct ReplicaContextInfo {
  int replica_id = 0;
  int num_replicas = 1;
  Communicator* communicator = nullptr;  // null when num_replicas == 1
  // The global batch of the step in flight (0: unknown) and this replica's
  // share of it, for scaling losses by the global batch size.
  std::int64_t global_batch_size = 0;
  std::int64_t local_batch_size = 0;
};

// Null outside replica threads (cross-replica context).
ReplicaContextInfo* current_replica_context();

// RAII, thread-local: also sets current_replica_id().
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
