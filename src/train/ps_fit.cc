// Model::fit under ParameterServerStrategy. The coordinator (this process)
// schedules fit's steps as functions on the workers — steps_per_execution
// steps each — and at every epoch's end merges the metric states they
// return, pulls the trained weights from the parameter servers (for
// callbacks, validation and checkpoints, which stay here), and runs the
// epoch-level callbacks. Each worker rebuilds the model once from its Keras
// config and compile config (the same binary: registered layers included),
// binds its weights to the coordinator's variables, and builds its own input
// from a registered dataset function — or takes the batches the coordinator
// sends with each function when fit was given a Dataset or tensors.
#include <bit>
#include <cstring>
#include <iostream>
#include <mutex>

#include "fit_loops.h"
#include "keras_config.h"
#include "lockstep/core/checked.h"
#include "lockstep/core/log.h"
#include "lockstep/distribute/assigned_on_worker.h"
#include "lockstep/distribute/parameter_server_strategy.h"
#include "lockstep/distribute/strategy_extended.h"

namespace lockstep {
namespace {

namespace ld = lockstep::distribute;

constexpr char kBuild[] = "lockstep.fit.build";
constexpr char kSteps[] = "lockstep.fit.train_steps";
constexpr char kResource[] = "lockstep.fit";

std::string as_string(const Tensor& t) { return data::Element({t}).string(0); }

// Each metric's name and state (float64 values as int64 bits: Tensor has no
// float64), in metrics() order.
std::vector<Tensor> metric_states(const Model& m) {
  std::vector<Tensor> out;
  for (const Metric& metric : m.metrics()) {
    out.push_back(data::Element::string_tensor(metric.name()));
    std::vector<std::int64_t> bits;
    for (double v : metric.impl()->state()) bits.push_back(std::bit_cast<std::int64_t>(v));
    out.push_back(Tensor::from_vector(bits));
  }
  return out;
}

// Adds states from metric_states into the model's metrics of the same names.
void add_metric_states(const Model& m, const std::vector<Tensor>& states) {
  const std::vector<Metric> all = m.metrics();
  for (std::size_t i = 0; i + 1 < states.size(); i += 2) {
    const std::string name = as_string(states[i]);
    auto it =
        std::find_if(all.begin(), all.end(), [&](const Metric& x) { return x.name() == name; });
    LOCKSTEP_CHECK_AS(InternalError, it != all.end(), "fit: a worker reported metric '", name,
                      "', which this model does not track");
    std::vector<double> state = it->impl()->state();
    const std::vector<std::int64_t> bits = states[i + 1].to_vector<std::int64_t>();
    LOCKSTEP_CHECK_AS(InternalError, bits.size() == state.size(), "fit: metric '", name, "' has ",
                      state.size(), " state values here, ", bits.size(), " on a worker");
    for (std::size_t k = 0; k < state.size(); ++k) state[k] += std::bit_cast<double>(bits[k]);
    it->impl()->set_state(state);
  }
}

// What a worker keeps for fit: the rebuilt model and, with a DatasetCreator,
// its own input.
struct FitOnWorker {
  Model model;
  std::unique_ptr<detail::DatasetBatches> batches;
  std::int64_t step = 0;
};

// Arguments: the model's Keras config, its compile config, the coordinator's
// index of each of its weights, the dataset function ("" for none) and its
// arguments.
std::vector<Tensor> build_on_worker(ld::WorkerContext& ctx) {
  auto fit = std::make_shared<FitOnWorker>();
  const std::string where = ctx.task() + ": fit: the coordinator's model";
  fit->model = model_from_json(as_string(ctx.argument(0)), where);
  const std::string compile_config = as_string(ctx.argument(1));
  check_json_nesting(compile_config, where);
  keras::compile_from_config(fit->model, nlohmann::json::parse(compile_config), where);
  ctx.bind_variables(fit->model.weights(), ctx.argument(2).to_vector<std::int64_t>());
  const std::string dataset_fn = as_string(ctx.argument(3));
  if (!dataset_fn.empty()) {
    std::vector<Tensor> args;
    for (std::size_t i = 4; i < ctx.num_arguments(); ++i) args.push_back(ctx.argument(i));
    const ld::InputContext input{.num_input_pipelines = ctx.num_workers(),
                                 .input_pipeline_id = ctx.worker_index(),
                                 .num_replicas_in_sync = 1};
    fit->batches = std::make_unique<detail::DatasetBatches>(
        "fit", ld::make_registered_dataset(dataset_fn, input, args), *fit->model.impl(),
        std::numeric_limits<std::int64_t>::max(), true);
    fit->batches->start_epoch(0);
  }
  ctx.set_resource(kResource, fit);
  return {};
}

// Arguments: the step count n, then nothing (the worker's own input) or the
// number k of input tensors and each step's batch (k inputs, then targets).
std::vector<Tensor> steps_on_worker(ld::WorkerContext& ctx) {
  auto fit = ctx.resource<FitOnWorker>(kResource);
  LOCKSTEP_CHECK_AS(InternalError, fit != nullptr, ctx.task(), ": fit: the model was not built");
  const auto n = ctx.argument(0).item<std::int64_t>();
  fit->model.reset_metrics();
  // State a step assigns (moving statistics) goes back to the ps tasks
  // after it, before the next step reads the variables again.
  distribute::AssignedOnWorker assigned(fit->model.impl()->non_trainable_weights());
  auto train = [&](const std::vector<Tensor>& x, const std::vector<Tensor>& y) {
    fit->model.train_step(x, y);
    assigned.write_changed(ctx);
  };
  if (ctx.num_arguments() == 1) {
    LOCKSTEP_CHECK_AS(InternalError, fit->batches != nullptr, ctx.task(), ": fit: no input");
    for (std::int64_t i = 0; i < n; ++i) {
      if (i > 0) ctx.read_variables();  // the updates since this function began
      std::optional<detail::Batch> b = fit->batches->next(fit->step++);
      LOCKSTEP_CHECK_AS(IndexError, b.has_value(), ctx.task(),
                        ": fit: the worker's dataset ran out after ", fit->step - 1,
                        " batches; repeat() it (fit takes steps_per_epoch batches per epoch)");
      train(b->x, b->y);
    }
  } else {
    const auto k = static_cast<std::size_t>(ctx.argument(1).item<std::int64_t>());
    const std::size_t per_step = (ctx.num_arguments() - 2) / static_cast<std::size_t>(n);
    for (std::int64_t i = 0; i < n; ++i) {
      if (i > 0) ctx.read_variables();
      std::vector<Tensor> x, y;
      const std::size_t first = 2 + static_cast<std::size_t>(i) * per_step;
      for (std::size_t j = 0; j < per_step; ++j) (j < k ? x : y).push_back(ctx.argument(first + j));
      train(x, y);
    }
  }
  return metric_states(fit->model);
}

}  // namespace

namespace detail {

void pull_from_parameter_servers(const Model& m) {
  const distribute::StrategyExtended ext = m.distribute_strategy().extended();
  if (ext.uses_parameter_servers()) ext.pull_variables(m.impl()->weights());
}

void register_fit_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    ld::register_worker_function(kBuild, build_on_worker);
    ld::register_worker_function(kSteps, steps_on_worker);
  });
}

}  // namespace detail

