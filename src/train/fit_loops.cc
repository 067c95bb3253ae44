// fit / evaluate / predict: the loops over a batch source, with their
// callbacks, checkpoint snapshots and resume, and where strategy meets model
// (each batch split between the replicas, run by the strategy, merged).
#include "fit_loops.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <iostream>
#include <tuple>
#include <typeinfo>

#include "keras_config.h"
#include "lockstep/core/log.h"
#include "lockstep/train/model.h"
#include "lockstep/train/progbar.h"
#include "model_internal.h"
#include "saving.h"
#include "step_graph.h"

namespace lockstep {

using detail::Batch;
using detail::BatchSource;
using detail::check_data;
using detail::DatasetBatches;
using detail::prepare_inputs;
using detail::TensorBatches;
using detail::view_all;

namespace detail {

// The functions ParameterServerStrategy's workers run for fit, registered in
// every program that links fit (its workers are the same binary).
const bool kFitFunctionsRegistered = (register_fit_functions(), true);

TrainingSnapshot snapshot_at(const Model& m, int epoch, std::int64_t step,
                             data::IteratorState input) {
  TrainingSnapshot snap;
  snap.epoch = epoch;
  snap.step = step;
  snap.input = std::move(input);
  for (const Metric& metric : m.metrics())
    snap.metrics.emplace_back(metric.name(), metric.impl()->state());
  std::tie(snap.random_seed, snap.random_stream) = detail::global_random_state();
  return snap;
}

int effective_verbose(int verbose, bool chief) {
  if (verbose == 1 && (!chief || !stdout_is_terminal())) return 2;
  return verbose;
}

CallbackList make_callbacks(const std::vector<std::shared_ptr<Callback>>& user, Model* model,
                            const CallbackParams& params, bool add_history) {
  CallbackList list;
  for (const auto& cb : user) {
    LOCKSTEP_CHECK(cb != nullptr, "callbacks: a callback is null");
    list.all.push_back(cb);
    if (auto h = std::dynamic_pointer_cast<History>(cb)) list.history = h;
  }
  // As Keras: History, then the progress logger, after the user's callbacks.
  if (add_history && !list.history) {
    list.history = std::make_shared<History>();
    list.all.push_back(list.history);
  }
  const bool has_progbar = std::any_of(list.all.begin(), list.all.end(), [](const auto& cb) {
    return std::dynamic_pointer_cast<ProgbarLogger>(cb) != nullptr;
  });
  if (params.verbose != 0 && !has_progbar) list.all.push_back(std::make_shared<ProgbarLogger>());
  for (auto& cb : list.all) {
    cb->set_model(model);
    cb->set_params(params);
  }
  return list;
}

}  // namespace detail

using detail::CallbackList;
using detail::effective_verbose;
using detail::make_callbacks;

namespace {

// Puts saved (merged) metric states back: into the primary metrics and, under
// a strategy, into replica 0's (the others start empty; the sum is the same).
void restore_metrics(const Model& m,
                     const std::vector<std::pair<std::string, std::vector<double>>>& saved) {
  const std::vector<Metric> all = m.metrics();
  LOCKSTEP_CHECK(saved.size() == all.size(), "fit: the checkpoint has ", saved.size(),
                 " metric states but the model tracks ", all.size(), " metrics");
  for (std::size_t i = 0; i < all.size(); ++i) {
    LOCKSTEP_CHECK(saved[i].first == all[i].name(), "fit: the checkpoint's metric ", i, " is '",
                   saved[i].first, "' but the model's is '", all[i].name(), "'");
    all[i].impl()->set_state(saved[i].second);
  }
}

}  // namespace

// A model is built (its variables created) on the calling thread, inside the
// strategy's scope, before replicas run it: building on replica threads would
// race, and create variables outside the scope.
void Model::Loops::build_before_replicas(Model& m, const std::vector<Tensor>& x) {
  if (m.impl_->built()) return;
  std::vector<Shape> shapes;
  for (const Tensor& t : prepare_inputs(*m.impl_, x)) shapes.push_back(t.shape());
  {
    distribute::Strategy::Scope scope(m.state().strategy);
    m.impl_->ensure_built(shapes);
  }
  prepare_replicas(m, "fit");
}

void Model::Loops::prepare_replicas(Model& m, const char* op) {
  TrainState& s = m.state();
  // Variables have one copy per replica of this process.
  const int n = s.strategy.num_local_replicas();
  if (n > 1) {
    for (const Variable& v : m.impl_->weights()) {
      LOCKSTEP_CHECK(v.is_mirrored() && v.num_replicas() == n, op, ": variable '", v.name(),
                     "' was created outside the scope of the ", s.strategy.name(), " (", n,
                     " replicas) that compiled this model; build and compile the model inside "
                     "strategy.scope()");
    }
  }
  if (n == 1 && s.strategy.num_workers() == 1) {
    for (const Variable& v : m.impl_->weights()) {
      LOCKSTEP_CHECK(!v.is_mirrored(), op, ": variable '", v.name(), "' is mirrored over ",
                     v.num_replicas(),
                     " replicas, but the model was created and compiled "
                     "outside that strategy's scope; create or compile it inside "
                     "strategy.scope()");
    }
    return;
  }
  if (static_cast<int>(s.replica_metrics.size()) == n) return;
  s.replica_metrics.clear();
  for (int r = 0; r < n; ++r) {
    std::vector<Metric> copies;
    for (const Metric& metric : m.metrics()) {
      auto impl = metric.impl()->clone();
      impl->set_name(metric.name());
      copies.emplace_back(impl);
    }
    s.replica_metrics.push_back(std::move(copies));
  }
}

bool Model::Loops::all_workers_have_batch(Model& m, std::optional<Batch>& batch) {
  const distribute::Strategy& strategy = m.state().strategy;
  if (strategy.num_workers() == 1) return batch.has_value();
  const auto agreed = strategy.extended().agree_on_step(
      batch.has_value(), batch && batch->worker_part ? batch->x.at(0).dim(0) : 0);
  if (!agreed.all_have_batch) return false;
  if (batch->worker_part) batch->global_rows = agreed.total_rows;
  return true;
}

void Model::Loops::check_workers_agree(Model& m, const char* op, std::int64_t steps) {
  const distribute::Strategy& strategy = m.state().strategy;
  if (strategy.num_workers() == 1) return;
  std::string model_config = "(subclassed)";
  try {
    model_config = keras::model_config(*m.impl_).dump();
  } catch (const Error&) {
    // A subclassed model has no config; the variables' broadcast checks shapes.
  }
  strategy.extended().check_workers_agree(op,
                                          {{"model config", model_config},
                                           {"optimizer config", m.state().optimizer->config_json()},
                                           {"number of steps per epoch", std::to_string(steps)}});
}

Model::Loops::Shares Model::Loops::share_out(Model& m, const Batch& b) {
  build_before_replicas(m, b.x);
  // x and y cut together, by the strategy's one batch splitter.
  std::vector<Tensor> all = b.x;
  all.insert(all.end(), b.y.begin(), b.y.end());
  distribute::StrategyExtended::LocalBatches local =
      m.state().strategy.extended().split_batch(all, b.worker_part, b.global_rows);
  Shares shares;
  shares.global = local.global_rows;
  shares.sizes = local.sizes;
  // A batch sent ahead to the first of several logical GPUs (they share its
  // memory): each other replica's share copied to its own device here,
  // before the replicas run, by the thread that waited for the batch — so
  // no replica's step waits for the first one's stream to copy its input
  // (which serialised the replicas), and none touches another device's
  // stream while that one records its step.
  const std::vector<Device*>& devices = m.state().strategy.replica_devices();
  if (devices.size() == local.parts.size()) {
    for (std::size_t r = 0; r < local.parts.size(); ++r) {
      for (Tensor& t : local.parts[r]) {
        if (t.defined() && !t.device().host_accessible() && &t.device() != devices[r])
          t = t.copy_to(*devices[r]);
      }
    }
  }
  for (auto& part : local.parts) {
    const auto nx = static_cast<std::ptrdiff_t>(b.x.size());
    shares.x.emplace_back(part.begin(), part.begin() + nx);
    shares.y.emplace_back(part.begin() + nx, part.end());
  }
  return shares;
}

int Model::Loops::records_steps(const Model& m) {
  if (!distributed(m)) return 1;
  const distribute::Strategy& strategy = m.state().strategy;
  if (strategy.num_workers() != 1) return 0;
  const std::vector<Device*>& devices = strategy.replica_devices();
  if (devices.size() <= 1) return 1;
  // Replicas whose gradients are summed on their devices — in the device
  // (logical GPUs of one GPU) or with NCCL (distinct GPUs) — the host's
  // part of the sum done between the recording's parts at each replay; not
  // replicas that sum through the host.
  for (const Device* d : devices) {
    if (d->kernels() == nullptr || !d->kernels()->can_capture()) return 0;
  }
  return strategy.extended().sums_on_devices() ? static_cast<int>(devices.size()) : 0;
}

Logs Model::Loops::train_batch(Model& m, const Batch& b) {
  TrainState& s = m.state();
  // Model's own train_step only: a subclass's may do anything.
  const auto graph_step = [&](const Batch& batch, std::size_t replica,
                              const std::vector<Variable>* synced) {
    if (replica >= s.step_graphs.size()) return false;
    const bool own = typeid(m) == typeid(Model) || typeid(m) == typeid(Sequential);
    const detail::StepGraph::Step step{
        .optimizer = *s.optimizer.operator->(),
        .replica = static_cast<int>(replica),
        .run_eagerly = s.run_eagerly,
        .own_train_step = own,
        .body = [&m](const std::vector<Tensor>& x,
                     const std::vector<Tensor>& y) { return train_step_body(m, x, y); },
        .synced = synced};
    return s.step_graphs[replica]->step(step, batch);
  };
  if (!distributed(m)) {
    if (graph_step(b, 0, nullptr)) return m.get_metrics_result();
    return m.train_step(b.x, b.y);
  }
  const Shares shares = share_out(m, b);
  // Listed once per batch, as compile fixed them: the replicas only read it.
  const std::shared_ptr<const detail::TrainableSnapshot> snap =
      detail::trainable_snapshot(s, *m.impl_);
  const CallContext call{.training = true, .frozen_layers = &snap->frozen};
  const std::vector<Variable> non_trainable = m.impl_->non_trainable_weights(call);
  const distribute::StrategyExtended::ReplicaStep step{
      .global_rows = shares.global, .sizes = shares.sizes, .sync = &non_trainable};
  // Several replicas replay together or not at all: only a batch split
  // evenly (the same shapes on every replica), never the last uneven one.
  const bool even = std::all_of(shares.sizes.begin(), shares.sizes.end(),
                                [&](std::int64_t n) { return n > 0 && n == shares.sizes[0]; });
  const std::vector<Variable>* synced = shares.sizes.size() > 1 ? &non_trainable : nullptr;
  s.strategy.extended().run_step(step, [&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    if (shares.sizes[i] > 0) {
      // On the replica's thread and device, recorded and replayed where
      // that device records.
      if (even && graph_step({.x = shares.x[i], .y = shares.y[i], .where = b.where}, i, synced))
        return;
      m.train_step(shares.x[i], shares.y[i]);
    } else {
      // No examples here: take part in the loss's reductions and the
      // gradient all-reduce with nothing.
      detail::join_loss_reductions(s, *m.impl_, ctx);
      const std::vector<Variable> vars = m.impl_->trainable_weights(call);
      s.optimizer.apply_gradients(std::vector<Tensor>(vars.size()), vars);
    }
  });
  return m.get_metrics_result();
}

Logs Model::Loops::test_batch(Model& m, const Batch& b) {
  if (!distributed(m)) return m.test_step(b.x, b.y);
  const Shares shares = share_out(m, b);
  // The global batch set as in training: a masked output's loss is the
  // mean over the whole batch's real steps. Nothing to keep in sync.
  const std::vector<Variable> nothing;
  const distribute::StrategyExtended::ReplicaStep step{
      .global_rows = shares.global, .sizes = shares.sizes, .sync = &nothing};
  m.state().strategy.extended().run_step(step, [&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    if (shares.sizes[i] > 0) {
      m.test_step(shares.x[i], shares.y[i]);
    } else {
      detail::join_loss_reductions(m.state(), *m.impl_, ctx);
    }
  });
  return m.get_metrics_result();
}

std::vector<Tensor> Model::Loops::predict_batch(Model& m, const Batch& b) {
  auto forward = [&](const std::vector<Tensor>& x) {
    NoGradGuard no_grad;
    return detail::float32_outputs(m(prepare_inputs(*m.impl_, x), {.training = false}));
  };
  if (!distributed(m)) return forward(b.x);
  const Shares shares = share_out(m, b);
  std::vector<std::vector<Tensor>> outs(shares.sizes.size());
  m.state().strategy.extended().run_replicas([&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    if (shares.sizes[i] > 0) outs[i] = forward(shares.x[i]);
  });
  // Replica order is example order; merged on the host (replicas on GPUs
  // need not share memory).
  std::vector<Tensor> merged;
  for (std::size_t k = 0; k < outs[0].size(); ++k) {
    std::vector<Tensor> parts;
    for (const auto& o : outs) {
      if (!o.empty()) parts.push_back(o[k].cpu());
    }
    merged.push_back(parts.size() == 1 ? parts[0] : concat(parts, 0));
  }
  return merged;
}

History Model::fit(const Tensor& x, const Tensor& y, const FitOptions& o) {
  return fit(std::vector<Tensor>{x}, std::vector<Tensor>{y}, o);
}

namespace {

void check_fit_options(const FitOptions& o) {
  LOCKSTEP_CHECK(o.epochs >= 1 && o.initial_epoch >= 0 && o.initial_epoch < o.epochs,
                 "fit: expected 0 <= initial_epoch < epochs, got initial_epoch ", o.initial_epoch,
                 " and epochs ", o.epochs);
  LOCKSTEP_CHECK(o.validation_freq >= 1, "fit: validation_freq must be >= 1, got ",
                 o.validation_freq);
  LOCKSTEP_CHECK(o.steps_per_epoch >= 0 && o.validation_steps >= 0,
                 "fit: steps_per_epoch and validation_steps must be >= 0");
}

}  // namespace

History Model::fit(const std::vector<Tensor>& x_all, const std::vector<Tensor>& y_all,
                   const FitOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "fit: you must call compile() before fit()");
  const std::int64_t total = check_data("fit", x_all, y_all);
  LOCKSTEP_CHECK(o.batch_size > 0, "fit: batch_size must be > 0, got ", o.batch_size);
  check_fit_options(o);
  LOCKSTEP_CHECK(o.validation_split >= 0.0 && o.validation_split < 1.0,
                 "fit: validation_split must be in [0, 1), got ", o.validation_split);

