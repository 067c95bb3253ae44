// Estimator: train, evaluate and predict as TensorFlow's estimator.py runs
// them, over Lockstep's strategies (one model_fn call per replica and step,
// gradients summed by the replica contexts, optimizers from optim), with
// checkpoints under model_dir (model_dir.cc).
#include "lockstep/estimator/estimator.h"

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include "estimator/model_dir.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/dir_lock.h"
#include "lockstep/core/log.h"
#include "lockstep/core/timer.h"
#include "lockstep/distribute/assigned_on_worker.h"
#include "lockstep/distribute/cluster_coordinator.h"
#include "lockstep/distribute/parameter_server_strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/io/event_file.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::estimator {

namespace fs = std::filesystem;
using distribute::ReplicaContext;
using distribute::Strategy;

const char* mode_name(ModeKeys mode) {
  switch (mode) {
    case ModeKeys::kTrain:
      return "train";
    case ModeKeys::kEval:
      return "eval";
    case ModeKeys::kPredict:
      return "infer";
  }
  return "?";
}

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
  // evaluate()'s: eval_distribute when it is the model's strategy, the
  // default strategy when unset.
  Strategy eval_strategy() const {
    if (!config.eval_distribute) return Strategy();
    LOCKSTEP_CHECK(*config.eval_distribute == strategy, "Estimator: eval_distribute (",
                   config.eval_distribute->name(), ") is not the strategy the model trains under (",
                   strategy.name(),
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
  distribute::InputContext input_context(const Strategy& s) const {
    return {.num_input_pipelines = s.num_workers(),
            .input_pipeline_id = s.worker_index(),
            .num_replicas_in_sync = s.num_replicas_in_sync()};
  }
};

namespace {

void register_parameter_server_functions();  // below, with the functions

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

// A worker's input: input_fn's dataset, and the element build() looked at
// first (it is trained on all the same).
class WorkerInput {
 public:
  WorkerInput(const InputFn& input_fn, const distribute::InputContext& context)
      : it_(input_fn(context).make_iterator()) {}
  std::optional<data::Element> next() {
    if (pending_) return std::exchange(pending_, std::nullopt);
    return it_.next();
  }
  const std::optional<data::Element>& peek() {
    if (!pending_) pending_ = it_.next();
    return pending_;
  }

 private:
  data::Iterator it_;
  std::optional<data::Element> pending_;
};

std::int64_t rows_of(const Features& features) {
  const Tensor& t = features.begin()->second;
  return t.rank() == 0 ? 1 : t.dim(0);
}

float scalar_loss(const Tensor& loss) { return loss.to(DType::kFloat32).item<float>(); }

}  // namespace

void Estimator::Impl::check_spec(const EstimatorSpec& spec, ModeKeys mode) const {
  LOCKSTEP_CHECK(spec.mode == mode, "Estimator: model_fn was called in mode ", mode_name(mode),
                 " and returned a spec for mode ", mode_name(spec.mode));
  if (mode == ModeKeys::kPredict) {
    LOCKSTEP_CHECK(!spec.predictions.empty(),
                   "Estimator: model_fn returned no predictions in PREDICT mode");
    return;
  }
  LOCKSTEP_CHECK(spec.loss.defined(), "Estimator: model_fn returned no loss in ", mode_name(mode),
                 " mode");
  LOCKSTEP_CHECK_AS(ShapeError, spec.loss.numel() == 1,
                    "Estimator: model_fn's loss must be a "
                    "scalar, got shape ",
                    spec.loss.shape());
  if (mode == ModeKeys::kTrain) {
    LOCKSTEP_CHECK(spec.train_op.optimizer.defined(),
                   "Estimator: model_fn returned no train_op in TRAIN mode. Hint: "
                   "spec.train_op = {.optimizer = optimizer}");
  }
}

EstimatorSpec Estimator::Impl::build(const Features& features, const Tensor& labels,
                                     ModeKeys mode) {
  NoGradGuard no_grad;
  if (built) {
    NoNewVariables guard;
    return call(features, labels, mode);
  }
  strategy = model_strategy();
  state.strategy = strategy;
  if (config.tf_random_seed) set_random_seed(*config.tf_random_seed);
  std::vector<Variable> made;
  EstimatorSpec spec;
  {
    auto scope = strategy.scope();
    // Innermost creator: records, then makes the variable with the
    // strategy's own creator.
    VariableCreatorScope record([&](const Tensor& initial, Variable::Options options) {
      Variable v;
      {
        auto inner = strategy.scope();
        v = create_variable(initial, std::move(options));
      }
      made.push_back(v);
      return v;
    });
    spec = call(features, labels, mode);
  }
  std::set<std::string> names;
  for (const Variable& v : made) {
    LOCKSTEP_CHECK(names.insert(v.name()).second, "Estimator: model_fn made two variables named '",
                   v.name(),
                   "'; checkpoints keep variables by name. Hint: give its layers "
                   "distinct names");
    state.variables.push_back(v);
    if (v.trainable()) state.trainable.push_back(v);
  }
  built = true;
  return spec;
}

void Estimator::Impl::adopt_optimizer(const EstimatorSpec& spec) {
  if (!state.optimizer.defined()) {
    state.optimizer = spec.train_op.optimizer;
    return;
  }
  LOCKSTEP_CHECK(spec.train_op.optimizer.operator->() == state.optimizer.operator->(),
                 "Estimator: model_fn returned another optimizer (",
                 spec.train_op.optimizer->name(), ") than on its first TRAIN call (",
                 state.optimizer->name(),
                 "); an optimizer keeps its slots across steps. Hint: make it once, outside "
                 "model_fn");
}

std::optional<std::string> Estimator::Impl::restore(const std::string& path) {
  if (!path.empty()) {
    global_step = detail::restore_checkpoint(path, state);
    return path;
  }
  const auto all = detail::checkpoints_in(model_dir);
  std::exception_ptr newest_error;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      global_step = detail::restore_checkpoint(it->second, state);  // changes nothing if it throws
      return it->second;
    } catch (const IOError& e) {
      if (!newest_error) newest_error = std::current_exception();
      say(LogLevel::kWarning, std::string("WARNING:lockstep:skipping a damaged checkpoint: ") +
                                  e.what() + "; falling back to the one before it");
    }
  }
  if (newest_error) std::rethrow_exception(newest_error);
  return std::nullopt;
}

