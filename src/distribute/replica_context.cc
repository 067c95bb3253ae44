// ReplicaContext: a replica's place, its gradient sums and its share of the
// optimizer update; the one thread-local pointer to it for
// get_replica_context().
#include "lockstep/distribute/replica_context.h"

#include <algorithm>
#include <cstring>

#include "lockstep/core/error.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::distribute {
namespace {

// The context of the replica the calling thread runs. Per thread because
// TensorFlow's get_replica_context() is asked by user code inside
// strategy.run, which has no other way to receive it. Library code whose
// signature is Keras's (Model::train_step, test_step, compute_loss,
// get_metrics_result) reads it here too; the strategy's own code is handed
// its context (run_step's and run_replicas' function argument).
thread_local ReplicaContext* t_context = nullptr;

}  // namespace

void all_reduce_tensor(comm::Communicator& comm, const Tensor& t, ReduceOp op) {
  check_defined(t, "all_reduce", "tensor");
  const auto n = static_cast<std::size_t>(t.numel());
  LOCKSTEP_CHECK(t.dtype() == DType::kFloat32, "all_reduce: expected a float32 tensor, got ",
                 t.dtype());
  comm.all_reduce(static_cast<float*>(t.raw_data()), n, op);
}

Tensor ReplicaContext::all_reduce(ReduceOp op, const Tensor& value) const {
  if (p_.num_replicas == 1) return value;
  Tensor out = value.to(DType::kFloat32).copy();
  all_reduce_tensor(*p_.communicator, out, op);
  return out;
}

GradientReduction ReplicaContext::start_gradient_reduction(const std::vector<Variable>& vars) {
  if (p_.num_replicas <= 1) return {};
  return GradientReduction(&buckets_, p_.communicator, vars, p_.bytes_per_pack,
                           p_.compress_gradients, p_.in_device_reduction, p_.device_collective);
}

std::vector<Tensor> ReplicaContext::sum_gradients(std::vector<Tensor> grads,
                                                  const std::vector<Variable>& vars) {
  GradientReduction reduction = start_gradient_reduction(vars);
  return reduction.finish(std::move(grads));
}

void ReplicaContext::sync_non_trainable(const std::vector<Variable>& vars,
                                        const std::vector<std::uint64_t>& versions_before) const {
  if (p_.num_replicas == 1 || vars.empty()) return;
  std::vector<float> changed(vars.size());
  for (std::size_t i = 0; i < vars.size(); ++i)
    changed[i] = vars[i].version() != versions_before[i] ? 1.0f : 0.0f;
  p_.communicator->all_reduce(changed.data(), changed.size(), ReduceOp::kMax);
  if (std::all_of(changed.begin(), changed.end(), [](float c) { return c == 0.0f; })) return;
  // Each copy weighs its replica's examples over the step's. Where the step
  // did not say (strategy.run), the examples are summed here; where nobody
  // knew them, the copies weigh the same.
  float local = static_cast<float>(local_batch_size_);
  float global = static_cast<float>(global_batch_size_);
  if (global_batch_size_ <= 0) {
    float total = local;
    p_.communicator->all_reduce(&total, 1, ReduceOp::kSum);
    if (total <= 0.0f) {
      local = 1.0f;
      total = static_cast<float>(p_.num_replicas);
    }
    global = total;
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    if (changed[i] == 0.0f || vars[i].dtype() != DType::kFloat32) continue;
    // In host memory: the collectives read it there (replicas on GPUs hold
    // their copies in device memory).
    Tensor weighted = mul(vars[i].value(), Tensor::scalar(local)).copy_to(host_device());
    all_reduce_tensor(*p_.communicator, weighted, ReduceOp::kSum);
    Variable v = vars[i];
    v.assign(div(weighted, Tensor::scalar(global)));
  }
}

bool ReplicaContext::shares_update(const std::vector<Variable>& vars) const {
  if (!p_.shard_optimizer_update || p_.num_local_replicas <= 1 || !p_.local_communicator)
    return false;
  return std::all_of(vars.begin(), vars.end(), [&](const Variable& v) {
    return v.is_mirrored() && v.num_replicas() == p_.num_local_replicas;
  });
}

void ReplicaContext::run_update(const std::vector<Variable>& vars,
                                const std::vector<UpdateSpan>& spans, std::int64_t total,
                                const UpdateRange& update) {
  if (!shares_update(vars)) {
    update(0, total);
    return;
  }
  // Every replica holds the same summed gradients and the same weights, so
  // replica i of N takes about the i-th N-th of the concatenation, updates
  // it in its own copy (with the optimizer's one set of slots) and copies it
  // into the others'. The first barrier: every replica's backward is done
  // reading its copy; the second: every copy is whole before any replica
  // reads it. Replica i's share starts near total·i/N, moved down to a
  // multiple of 16 elements (64 bytes) of its variable: no two replicas
  // write one cache line.
  const std::int64_t n = p_.num_local_replicas, me = p_.local_replica_id;
  auto share_start = [&](std::int64_t i) {
    const std::int64_t at = total * i / n;
    for (const UpdateSpan& span : spans) {
      if (at < span.begin + span.size) return span.begin + (at - span.begin) / 16 * 16;
    }
    return total;
  };
  const std::int64_t first = share_start(me), last = share_start(me + 1);
  p_.local_communicator->barrier();
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const UpdateSpan& span = spans[k];
    const std::int64_t lo = std::max(first, span.begin);
    const std::int64_t hi = std::min(last, span.begin + span.size);
    if (lo >= hi) continue;
    update(lo, hi);
    const std::size_t offset = static_cast<std::size_t>(lo - span.begin) * sizeof(float);
    const std::size_t bytes = static_cast<std::size_t>(hi - lo) * sizeof(float);
    const auto* mine = static_cast<const char*>(vars[k].value().raw_data()) + offset;
    for (int q = 0; q < p_.num_local_replicas; ++q) {
      if (q != p_.local_replica_id)
        std::memcpy(static_cast<char*>(vars[k].replica_value(q).raw_data()) + offset, mine, bytes);
    }
  }
  p_.local_communicator->barrier();
}

const ReplicaContext& get_replica_context() {
  static const ReplicaContext cross_replica;
  return t_context ? *t_context : cross_replica;
}

ReplicaContext* current_replica_context() { return t_context; }

ReplicaContextScope::ReplicaContextScope(ReplicaContext* context)
    : previous_(t_context), copy_(context ? context->local_replica_id() : -1) {
  // Only replicas that have others to add with need an aggregator; a single
  // replica leaves the thread's as it is (a parameter-server worker's
  // remote update, say).
  if (context && context->num_replicas_in_sync() > 1) aggregator_.emplace(context);
  t_context = context;
}

ReplicaContextScope::~ReplicaContextScope() { t_context = previous_; }

}  // namespace lockstep::distribute
