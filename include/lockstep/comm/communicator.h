// Communicator: SPMD collectives between the ranks of a group.
//
// Every rank calls the same collectives in the same order (as with MPI). Each
// blocking call has a deadline: a rank that does not arrive in time is named
// in a TimeoutError on every rank that waited for it. A group can be aborted
// (a replica failed): every rank blocked in, or later entering, a collective
// gets a DistributedError naming the rank that aborted and why.
//
// Communicators move bytes; they know no tensors (distribute's
// all_reduce_tensor is the Tensor face). Backends: in-process (replica
// threads; this file) and, for worker processes, Gloo and MPI
// (process_group.h).
//
//   auto group = lockstep::comm::InProcessGroup::create(2);
//   // in replica thread r:
//   group->communicator(r).all_reduce(grads.data<float>(), grads.numel(), ReduceOp::kSum);
//
// Asynchronous collectives return a Work handle: the call only posts the
// buffer, and the reduction makes progress whenever this rank calls into the
// communicator again (another post, test(), wait(), any blocking collective).
// That is how gradient buckets are reduced while backward is still running
// (distribute's GradientReduction). The buffer must not be touched until wait()
// returns or test() has returned true.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lockstep/core/error.h"  // the errors collectives throw

namespace lockstep::comm {

// SUM, MEAN, MAX and MIN: tf.distribute's spellings (ReduceOp.SUM), the
// same values.
enum class ReduceOp { kSum, kMean, kMax, kMin, SUM = kSum, MEAN = kMean, MAX = kMax, MIN = kMin };

// How the in-process all-reduce moves data. Both sum in rank order, so every
// rank ends with bitwise-identical values whichever is used.
enum class Algorithm {
  kReduceScatterAllGather,  // each rank reduces 1/N of the buffer, then all copy (default)
  kReductionToOneDevice,    // rank 0 reduces everything, the others copy
};

// One asynchronous collective in flight on one rank.
class Work {
 public:
  virtual ~Work() = default;
  // True once this rank's buffer holds the result; never blocks.
  virtual bool test() = 0;
  // Blocks until this rank's buffer holds the result (within the group's
  // deadline); throws what the collective failed with.
  virtual void wait() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place, on every rank's buffer of the same length.
  virtual void all_reduce(float* data, std::size_t count, ReduceOp op) = 0;
  virtual void all_reduce(double* data, std::size_t count, ReduceOp op) = 0;
  // Posts an in-place all-reduce and returns at once. Every rank posts the
  // same sequence of asynchronous collectives; they may be waited for in any
  // order. A backend without asynchronous collectives runs the reduction
  // here and returns a completed handle. The in-process backend keeps up to
  // 64 unfinished collectives per group; a rank posting more waits until the
  // oldest is finished everywhere (so wait for old handles before posting
  // more than that).
  virtual WorkHandle all_reduce_async(float* data, std::size_t count, ReduceOp op);
  // all_reduce_async with bfloat16 on the wire (Horovod's Compression.fp16,
  // in bfloat16): each rank's floats are rounded to bfloat16, every partial
  // sum is added in float32 and rounded to bfloat16 again, and the result
  // is widened back into `data`. Half the bytes, at bfloat16's 8 significant
  // bits. The backends between processes (Gloo, MPI) implement it; the
  // others throw a ValueError (there is no wire to compress).
  virtual WorkHandle all_reduce_bf16_async(float* data, std::size_t count, ReduceOp op);
  // Root's bytes to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Every rank's `bytes` into `out` (size() * bytes), in rank order.
  virtual void all_gather(const void* data, std::size_t bytes, void* out) = 0;
  virtual void barrier() = 0;

  // Makes every rank's current and future collectives fail with `reason`.
  virtual void abort(const std::string& reason) = 0;

  // Since when this rank has been waiting for a collective to finish (the
  // start of an unbroken run of waits); nullopt when it waits for none. A
  // stall inspector asks who is missing only when a wait has lasted (the
  // multi-worker liveness watch). Backends that do not track it: nullopt.
  virtual std::optional<std::chrono::steady_clock::time_point> waiting_since() const {
    return std::nullopt;
  }
};

class InProcessGroup {
 public:
  struct Options {
    Algorithm algorithm = Algorithm::kReduceScatterAllGather;
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  };
  static std::shared_ptr<InProcessGroup> create(int size) { return create(size, Options{}); }
  static std::shared_ptr<InProcessGroup> create(int size, Options options);
  virtual ~InProcessGroup() = default;
  virtual int size() const = 0;
  // The communicator of `rank` (one per rank; valid while the group lives).
  virtual Communicator& communicator(int rank) = 0;
};

}  // namespace lockstep::comm