void Estimator::Impl::save() {
  if (strategy.is_chief()) {
    const std::string path =
        detail::save_checkpoint(model_dir, state, global_step, config.keep_checkpoint_max);
    info("Saving checkpoints for " + std::to_string(global_step) + " into " + path + ".");
  }
  // Every worker leaves only when the chief has written: the next call's
  // restore reads the same file everywhere.
  strategy.extended().barrier_across_workers();
}

Estimator::Estimator(ModelFn model_fn, EstimatorOptions options) : impl_(std::make_shared<Impl>()) {
  LOCKSTEP_CHECK(model_fn != nullptr, "Estimator: model_fn is empty");
  // A worker that runs a plain Server in a process that made an Estimator
  // then says it serves none, rather than that the function is unknown.
  register_parameter_server_functions();
  Impl& m = *impl_;
  m.model_fn = std::move(model_fn);
  m.config = std::move(options.config);
  m.params = std::move(options.params);
  m.log = options.log;
  const RunConfig& c = m.config;
  LOCKSTEP_CHECK(!(c.save_checkpoints_steps && c.save_checkpoints_secs),
                 "RunConfig: save_checkpoints_steps and save_checkpoints_secs cannot both be set");
  LOCKSTEP_CHECK(!c.save_checkpoints_steps || *c.save_checkpoints_steps > 0,
                 "RunConfig: save_checkpoints_steps must be > 0, got ",
                 c.save_checkpoints_steps.value_or(0));
  LOCKSTEP_CHECK(!c.save_checkpoints_secs || *c.save_checkpoints_secs > 0,
                 "RunConfig: save_checkpoints_secs must be > 0, got ",
                 c.save_checkpoints_secs.value_or(0));
  LOCKSTEP_CHECK(c.keep_checkpoint_max >= 0, "RunConfig: keep_checkpoint_max must be >= 0, got ",
                 c.keep_checkpoint_max);
  LOCKSTEP_CHECK(c.log_step_count_steps >= 0, "RunConfig: log_step_count_steps must be >= 0, got ",
                 c.log_step_count_steps);
  LOCKSTEP_CHECK(
      options.model_dir.empty() || c.model_dir.empty() || options.model_dir == c.model_dir,
      "Estimator: model_dir '", options.model_dir, "' and config.model_dir '", c.model_dir,
      "' differ; set one");
  m.model_dir = !options.model_dir.empty() ? options.model_dir : c.model_dir;
  m.strategy = m.model_strategy();
  LOCKSTEP_CHECK(!m.model_dir.empty() || m.strategy.num_workers() == 1,
                 "Estimator: ", m.strategy.name(), " has ", m.strategy.num_workers(),
                 " workers and no model_dir; every worker must read the chief's checkpoints. "
                 "Hint: set a model_dir every worker sees");
  if (m.model_dir.empty()) {
    // TensorFlow: "Using temporary folder as model directory".
    std::string tmpl = (fs::temp_directory_path() / "lockstep_estimator_XXXXXX").string();
    LOCKSTEP_CHECK_AS(IOError, ::mkdtemp(tmpl.data()) != nullptr, tmpl,
                      ": cannot make a temporary model directory");
    m.model_dir = tmpl;
    m.info("Using temporary folder as model directory: " + m.model_dir);
  } else {
    std::error_code ec;
    fs::create_directories(m.model_dir, ec);
    LOCKSTEP_CHECK_AS(IOError, !ec, m.model_dir,
                      ": cannot create the model directory: ", ec.message());
  }
  m.config.model_dir = m.model_dir;
}

