// Estimator::Impl: the state one Estimator keeps (its model_fn, model_dir,
// strategy and the model its first call built) and the helpers its three
// files share: estimator.cc (the API, building, checkpoints),
// estimator_loops.cc (train, evaluate and predict over the replicas) and
// estimator_ps.cc (train under ParameterServerStrategy). Internal to
// estimator/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "estimator/model_dir.h"
#include "lockstep/autodiff/variable.h"
#include "lockstep/core/error.h"
#include "lockstep/core/log.h"
#include "lockstep/core/timer.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/estimator/estimator.h"

namespace lockstep::estimator {

using distribute::ReplicaContext;
using distribute::Strategy;

// TensorFlow's name of a mode ("train", "eval", "infer").
const char* mode_name(ModeKeys mode);

struct Estimator::Impl {
  ModelFn model_fn;
  std::string model_dir;
  RunConfig config;
  Params params;
  std::ostream* log = nullptr;

  // The model, made by model_fn's first call under `strategy`.
  bool built = false;
  Strategy strategy;
  detail::ModelState state;
  std::int64_t global_step = 0;

  // TensorFlow's logged lines ("INFO:lockstep:…"), on the chief: onto the
  // caller's stream, or through the log sink at `level`.
  void say(LogLevel level, const std::string& line) const {
    if (!strategy.is_chief()) return;
    LogStream fallback(level);
    (log ? *log : fallback) << line << "\n" << std::flush;
  }
  void info(const std::string& line) const { say(LogLevel::kInfo, "INFO:lockstep:" + line); }
  // The strategy the model lives under: train_distribute, else
  // eval_distribute, else the default (one replica on the calling thread).
  Strategy model_strategy() const {
    if (config.train_distribute) return *config.train_distribute;
    if (config.eval_distribute) return *config.eval_distribute;
    return Strategy();
  }
  // evaluate()'s: eval_distribute when it is the model's strategy (the one
  // it was built under, or will be), the default strategy when unset (each
  // worker evaluates alone, its input_fn told of one pipeline, as
  // TensorFlow's undistributed evaluation).
  Strategy eval_strategy() const {
    if (!config.eval_distribute) return Strategy();
    const Strategy model = built ? strategy : model_strategy();
    LOCKSTEP_CHECK(*config.eval_distribute == model, "Estimator: eval_distribute (",
                   config.eval_distribute->name(), ") is not the strategy the model trains under (",
                   model.name(),
                   "); Lockstep evaluates under the training strategy or none. "
                   "Hint: set eval_distribute to train_distribute, or leave it unset");
    return strategy;
  }

  EstimatorSpec call(const Features& features, const Tensor& labels, ModeKeys mode) const {
    EstimatorSpec spec = model_fn(features, labels, mode, params, config);
    check_spec(spec, mode);
    return spec;
  }
  void check_spec(const EstimatorSpec& spec, ModeKeys mode) const;
  class Progress;
  // One step of model_fn's TRAIN call on a batch: recorded on a tape, its
  // gradients applied by its optimizer (summed with the other replicas' by
  // the replica context, or sent to the parameter servers). Takes the
  // optimizer from the spec when `adopt`. Returns the step's loss.
  double train_step(const Features& features, const Tensor& labels, bool adopt);
  // train() under ParameterServerStrategy, on the chief: steps scheduled on
  // the workers (Estimator::serve) up to global step `last`.
  void train_on_parameter_servers(Progress& progress, std::int64_t last);
  // Runs model_fn's first call inside the strategy's scope, recording the
  // variables it makes (and the optimizer, in TRAIN); later calls check
  // that no variable is made.
  EstimatorSpec build(const Features& features, const Tensor& labels, ModeKeys mode);
  // Takes the optimizer from a TRAIN spec (one optimizer for the model's
  // life).
  void adopt_optimizer(const EstimatorSpec& spec);
  // The newest checkpoint (or `path`) into the model; the file restored,
  // nullopt when there is none. A damaged newest checkpoint (an IOError:
  // a disk, a hand, a hostile file) is named and skipped for the one
  // before it; when every one is damaged, the newest's error. Every worker
  // reads the same files (a barrier after each save makes sure of it).
  std::optional<std::string> restore(const std::string& path = {});
  void save();
};

// The functions a parameter-server job's workers run for an Estimator
// (estimator_ps.cc); registered once, by the first Estimator made.
void register_parameter_server_functions();

namespace detail {

// Variables made while alive are an error: model_fn's calls after the
// first must reuse the model's variables.
class NoNewVariables {
 public:
  NoNewVariables()
      : scope_([](const Tensor&, Variable::Options options) -> Variable {
          lockstep::detail::throw_error<ValueError>(
              "Estimator: model_fn made the variable '", options.name,
              "' on a call after its first. TensorFlow traced model_fn once; Lockstep calls it "
              "on every step, so it must reuse what its first call made. Hint: make layers "
              "outside model_fn and capture them");
        }) {}