History Model::Loops::fit_on_parameter_servers(Model& m, const ld::DatasetCreator* creator,
                                               BatchSource* source,
                                               const std::optional<ValidationData>& val,
                                               const FitOptions& o) {
  TrainState& s = m.state();
  const ld::ParameterServerStrategy strategy(s.strategy);
  LOCKSTEP_CHECK(o.steps_per_epoch > 0,
                 "fit: with ParameterServerStrategy, steps_per_epoch is required: the workers "
                 "read their own input, so the coordinator cannot see where it ends (repeat() the "
                 "dataset and give the steps of an epoch)");
  for (std::size_t i = 0; i < o.callbacks.size(); ++i) {
    LOCKSTEP_CHECK(o.callbacks[i] != nullptr, "callbacks: a callback is null");
    LOCKSTEP_CHECK(!o.callbacks[i]->implements_train_batch_hooks(), "fit: callback ", i,
                   " acts at batch level (on_train_batch_begin / _end), which "
                   "ParameterServerStrategy does not support: the batches run on the workers. "
                   "Use epoch-level callbacks (save_freq = \"epoch\"), or have it say so by "
                   "overriding implements_train_batch_hooks()");
  }
  LOCKSTEP_CHECK(m.impl_->built() || !m.impl_->weights().empty(),
                 "fit: under ParameterServerStrategy the model must be built in the strategy's "
                 "scope before fit (its variables live on the parameter servers): give Sequential "
                 "an input_shape, or call the model once inside strategy.scope()");
  std::string model_json;
  try {
    model_json = keras::model_config(*m.impl_).dump();
  } catch (const Error&) {
    detail::rethrow_with_prefix(
        "fit: with ParameterServerStrategy every worker rebuilds the model from its Keras "
        "config, and this one has none (a subclassed model? train it with a custom loop and "
        "ClusterCoordinator): ");
  }
  std::vector<std::int64_t> indices;
  for (const Variable& w : m.impl_->weights()) indices.push_back(strategy.variable_index(w));
  // What the coordinator's copies hold now is what trains: weights loaded or
  // assigned since the last pull (load_weights, load_model into the model)
  // would otherwise be overwritten by the parameter servers' values.
  s.strategy.extended().push_variables(m.impl_->weights());
  ld::ClusterCoordinator coordinator(strategy);
  // The parameter servers build their optimizers from these settings; a
  // callback that changes them during fit (LearningRateScheduler,
  // ReduceLROnPlateau) would change the coordinator's optimizer alone.
  const std::string compile_config = m.get_compile_config();
  const auto check_settings_unchanged = [&](int epoch) {
    LOCKSTEP_CHECK(m.get_compile_config() == compile_config, "fit: epoch ", epoch + 1,
                   ": a callback changed the optimizer's settings (its learning rate?) during "
                   "fit; under ParameterServerStrategy the parameter servers update with the "
                   "settings fit started with, so the change would not reach them. Hint: set the "
                   "learning rate before fit and call fit once per setting (each fit hands the "
                   "parameter servers its optimizer's settings)");
  };
  std::vector<Tensor> build = {data::Element::string_tensor(model_json),
                               data::Element::string_tensor(compile_config),
                               Tensor::from_vector(indices),
                               data::Element::string_tensor(creator ? creator->dataset_fn : "")};
  if (creator) build.insert(build.end(), creator->arguments.begin(), creator->arguments.end());
  coordinator.create_per_worker_resource(kBuild, build);

  std::unique_ptr<BatchSource> val_source = validation_source(m, val, o);
  // No batches pass here: the bar moves at epoch ends (verbose 1 prints as 2).
  const int verbose = o.verbose == 0 ? 0 : 2;
  CallbackList callbacks = detail::make_callbacks(
      o.callbacks, &m, {.epochs = o.epochs, .steps = o.steps_per_epoch, .verbose = verbose}, true);
  const std::int64_t per_call = s.steps_per_execution;
  ld::ParameterServerStats before = strategy.stats();
  EpochSteps steps{
      .input_state =
          [&](int epoch, bool full) {
            return source ? source->save_state(epoch, full) : data::IteratorState{};
          },
      .check_resume =
          [](TrainingSnapshot& resume) {
            if (resume.step == 0) return;
            log(LogLevel::kWarning,
                detail::str_cat("fit: the backup was taken at batch ", resume.step, " of epoch ",
                                resume.epoch + 1,
                                "; under ParameterServerStrategy epochs restart at their first "
                                "batch\n"));
            resume.step = 0;
          },
      .begin_epoch = check_settings_unchanged,
      .run_epoch =
          [&](int epoch, const data::IteratorState* resume_input, std::int64_t&) {
            std::vector<ld::RemoteValue> values;
            try {
              if (source) {
                if (resume_input) {
                  source->restore_state(epoch, 0, *resume_input);
                } else {
                  source->start_epoch(epoch);
                }
              }
              for (std::int64_t step = 0; step < o.steps_per_epoch && !s.stop; step += per_call) {
                const std::int64_t n = std::min(per_call, o.steps_per_epoch - step);
                std::vector<ld::RemoteArgument> args = {
                    Tensor::from_vector(std::vector<std::int64_t>{n}, Shape{})};
                for (std::int64_t i = 0; source && i < n; ++i) {
                  std::optional<Batch> b = source->next(step + i);
                  LOCKSTEP_CHECK(b.has_value(), "the data ran out after ", step + i, " of the ",
                                 o.steps_per_epoch, " steps_per_epoch batches");
                  if (i == 0)
                    args.emplace_back(Tensor::from_vector(
                        std::vector<std::int64_t>{static_cast<std::int64_t>(b->x.size())},
                        Shape{}));
                  for (const Tensor& t : b->x) args.emplace_back(t.copy());
                  for (const Tensor& t : b->y) args.emplace_back(t.copy());
                }
                values.push_back(coordinator.schedule(kSteps, std::move(args)));
              }
              coordinator.join();
              for (const ld::RemoteValue& v : values) add_metric_states(m, v.fetch());
            } catch (const Error&) {
              detail::rethrow_with_prefix("fit: epoch " + std::to_string(epoch + 1) + ": ");
            }
          },
      .end_epoch =
          [&](int, Logs& epoch_logs) {
            // The trained weights and step count, here, for validation,
            // callbacks and checkpoints.
            s.strategy.extended().pull_variables(m.impl_->weights());
            const ld::ParameterServerStats after = strategy.stats();
            s.optimizer->set_iterations(after.iterations);
            const std::int64_t updates = after.updates - before.updates;
            const double staleness = after.mean_staleness * static_cast<double>(after.updates) -
                                     before.mean_staleness * static_cast<double>(before.updates);
            epoch_logs.set("staleness",
                           updates > 0 ? staleness / static_cast<double>(updates) : 0.0);
            before = after;
          },
  };
  return run_epochs(m, callbacks, val_source.get(), o, steps);
}

}  // namespace lockstep