// One train() call's bookkeeping after each global step: the hooks, the
// loss check, TensorFlow's log lines, and when a checkpoint is due.
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

double Estimator::Impl::train_step(const Features& features, const Tensor& labels, bool adopt) {
  EstimatorSpec spec;
  std::vector<Tensor> grads;
  std::vector<Variable> vars;
  {
    GradientTape tape;
    {
      NoNewVariables guard;
      spec = call(features, labels, ModeKeys::kTrain);
    }
    vars = spec.train_op.var_list.empty() ? state.trainable : spec.train_op.var_list;
    const Tensor& objective = spec.train_op.loss.defined() ? spec.train_op.loss : spec.loss;
    grads = tape.gradient(objective, vars);
  }
  if (adopt) adopt_optimizer(spec);
  spec.train_op.optimizer.apply_gradients(grads, vars);
  return scalar_loss(spec.loss);
}

Estimator& Estimator::train(const InputFn& input_fn, TrainOptions o) {
  Impl& m = *impl_;
  LOCKSTEP_CHECK(!(o.steps && o.max_steps),
                 "Estimator.train: can not provide both steps and "
                 "max_steps");
  LOCKSTEP_CHECK(!o.steps || *o.steps > 0, "Estimator.train: steps must be > 0, got ",
                 o.steps.value_or(0));
  LOCKSTEP_CHECK(!o.max_steps || *o.max_steps > 0, "Estimator.train: max_steps must be > 0, got ",
                 o.max_steps.value_or(0));
  const Strategy strategy = m.built ? m.strategy : m.model_strategy();
  // One trainer at a time in a model_dir (the chief writes it): a second
  // would restore the first's checkpoints and prune its files (issue #41).
  // evaluate and predict only read, beside a trainer, as TF's evaluators do.
  std::optional<DirectoryLock> lock;
  if (strategy.is_chief()) lock.emplace(m.model_dir, "model_dir");
  const auto ext = strategy.extended();
  const int replicas = strategy.num_local_replicas();
  WorkerInput input(input_fn, m.input_context(strategy));
  const std::optional<data::Element>& first = input.peek();
  LOCKSTEP_CHECK(first.has_value(), "Estimator.train: input_fn's dataset is empty");
  Features features;
  Tensor labels;
  split_features_and_labels(*first, features, labels);
  m.adopt_optimizer(m.build(features, labels, ModeKeys::kTrain));
  if (const auto restored = m.restore()) m.info("Restoring parameters from " + *restored);
  if (o.max_steps && m.global_step >= *o.max_steps) {
    m.info("Skipping training since max_steps has already saved.");
    return *this;
  }
  const std::int64_t last = o.steps       ? m.global_step + *o.steps
                            : o.max_steps ? *o.max_steps
                                          : std::numeric_limits<std::int64_t>::max();
  Impl::Progress progress(m, o);
  if (ext.uses_parameter_servers()) {
    m.train_on_parameter_servers(progress, last);
    progress.finish();
    return *this;
  }
  std::vector<data::Element> batches(static_cast<std::size_t>(replicas));
  std::vector<double> losses(static_cast<std::size_t>(replicas));
  while (m.global_step < last) {
    // Each replica takes its own next batch (per-replica batches). A hook's
    // stop is agreed like the end of the input, so every worker stops at
    // the same step.
    bool have = !progress.stop_requested();
    std::int64_t rows = 0;
    std::vector<std::int64_t> local_rows(static_cast<std::size_t>(replicas), 0);
    for (int r = 0; r < replicas && have; ++r) {
      auto element = input.next();
      if (!element) {
        have = false;
        break;
      }
      batches[static_cast<std::size_t>(r)] = std::move(*element);
    }
    std::vector<Features> replica_features(static_cast<std::size_t>(replicas));
    std::vector<Tensor> replica_labels(static_cast<std::size_t>(replicas));
    for (int r = 0; r < replicas && have; ++r) {
      const auto i = static_cast<std::size_t>(r);
      split_features_and_labels(batches[i], replica_features[i], replica_labels[i]);
      local_rows[i] = rows_of(replica_features[i]);
      rows += local_rows[i];
    }
    const auto agreement = ext.agree_on_step(have, rows);
    if (!agreement.all_have_batch) {
      if (!progress.stop_requested()) {
        m.info("input_fn's dataset ended at global step " + std::to_string(m.global_step) + ".");
      }
      break;
    }
    std::vector<Variable> non_trainable;
    for (const Variable& v : m.state.variables) {
      if (!v.trainable()) non_trainable.push_back(v);
    }
    ext.run_step({.global_rows = agreement.total_rows, .sizes = local_rows, .sync = &non_trainable},
                 [&](ReplicaContext& ctx) {
                   const auto r = static_cast<std::size_t>(ctx.local_replica_id());
                   losses[r] = m.train_step(replica_features[r], replica_labels[r], r == 0);
                 });
    ++m.global_step;
    // The step's loss: the replicas' losses summed (TensorFlow's report);
    // beside it, whether the chief's clock says a checkpoint is due (every
    // worker then saves at the same step: the save ends in a barrier).
    std::vector<double> total{0.0, progress.save_due_here() ? 1.0 : 0.0};
    for (double l : losses) total[0] += l;
    ext.sum_across_workers(total);
    progress.after_step(total[0]);
    if (total[1] > 0) progress.save();
  }
  progress.finish();
  return *this;
}

