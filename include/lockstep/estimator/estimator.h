// Estimator: TensorFlow's tf.estimator API, as a compatibility layer over
// Lockstep's Keras-style core (layers, optimizers, strategies). For programs
// written against Estimator, which TensorFlow removed in 2.16; new code
// should use Model::fit.
//
//   auto model_fn = [dense](const Features& features, const Tensor& labels, ModeKeys mode,
//                           const Params&, const RunConfig&) {
//     Tensor predictions = dense(features.at("x"));
//     EstimatorSpec spec{.mode = mode, .predictions = {{"y", predictions}}};
//     if (mode == ModeKeys::kPredict) return spec;
//     spec.loss = ls::mean(ls::square(ls::sub(predictions, labels)));
//     spec.train_op = {.optimizer = optimizer};     // optimizer.minimize(loss)
//     return spec;
//   };
//   ls::estimator::Estimator est(model_fn, {.model_dir = "/tmp/m"});
//   est.train(input_fn, {.steps = 100});
//   auto results = est.evaluate(input_fn, {.steps = 10});   // {"loss": ..., "global_step": 100}
//
// How it maps TensorFlow's graph-mode design onto eager C++:
// - model_fn runs on every step (TensorFlow traced it once into a graph).
//   Its first call, on the calling thread inside the strategy's scope, makes
//   the model's variables (mirrored under a strategy); later calls must reuse
//   them: make layers and the optimizer once, outside model_fn, and capture
//   them. A later call that makes a variable is a ValueError naming it.
// - train_op is what TensorFlow's optimizer.minimize(loss) built: the
//   Estimator records model_fn's TRAIN call on a GradientTape, takes the
//   gradients of train_op.loss (or the spec's loss) and applies them.
// - eval_metric_ops are updates of Keras-style metrics (nn/metrics.h); the
//   Estimator keeps each metric's state per replica, merges the replicas'
//   and sums the workers' states, and adds "loss" (the mean of the batches'
//   losses) and "global_step".
//
// Under a strategy (RunConfig::train_distribute / eval_distribute) input_fn
// is called once per worker, with the InputContext of that worker, and each
// replica takes its own next batch from it: a dataset batched by 10 gives
// every replica 10 examples per step — per-replica batches, as Estimator
// defined them, unlike Model::fit, which splits one global batch. The
// replicas' gradients are summed; the canned heads divide a mean loss by
// the replica count, as TensorFlow's do.
//
// Under ParameterServerStrategy (train_distribute, on the chief) every task
// runs the same program: the chief's train() builds the model on the
// parameter servers and schedules one step per global step on the workers,
// which serve() with the same model_fn and their own input_fn; each
// worker's update lands without waiting for the others (asynchronous, as
// TensorFlow 1 ran Estimators under that strategy); the chief counts the
// global steps, logs and saves (the variables and optimizer slots read
// from the parameter servers). evaluate() and predict() run on the chief.
//
// Checkpoints: <model_dir>/model.ckpt-<global_step>.safetensors (Lockstep's
// checksummed, atomic safetensors file), written every
// save_checkpoints_steps or _secs and when train() ends, by the chief only;
// keep_checkpoint_max are kept. train(), evaluate() and predict() start from
// the newest one, as Estimator does, so a run killed at any point resumes
// from its last checkpoint. input_fn is called anew by every train() call,
// as in TensorFlow: the input restarts from its beginning.
//
// An Estimator is a handle: copies share the model and its state. Not
// thread-safe: one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/distribute/cluster_coordinator.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/estimator/features.h"
#include "lockstep/estimator/run_config.h"
#include "lockstep/nn/metrics.h"
#include "lockstep/optim/optimizers.h"

