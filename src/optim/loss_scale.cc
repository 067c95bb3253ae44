// Dynamic loss scaling, Keras 3's LossScaleOptimizer: the loss multiplied
// by a scale before backward, the gradients checked and divided by it
// before the update. A step with an inf or NaN gradient is skipped and the
// scale halved; every `dynamic_growth_steps` finite steps in a row double
// it. The scale is a float32 power of two times the initial one, so scaling
// and unscaling change no bit of a gradient that stays in float32's normal
// range (N replicas and 1 train alike; a run with the scale is bitwise one
// without it while nothing overflows).
//
// Under a strategy each replica keeps its own copy of the scale and count
// (OptimizerImpl::ReplicaState); they check the gradients after the
// all-reduce, see the same values and so move in step.
#include <cmath>

#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/core/error.h"
#include "lockstep/optim/aggregation.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// Whether every element of every defined gradient is finite. On the host a
// scan; on an accelerator one sum of g·0 per gradient (NaN exactly when g
// holds an inf or a NaN), added on the device and read once.
bool all_finite(const std::vector<Tensor>& grads) {
  Tensor on_device;
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    if (g.device().host_accessible()) {
      const Tensor f = g.dtype() == DType::kFloat32 ? g : g.to(DType::kFloat32);
      const float* p = f.data<float>();
      for (std::int64_t i = 0; i < f.numel(); ++i) {
        if (!std::isfinite(p[i])) return false;
      }
      continue;
    }
    const Tensor probe = sum(mul(g.to(DType::kFloat32), Tensor::scalar(0.0f)));
    on_device = on_device.defined() ? add(on_device, probe) : probe;
  }
  return !on_device.defined() || std::isfinite(on_device.item<float>());
}

}  // namespace

void OptimizerImpl::enable_loss_scaling(const LossScaling& scaling) {
  LOCKSTEP_CHECK(
      std::isfinite(static_cast<float>(scaling.initial_scale)) && scaling.initial_scale > 0,
      "LossScaleOptimizer: initial_scale must be a number > 0 that float32 holds, got ",
      scaling.initial_scale);
  LOCKSTEP_CHECK(scaling.dynamic_growth_steps >= 1,
                 "LossScaleOptimizer: dynamic_growth_steps must be >= 1, got ",
                 scaling.dynamic_growth_steps);
  LOCKSTEP_CHECK(!loss_scaling_, "LossScaleOptimizer: the optimizer (", name_,
                 ") already scales its loss; wrap it once");
  std::lock_guard lk(replicas_mu_);
  loss_scaling_ = scaling;
  for (ReplicaState& rs : replicas_) {
    rs.loss_scale = static_cast<float>(scaling.initial_scale);
    rs.finite_steps = 0;
  }
}

Tensor OptimizerImpl::scale_loss(const Tensor& loss) {
  if (!loss_scaling_) return loss;
  // Every local replica's state is made when the first of them gets here
  // (apply_gradients' rule), before any has changed replica 0's.
  if (GradientAggregator* aggregator = current_gradient_aggregator())
    replica_state(aggregator->num_local_replicas() - 1);
  const ReplicaState& rs = replica_state(std::max(0, current_mirrored_copy()));
  const Tensor scale = Tensor::scalar(rs.loss_scale);
  return mul(loss, loss.dtype() == DType::kFloat32 ? scale : scale.to(loss.dtype()));
}

double OptimizerImpl::dynamic_scale() const {
  std::lock_guard lk(replicas_mu_);
  return loss_scaling_ ? replicas_.front().loss_scale : 1.0;
}

std::int64_t OptimizerImpl::loss_scale_step_counter() const {
  std::lock_guard lk(replicas_mu_);
  return replicas_.front().finite_steps;
}

bool OptimizerImpl::unscale_gradients(std::vector<Tensor>& grads, ReplicaState& rs) const {
  if (!all_finite(grads)) {
    rs.loss_scale *= 0.5f;
    rs.finite_steps = 0;
    return false;
  }
  const Tensor scale = Tensor::scalar(rs.loss_scale);
  for (Tensor& g : grads) {
    if (g.defined()) g = div(g, scale);
  }
  if (rs.finite_steps == loss_scaling_->dynamic_growth_steps - 1) {
    // Keras doubles into inf, where every later step overflows and is
    // skipped: a run that stops learning without a word. The scale stays.
    if (std::isfinite(rs.loss_scale * 2.0f)) rs.loss_scale *= 2.0f;
    rs.finite_steps = 0;
  } else {
    ++rs.finite_steps;
  }
  return true;
}

namespace optimizers {

LossScaleOptimizer::LossScaleOptimizer(const Optimizer& inner_optimizer,
                                       LossScaleOptimizerOptions options)
    : Optimizer(inner_optimizer) {
  LOCKSTEP_CHECK(defined(), "LossScaleOptimizer: the inner optimizer is undefined");
  impl_->enable_loss_scaling({.initial_scale = options.initial_scale,
                              .dynamic_growth_steps = options.dynamic_growth_steps});
}

}  // namespace optimizers
}  // namespace lockstep