// ---- Under ParameterServerStrategy ----
//
// The chief (the coordinator) builds the model in the strategy's scope, so
// its variables live on the parameter servers, and schedules one function
// per global step on the workers. A worker (Estimator::serve) builds the
// same model from its own input_fn's first batch, binds its variables to
// the chief's, and runs model_fn's TRAIN step on its next batch: its
// optimizer's update goes to the parameter servers, without waiting for
// the other workers (asynchronous training, as TensorFlow 1's between-graph
// ParameterServerStrategy ran Estimators).

namespace {

constexpr char kPsBuild[] = "lockstep.estimator.build";
constexpr char kPsStep[] = "lockstep.estimator.train_step";
constexpr char kPsResource[] = "lockstep.estimator";

// What a worker keeps: its input (input_fn called once, with its
// InputContext) and the state a step assigns rather than trains.
struct EstimatorOnWorker {
  std::unique_ptr<WorkerInput> input;
  distribute::AssignedOnWorker assigned;
};

// The Estimator this worker process serves (serve() sets it).
struct ServedEstimator {
  std::mutex mu;
  std::shared_ptr<Estimator::Impl> impl;
  std::optional<InputFn> input_fn;
  std::atomic<std::int64_t> steps{0};  // run here, for the log
};

ServedEstimator& served_estimator() {
  static ServedEstimator served;
  return served;
}

std::shared_ptr<Estimator::Impl> served_impl(const distribute::WorkerContext& ctx) {
  ServedEstimator& served = served_estimator();
  std::lock_guard lk(served.mu);
  LOCKSTEP_CHECK(served.impl != nullptr, ctx.task(),
                 ": this worker serves no Estimator; the chief's Estimator.train schedules its "
                 "steps on workers that run Estimator::serve(input_fn) (the same program), not "
                 "a plain Server");
  return served.impl;
}

// Arguments: the chief's index of each of the model's variables.
std::vector<Tensor> build_on_worker(distribute::WorkerContext& ctx) {
  if (ctx.resource<EstimatorOnWorker>(kPsResource)) return {};
  const std::shared_ptr<Estimator::Impl> impl = served_impl(ctx);
  auto on = std::make_shared<EstimatorOnWorker>();
  on->input = std::make_unique<WorkerInput>(
      *served_estimator().input_fn,
      distribute::InputContext{.num_input_pipelines = ctx.num_workers(),
                               .input_pipeline_id = ctx.worker_index(),
                               .num_replicas_in_sync = 1});
  const std::optional<data::Element>& first = on->input->peek();
  LOCKSTEP_CHECK(first.has_value(), ctx.task(), ": Estimator: input_fn's dataset is empty");
  Features features;
  Tensor labels;
  split_features_and_labels(*first, features, labels);
  impl->adopt_optimizer(impl->build(features, labels, ModeKeys::kTrain));
  const std::vector<Variable>& made = impl->state.variables;
  const std::vector<std::int64_t> indices = ctx.argument(0).to_vector<std::int64_t>();
  LOCKSTEP_CHECK(indices.size() == made.size(), ctx.task(), ": Estimator: model_fn made ",
                 made.size(), " variables here and ", indices.size(),
                 " on the chief; every task must build the same model");
  ctx.bind_variables(made, indices);
  std::vector<Variable> non_trainable;
  for (const Variable& v : made) {
    if (!v.trainable()) non_trainable.push_back(v);
  }
  on->assigned = distribute::AssignedOnWorker(std::move(non_trainable));
  ctx.set_resource(kPsResource, on);
  return {};
}

// One global step on the worker's next batch; returns its loss, or
// nothing when the worker's input has ended.
std::vector<Tensor> step_on_worker(distribute::WorkerContext& ctx) {
  auto on = ctx.resource<EstimatorOnWorker>(kPsResource);
  LOCKSTEP_CHECK_AS(InternalError, on != nullptr, ctx.task(),
                    ": Estimator: the model was not built");
  std::optional<data::Element> element = on->input->next();
  if (!element) return {};
  Features features;
  Tensor labels;
  split_features_and_labels(*element, features, labels);
  const double loss = served_impl(ctx)->train_step(features, labels, false);
  on->assigned.write_changed(ctx);  // moving statistics, to the parameter servers
  ++served_estimator().steps;
  return {Tensor::scalar(static_cast<float>(loss))};
}

// Every process that makes an Estimator registers the workers' functions
// (the chief checks the names it schedules).
void register_parameter_server_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    distribute::register_worker_function(kPsBuild, build_on_worker);
    distribute::register_worker_function(kPsStep, step_on_worker);
  });
}

}  // namespace

