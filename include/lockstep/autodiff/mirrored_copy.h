// Which copy of a mirrored variable the calling thread works on.
//
// A strategy's scope makes variables with one copy per local replica
// (Variable::mirrored); the strategy runs local replica r on a thread where
// the copy in use is r, and there value(), id() and the assign family of a
// mirrored variable mean copy r. Everywhere else (the cross-replica context)
// reads see copy 0 and assign writes every copy. The optimizer keys its
// per-replica state (slots, step count) by the same index.
//
// Only the index lives here: who the replica is and with whom it sums its
// gradients is the strategy's (distribute/replica_context.h).
#pragma once

namespace lockstep {

// The copy the calling thread uses, or -1 outside replica threads.
int current_mirrored_copy();

// RAII, nestable: the calling thread uses copy `copy` (-1: none) while alive.
class MirroredCopyScope {
 public:
  explicit MirroredCopyScope(int copy);
  ~MirroredCopyScope();
  MirroredCopyScope(const MirroredCopyScope&) = delete;
  MirroredCopyScope& operator=(const MirroredCopyScope&) = delete;

 private:
  int previous_;
};

}  // namespace lockstep
