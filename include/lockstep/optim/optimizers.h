// Optimizers (keras.optimizers) with Keras 3's update rules, gradient
// clipping and weight decay.
//
//   auto opt = ls::optimizers::Adam({.learning_rate = 1e-3});
//   opt.apply_gradients(grads, model.trainable_weights());
//
// Slot variables (momentum, velocity, ...) are created on the first
// apply_gradients through create_variable, so a strategy in scope mirrors
// them. Each update is one fused loop per variable over raw buffers, under
// NoGradGuard. The replica threads of a strategy call one optimizer at the
// same time, each for its own copies (its own per-replica state, or its
// share of the one set of slots, optim/aggregation.h); other concurrent
// calls are a data race.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/optim/aggregation.h"
#include "lockstep/optim/schedules.h"

namespace lockstep::detail {
struct DeviceUpdate;
}  // namespace lockstep::detail

namespace lockstep {

// Options every optimizer shares (Keras's base Optimizer arguments).
struct ClipOptions {
  double clipnorm = 0.0;         // > 0: clip each gradient to this L2 norm
  double clipvalue = 0.0;        // > 0: clip each element to [-v, v]
  double global_clipnorm = 0.0;  // > 0: scale all gradients so their joint norm is at most this
};

// One argument of an optimizer's Keras config: a number or a flag.
using OptimizerArgument = std::variant<bool, double>;
using OptimizerConfig = std::vector<std::pair<std::string, OptimizerArgument>>;

// How apply_gradients treats its gradients (Keras's keyword arguments).
struct ApplyOptions {
  // The gradients are already summed across replicas (the strategy summed
  // them while backward ran: distribute::ReplicaContext).
  bool skip_gradients_aggregation = false;
};

class OptimizerImpl {
 public:
  OptimizerImpl(std::string name, LearningRate learning_rate, ClipOptions clip,
                double weight_decay);
  virtual ~OptimizerImpl() = default;

  // Applies one update. Gradients may be undefined (no gradient: skipped).
  //
  // On a replica thread of a strategy with several replicas the gradients
  // are first summed across replicas by the strategy's GradientAggregator
  // (optim/aggregation.h), then every copy gets the identical update, so any
  // train_step or custom loop is synchronised by calling this. The strategy
  // may share the update between the process's replicas (its
  // shard_optimizer_update option): each then computes its part of the
  // elements with the one set of slots, and the strategy writes it into
  // every replica's copy; otherwise each replica updates its own copies with
  // its own slots. Mirrored variables must be updated on replica threads
  // (strategy.run), never from outside.
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       ApplyOptions options = {});

  // Updates applied so far (the step the schedule sees).
  std::int64_t iterations() const;
  void set_iterations(std::int64_t iterations);
  // The rate the next update will use.
  double learning_rate() const { return learning_rate_.at(iterations()); }
  void set_learning_rate(LearningRate lr) { learning_rate_ = std::move(lr); }
  const std::string& name() const { return name_; }
  // Slot variables in creation order (replica 0's).
  const std::vector<Variable>& variables() const { return slots_; }

  // Checkpoints, topology-free: the slot values of `vars` named
  // "<index in vars>/<slot name>" (replica 0's: every replica holds the
  // same), for the variables that have slots yet. By position, as
  // TensorFlow's object-based checkpoints: layer names differ between
  // processes (dense_4 vs dense), the model's structure does not.
  std::vector<std::pair<std::string, Tensor>> slot_values(const std::vector<Variable>& vars) const;
  // Sets slot values by those names on every replica that has slots now and
  // on every replica that creates them later (under any replica count).
  // Slots that match no variable are a ValueError, a shape that differs a
  // ShapeError; nothing is set then.
  void restore_slot_values(const std::vector<Variable>& vars,
                           const std::map<std::string, Tensor>& values);
  // Keras's optimizer config: name, learning rate (now), options.
  virtual std::string config_json() const;

  // Keras's class name ("Adam"): what optimizers::get and from_config take.
  const std::string& class_name() const { return name_; }
  // Keras's arguments of this optimizer, by Keras's names: learning_rate
  // (the constant rate; left out under a schedule, see learning_rate_schedule),
  // the class's own arguments, then weight_decay, clipnorm, clipvalue and
  // global_clipnorm (0 where unset). optimizers::from_config takes them back.
  OptimizerConfig get_config() const;
  // The schedule of the learning rate; its name is "constant" for a number.
  const LearningRateSchedule& learning_rate_schedule() const { return learning_rate_.schedule(); }

