#include "lockstep/core/replica.h"

namespace lockstep {
namespace {
thread_local int t_replica_id = -1;
}

int current_replica_id() { return t_replica_id; }

ReplicaIdScope::ReplicaIdScope(int replica_id) : previous_(t_replica_id) {
  t_replica_id = replica_id;
}

ReplicaIdScope::~ReplicaIdScope() { t_replica_id = previous_; }

}  // namespace lockstep