  std::vector<Tensor> x = x_all, y = y_all;
  std::optional<ValidationData> val = o.validation_data;
  if (o.validation_split > 0.0 && !val) {
    const auto split_at = static_cast<std::int64_t>(
        std::floor(static_cast<double>(total) * (1.0 - o.validation_split)));
    LOCKSTEP_CHECK(split_at > 0 && split_at < total, "fit: validation_split ", o.validation_split,
                   " of ", total, " examples leaves an empty training or validation set");
    x = view_all(x_all, 0, split_at);
    y = view_all(y_all, 0, split_at);
    val = ValidationData{view_all(x_all, split_at, total), view_all(y_all, split_at, total)};
  }
  const std::int64_t n = x[0].shape()[0];
  const std::int64_t full_steps = (n + o.batch_size - 1) / o.batch_size;
  LOCKSTEP_CHECK(o.steps_per_epoch <= full_steps, "fit: steps_per_epoch ", o.steps_per_epoch,
                 " exceeds the ", full_steps, " batches of ", o.batch_size, " that ", n,
                 " examples make");
  TensorBatches train(x, y, o.batch_size, o.steps_per_epoch, o.shuffle);
  if (state().strategy.extended().uses_parameter_servers())
    return Loops::fit_on_parameter_servers(*this, nullptr, &train, val, o);
  return Loops::fit(*this, train, val, o);
}