  // Keras's `optimizer.variables` for a model whose trainable variables are
  // `trainable`: iterations (an int64 scalar), the learning rate (a float32
  // scalar, absent under a schedule), then the slots in the order Keras
  // creates them for this class; a slot not created yet is its initial
  // value, as Keras builds every slot before it saves.
  std::vector<Tensor> keras_variables(const std::vector<Variable>& trainable) const;
  // Sets iterations and every slot from such a list; the count and every
  // shape are checked first (a ValueError or ShapeError naming `source`
  // and the variable), so nothing is set from a list that does not fit.
  void set_keras_variables(const std::vector<Variable>& trainable,
                           const std::vector<Tensor>& values, const std::string& source);

  // Dynamic loss scaling (optimizers::LossScaleOptimizer, optim/loss_scale.cc),
  // off until enabled. Then apply_gradients first checks the gradients
  // (after they are summed across replicas, so every replica decides
  // alike): any inf or NaN skips the step — no update, no slot change, the
  // step count stays — halves the scale and restarts the count of finite
  // steps; otherwise they are divided by the scale, the update runs, and
  // after `dynamic_growth_steps` finite steps in a row the scale doubles —
  // unless that overflows float32: then it stays (as PyTorch's GradScaler;
  // Keras 3 makes it inf, and every later step is skipped).
  struct LossScaling {
    double initial_scale = 32768.0;  // 2^15, Keras's
    std::int64_t dynamic_growth_steps = 2000;
  };
  void enable_loss_scaling(const LossScaling& scaling);
  const std::optional<LossScaling>& loss_scaling() const { return loss_scaling_; }
  // loss × the calling replica's scale (the loss itself when not scaling):
  // what fit's train_step differentiates, as Keras's optimizer.scale_loss.
  Tensor scale_loss(const Tensor& loss);
  // Replica 0's scale, and its finite steps since the scale last changed.
  double dynamic_scale() const;
  std::int64_t loss_scale_step_counter() const;

  // A step recorded on a device and replayed (fit's step graph,
  // train/step_graph.h). The numbers that change from step to step — the
  // learning rate, Adam's bias correction, weight decay's factor, the loss
  // scale — cannot be a recorded kernel's arguments: while `recording` is
  // set the update kernels and scale_loss read them from the replica's
  // device memory instead, and stage_device_step writes the next step's
  // there before each replay (on the device's stream, ahead of it). A
  // recording counts nothing and changes no host state; a replay runs no
  // host code: finish_replayed_step then does what apply_gradients would
  // have — under loss scaling it reads the step's check of the gradients
  // (the recorded update kernels skipped the update on the device when one
  // was not finite) and moves the scale; it advances the step count unless
  // the step was skipped, and returns whether it was applied. False from
  // stage_device_step when this optimizer's step cannot be replayed (no
  // device kernel). Replica 0 outside strategies.
  bool stage_device_step(int replica, Device& device);
  // `replica`'s step count (replica 0's before that replica's state is made).
  std::int64_t iterations_of(int replica) const;
  bool finish_replayed_step(int replica);
  // While `replica`'s step is recorded (each replica's on its own thread).
  // Before a recording starts, the replica's last recording's check is
  // dropped (its memory freed now, not while the next one records).
  void set_recording(int replica, bool recording);

 protected:
  // Per-variable state: created on first use by create_slots.
  virtual int num_slots() const = 0;
  virtual const char* slot_name(int i) const = 0;
  virtual float slot_initial_value(int) const { return 0.0f; }
  // The class's own Keras arguments (beta_1, momentum, ...).
  virtual OptimizerConfig own_config() const = 0;
  // Keras orders optimizer.variables by variable (all slots of one variable
  // together, as Adam creates them) or by slot (every velocity, then every
  // momentum, as RMSprop does).
  virtual bool keras_slots_by_variable() const { return true; }
  // Scalars Keras keeps after the slots (Nadam's u_product), as they are
  // after `step` updates; Lockstep derives them from the step count, so
  // loading checks their count and shape and takes the step count instead.
  virtual std::vector<Tensor> keras_scalars(std::int64_t) const { return {}; }
  // An elementwise update of n elements of a variable; `slots` point at the
  // same elements of its slot buffers. Called concurrently from the intra-op
  // threads on disjoint ranges (a range may be any part of a variable), so it
  // must not change the optimizer's own state. At most 4 slots.
  virtual void update(float* var, const float* grad, std::int64_t n, float** slots, double lr,
                      std::int64_t step) = 0;
  // The same step as a device kernel's parameters (variables on a GPU or the
  // fake accelerator); false for a rule that has no device kernel yet.
  virtual bool device_update(double lr, std::int64_t step, detail::DeviceUpdate& out) const;