void Estimator::Impl::train_on_parameter_servers(Progress& progress, std::int64_t last) {
  const distribute::ParameterServerStrategy ps(strategy);
  std::vector<std::int64_t> indices;
  for (const Variable& v : state.variables) indices.push_back(ps.variable_index(v));
  distribute::ClusterCoordinator coordinator(ps);
  // What the workers raise (named by the coordinator) is said to come from train().
  const auto on_workers = [](const auto& fn) {
    try {
      return fn();
    } catch (const Error&) {
      lockstep::detail::rethrow_with_prefix("Estimator.train: ");
    }
  };
  on_workers(
      [&] { coordinator.create_per_worker_resource(kPsBuild, {Tensor::from_vector(indices)}); });
  // Steps go out in runs that end where a line is logged or a checkpoint
  // is due by steps, so each is taken after exactly that many steps; a
  // run waits for its steps (join), then counts them in order.
  const std::int64_t log_every = config.log_step_count_steps;
  const std::int64_t save_every = config.save_checkpoints_steps.value_or(0);
  constexpr std::int64_t kMaxRun = 256;
  bool ended = false;
  while (global_step < last && !ended && !progress.stop_requested()) {
    std::int64_t end = std::min(last, global_step + kMaxRun);
    if (save_every > 0) end = std::min(end, (global_step / save_every + 1) * save_every);
    // Lines are logged after steps k * log_every + 1.
    if (log_every > 0)
      end = std::min(end, (global_step - 1 + log_every) / log_every * log_every + 1);
    const std::vector<std::vector<Tensor>> results = on_workers([&] {
      std::vector<distribute::RemoteValue> values;
      for (std::int64_t s = global_step; s < end; ++s)
        values.push_back(coordinator.schedule(kPsStep));
      coordinator.join();
      return coordinator.fetch(values);
    });
    bool due = false;
    for (const std::vector<Tensor>& out : results) {
      if (out.empty()) {  // that worker's input ended
        ended = true;
        continue;
      }
      ++global_step;
      progress.after_step(out[0].item<float>());
      due = due || progress.save_due_here();
    }
    if (ended)
      info("input_fn's dataset ended on a worker at global step " + std::to_string(global_step) +
           ".");
    if (due) progress.save();
  }
}

