// Estimator under ParameterServerStrategy: the functions a worker runs for
// it (build the model, take steps), the chief's train loop that schedules
// them, and Estimator::serve.
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
#include "lockstep/estimator/estimator.h"
#include "lockstep/io/event_file.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::estimator {

using namespace detail;

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

// A worker's input: input_fn's dataset (one pipeline per worker: each
// trains on its own, asynchronously, so nothing is split or agreed), and
// the element build() looked at first (it is trained on all the same).
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

}  // namespace

// Every process that makes an Estimator registers the workers' functions
// (the chief checks the names it schedules).
void register_parameter_server_functions() {
  static std::once_flag once;
  std::call_once(once, [] {
    distribute::register_worker_function(kPsBuild, build_on_worker);
    distribute::register_worker_function(kPsStep, step_on_worker);
  });
}

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

}  // namespace lockstep::estimator