History Model::fit(const data::Dataset& dataset, const FitOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "fit: you must call compile() before fit()");
  check_fit_options(o);
  LOCKSTEP_CHECK(o.validation_split == 0.0,
                 "fit: validation_split is not supported with a Dataset (it cannot be split "
                 "without reading it); pass validation_data");
  if (state().strategy.extended().uses_parameter_servers()) {
    DatasetBatches train("fit", dataset, *impl_, o.steps_per_epoch, true);
    return Loops::fit_on_parameter_servers(*this, nullptr, &train, o.validation_data, o);
  }
  DatasetBatches train("fit", dataset, *impl_, o.steps_per_epoch, true, &state().strategy);
  return Loops::fit(*this, train, o.validation_data, o);
}

History Model::fit(const distribute::DatasetCreator& creator, const FitOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "fit: you must call compile() before fit()");
  check_fit_options(o);
  LOCKSTEP_CHECK(state().strategy.extended().uses_parameter_servers(),
                 "fit: a DatasetCreator is the input of ParameterServerStrategy's workers; this "
                 "model is under ",
                 state().strategy.name(),
                 " (give it a Dataset, or create and compile it in a ParameterServerStrategy's "
                 "scope)");
  LOCKSTEP_CHECK(o.validation_split == 0.0,
                 "fit: validation_split is not supported with a DatasetCreator; pass "
                 "validation_data");
  return Loops::fit_on_parameter_servers(*this, &creator, nullptr, o.validation_data, o);
}

