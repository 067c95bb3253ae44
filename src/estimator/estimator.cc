// Estimator, its API: construction, model_fn's first call (the model built
// in the strategy's scope), the optimizer it adopts, checkpoints under
// model_dir (model_dir.cc) and what reads them. train, evaluate and predict
// run in estimator_loops.cc, and under ParameterServerStrategy in
// estimator_ps.cc, as TensorFlow's estimator.py runs them.
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
#include "estimator_impl.h"
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
using namespace detail;

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

namespace {

// Replicas on accelerators (GPUs) hold the model's variables there: a
// call of model_fn outside the steps runs on the first replica's device,
// as the steps do on theirs. Nothing for replicas on CPUs.
void on_first_replica(const distribute::Strategy& strategy, std::optional<DeviceScope>& on) {
  if (const std::vector<Device*>& devices = strategy.replica_devices();
      !devices.empty() && !devices[0]->host_accessible())
    on.emplace(*devices[0], DeviceScope::Options{.pin_thread = false});
}

}  // namespace

EstimatorSpec Estimator::Impl::build(const Features& features, const Tensor& labels,
                                     ModeKeys mode) {
  NoGradGuard no_grad;
  if (built) {
    NoNewVariables guard;
    std::optional<DeviceScope> on;
    on_first_replica(strategy, on);
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
    std::optional<DeviceScope> on;
    on_first_replica(strategy, on);
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
