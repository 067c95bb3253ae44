// The calling thread's mirrored-copy index (autodiff/mirrored_copy.h).
#include "lockstep/autodiff/mirrored_copy.h"

namespace lockstep {
namespace {
// Per thread because each replica thread of a strategy reads and updates its
// own copies at the same time as the others read theirs.
thread_local int t_copy = -1;
}  // namespace

int current_mirrored_copy() { return t_copy; }

MirroredCopyScope::MirroredCopyScope(int copy) : previous_(t_copy) { t_copy = copy; }

MirroredCopyScope::~MirroredCopyScope() { t_copy = previous_; }

}  // namespace lockstep