std::unique_ptr<BatchSource> Model::Loops::validation_source(
    Model& m, const std::optional<ValidationData>& val, const FitOptions& o) {
  if (!val) return nullptr;
  if (val->dataset.defined()) {
    return std::make_unique<DatasetBatches>("fit (validation_data)", val->dataset, *m.impl_,
                                            o.validation_steps, true, &m.state().strategy);
  }
  check_data("fit (validation_data)", val->x, val->y);
  return std::make_unique<TensorBatches>(val->x, val->y, o.batch_size, o.validation_steps, false);
}

void Model::Loops::train_epoch(Model& m, BatchSource& train, CallbackList& callbacks, int epoch,
                               std::int64_t& done) {
  const TrainState& s = m.state();
  // Batch-level callbacks run once per execution of steps_per_execution
  // steps: at its first step and at its last.
  const std::int64_t per_call = s.steps_per_execution;
  Logs logs;
  std::int64_t unreported = -1;  // a step whose execution has not ended yet
  for (std::int64_t step = done;; ++step) {
    std::optional<Batch> batch;
    try {
      batch = train.next(step);
    } catch (const Error&) {
      detail::rethrow_with_prefix("fit: epoch " + std::to_string(epoch + 1) + ", reading batch " +
                                  std::to_string(step) + ": ");
    }
    if (!all_workers_have_batch(m, batch)) break;
    if (step % per_call == 0 || step == done)
      callbacks.each([&](Callback& cb) { cb.on_train_batch_begin(step, {}); });
    try {
      if (step == 0) {
        const std::int64_t n = s.strategy.num_replicas_in_sync();
        const std::int64_t global =
            batch->worker_part ? batch->global_rows : batch->x.at(0).shape()[0];
        LOCKSTEP_CHECK(global >= n, "the global batch of ", global,
                       " examples is smaller than the ", n, " replicas of ", s.strategy.name(),
                       "; batch the dataset with the global batch size (per-replica size × ", n,
                       ")");
      }
      logs = train_batch(m, *batch);
    } catch (const Error&) {
      detail::rethrow_with_prefix("fit: epoch " + std::to_string(epoch + 1) + ", batch " +
                                  std::to_string(step) + batch->where + ": ");
    }
    done = step + 1;
    unreported = step;
    if ((step + 1) % per_call == 0 || step + 1 == train.steps()) {
      callbacks.each([&](Callback& cb) { cb.on_train_batch_end(step, logs); });
      unreported = -1;
    }
    if (s.stop) break;
  }
  if (unreported >= 0)
    callbacks.each([&](Callback& cb) { cb.on_train_batch_end(unreported, logs); });
}