void Estimator::serve(const InputFn& input_fn, distribute::ServerOptions options) {
  Impl& m = *impl_;
  const std::optional<distribute::ClusterResolver> resolver =
      distribute::ClusterResolver::from_environment();
  LOCKSTEP_CHECK(resolver.has_value(),
                 "Estimator.serve: no cluster: set TF_CONFIG (a chief, workers and ps tasks); "
                 "serve() runs a worker or ps task of a ParameterServerStrategy job");
  const std::string& type = resolver->task_type();
  LOCKSTEP_CHECK(type == "worker" || type == "ps", "Estimator.serve: this task is ",
                 resolver->describe_task(type, resolver->task_id()),
                 "; the chief trains: construct ParameterServerStrategy there and call train() "
                 "with RunConfig{.train_distribute = strategy}; workers and ps tasks serve");
  LOCKSTEP_CHECK(!m.config.train_distribute && !m.config.eval_distribute,
                 "Estimator.serve: this task serves the chief's steps, one replica per worker; "
                 "leave train_distribute and eval_distribute unset on the tasks that serve");
  if (type == "worker") {
    ServedEstimator& served = served_estimator();
    std::lock_guard lk(served.mu);
    LOCKSTEP_CHECK(served.impl == nullptr,
                   "Estimator.serve: this process serves an Estimator "
                   "already; a worker runs one Estimator's steps");
    served.impl = impl_;
    served.input_fn = input_fn;
  }
  distribute::Server server(*resolver, std::move(options));
  m.info(type + " " + std::to_string(resolver->task_id()) + " serving at port " +
         std::to_string(server.port()));
  server.join();
  if (type == "worker")
    m.info("The chief ended the job; this worker ran " +
           std::to_string(served_estimator().steps.load()) + " of its training steps.");
}

