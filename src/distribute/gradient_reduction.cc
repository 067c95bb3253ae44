// GradientReduction: buckets of gradients all-reduced while backward runs.
#include "lockstep/distribute/gradient_reduction.h"

#include <cstring>

#include "lockstep/core/error.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"

namespace lockstep::distribute {
namespace {

// Lays the arena out in reverse variable order (backward's order), cutting
// a bucket before a gradient that would take it past the cap. Each bucket is
// one contiguous range: its gradients, then its variables' flags.
void lay_out(GradientBuckets& b, const std::vector<Variable>& vars, std::size_t bytes_per_pack,
             bool in_device, bool sums) {
  const std::size_t n = vars.size();
  b.var_ids.clear();
  for (const Variable& v : vars) b.var_ids.push_back(v.id());
  b.bytes_per_pack = bytes_per_pack;
  b.offset.assign(n, 0);
  b.flag.assign(n, 0);
  b.bucket_of.assign(n, 0);
  b.buckets.clear();
  std::vector<std::vector<std::size_t>> groups;
  std::size_t bytes = 0;
  for (std::size_t k = n; k-- > 0;) {
    const std::size_t var_bytes = static_cast<std::size_t>(vars[k].shape().numel()) * sizeof(float);
    if (groups.empty() || (bytes_per_pack > 0 && bytes > 0 && bytes + var_bytes > bytes_per_pack)) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += var_bytes;
  }
  std::int64_t at = 0;
  for (auto& group : groups) {
    GradientBuckets::Bucket bucket;
    bucket.begin = at;
    for (std::size_t k : group) {
      b.offset[k] = at;
      at += vars[k].shape().numel();
    }
    for (std::size_t k : group) {
      b.flag[k] = at++;
      b.bucket_of[k] = b.buckets.size();
    }
    bucket.end = at;
    bucket.vars = std::move(group);
    b.buckets.push_back(std::move(bucket));
  }
  if (in_device) {
    // On this replica's device: its gradients, and the sums of everyone's
    // (in place where a collective sums).
    // Zeroed where the collective sums the arena in place: its flags' slots
    // are summed too, never written.
    b.arena = sums ? Tensor::empty({at}) : Tensor::zeros({at});
    b.sums = sums ? Tensor::empty({at}) : Tensor();
    b.packed = b.summed = nullptr;  // made at the first sum, on this device
  } else {
    // In host memory: replicas on accelerators copy their gradients here and
    // the host's collectives sum them (TensorFlow's ReductionToOneDevice to
    // "/cpu:0"); the sums go back to each device in the update.
    b.arena = Tensor::empty_on(host_device(), {at});
    b.sums = Tensor();
  }
  b.has_gradient.assign(n, 0.0f);
}

}  // namespace

GradientReduction::GradientReduction(GradientBuckets* buckets, comm::Communicator* comm,
                                     const std::vector<Variable>& vars, std::size_t bytes_per_pack,
                                     bool compress, bool in_device,
                                     detail::DeviceCollective* collective)
    : buckets_(buckets),
      comm_(comm),
      vars_(vars),
      compress_(compress),
      in_device_(in_device),
      collective_(in_device ? collective : nullptr) {
  GradientBuckets& b = *buckets_;
  const bool sums = in_device && collective_ == nullptr;
  if (sums && detail::recording_hooks() == nullptr) {
    // Nothing is written into this replica's arena (nor is it laid out
    // again) before every replica's last sum has read it. A recorded step
    // waits at each replay's start instead (finish_in_device_recorded).
    Device& device = current_device();
    for (const GradientBuckets::Peer& peer : b.peers) {
      if (peer.summed && peer.summed != b.summed)
        device.kernels()->wait_event(device, *peer.summed);
    }
  }
  bool same = b.arena.defined() && b.bytes_per_pack == bytes_per_pack &&
              b.var_ids.size() == vars.size() && b.sums.defined() == sums &&
              &b.arena.device() == &(in_device ? current_device() : host_device());
  for (std::size_t i = 0; same && i < vars.size(); ++i) same = b.var_ids[i] == vars[i].id();
  if (!same) lay_out(b, vars, bytes_per_pack, in_device, sums);
  b.added.assign(vars.size(), 0);
  for (auto& bucket : b.buckets) {
    bucket.pending = static_cast<int>(bucket.vars.size());
    bucket.work.reset();
  }
  b.next_post = 0;
}

GradientReduction::~GradientReduction() {
  if (!buckets_) return;
  for (auto& bucket : buckets_->buckets) {
    if (!bucket.work) continue;
    try {
      bucket.work->wait();
    } catch (const std::exception&) {
      // The group is failing; whoever failed reports why.
    }
    bucket.work.reset();
  }
}

GradientReadyFn GradientReduction::listener() {
  if (!active()) return nullptr;
  return [this](std::size_t i, const Tensor& grad) { add(i, grad); };
}

void GradientReduction::add(std::size_t i, const Tensor& grad) {
  GradientBuckets& b = *buckets_;
  LOCKSTEP_CHECK_AS(IndexError, i < vars_.size(), "GradientReduction: variable index ", i,
                    " out of range for ", vars_.size(), " variables");
  if (b.added[i]) return;
  const Variable& v = vars_[i];
  const auto n = static_cast<std::size_t>(v.shape().numel());
  if (in_device_) {
    // Queued on this replica's stream; summed at finish().
    const auto begin = b.offset[i], end = b.offset[i] + static_cast<std::int64_t>(n);
    if (grad.defined()) {
      LOCKSTEP_CHECK_AS(ShapeError, grad.shape() == v.shape(), "gradient ", grad.shape(),
                        " does not match variable '", v.name(), "' of shape ", v.shape());
      if (n > 0) detail::copy_into(b.arena.view_rows(begin, end), grad);
    } else if (n > 0) {
      detail::copy_into(b.arena.view_rows(begin, end), Tensor::zeros({end - begin}));
    }
    b.has_gradient[i] = grad.defined() ? 1.0f : 0.0f;
    b.added[i] = 1;
    return;
  }
  float* arena = b.arena.data<float>();
  if (grad.defined()) {
    LOCKSTEP_CHECK_AS(ShapeError, grad.shape() == v.shape(), "gradient ", grad.shape(),
                      " does not match variable '", v.name(), "' of shape ", v.shape());
    if (n > 0 && grad.device().host_accessible()) {
      std::memcpy(arena + b.offset[i], grad.data<float>(), n * sizeof(float));
    } else if (n > 0) {
      detail::copy_into(b.arena.view_rows(b.offset[i], b.offset[i] + static_cast<std::int64_t>(n)),
                        grad);
    }
    arena[b.flag[i]] = 1.0f;
  } else {
    if (n > 0) std::memset(arena + b.offset[i], 0, n * sizeof(float));
    arena[b.flag[i]] = 0.0f;
  }
  b.added[i] = 1;
  --b.buckets[b.bucket_of[i]].pending;
  post_ready_buckets();
}

void GradientReduction::post_ready_buckets() {
  GradientBuckets& b = *buckets_;
  float* arena = b.arena.data<float>();
  while (b.next_post < b.buckets.size() && b.buckets[b.next_post].pending == 0) {
    auto& bucket = b.buckets[b.next_post++];
    float* data = arena + bucket.begin;
    const auto count = static_cast<std::size_t>(bucket.end - bucket.begin);
    bucket.work = compress_ ? comm_->all_reduce_bf16_async(data, count, comm::ReduceOp::kSum)
                            : comm_->all_reduce_async(data, count, comm::ReduceOp::kSum);
  }
}

std::vector<Tensor> GradientReduction::finish_in_device() {
  GradientBuckets& b = *buckets_;
  if (collective_ != nullptr) {
    // Every replica is here once the flags are summed (a replica that failed
    // before aborts the host collective, and the strategy the device one);
    // then the arenas are summed in place on the replicas' streams. The host
    // waits for the sum before it queues the update: a sum that the
    // strategy's watchdog aborted (a peer that never came) fails the step
    // here, with the weights as they were, instead of updating them with
    // a partial sum. What it costs: the update's launches no longer overlap
    // the sum (a few kernels).
    comm_->all_reduce(b.has_gradient.data(), b.has_gradient.size(), comm::ReduceOp::kSum);
    auto* arena = static_cast<float*>(detail::device_pointer(b.arena));
    if (detail::RecordingHooks* hooks = detail::recording_hooks()) {
      // Recorded: the flags are summed once, here (the model's, the same at
      // every replay); the sum is a part of its own, its marks and the
      // host's wait for it the work around that part at each replay.
      detail::DeviceCollective* c = collective_;
      hooks->split([c, held = b.arena] {  // the recording holds the arena it sums
        (void)held;
        c->begin_sum();
      });
      c->queue_sum(arena, b.arena.numel());
      hooks->split([c] {
        c->end_sum();
        c->wait();
      });
      return device_sums(b.arena);
    }
    collective_->all_reduce_sum(arena, b.arena.numel());
    collective_->wait();
    return device_sums(b.arena);
  }
  Device& device = current_device();
  detail::DeviceKernels* kernels = device.kernels();
  if (!b.packed) {
    b.packed = kernels->make_event(device);
    b.summed = kernels->make_event(device);
  }
  if (detail::recording_hooks() != nullptr) return finish_in_device_recorded();
  // This replica's arena is complete after the work its stream has queued
  // (marked); the flags' sum is then the barrier after which every mark is
  // made and each stream waits for the others' before it sums.
  if (b.packed) kernels->record_event(device, *b.packed);
  gather_peers();
  for (const GradientBuckets::Peer& peer : b.peers) {
    if (peer.packed && peer.packed != b.packed) kernels->wait_event(device, *peer.packed);
  }
  kernels->sum_buffers(device, sources(), static_cast<float*>(detail::device_pointer(b.sums)),
                       b.arena.numel());
  // Nobody's arena is written again (the next step's gradients) before
  // everyone has read it: the next reduction waits for every mark.
  if (b.summed) kernels->record_event(device, *b.summed);
  comm_->barrier();
  return device_sums(b.sums);
}

std::vector<Tensor> GradientReduction::finish_in_device_recorded() {
  GradientBuckets& b = *buckets_;
  Device& device = current_device();
  detail::DeviceKernels* kernels = device.kernels();
  LOCKSTEP_CHECK_AS(DeviceError, b.packed && b.summed, device.name(),
                    ": a recording of the replicas' in-device sum needs the device's events");
  // The replicas record together: the flags are summed once, here, as the
  // recorded step's (they are the model's, the same at every replay).
  gather_peers();
  // At each replay: this replica's packing marked, every replica's
  // awaited (the barrier: every mark is made), then the sum; its mark
  // after it; and the next replay's packing after everyone's sum. The
  // replays run under the strategy's run, whose end every replica
  // reaches before the next: each sum's mark is made before it is awaited.
  // The recording holds this replica's arena and sums (its kernels' memory).
  const std::vector<GradientBuckets::Peer> peers = b.peers;
  const std::shared_ptr<detail::DeviceEvent> packed = b.packed, summed = b.summed;
  comm::Communicator* comm = comm_;
  Device* on = &device;
  const Tensor arena = b.arena, sums = b.sums;
  detail::RecordingHooks& hooks = *detail::recording_hooks();
  hooks.split([=] {
    (void)arena;
    on->kernels()->record_event(*on, *packed);
    comm->barrier();
    for (const GradientBuckets::Peer& peer : peers) {
      if (peer.packed != packed) on->kernels()->wait_event(*on, *peer.packed);
    }
  });
  kernels->sum_buffers(device, sources(), static_cast<float*>(detail::device_pointer(b.sums)),
                       b.arena.numel());
  hooks.split([=] {
    (void)sums;
    on->kernels()->record_event(*on, *summed);
  });
  hooks.at_start([=] {
    for (const GradientBuckets::Peer& peer : peers) {
      if (peer.summed != summed) on->kernels()->wait_event(*on, *peer.summed);
    }
  });
  // Nobody lays its buckets out again before every replica has read them.
  comm_->barrier();
  return device_sums(b.sums);
}

void GradientReduction::gather_peers() {
  GradientBuckets& b = *buckets_;
  GradientBuckets* mine = &b;
  std::vector<GradientBuckets*> all(static_cast<std::size_t>(comm_->size()));
  comm_->all_gather(&mine, sizeof mine, all.data());
  // After the flags' sum every replica has gathered, with its arena and its
  // marks made; none changes them before the reduction's last barrier.
  comm_->all_reduce(b.has_gradient.data(), b.has_gradient.size(), comm::ReduceOp::kSum);
  b.peers.clear();
  for (const GradientBuckets* p : all)
    b.peers.push_back({.arena = static_cast<const float*>(detail::device_pointer(p->arena)),
                       .packed = p->packed,
                       .summed = p->summed});
}

std::vector<const float*> GradientReduction::sources() const {
  std::vector<const float*> out;
  for (const GradientBuckets::Peer& peer : buckets_->peers) out.push_back(peer.arena);
  return out;
}

std::vector<Tensor> GradientReduction::device_sums(const Tensor& sums) const {
  const GradientBuckets& b = *buckets_;
  std::vector<Tensor> summed(vars_.size());
  for (std::size_t i = 0; i < vars_.size(); ++i) {
    if (b.has_gradient[i] > 0)
      summed[i] = sums.view_rows(b.offset[i], b.offset[i] + vars_[i].shape().numel())
                      .view_as(vars_[i].shape());
  }
  return summed;
}

std::vector<Tensor> GradientReduction::finish(std::vector<Tensor> local) {
  if (!active()) return local;
  GradientBuckets& b = *buckets_;
  LOCKSTEP_CHECK(local.size() == vars_.size(), "GradientReduction: got ", local.size(),
                 " gradients for ", vars_.size(), " variables");
  for (std::size_t i = 0; i < vars_.size(); ++i) {
    if (!b.added[i]) add(i, local[i]);
  }
  if (in_device_) return finish_in_device();
  for (auto& bucket : b.buckets) {
    bucket.work->wait();
    bucket.work.reset();
  }
  const float* arena = b.arena.data<float>();
  std::vector<Tensor> summed(vars_.size());
  for (std::size_t i = 0; i < vars_.size(); ++i) {
    if (arena[b.flag[i]] > 0)
      summed[i] = b.arena.view_rows(b.offset[i], b.offset[i] + vars_[i].shape().numel())
                      .view_as(vars_[i].shape());
  }
  return summed;
}

}  // namespace lockstep::distribute