History Model::Loops::fit(Model& m, BatchSource& train, const std::optional<ValidationData>& val,
                          const FitOptions& o) {
  TrainState& s = m.state();
  prepare_replicas(m, "fit");
  // This fit's recorded steps, one per local replica, where the devices
  // record them; freed (with the recordings' memory) when fit returns.
  s.step_graphs.clear();
  const int recorded_replicas = records_steps(m);
  for (int r = 0; r < recorded_replicas; ++r)
    s.step_graphs.push_back(std::make_shared<detail::StepGraph>(r == 0));
  struct ForgetGraph {
    TrainState& s;
    ~ForgetGraph() {
      if (!s.step_graphs.empty() && s.step_graphs[0]->replays() > 0) {
        try {
          log(LogLevel::kDebug,
              detail::str_cat("fit: ", s.step_graphs[0]->replays(),
                              " steps replayed from the recorded step",
                              s.step_graphs.size() > 1 ? " on each replica" : "", "\n"));
        } catch (...) {  // a sink that failed: nothing to add to fit's own ending
        }
      }
      s.step_graphs.clear();
    }
  } forget_graph{s};
  check_workers_agree(m, "fit", train.steps());
  std::unique_ptr<BatchSource> val_source = validation_source(m, val, o);
  const int verbose = effective_verbose(o.verbose, s.strategy.is_chief());
  CallbackList callbacks = make_callbacks(
      o.callbacks, &m, {.epochs = o.epochs, .steps = train.steps(), .verbose = verbose}, true);
  EpochSteps steps{
      .input_state = [&](int epoch, bool full) { return train.save_state(epoch, full); },
      // Merges the replicas' metrics into the primary ones. Across workers
      // that is a collective, and the chief alone takes snapshots: there the
      // last batch's logs have merged them already.
      .before_snapshot =
          [&] {
            if (s.strategy.num_workers() == 1) (void)m.get_metrics_result();
          },
      .run_epoch =
          [&](int epoch, const data::IteratorState* resume_input, std::int64_t& done) {
            if (resume_input) {
              train.restore_state(epoch, done, *resume_input);
            } else {
              train.start_epoch(epoch);
            }
            train_epoch(m, train, callbacks, epoch, done);
            if (auto* d = dynamic_cast<DatasetBatches*>(&train); d && d->exhausted()) {
              // Keras's behaviour: warn, finish this epoch, stop.
              log(LogLevel::kWarning,
                  detail::str_cat("fit: the dataset ran out of data after ",
                                  epoch - o.initial_epoch + 1,
                                  " epoch(s) with steps_per_epoch = ", o.steps_per_epoch,
                                  "; interrupting training (repeat() the dataset to train "
                                  "longer)\n"));
              s.stop = true;
            }
          },
  };
  return run_epochs(m, callbacks, val_source.get(), o, steps);
}