 private:
  // A variable's slot variables and raw pointers to their buffers (stable:
  // variables update in place), found by variable id in one hash lookup.
  struct VarSlots {
    std::vector<Variable> slots{};
    std::vector<float*> buffers{};
  };
  // What each replica keeps for itself (index 0 outside strategies).
  struct ReplicaState {
    std::unordered_map<std::uint64_t, VarSlots> var_slots{};
    std::int64_t iterations = 0;
    float loss_scale = 0;           // under loss scaling (float32, as Keras's)
    std::int64_t finite_steps = 0;  // since the scale last changed
    Tensor step_numbers{};          // a recorded step's {lr, alpha, decay} (device memory)
    Tensor device_scale{};          // its loss scale (device memory, a scalar)
    Tensor recorded_finite{};       // its check of the gradients, NaN when one was not finite
    bool recording = false;         // its step is recorded: the update reads step_numbers
  };
  ReplicaState& replica_state(int replica);
  // Gradients and variables that cannot be updated are a ValueError or
  // ShapeError naming the variable.
  void check_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars) const;
  void clip_gradients(std::vector<Tensor>& grads) const;
  VarSlots& slots_for(ReplicaState& rs, int replica, const Variable& v);
  // Under a shared update (optim/aggregation.h): the one set of slots of
  // mirrored variable `v`, found in this replica's own map after the first
  // step (made once, under a lock, in shared_slots_).
  VarSlots& shared_slots_for(ReplicaState& rs, const Variable& v);
  // Loss scaling's check (optim/loss_scale.cc): false when a gradient is
  // not finite (the caller skips the step); else the gradients unscaled.
  // Either way the replica's scale and count move on (move_loss_scale).
  // While recording, the gradients are divided by the staged scale and
  // their check kept on the device (rs.recorded_finite) for the update
  // kernels; nothing moves.
  bool unscale_gradients(std::vector<Tensor>& grads, ReplicaState& rs) const;
  void move_loss_scale(ReplicaState& rs, bool finite) const;
  // apply_gradients for variables on an accelerator: device_update's kernel.
  void apply_on_device(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       ReplicaState& rs, int replica, double lr, std::int64_t step);

  std::string name_;
  LearningRate learning_rate_;
  ClipOptions clip_;
  double weight_decay_;
  mutable std::mutex replicas_mu_;
  std::deque<ReplicaState> replicas_{1};  // a deque: references stay valid as it grows
  std::mutex shared_slots_mu_;
  ReplicaState shared_slots_;    // sharded updates: by the variables' replica-0 ids
  std::vector<Variable> slots_;  // replica 0's
  // Restored slot values by variable id, for replicas that have not created
  // their slots yet (they start from these instead of the initial value).
  std::unordered_map<std::uint64_t, std::vector<Tensor>> restored_;
  std::optional<LossScaling> loss_scaling_;
};

// A handle to an OptimizerImpl; copies share it.
class Optimizer {
 public:
  Optimizer() = default;
  explicit Optimizer(std::shared_ptr<OptimizerImpl> impl) : impl_(std::move(impl)) {}
  // A Keras identifier with Keras's defaults, as compile(optimizer="adam"):
  // optimizers::get(name).
  Optimizer(const char* name);         // NOLINT(google-explicit-constructor): as Keras's strings
  Optimizer(const std::string& name);  // NOLINT(google-explicit-constructor)
  void apply_gradients(const std::vector<Tensor>& grads, const std::vector<Variable>& vars,
                       ApplyOptions options = {}) const {
    impl_->apply_gradients(grads, vars, options);
  }
  std::int64_t iterations() const { return impl_->iterations(); }
  double learning_rate() const { return impl_->learning_rate(); }
  // Keras's optimizer.scale_loss: the loss times the loss scale under a
  // LossScaleOptimizer, else the loss (a custom loop differentiates this).
  Tensor scale_loss(const Tensor& loss) const { return impl_->scale_loss(loss); }
  OptimizerImpl* operator->() const { return impl_.get(); }
  bool defined() const { return impl_ != nullptr; }

 protected:
  std::shared_ptr<OptimizerImpl> impl_;
};