namespace lockstep::estimator {

// tf.estimator.ModeKeys.
enum class ModeKeys { kTrain, kEval, kPredict };
// TensorFlow's strings: "train", "eval", "infer".
const char* mode_name(ModeKeys mode);

// The `params` dictionary handed to model_fn.
using ParamValue = std::variant<bool, double, std::string>;
using Params = std::map<std::string, ParamValue>;

// What TensorFlow's optimizer.minimize(loss, var_list=...) builds.
struct TrainOp {
  // Made once, outside model_fn (its slots live across steps).
  Optimizer optimizer{};
  // The loss to minimise; undefined: the spec's loss.
  Tensor loss{};
  // Empty: every trainable variable model_fn made.
  std::vector<Variable> var_list{};
};

// One update of a metric: metric.update_state(y_true, y_pred, sample_weight)
// (for metrics::Mean and Sum, y_true holds the values). `metric` names the
// kind of metric; a fresh instance on every call is fine.
struct EvalMetricOp {
  Metric metric{};
  Tensor y_true{};
  Tensor y_pred{};
  Tensor sample_weight{};
};

// tf.estimator.EstimatorSpec.
struct EstimatorSpec {
  ModeKeys mode = ModeKeys::kTrain;
  // Each [batch, ...]; what predict() yields.
  std::map<std::string, Tensor> predictions{};
  // A scalar; required in TRAIN and EVAL.
  Tensor loss{};
  // Required in TRAIN.
  TrainOp train_op{};
  std::map<std::string, EvalMetricOp> eval_metric_ops{};
};

// model_fn(features, labels, mode, params, config); labels are undefined in
// PREDICT (and when input_fn yields none).
using ModelFn =
    std::function<EstimatorSpec(const Features& features, const Tensor& labels, ModeKeys mode,
                                const Params& params, const RunConfig& config)>;

// input_fn: a function returning a Dataset of features_and_labels elements
// (features.h), taking nothing or the worker's distribute::InputContext
// (to shard by input_pipeline_id, say).
class InputFn {
 public:
  template <typename F>
  requires std::is_invocable_r_v<data::Dataset, F&> InputFn(
      F fn)  // NOLINT(google-explicit-constructor): as Python's callables
      : fn_([fn = std::move(fn)](const distribute::InputContext&) mutable { return fn(); }) {}
  template <typename F>
  requires(std::is_invocable_r_v<data::Dataset, F&, const distribute::InputContext&> &&
           !std::is_invocable_v<F&>) InputFn(F fn)  // NOLINT(google-explicit-constructor)
      : fn_(std::move(fn)) {}
  data::Dataset operator()(const distribute::InputContext& context) const { return fn_(context); }

 private:
  std::function<data::Dataset(const distribute::InputContext&)> fn_;
};

// What a hook sees after each training step (tf.train.SessionRunHook).
struct SessionRunValues {
  std::int64_t global_step = 0;  // after the step
  double loss = 0;               // the step's loss, summed over the replicas
};
class RunContext {
 public:
  void request_stop() { stop_ = true; }
  bool stop_requested() const { return stop_; }

 private:
  bool stop_ = false;
};
class SessionRunHook {
 public:
  virtual ~SessionRunHook() = default;
  virtual void begin() {}
  virtual void after_run(RunContext& run_context, const SessionRunValues& values) {
    (void)run_context;
    (void)values;
  }
  virtual void end(std::int64_t global_step) { (void)global_step; }
};

struct EstimatorOptions {
  // Overrides config.model_dir when set (they must agree when both are).
  std::string model_dir{};
  RunConfig config{};
  Params params{};
  // Where INFO lines go (TensorFlow logs them to stderr); null: std::cerr.
  std::ostream* log = nullptr;
};

struct TrainOptions {
  // At most one: this many more steps, or up to this global step.
  // Neither: until input_fn's dataset ends.
  std::optional<std::int64_t> steps{};
  std::optional<std::int64_t> max_steps{};
  std::vector<std::shared_ptr<SessionRunHook>> hooks{};
};

struct EvaluateOptions {
  // Batches per replica; none: until the input ends.
  std::optional<std::int64_t> steps{};
  // The results also go to <model_dir>/eval_<name> (or eval) as TensorBoard
  // scalars at the global step, as TensorFlow writes them.
  std::string name{};
  // Evaluate this checkpoint instead of the newest.
  std::string checkpoint_path{};
};

struct PredictOptions {
  // One map per example (TensorFlow's default), or one per batch.
  bool yield_single_examples = true;
  std::string checkpoint_path{};
};

using EvalResults = std::map<std::string, double>;
using Predictions = std::map<std::string, Tensor>;

class Estimator {
 public:
  explicit Estimator(ModelFn model_fn, EstimatorOptions options = {});

  // Trains; returns *this, as TensorFlow returns self.
  Estimator& train(const InputFn& input_fn, TrainOptions options = {});
  EvalResults evaluate(const InputFn& input_fn, EvaluateOptions options = {});
  std::vector<Predictions> predict(const InputFn& input_fn, PredictOptions options = {});

  // Serves this worker or ps task of a ParameterServerStrategy job (TF_CONFIG)
  // until the chief ends it. A worker runs the training steps the chief's
  // train() schedules with this Estimator's model_fn, on batches from
  // `train_input_fn` (called once, with the worker's InputContext); its
  // model must be the chief's (same model_fn and params). Its RunConfig
  // has no strategy.
  void serve(const InputFn& train_input_fn, distribute::ServerOptions options = {});

  // The newest checkpoint in model_dir, if any.
  std::optional<std::string> latest_checkpoint() const;
  // A variable's value in the newest checkpoint ("global_step" included),
  // as TensorFlow reads it; a ValueError lists the names otherwise.
  Tensor get_variable_value(const std::string& name) const;
  std::vector<std::string> get_variable_names() const;

  const std::string& model_dir() const;
  const RunConfig& config() const;
  const Params& params() const;

  struct Impl;

 protected:
  std::shared_ptr<Impl> impl_;
};

// The results as Python prints the dictionary evaluate() returns
// ({'average_loss': 1.0, 'global_step': 10, ...}): keys sorted, values as
// NumPy prints float32 numbers, global_step as an integer.
std::string format_results(const EvalResults& results);

}  // namespace lockstep::estimator