History Model::Loops::run_epochs(Model& m, CallbackList& callbacks, BatchSource* val_source,
                                 const FitOptions& o, const EpochSteps& steps) {
  TrainState& s = m.state();
  s.stop = false;
  s.resume.reset();
  // Where training is, for checkpoints taken by callbacks: `done` batches of
  // `at_epoch` applied (at an epoch's end: 0 of the next).
  int at_epoch = o.initial_epoch;
  std::int64_t done = 0;
  s.snapshot = [&](bool full_input_state) {
    if (steps.before_snapshot) steps.before_snapshot();
    return detail::snapshot_at(m, at_epoch, done, steps.input_state(at_epoch, full_input_state));
  };
  detail::ForgetSnapshot forget{s};
  callbacks.each([](Callback& cb) { cb.on_train_begin({}); });
  // A BackupAndRestore callback's on_train_begin may have set where to resume.
  std::optional<TrainingSnapshot> resume = std::move(s.resume);
  s.resume.reset();
  int first_epoch = o.initial_epoch;
  if (resume) {
    LOCKSTEP_CHECK(resume->epoch >= 0 && resume->step >= 0, "fit: cannot resume at epoch ",
                   resume->epoch, ", batch ", resume->step);
    if (steps.check_resume) steps.check_resume(*resume);
    first_epoch = resume->epoch;
    detail::set_global_random_state(resume->random_seed, resume->random_stream);
  }
  Logs epoch_logs;
  for (int epoch = first_epoch; epoch < o.epochs; ++epoch) {
    const bool resuming = resume && epoch == resume->epoch;
    at_epoch = epoch;
    done = resuming ? resume->step : 0;
    m.reset_metrics();
    if (resuming && resume->step > 0) {
      restore_metrics(m, resume->metrics);
      // Merged on read: replica 0 (of the chief, across workers) holds the
      // sum so far.
      if (!s.replica_metrics.empty() && s.strategy.is_chief()) {
        for (std::size_t i = 0; i < resume->metrics.size(); ++i)
          s.replica_metrics[0].at(i).impl()->set_state(resume->metrics[i].second);
      }
    }
    callbacks.each([&](Callback& cb) { cb.on_epoch_begin(epoch, {}); });
    if (steps.begin_epoch) steps.begin_epoch(epoch);
    steps.run_epoch(epoch, resuming ? &resume->input : nullptr, done);
    epoch_logs = m.get_metrics_result();
    if (steps.end_epoch) steps.end_epoch(epoch, epoch_logs);
    if (val_source && (epoch + 1) % o.validation_freq == 0) {
      // Validation is the evaluate pass, through the same callbacks,
      // silently (as Keras).
      const Logs val_logs =
          test_pass(m, *val_source, callbacks,
                    "fit: validation after epoch " + std::to_string(epoch + 1) + ", ");
      for (const auto& [k, v] : val_logs) epoch_logs.set("val_" + k, v);
    }
    at_epoch = epoch + 1;  // a checkpoint taken now starts the next epoch
    done = 0;
    callbacks.each([&](Callback& cb) { cb.on_epoch_end(epoch, epoch_logs); });
    if (s.stop) break;
  }
  callbacks.each([&](Callback& cb) { cb.on_train_end(epoch_logs); });
  return *callbacks.history;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& o) {
  return evaluate(std::vector<Tensor>{x}, std::vector<Tensor>{y}, o);
}