 private:
  VariableCreatorScope scope_;
};

inline std::int64_t rows_of(const Features& features) {
  const Tensor& t = features.begin()->second;
  return t.rank() == 0 ? 1 : t.dim(0);
}

inline float scalar_loss(const Tensor& loss) { return loss.to(DType::kFloat32).item<float>(); }

}  // namespace detail

class Estimator::Impl::Progress {
 public:
  Progress(Impl& m, const TrainOptions& o) : m_(m), o_(o), logged_step_(m.global_step) {
    const RunConfig& c = m.config;
    save_secs_ = c.save_checkpoints_secs.value_or(c.save_checkpoints_steps ? 0.0 : 600.0);
    for (auto& hook : o_.hooks) hook->begin();
  }
  // Whether this process's clock or step count says a checkpoint is due
  // after the step just counted.
  bool save_due_here() const {
    const RunConfig& c = m_.config;
    return c.save_checkpoints_steps ? m_.global_step % *c.save_checkpoints_steps == 0
                                    : m_.strategy.is_chief() && since_save_.seconds() >= save_secs_;
  }
  // After global step m.global_step, whose loss (summed over the replicas)
  // is `loss`.
  void after_step(double loss) {
    loss_ = loss;
    LOCKSTEP_CHECK(std::isfinite(loss), "Estimator.train: the loss is ", loss, " at global step ",
                   m_.global_step, " (NaN loss during training)");
    RunContext run_context;
    for (auto& hook : o_.hooks) hook->after_run(run_context, {m_.global_step, loss});
    stop_ = stop_ || run_context.stop_requested();
    // TensorFlow logs the loss of the first step and every
    // log_step_count_steps after it, with the step count before the step.
    const std::int64_t every = m_.config.log_step_count_steps;
    const std::int64_t before = m_.global_step - 1;
    if (every > 0 && before % every == 0) {
      std::ostringstream line;
      line << "loss = " << loss << ", step = " << before;
      if (before > logged_step_) {
        const double secs = since_log_.seconds();
        line << " (" << secs << " sec)";
        std::ostringstream rate;
        rate << "global_step/sec: " << static_cast<double>(before - logged_step_) / secs;
        m_.info(rate.str());
      }
      m_.info(line.str());
      logged_step_ = before;
      since_log_.reset();
    }
  }
  void save() {
    m_.save();
    saved_step_ = m_.global_step;
    since_save_.reset();
  }
  // The last save (unless the last step saved), the hooks' end, the last line.
  void finish() {
    if (saved_step_ != m_.global_step) m_.save();
    for (auto& hook : o_.hooks) hook->end(m_.global_step);
    std::ostringstream final_loss;
    final_loss << "Loss for final step: " << loss_ << ".";
    m_.info(final_loss.str());
  }
  bool stop_requested() const { return stop_; }

 private:
  Impl& m_;
  const TrainOptions& o_;
  double save_secs_ = 600;
  Timer since_save_, since_log_;
  std::int64_t saved_step_ = -1, logged_step_;
  double loss_ = 0;
  bool stop_ = false;
};

}  // namespace lockstep::estimator
