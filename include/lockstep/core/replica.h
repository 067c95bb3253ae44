// Which replica the calling thread is running, for code in every layer that
// must pick the replica's own copy of something (a mirrored variable, an
// optimizer's slots, a metric's state). Strategies set it on their replica
// threads; everywhere else it is -1 ("cross-replica context").
#pragma once

namespace lockstep {

int current_replica_id();

// RAII, thread-local, nestable.
class ReplicaIdScope {
 public:
  explicit ReplicaIdScope(int replica_id);
  ~ReplicaIdScope();
  ReplicaIdScope(const ReplicaIdScope&) = delete;
  ReplicaIdScope& operator=(const ReplicaIdScope&) = delete;

 private:
  int previous_;
};

}  // namespace lockstep
