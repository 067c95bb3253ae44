// The one seam between an optimizer and a strategy: how apply_gradients on a
// replica sums its gradients with the other replicas' and how the update is
// shared between the replicas of a process.
//
// The optimizer has no collective of its own. A strategy opens a
// GradientAggregatorScope on each of its replica threads with that replica's
// GradientAggregator (distribute::ReplicaContext is one), so that
// `optimizer.apply_gradients(grads, vars)` inside `strategy.run` sums across
// replicas as in TensorFlow, and `fit` can sum earlier, while backward runs,
// and say so with ApplyOptions::skip_gradients_aggregation.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lockstep/autodiff/variable.h"

namespace lockstep {

// Where a variable's elements sit in the concatenation of the variables one
// update covers (in the order apply_gradients was given them).
struct UpdateSpan {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};

// Updates elements [begin, end) of the concatenation in the calling
// replica's copies (an update rule is elementwise).
using UpdateRange = std::function<void(std::int64_t begin, std::int64_t end)>;

class OptimizerImpl;

class GradientAggregator {
 public:
  virtual ~GradientAggregator() = default;

  // The replicas in this process (one copy of each mirrored variable each).
  virtual int num_local_replicas() const = 0;

  // Sums each gradient of `vars` across every replica in sync; undefined
  // where no replica had one. Every replica gets bitwise the same sums.
  virtual std::vector<Tensor> sum_gradients(std::vector<Tensor> grads,
                                            const std::vector<Variable>& vars) = 0;
  // Whether this replica updates only its share of `vars` and writes it into
  // the other local replicas' copies (then the optimizer keeps one set of
  // slots for all of them, see run_update).
  virtual bool shares_update(const std::vector<Variable>& vars) const = 0;
  // Runs `update` over the part of [0, total) this replica owns (all of it
  // when the update is not shared) and returns when every local replica's
  // copy of `vars` holds the updated values. `spans` place each of `vars` in
  // [0, total).
  virtual void run_update(const std::vector<Variable>& vars, const std::vector<UpdateSpan>& spans,
                          std::int64_t total, const UpdateRange& update) = 0;
  // Whether the update runs elsewhere (ParameterServerStrategy's workers:
  // on the parameter servers, which hold the variables, their slots and
  // the step count). Then apply_gradients hands its summed and clipped
  // gradients over here, with the optimizer (its class and arguments),
  // and updates nothing in this process. Undefined gradients are skipped.
  virtual bool apply_elsewhere(const std::vector<Tensor>& /*grads*/,
                               const std::vector<Variable>& /*vars*/,
                               const OptimizerImpl& /*optimizer*/) {
    return false;
  }
};

// The calling thread's aggregator: the innermost GradientAggregatorScope's,
// null outside every one (no strategy's replicas, or a single replica in
// sync that needs none).
GradientAggregator* current_gradient_aggregator();

// RAII, thread-local, nestable: while alive, `aggregator` is the calling
// thread's. The one way a strategy hands its aggregator to the optimizer: a
// replica context opens one on its replica's thread (distribute's
// ReplicaContextScope), a parameter-server worker's function one for its
// remote update. Not copyable or movable.
class GradientAggregatorScope {
 public:
  explicit GradientAggregatorScope(GradientAggregator* aggregator);
  ~GradientAggregatorScope();
  GradientAggregatorScope(const GradientAggregatorScope&) = delete;
  GradientAggregatorScope& operator=(const GradientAggregatorScope&) = delete;

 private:
  GradientAggregator* previous_;
};

}  // namespace lockstep