Logs Model::evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                     const EvaluateOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "evaluate: you must call compile() before evaluate()");
  check_data("evaluate", x, y);
  LOCKSTEP_CHECK(o.batch_size > 0, "evaluate: batch_size must be > 0, got ", o.batch_size);
  TensorBatches source(x, y, o.batch_size, o.steps, false);
  return Loops::evaluate(*this, source, o);
}

Logs Model::evaluate(const data::Dataset& dataset, const EvaluateOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "evaluate: you must call compile() before evaluate()");
  DatasetBatches source("evaluate", dataset, *impl_, o.steps, true, &state().strategy);
  return Loops::evaluate(*this, source, o);
}

Logs Model::Loops::evaluate(Model& m, BatchSource& source, const EvaluateOptions& o) {
  prepare_replicas(m, "evaluate");
  detail::pull_from_parameter_servers(m);
  CallbackList callbacks =
      make_callbacks(o.callbacks, &m,
                     {.epochs = 1,
                      .steps = source.steps(),
                      .verbose = effective_verbose(o.verbose, m.state().strategy.is_chief())},
                     false);
  return test_pass(m, source, callbacks, "evaluate: ");
}

Logs Model::Loops::test_pass(Model& m, BatchSource& source, CallbackList& callbacks,
                             const std::string& op) {
  m.reset_metrics();
  source.start_epoch(0);
  callbacks.each([](Callback& cb) { cb.on_test_begin({}); });
  Logs logs;
  for (std::int64_t step = 0;; ++step) {
    std::optional<Batch> batch;
    try {
      batch = source.next(step);
      if (!all_workers_have_batch(m, batch)) break;
      callbacks.each([&](Callback& cb) { cb.on_test_batch_begin(step, {}); });
      logs = test_batch(m, *batch);
    } catch (const Error&) {
      detail::rethrow_with_prefix(op + "batch " + std::to_string(step) +
                                  (batch ? batch->where : std::string()) + ": ");
    }
    callbacks.each([&](Callback& cb) { cb.on_test_batch_end(step, logs); });
  }
  callbacks.each([&](Callback& cb) { cb.on_test_end(logs); });
  return logs;
}

