// Estimator's train, evaluate and predict over the replicas of its
// strategy (one model_fn call per replica and step, through
// StrategyExtended::run_step), and the training progress they report.
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
namespace fs = std::filesystem;

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
    // Scaled under a LossScaleOptimizer, whose apply_gradients unscales.
    grads = tape.gradient(spec.train_op.optimizer.scale_loss(objective), vars);
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
  // input_fn once per worker, its batches to the replicas in turn
  // (TensorFlow's PER_WORKER input replication).
  distribute::DistributedDataset::Iterator input =
      distribute::DistributedDataset::from_worker_function(strategy, input_fn).make_iterator();
  const data::Element* first = input.peek();
  LOCKSTEP_CHECK(first != nullptr, "Estimator.train: input_fn's dataset is empty");
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
  std::vector<double> losses(static_cast<std::size_t>(replicas));
  while (m.global_step < last) {
    // Each replica takes its own next batch (per-replica batches). A hook's
    // stop is agreed like the end of the input, so every worker stops at
    // the same step.
    const bool stop = progress.stop_requested();
    std::optional<distribute::PerReplica<data::Element>> batches = input.next(stop);
    if (!batches) {
      if (!stop) {
        m.info("input_fn's dataset ended at global step " + std::to_string(m.global_step) + ".");
      }
      break;
    }
    std::vector<Features> replica_features(static_cast<std::size_t>(replicas));
    std::vector<Tensor> replica_labels(static_cast<std::size_t>(replicas));
    std::vector<std::int64_t> local_rows(static_cast<std::size_t>(replicas), 0);
    for (int r = 0; r < replicas; ++r) {
      const auto i = static_cast<std::size_t>(r);
      split_features_and_labels((*batches)[r], replica_features[i], replica_labels[i]);
      local_rows[i] = rows_of(replica_features[i]);
    }
    std::vector<Variable> non_trainable;
    for (const Variable& v : m.state.variables) {
      if (!v.trainable()) non_trainable.push_back(v);
    }
    ext.run_step({.global_rows = input.global_rows(), .sizes = local_rows, .sync = &non_trainable},
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

EvalResults Estimator::evaluate(const InputFn& input_fn, EvaluateOptions o) {
  Impl& m = *impl_;
  LOCKSTEP_CHECK(!o.steps || *o.steps > 0, "Estimator.evaluate: steps must be > 0, got ",
                 o.steps.value_or(0));
  const Strategy strategy = m.eval_strategy();
  distribute::DistributedDataset::Iterator input =
      distribute::DistributedDataset::from_worker_function(strategy, input_fn).make_iterator();
  const data::Element* first = input.peek();
  LOCKSTEP_CHECK(first != nullptr, "Estimator.evaluate: input_fn's dataset is empty");
  {
    Features features;
    Tensor labels;
    split_features_and_labels(*first, features, labels);
    m.build(features, labels, ModeKeys::kEval);
  }
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
    // Every example is evaluated: a step runs while any replica of any
    // worker has a batch (the others sit it out).
    std::optional<std::vector<std::optional<data::Element>>> batches = input.next_partial();
    if (!batches) break;
    ext.run_replicas([&](ReplicaContext& ctx) {
      const auto r = static_cast<std::size_t>(ctx.local_replica_id());
      if (!(*batches)[r]) return;
      Features features;
      Tensor labels;
      split_features_and_labels(*(*batches)[r], features, labels);
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
  // On the calling thread, every worker reading all of input_fn's dataset
  // (the default strategy: one replica, no vote).
  distribute::DistributedDataset::Iterator input =
      distribute::DistributedDataset::from_worker_function(Strategy(), input_fn).make_iterator();
  std::vector<Predictions> out;
  bool restored = false;
  while (auto element = input.next()) {
    Features features;
    Tensor labels;
    split_features_and_labels((*element)[0], features, labels);
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

}  // namespace lockstep::estimator
