#include "lockstep/comm/replica_context.h"

namespace lockstep::comm {
namespace {
thread_local ReplicaContextInfo* t_context = nullptr;
}

ReplicaContextInfo* current_replica_context() { return t_context; }

ReplicaContextScope::ReplicaContextScope(ReplicaContextInfo* info)
    : previous_(t_context), id_scope_(info ? info->local_replica_id : -1) {
  t_context = info;
}

ReplicaContextScope::~ReplicaContextScope() { t_context = previous_; }

}  // namespace lockstep::comm
