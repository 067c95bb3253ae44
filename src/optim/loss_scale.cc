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

// On an accelerator, a float on the device that is NaN when a gradient
// holds an inf or a NaN and 0 otherwise: the sum over every gradient of
// g − g (0 for every finite g), added on the device.
Tensor finite_check_on_device(const std::vector<Tensor>& grads) {
  Tensor check;
  for (const Tensor& g : grads) {
    if (!g.defined() || g.numel() == 0) continue;
    const Tensor f = g.dtype() == DType::kFloat32 ? g : g.to(DType::kFloat32);
    const Tensor part = sum(sub(f, f));
    check = check.defined() ? add(check, part) : part;
  }
  return check;
}

// Whether every element of every defined gradient is finite. On the host a
// scan; on an accelerator finite_check_on_device, read once.
bool all_finite(const std::vector<Tensor>& grads) {
  std::vector<Tensor> on_device;
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
    on_device.push_back(g);
  }
  return on_device.empty() || std::isfinite(finite_check_on_device(on_device).item<float>());
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
  // A recorded step's scale is the one staged on the device before each
  // replay (stage_device_step).
  LOCKSTEP_CHECK_AS(DeviceError, !rs.recording || rs.device_scale.defined(), name_,
                    ": a step recorded without its loss scale staged (stage_device_step)");
  const Tensor scale = rs.recording ? rs.device_scale : Tensor::scalar(rs.loss_scale);
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
  if (rs.recording) {
    // Recorded: each replay checks its own gradients on the device, and the
    // update kernels skip the update when one was not finite;
    // finish_replayed_step reads the check and moves the scale.
    rs.recorded_finite = finite_check_on_device(grads);
    for (Tensor& g : grads) {
      if (g.defined()) g = div(g, rs.device_scale);
    }
    return true;
  }
  if (!all_finite(grads)) {
    move_loss_scale(rs, false);
    return false;
  }
  const Tensor scale = Tensor::scalar(rs.loss_scale);
  for (Tensor& g : grads) {
    if (g.defined()) g = div(g, scale);
  }
  move_loss_scale(rs, true);
  return true;
}

void OptimizerImpl::move_loss_scale(ReplicaState& rs, bool finite) const {
  if (!finite) {
    rs.loss_scale *= 0.5f;
    rs.finite_steps = 0;
  } else if (rs.finite_steps == loss_scaling_->dynamic_growth_steps - 1) {
    // Keras doubles into inf, where every later step overflows and is
    // skipped: a run that stops learning without a word. The scale stays.
    if (std::isfinite(rs.loss_scale * 2.0f)) rs.loss_scale *= 2.0f;
    rs.finite_steps = 0;
  } else {
    ++rs.finite_steps;
  }
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