Tensor Model::predict(const Tensor& x, const PredictOptions& o) {
  return predict(std::vector<Tensor>{x}, o).at(0);
}

std::vector<Tensor> Model::predict(const std::vector<Tensor>& x, const PredictOptions& o) {
  LOCKSTEP_CHECK(!x.empty() && x[0].defined() && x[0].rank() >= 1 && x[0].shape()[0] > 0,
                 "predict: x is undefined or empty");
  LOCKSTEP_CHECK(o.batch_size > 0, "predict: batch_size must be > 0, got ", o.batch_size);
  TensorBatches source(x, {}, o.batch_size, o.steps, false);
  return Loops::predict(*this, source, o);
}

Tensor Model::predict(const data::Dataset& dataset, const PredictOptions& o) {
  return predict_outputs(dataset, o).at(0);
}

std::vector<Tensor> Model::predict_outputs(const data::Dataset& dataset, const PredictOptions& o) {
  DatasetBatches source("predict", dataset, *impl_, o.steps, false);
  return Loops::predict(*this, source, o);
}

std::vector<Tensor> Model::Loops::predict(Model& m, BatchSource& source, const PredictOptions& o) {
  if (m.state_) {
    prepare_replicas(m, "predict");
    detail::pull_from_parameter_servers(m);
  }
  CallbackList callbacks = make_callbacks(
      o.callbacks, &m,
      {.epochs = 1,
       .steps = source.steps(),
       .verbose = effective_verbose(o.verbose, !m.state_ || m.state_->strategy.is_chief())},
      false);
  source.start_epoch(0);
  callbacks.each([](Callback& cb) { cb.on_predict_begin({}); });
  std::vector<std::vector<Tensor>> per_output;
  for (std::int64_t step = 0;; ++step) {
    std::optional<Batch> batch;
    try {
      batch = source.next(step);
      if (!batch) break;
      callbacks.each([&](Callback& cb) { cb.on_predict_batch_begin(step, {}); });
      NoGradGuard no_grad;
      const std::vector<Tensor> outs = predict_batch(m, *batch);
      per_output.resize(outs.size());
      for (std::size_t i = 0; i < outs.size(); ++i)
        per_output[i].push_back(outs[i].copy_to(host_device()));
    } catch (const Error&) {
      detail::rethrow_with_prefix("predict: batch " + std::to_string(step) + ": ");
    }
    callbacks.each([&](Callback& cb) { cb.on_predict_batch_end(step, {}); });
  }
  callbacks.each([](Callback& cb) { cb.on_predict_end({}); });
  LOCKSTEP_CHECK(!per_output.empty(), "predict: the data yielded no batches");
  std::vector<Tensor> result;
  for (const auto& parts : per_output)
    result.push_back(parts.size() == 1 ? parts[0] : concat(parts, 0));
  return result;
}

}  // namespace lockstep
