// GradientReduction: sums a replica's gradients with the other replicas'
// while backward is still running (the job of PyTorch DDP's reducer). A
// replica's ReplicaContext starts it and keeps its arena
// (distribute/replica_context.h).
//
// Gradients are copied into a flat per-replica arena, laid out in reverse
// variable order (the order backward produces them) and cut into buckets of
// at most `bytes_per_pack` bytes (the strategy's CommunicationOptions). A
// bucket is posted as an asynchronous all-reduce as soon as all of its
// gradients are in; buckets are posted in one fixed order on every replica
// whatever order their gradients arrive in, so the collectives match.
//
//   auto reduction = replica_context.start_gradient_reduction(vars);
//   auto grads = tape.gradient(loss, vars, UnconnectedGradients::kNone, reduction.listener());
//   grads = reduction.finish(std::move(grads));
//   optimizer.apply_gradients(grads, vars, {.skip_gradients_aggregation = reduction.active()});
//
// A default-constructed one (a single replica in sync) is inactive: the
// listener is empty and finish() returns the gradients it is given.
//
// Replicas on accelerator devices that share one memory (logical GPUs of
// one GPU, the fake accelerator's devices) and no other worker reduce in
// the device instead: each packs its gradients into its arena on its own
// stream, and at finish() — after one host collective that is also the
// barrier — every replica sums all arenas in rank order into its own sums
// with one kernel, so every replica holds the same bits and no gradient
// crosses to the host. The streams are ordered by events, the host never
// waiting for a device: a replica's sum waits for every replica's packing
// (marked before the barrier), and its next packing for every replica's
// sum (marked after it; the next reduction waits before it writes its
// arena). While the step is recorded (fit's step graph on logical GPUs) the
// host's part — the marks, the barrier, the waits — is the recording's
// work between its parts (detail::RecordingHooks), done at each replay. Elsewhere gradients on an
// accelerator are copied to a host arena and summed by the communicator (TensorFlow's
// ReductionToOneDevice to "/cpu:0") — except on distinct GPUs of one
// process with a collective (NCCL, DeviceKernels::make_collective): each
// replica packs its arena on its stream as above, one host collective sums
// the "has a gradient" flags, and NCCL sums the arenas in place on the
// replicas' streams (TensorFlow's NcclAllReduce); the host waits for that
// sum before it queues the update, so that one the strategy's watchdog
// aborts never reaches the weights. Recorded, the NCCL sum is a part of its
// own, its marks and that wait the host's work around it at each replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/comm/communicator.h"

namespace lockstep::detail {
class DeviceCollective;  // lockstep/tensor/device_kernels.h
class DeviceEvent;       // likewise
}  // namespace lockstep::detail

namespace lockstep::distribute {

// A replica's reusable bucket layout and arena (kept by its ReplicaContext,
// rebuilt when the variable list or the bucket size changes).
struct GradientBuckets {
  struct Bucket {
    std::int64_t begin = 0, end = 0;  // arena range: gradients, then one flag per variable
    std::vector<std::size_t> vars{};
    int pending = 0;
    comm::WorkHandle work{};
  };
  std::vector<std::uint64_t> var_ids{};
  std::size_t bytes_per_pack = 0;
  Tensor arena{};
  Tensor sums{};                         // in-device sum of shared arenas: this replica's (device)
  std::vector<float> has_gradient{};     // in-device reduction: the flags, on the host
  std::vector<std::int64_t> offset{};    // per variable: its gradient's place in the arena
  std::vector<std::int64_t> flag{};      // per variable: its "has a gradient" flag's place
  std::vector<std::size_t> bucket_of{};  // per variable
  std::vector<char> added{};             // per variable, this step
  std::vector<Bucket> buckets{};         // in posting order
  std::size_t next_post = 0;
  // In-device sum of shared arenas: this replica's stream's marks after its
  // packing and after its sum (null on devices that run work as queued),
  // and every replica's, in rank order, as the last sum saw them.
  std::shared_ptr<detail::DeviceEvent> packed{}, summed{};
  struct Peer {
    const float* arena = nullptr;
    std::shared_ptr<detail::DeviceEvent> packed{}, summed{};
  };
  std::vector<Peer> peers{};
};

class GradientReduction {
 public:
  GradientReduction() = default;  // inactive
  // `bytes_per_pack` 0 (automatic): one bucket for all gradients.
  // `compress`: each bucket's all-reduce sends bfloat16
  // (Communicator::all_reduce_bf16_async).
  // `in_device`: reduce in the device's memory (see above); `comm` then
  // joins this process's replicas only. `collective` (with `in_device`):
  // this replica's member of the replicas' device collective, which sums.
  GradientReduction(GradientBuckets* buckets, comm::Communicator* comm,
                    const std::vector<Variable>& vars, std::size_t bytes_per_pack,
                    bool compress = false, bool in_device = false,
                    detail::DeviceCollective* collective = nullptr);
  GradientReduction(GradientReduction&&) = default;
  GradientReduction& operator=(GradientReduction&&) = default;
  // Waits for what was posted, so no collective is left half-seen by the
  // other replicas (errors are dropped here: finish() reports them).
  ~GradientReduction();

  bool active() const { return buckets_ != nullptr; }
  // For GradientTape::gradient; empty when inactive.
  GradientReadyFn listener();
  // Variable i's local gradient (undefined: none). Posts every bucket that
  // is complete and next in order.
  void add(std::size_t i, const Tensor& grad);
  // Adds what is missing as "no gradient", waits for every bucket, and
  // returns the sums: views into the arena (valid until the next reduction
  // on this replica), undefined where no replica had a gradient.
  std::vector<Tensor> finish(std::vector<Tensor> local);

 private:
  void post_ready_buckets();
  std::vector<Tensor> finish_in_device();
  // Recorded (a capture on this thread): the host's part at each replay.
  std::vector<Tensor> finish_in_device_recorded();
  // Every replica's arena and marks (the buckets' peers), and the flags'
  // sum: the replicas' barrier.
  void gather_peers();
  std::vector<const float*> sources() const;
  // Views of `sums` (a device arena laid out as this replica's) for the
  // variables some replica had a gradient for.
  std::vector<Tensor> device_sums(const Tensor& sums) const;

  GradientBuckets* buckets_ = nullptr;
  comm::Communicator* comm_ = nullptr;
  std::vector<Variable> vars_;
  bool compress_ = false;
  bool in_device_ = false;
  detail::DeviceCollective* collective_ = nullptr;
};

}  // namespace lockstep::distribute