EvalResults Estimator::evaluate(const InputFn& input_fn, EvaluateOptions o) {
  Impl& m = *impl_;
  LOCKSTEP_CHECK(!o.steps || *o.steps > 0, "Estimator.evaluate: steps must be > 0, got ",
                 o.steps.value_or(0));
  WorkerInput input(input_fn, m.input_context(m.built ? m.strategy : m.model_strategy()));
  const std::optional<data::Element>& first = input.peek();
  LOCKSTEP_CHECK(first.has_value(), "Estimator.evaluate: input_fn's dataset is empty");
  {
    Features features;
    Tensor labels;
    split_features_and_labels(*first, features, labels);
    m.build(features, labels, ModeKeys::kEval);
  }
  const Strategy strategy = m.eval_strategy();
  const auto ext = strategy.extended();
  const int replicas = strategy.num_local_replicas();
  if (!m.restore(o.checkpoint_path)) {
    m.info("Could not find trained model in model_dir: " + m.model_dir +
           ", running initialization to evaluate.");
  }
  // Each replica's metric states, by name ("loss" is Estimator's own).
  std::vector<std::map<std::string, Metric>> replica_metrics(static_cast<std::size_t>(replicas));
  std::int64_t step = 0;
  while (!o.steps || step < *o.steps) {
    std::vector<std::optional<data::Element>> batches(static_cast<std::size_t>(replicas));
    std::vector<double> have{0.0};
    for (auto& b : batches) {
      b = input.next();
      if (b) have[0] += 1;
    }
    ext.sum_across_workers(have);
    if (have[0] == 0) break;
    ext.run_replicas([&](ReplicaContext& ctx) {
      const auto r = static_cast<std::size_t>(ctx.local_replica_id());
      if (!batches[r]) return;
      Features features;
      Tensor labels;
      split_features_and_labels(*batches[r], features, labels);
      NoGradGuard no_grad;
      EstimatorSpec spec;
      {
        NoNewVariables guard;
        spec = m.call(features, labels, ModeKeys::kEval);
      }
      auto& metrics = replica_metrics[r];
      LOCKSTEP_CHECK(!spec.eval_metric_ops.contains("loss"),
                     "Estimator: a metric named 'loss' "
                     "is not allowed; Estimator defines it (the mean of the batches' losses)");
      for (const auto& [name, op] : spec.eval_metric_ops) {
        LOCKSTEP_CHECK(op.metric.defined(), "Estimator: eval_metric_ops['", name,
                       "'] has no metric");
        auto it = metrics.find(name);
        if (it == metrics.end())
          it = metrics.emplace(name, Metric(op.metric.impl()->clone())).first;
        it->second.update_state(op.y_true, op.y_pred, op.sample_weight);
      }
      auto it = metrics.find("loss");
      if (it == metrics.end()) it = metrics.emplace("loss", metrics::Mean()).first;
      it->second.update_state(spec.loss.to(DType::kFloat32).view_as(Shape{1}), Tensor(), Tensor());
    });
    ++step;
  }
  // Replicas' states merged, then summed over the workers.
  std::map<std::string, Metric> merged;
  for (auto& metrics : replica_metrics) {
    for (auto& [name, metric] : metrics) {
      auto it = merged.find(name);
      if (it == merged.end()) {
        merged.emplace(name, Metric(metric.impl()->clone())).first->second.merge(metric);
      } else {
        it->second.merge(metric);
      }
    }
  }
  if (strategy.num_workers() > 1) {
    ext.check_workers_agree("Estimator.evaluate", {{"metrics", std::to_string(merged.size())}});
    std::vector<Metric> in_order;
    for (auto& [name, metric] : merged) in_order.push_back(metric);
    sum_metric_states(in_order,
                      [&](std::vector<double>& states) { ext.sum_across_workers(states); });
  }
  EvalResults results;
  for (auto& [name, metric] : merged) results[name] = metric.result();
  results["global_step"] = static_cast<double>(m.global_step);
  m.info("Saving dict for global step " + std::to_string(m.global_step) + ": " +
         format_results(results));
  if (strategy.is_chief()) {
    io::EventFileWriter writer(
        (fs::path(m.model_dir) / (o.name.empty() ? "eval" : "eval_" + o.name)).string());
    for (const auto& [name, value] : results) {
      if (name != "global_step") writer.add_scalar(name, value, m.global_step);
    }
    writer.flush();
  }
  return results;
}