namespace optimizers {

struct SGDOptions {
  LearningRate learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class SGD : public Optimizer {
 public:
  explicit SGD(SGDOptions options = {});
};

struct AdamOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class Adam : public Optimizer {
 public:
  explicit Adam(AdamOptions options = {});
};

// Adam with decoupled weight decay (default 0.004, as Keras).
struct AdamWOptions {
  LearningRate learning_rate = 0.001;
  double weight_decay = 0.004;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  ClipOptions clip{};
};
class AdamW : public Optimizer {
 public:
  explicit AdamW(AdamWOptions options = {});
};

struct RMSpropOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.9;
  double momentum = 0.0;
  double epsilon = 1e-7;
  bool centered = false;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(RMSpropOptions options = {});
};

struct AdagradOptions {
  LearningRate learning_rate = 0.001;
  double initial_accumulator_value = 0.1;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(AdagradOptions options = {});
};

// Follow-the-regularized-leader (keras.optimizers.Ftrl; TensorFlow's
// ApplyFtrlV2 kernel, which Estimator's linear models default to). Per
// element, with p = −learning_rate_power and g the gradient:
//   g_s = g + 2·l2_shrinkage·w;  n' = n + g²
//   z += g_s − (n'^p − n^p)/lr · w
//   w  = |z| > l1 ? (sign(z)·l1 − z) / (n'^p/lr + 2·(l2 + beta/(2·lr))) : 0
//   n  = n'
// Slots: "accumulator" (n, from initial_accumulator_value) and "linear" (z).
struct FtrlOptions {
  LearningRate learning_rate = 0.001;
  double learning_rate_power = -0.5;  // <= 0; 0: a fixed rate
  double initial_accumulator_value = 0.1;
  double l1_regularization_strength = 0.0;
  double l2_regularization_strength = 0.0;
  double l2_shrinkage_regularization_strength = 0.0;  // an L2 penalty on the loss itself
  double beta = 0.0;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class Ftrl : public Optimizer {
 public:
  explicit Ftrl(FtrlOptions options = {});
};

// Adam with Nesterov momentum (keras.optimizers.Nadam): Keras 3's rule with
// its momentum schedule u_t = β1·(1 − 0.5·0.96^t) and their running product.
// Adam's arguments.
using NadamOptions = AdamOptions;
class Nadam : public Optimizer {
 public:
  explicit Nadam(NadamOptions options = {});
};

// Adam with the infinity norm (keras.optimizers.Adamax): slots "momentum"
// and "norm" (u = max(β2·u, |g|)). Adam's arguments.
using AdamaxOptions = AdamOptions;
class Adamax : public Optimizer {
 public:
  explicit Adamax(AdamaxOptions options = {});
};

// keras.optimizers.Adadelta: slots "accumulated_grad" and
// "accumulated_delta_var"; the step is lr · −√(E[Δ²] + ε)·g / √(E[g²] + ε).
struct AdadeltaOptions {
  LearningRate learning_rate = 0.001;
  double rho = 0.95;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class Adadelta : public Optimizer {
 public:
  explicit Adadelta(AdadeltaOptions options = {});
};

// keras.optimizers.Lion (sign of an interpolated momentum): one slot,
// "momentum". beta_1 in (0, 1], as Keras checks.
struct LionOptions {
  LearningRate learning_rate = 0.001;
  double beta_1 = 0.9;
  double beta_2 = 0.99;
  double weight_decay = 0.0;
  ClipOptions clip{};
};
class Lion : public Optimizer {
 public:
  explicit Lion(LionOptions options = {});
};

// keras.optimizers.LossScaleOptimizer: dynamic loss scaling around another
// optimizer (OptimizerImpl::LossScaling says what a step does). fit scales
// the loss itself; a custom loop writes, as with Keras 3:
//   Tensor loss = optimizer.scale_loss(compute_loss(...));   // inside the tape
//   optimizer.apply_gradients(tape.gradient(loss, vars), vars);
// It wraps the inner optimizer's state, not a copy: the inner handle and
// this one are one optimizer (Keras's inner_optimizer.iterations is this
// one's too), which scales from now on. Loss scaling keeps float16
// gradients from underflowing; float32 and bfloat16 training runs with it
// too (bfloat16 has float32's range and needs none).
struct LossScaleOptimizerOptions {
  double initial_scale = 32768.0;  // 2^15
  std::int64_t dynamic_growth_steps = 2000;
};
class LossScaleOptimizer : public Optimizer {
 public:
  explicit LossScaleOptimizer(const Optimizer& inner_optimizer,
                              LossScaleOptimizerOptions options = {});
  Optimizer inner_optimizer() const { return Optimizer(impl_); }
  double dynamic_scale() const { return impl_->dynamic_scale(); }
  std::int64_t step_counter() const { return impl_->loss_scale_step_counter(); }
};

// An optimizer from its Keras class name and arguments, as get_config gives
// them (Keras's own names; a schedule is passed as `learning_rate` and
// wins over a number in `args`). An argument the class does not take, or
// one Lockstep does not implement with another value than Keras's default
// (amsgrad, use_ema, loss_scale_factor, gradient_accumulation_steps), is a
// ValueError naming it.
Optimizer from_config(const std::string& class_name,
                      const std::map<std::string, OptimizerArgument>& args,
                      const LearningRateSchedule* learning_rate = nullptr);

// By Keras identifier, with Keras's defaults: "sgd", "adam", "adamw",
// "rmsprop", "adagrad", "ftrl", "nadam", "adamax", "adadelta", "lion", or the
// class name ("Adam"). An unknown name is a ValueError that lists the known
// ones.
Optimizer get(const std::string& name);

}  // namespace optimizers
}  // namespace lockstep