std::vector<Predictions> Estimator::predict(const InputFn& input_fn, PredictOptions o) {
  Impl& m = *impl_;
  WorkerInput input(input_fn, m.input_context(Strategy()));
  std::vector<Predictions> out;
  bool restored = false;
  while (auto element = input.next()) {
    Features features;
    Tensor labels;
    split_features_and_labels(*element, features, labels);
    if (!m.built) m.build(features, Tensor(), ModeKeys::kPredict);
    if (!restored) {
      if (!m.restore(o.checkpoint_path)) {
        m.info("Could not find trained model in model_dir: " + m.model_dir +
               ", running initialization to predict.");
      }
      restored = true;
    }
    NoGradGuard no_grad;
    EstimatorSpec spec;
    {
      NoNewVariables guard;
      spec = m.call(features, Tensor(), ModeKeys::kPredict);
    }
    if (!o.yield_single_examples) {
      out.push_back(spec.predictions);
      continue;
    }
    const std::int64_t rows = spec.predictions.begin()->second.dim(0);
    for (const auto& [name, t] : spec.predictions)
      LOCKSTEP_CHECK_AS(ShapeError, t.rank() >= 1 && t.dim(0) == rows,
                        "Estimator.predict: "
                        "prediction '",
                        name, "' has shape ", t.shape(),
                        "; every prediction "
                        "must have the batch's ",
                        rows, " rows to yield single examples");
    for (std::int64_t i = 0; i < rows; ++i) {
      Predictions one;
      for (const auto& [name, t] : spec.predictions) {
        std::vector<std::int64_t> dims(t.shape().dims().begin() + 1, t.shape().dims().end());
        one[name] = t.view_rows(i, i + 1).copy().view_as(Shape(dims));
      }
      out.push_back(std::move(one));
    }
  }
  return out;
}

std::optional<std::string> Estimator::latest_checkpoint() const {
  return detail::newest_checkpoint(impl_->model_dir);
}

Tensor Estimator::get_variable_value(const std::string& name) const {
  const auto path = latest_checkpoint();
  LOCKSTEP_CHECK(path.has_value(), "Estimator.get_variable_value: model_dir ", impl_->model_dir,
                 " has no checkpoint yet; train the model first");
  const detail::CheckpointValues values = detail::read_checkpoint(*path);
  if (name == "global_step")
    return Tensor::from_vector<std::int64_t>({values.global_step}, Shape{});
  std::string names = "'global_step'";
  for (const auto& [n, t] : values.variables) {
    if (n == name) return t;
    names += ", '" + n + "'";
  }
  lockstep::detail::throw_error<ValueError>("Estimator.get_variable_value: ", *path,
                                            " has no variable '", name, "'; it has ", names);
}

std::vector<std::string> Estimator::get_variable_names() const {
  const auto path = latest_checkpoint();
  LOCKSTEP_CHECK(path.has_value(), "Estimator.get_variable_names: model_dir ", impl_->model_dir,
                 " has no checkpoint yet; train the model first");
  std::vector<std::string> names = {"global_step"};
  for (const auto& [n, t] : detail::read_checkpoint(*path).variables) names.push_back(n);
  std::sort(names.begin(), names.end());
  return names;
}

const std::string& Estimator::model_dir() const { return impl_->model_dir; }
const RunConfig& Estimator::config() const { return impl_->config; }
const Params& Estimator::params() const { return impl_->params; }

namespace {

// NumPy's str() of a float32: the shortest digits that read back as the
// same float32; positional for 1e-4 <= |x| < 1e6 (and 0), else scientific
// with a signed two-digit exponent.
std::string numpy_float32(double value) {
  const float f = static_cast<float>(value);
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  char buf[64];
  const float a = std::fabs(f);
  if (a == 0.0f || (a >= 1e-4f && a < 1e6f)) {
    auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::fixed);
    std::string s(buf, r.ptr);
    if (s.find('.') == std::string::npos) s += ".0";
    return s;
  }
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string s(buf, r.ptr);  // "1.4210855e-14", "1e+16"
  return s;
}

}  // namespace

std::string format_results(const EvalResults& results) {
  std::string out = "{";
  for (const auto& [name, value] : results) {
    if (out.size() > 1) out += ", ";
    out += "'" + name + "': ";
    if (name == "global_step") {
      out += std::to_string(static_cast<std::int64_t>(value));
    } else {
      out += numpy_float32(value);
    }
  }
  return out + "}";
}

}  // namespace lockstep::estimator
