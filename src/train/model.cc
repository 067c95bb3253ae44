// Model: compile, the train/test steps, and the fit / evaluate / predict
// loops with their callbacks (the structure of Keras 3's trainer).
#include "lockstep/train/model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <tuple>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/hash.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/nn/functional.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "saving.h"

namespace lockstep {

struct Model::TrainState {
  bool compiled = false;
  Optimizer optimizer;
  std::vector<Loss> losses;  // one shared by every output, or one per output
  std::vector<double> loss_weights;
  std::vector<MetricSpec> metric_specs;
  metrics::Mean loss_tracker{{.name = "loss"}};
  std::size_t num_outputs = 0;  // resolved at compile (graphs) or the first step
  std::vector<std::vector<Metric>> output_metrics;  // [output][metric]
  std::vector<metrics::Mean> output_loss_trackers;  // with several outputs only
  bool stop = false;
  // Keras's model.distribute_strategy: the strategy in scope when the model
  // was created (or, if that was none, when it was compiled).
  distribute::Strategy strategy = distribute::get_strategy();
  // Under a strategy with several replicas: each replica's own metrics, in
  // metrics() order, merged into the primary ones when read.
  std::vector<std::vector<Metric>> replica_metrics;
  // While fit runs: where it is (for checkpoints). Set by a callback in
  // on_train_begin: where the starting fit continues from.
  std::function<TrainingSnapshot(bool full_input_state)> snapshot;
  std::optional<TrainingSnapshot> resume;
};

namespace {

Metric resolve_metric(const MetricSpec& spec, const Loss& loss) {
  return spec.metric.defined() ? spec.metric : metrics::get(spec.name, loss);
}

// Rows `idx` of t (a copy), or rows [begin, end) as a view when idx is empty.
Tensor take_rows(const Tensor& t, const std::vector<std::int64_t>& order, std::int64_t begin,
                 std::int64_t end) {
  if (order.empty()) return t.view_rows(begin, end);
  std::vector<std::int64_t> idx(order.begin() + begin, order.begin() + end);
  return gather(t, Tensor::from_vector(idx), 0);
}

int effective_verbose(int verbose) {
  // The live bar needs a terminal; elsewhere print the one-line form.
  if (verbose == 1 && !stdout_is_terminal()) return 2;
  return verbose;
}

struct CallbackList {
  std::vector<std::shared_ptr<Callback>> all;
  std::shared_ptr<History> history;
  template <typename F>
  void each(F&& f) {
    for (auto& cb : all) f(*cb);
  }
};

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

}  // namespace

Model::Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name)
    : Model(std::vector<KerasTensor>{inputs}, std::vector<KerasTensor>{outputs}, std::move(name)) {}

Model::Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name)
    // An empty name becomes "functional", "functional_1", ... as in Keras.
    : Layer(
          std::make_shared<FunctionalImpl>(std::move(inputs), std::move(outputs), std::move(name))),
      state_(std::make_shared<TrainState>()) {}

Model::Model(std::vector<KerasTensor> inputs, const KerasTensor& output, std::string name)
    : Model(std::move(inputs), std::vector<KerasTensor>{output}, std::move(name)) {}

Model::Model(std::shared_ptr<LayerImpl> network)
    : Layer(std::move(network)), state_(std::make_shared<TrainState>()) {
  LOCKSTEP_CHECK(impl_ != nullptr, "Model: the network is null");
}

Model::TrainState& Model::state() const {
  LOCKSTEP_CHECK(state_ != nullptr, "Model: this model is undefined (default-constructed)");
  return *state_;
}

namespace {

// Names of a model's outputs (the producing layers), for per-output logs.
std::vector<std::string> output_names(const LayerImpl& net, std::size_t n) {
  std::vector<std::string> names;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    for (const KerasTensor& out : f->outputs()) {
      names.push_back(out.node()->layer ? out.node()->layer->name() : out.node()->input_name);
    }
  }
  for (std::size_t i = names.size(); i < n; ++i) names.push_back("output_" + std::to_string(i));
  return names;
}

std::size_t declared_outputs(const LayerImpl& net) {
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) return f->outputs().size();
  return 1;
}

}  // namespace

// Builds the per-output losses, weights, metrics and trackers for n outputs.
void Model::resolve_outputs(std::size_t n) const {
  TrainState& s = state();
  if (s.num_outputs == n) return;
  LOCKSTEP_CHECK(s.losses.size() == 1 || s.losses.size() == n, "compile: ", s.losses.size(),
                 " losses for a model with ", n, " outputs; give one loss, or one per output");
  LOCKSTEP_CHECK(s.loss_weights.empty() || s.loss_weights.size() == n,
                 "compile: ", s.loss_weights.size(), " loss_weights for a model with ", n,
                 " outputs");
  const std::vector<std::string> names = output_names(*impl_, n);
  s.output_metrics.assign(n, {});
  s.output_loss_trackers.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const Loss& loss = s.losses.size() == 1 ? s.losses[0] : s.losses[i];
    for (const MetricSpec& spec : s.metric_specs) {
      Metric m = resolve_metric(spec, loss);
      if (n > 1) {  // one independent metric per output, named after it
        auto impl = spec.metric.defined() ? m.impl()->clone() : m.impl();
        impl->set_name(names[i] + "_" + m.name());
        m = Metric(impl);
      }
      s.output_metrics[i].push_back(m);
    }
    if (n > 1)
      s.output_loss_trackers.emplace_back(metrics::MetricOptions{.name = names[i] + "_loss"});
  }
  s.num_outputs = n;
}

std::vector<Layer> Model::layers() const {
  LOCKSTEP_CHECK(impl_ != nullptr, "Model::layers: this model is undefined (default-constructed)");
  if (auto* seq = dynamic_cast<const SequentialImpl*>(impl_.get())) return seq->layers();
  std::vector<Layer> out;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(impl_.get())) {
    for (const KerasTensor& in : f->inputs()) out.emplace_back(in.node()->input_layer);
  }
  for (const auto& sub : impl_->sublayers()) out.emplace_back(sub);
  return out;
}

Layer Model::get_layer(const std::string& name) const {
  std::string names;
  for (const Layer& l : layers()) {
    if (l.name() == name) return l;
    names += (names.empty() ? "" : ", ") + l.name();
  }
  detail::throw_error<ValueError>("Model '", impl_->name(), "': no layer named '", name,
                                  "'; its layers: ", names);
}

std::vector<KerasTensor> Model::inputs() const {
  LOCKSTEP_CHECK(impl_ != nullptr, "Model::inputs: this model is undefined (default-constructed)");
  if (auto* f = dynamic_cast<const FunctionalImpl*>(impl_.get())) return f->inputs();
  if (auto* seq = dynamic_cast<const SequentialImpl*>(impl_.get()); seq && seq->input().defined())
    return {seq->input()};
  detail::throw_error<ValueError>(
      "Model '", impl_->name(),
      "' has no symbolic inputs: only functional models and Sequential models with a known input "
      "shape have them");
}

std::vector<KerasTensor> Model::outputs() const {
  LOCKSTEP_CHECK(impl_ != nullptr, "Model::outputs: this model is undefined (default-constructed)");
  if (auto* f = dynamic_cast<const FunctionalImpl*>(impl_.get())) return f->outputs();
  if (auto* seq = dynamic_cast<const SequentialImpl*>(impl_.get());
      seq && !seq->layer_outputs().empty())
    return {seq->layer_outputs().back()};
  detail::throw_error<ValueError>(
      "Model '", impl_->name(),
      "' has no symbolic outputs: only functional models and Sequential models with a known input "
      "shape and at least one layer have them");
}

namespace {
KerasTensor the_one(const std::vector<KerasTensor>& all, const std::string& model,
                    const char* what) {
  LOCKSTEP_CHECK(all.size() == 1, "Model '", model, "' has ", all.size(), " ", what, "s; use ",
                 what, "s() for a model with several");
  return all[0];
}
}  // namespace

KerasTensor Model::input() const { return the_one(inputs(), impl_->name(), "input"); }
KerasTensor Model::output() const { return the_one(outputs(), impl_->name(), "output"); }

void Model::compile(CompileOptions o) {
  TrainState& s = state();
  s.losses = o.losses.empty() ? std::vector<Loss>{o.loss} : o.losses;
  for (const Loss& l : s.losses) {
    LOCKSTEP_CHECK(l.defined(),
                   "compile: a loss is required, e.g. "
                   "{.loss = ls::losses::SparseCategoricalCrossentropy()}");
  }
  s.optimizer = o.optimizer.defined() ? o.optimizer : optimizers::RMSprop();
  s.loss_weights = o.loss_weights;
  s.metric_specs = o.metrics;
  for (const MetricSpec& spec : s.metric_specs)
    (void)resolve_metric(spec, s.losses[0]);  // unknown names fail here
  s.num_outputs = 0;
  resolve_outputs(declared_outputs(*impl_));
  if (const distribute::Strategy in_scope = distribute::get_strategy(); !in_scope.is_default())
    s.strategy = in_scope;
  s.replica_metrics.clear();
  s.compiled = true;
}

bool Model::compiled() const { return state_ && state_->compiled; }

const Optimizer& Model::optimizer() const { return state().optimizer; }

std::vector<Metric> Model::metrics() const {
  std::vector<Metric> all{state().loss_tracker};
  for (const metrics::Mean& t : state().output_loss_trackers) all.push_back(t);
  for (const auto& per_output : state().output_metrics) {
    for (const Metric& m : per_output) all.push_back(m);
  }
  return all;
}

Logs Model::get_metrics_result() const {
  const TrainState& s = state();
  std::vector<Metric> all = metrics();
  if (!s.replica_metrics.empty()) {
    // Inside train_step / test_step on a replica: that replica's own,
    // unmerged (as Keras's per-replica logs).
    if (const distribute::ReplicaContext* ctx = distribute::current_replica_context()) {
      all = s.replica_metrics.at(static_cast<std::size_t>(ctx->local_replica_id()));
    } else {
      // Sync on read: the primary metrics become the merge of the replicas'
      // (all workers' under a multi-worker strategy: states add up).
      for (std::size_t i = 0; i < all.size(); ++i) {
        all[i].reset_state();
        for (const auto& replica : s.replica_metrics) all[i].merge(replica.at(i));
      }
      if (s.strategy.num_workers() > 1) {
        std::vector<double> states;
        for (const Metric& m : all)
          states.insert(states.end(), m.impl()->state().begin(), m.impl()->state().end());
        s.strategy.sum_across_workers(states);
        std::size_t at = 0;
        for (const Metric& m : all) {
          const std::size_t n = m.impl()->state().size();
          m.impl()->set_state(
              std::vector<double>(states.begin() + static_cast<std::ptrdiff_t>(at),
                                  states.begin() + static_cast<std::ptrdiff_t>(at + n)));
          at += n;
        }
      }
    }
  }
  std::vector<std::pair<std::string, double>> entries;
  for (const Metric& m : all) entries.emplace_back(m.name(), m.result());
  // Keras (TensorFlow backend) returns its logs dict with sorted keys.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Logs logs;
  for (const auto& [k, v] : entries) logs.set(k, v);
  return logs;
}

void Model::reset_metrics() const {
  for (const Metric& m : metrics()) m.reset_state();
  for (const auto& replica : state().replica_metrics) {
    for (const Metric& m : replica) m.reset_state();
  }
}

const distribute::Strategy& Model::distribute_strategy() const { return state().strategy; }

void Model::stop_training() const { state().stop = true; }
bool Model::stop_training_requested() const { return state().stop; }

std::optional<TrainingSnapshot> Model::training_snapshot(bool full_input_state) const {
  if (!state().snapshot) return std::nullopt;
  return state().snapshot(full_input_state);
}

void Model::resume_training_from(TrainingSnapshot snapshot) const {
  state().resume = std::move(snapshot);
}

namespace {

struct LossParts {
  Tensor total;     // what gradients are taken of
  Tensor reported;  // what the loss tracker records (this replica's mean)
  std::vector<Tensor> per_output;
};

// On a replica of a multi-replica step the loss is scaled for the global
// batch: (mean over this replica's n examples) × n / global batch, plus the
// regularisation / replicas — so the all-reduced sum of gradients is the
// gradient of the global mean loss ("add across replicas, never average").
// `ctx`: the replica running the step (null outside replicas).
LossParts compute_losses(const Model::TrainState& s, const LayerImpl& net,
                         const distribute::ReplicaContext* ctx, const std::vector<Tensor>& y,
                         const std::vector<Tensor>& y_pred) {
  LOCKSTEP_CHECK(y.size() == y_pred.size(), "the model has ", y_pred.size(), " outputs but ",
                 y.size(), " targets were given; pass one target per output");
  const bool scaled = ctx && ctx->num_replicas_in_sync() > 1 && ctx->global_batch_size() > 0;
  LossParts parts;
  for (std::size_t i = 0; i < y.size(); ++i) {
    const Loss& loss = s.losses.size() == 1 ? s.losses[0] : s.losses.at(i);
    Tensor value = loss(y[i], y_pred[i]);
    parts.per_output.push_back(value);
    if (!s.loss_weights.empty())
      value = mul(value, Tensor::scalar(static_cast<float>(s.loss_weights[i])));
    parts.reported = parts.reported.defined() ? add(parts.reported, value) : value;
  }
  Tensor penalties;
  for (const Tensor& penalty : net.regularization_losses())
    penalties = penalties.defined() ? add(penalties, penalty) : penalty;
  if (scaled) {
    const double share = static_cast<double>(ctx->local_batch_size()) /
                         static_cast<double>(ctx->global_batch_size());
    parts.total = mul(parts.reported, Tensor::scalar(static_cast<float>(share)));
    if (penalties.defined())
      parts.total = add(parts.total, div(penalties, Tensor::scalar(static_cast<float>(
                                                         ctx->num_replicas_in_sync()))));
  } else {
    parts.total = parts.reported;
    if (penalties.defined()) parts.total = add(parts.total, penalties);
  }
  if (penalties.defined()) parts.reported = add(parts.reported, stop_gradient(penalties));
  return parts;
}

// Models declared with float inputs accept other dtypes (uint8 images) and
// cast them, as Keras does when it converts inputs.
std::vector<Tensor> prepare_inputs(const LayerImpl& network, const std::vector<Tensor>& xs) {
  std::vector<KerasTensor> declared;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&network)) {
    declared = f->inputs();
    LOCKSTEP_CHECK(xs.size() == declared.size(), "model '", network.name(), "' has ",
                   declared.size(), " inputs, got ", xs.size(), " input tensors");
  } else if (auto* s = dynamic_cast<const SequentialImpl*>(&network)) {
    if (s->input().defined()) declared = {s->input()};
  }
  std::vector<Tensor> out = xs;
  for (std::size_t i = 0; i < out.size() && i < declared.size(); ++i) {
    if (out[i].dtype() != DType::kFloat32 && declared[i].dtype() == DType::kFloat32)
      out[i] = cast(out[i], DType::kFloat32);
  }
  return out;
}

// Updates the metrics of replica `ctx` (the primary ones outside replicas):
// weights by the true example count, so merged replicas give the
// single-device numbers.
void update_trackers(Model::TrainState& s, const distribute::ReplicaContext* ctx,
                     const LossParts& parts, const std::vector<Tensor>& y,
                     const std::vector<Tensor>& y_pred, std::int64_t batch) {
  const Tensor weight = Tensor::full({1}, static_cast<double>(batch));
  if (ctx && !s.replica_metrics.empty()) {
    // Flat, in metrics() order: loss, per-output losses, per-output metrics.
    const std::vector<Metric>& mine =
        s.replica_metrics.at(static_cast<std::size_t>(ctx->local_replica_id()));
    std::size_t k = 0;
    mine.at(k++).update_state(parts.reported, Tensor(), weight);
    for (std::size_t i = 0; i < s.output_loss_trackers.size(); ++i)
      mine.at(k++).update_state(parts.per_output[i], Tensor(), weight);
    for (std::size_t i = 0; i < s.output_metrics.size(); ++i) {
      for (std::size_t j = 0; j < s.output_metrics[i].size(); ++j)
        mine.at(k++).update_state(y[i], y_pred[i]);
    }
    return;
  }
  s.loss_tracker.update_state(parts.reported, weight);
  for (std::size_t i = 0; i < s.output_loss_trackers.size(); ++i) {
    s.output_loss_trackers[i].update_state(parts.per_output[i], weight);
  }
  for (std::size_t i = 0; i < s.output_metrics.size(); ++i) {
    for (const Metric& m : s.output_metrics[i]) m.update_state(y[i], y_pred[i]);
  }
}

std::int64_t check_data(const char* op, const std::vector<Tensor>& x,
                        const std::vector<Tensor>& y) {
  LOCKSTEP_CHECK(!x.empty(), op, ": no input tensors");
  LOCKSTEP_CHECK(!y.empty(), op, ": no targets");
  const Tensor& first = x[0];
  LOCKSTEP_CHECK(first.defined() && first.rank() >= 1, op, ": x is undefined or a scalar");
  const std::int64_t n = first.shape()[0];
  for (const auto* group : {&x, &y}) {
    for (std::size_t i = 0; i < group->size(); ++i) {
      const Tensor& t = (*group)[i];
      const char* what = group == &x ? "x" : "y";
      LOCKSTEP_CHECK(t.defined(), op, ": ", what, " ", i, " is undefined");
      LOCKSTEP_CHECK_AS(
          ShapeError, t.rank() >= 1 && t.shape()[0] == n, op,
          ": x and y must have the same number of examples, got x ", first.shape(), " and ", what,
          (group->size() > 1 ? " " + std::to_string(i) : std::string()), " ", t.shape());
    }
  }
  LOCKSTEP_CHECK(n > 0, op, ": the data is empty (x has shape ", first.shape(), ")");
  return n;
}

std::vector<Tensor> rows_of(const std::vector<Tensor>& ts, const std::vector<std::int64_t>& order,
                            std::int64_t begin, std::int64_t end) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(take_rows(t, order, begin, end));
  return out;
}

std::vector<Tensor> view_all(const std::vector<Tensor>& ts, std::int64_t begin, std::int64_t end) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.view_rows(begin, end));
  return out;
}

}  // namespace

Tensor Model::compute_loss(const std::vector<Tensor>& y, const std::vector<Tensor>& y_pred) const {
  return compute_losses(state(), *impl_, distribute::current_replica_context(), y, y_pred).total;
}

Logs Model::train_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y) {
  TrainState& s = state();
  LOCKSTEP_CHECK(s.compiled, "fit: you must call compile() before training the model");
  const std::vector<Tensor> x = prepare_inputs(*impl_, x_in);
  const std::vector<Variable> vars = impl_->trainable_weights();
  std::vector<Tensor> y_pred, grads;
  LossParts parts;
  // On a replica of a strategy (train_step is Keras's override point, user
  // code: it asks for its context as user code does), gradient buckets are
  // summed across replicas while backward goes on (inactive otherwise).
  distribute::ReplicaContext* ctx = distribute::current_replica_context();
  distribute::GradientReduction reduction =
      ctx ? ctx->start_gradient_reduction(vars) : distribute::GradientReduction();
  {
    GradientTape tape;
    y_pred = (*this)(x, {.training = true});
    resolve_outputs(y_pred.size());
    parts = compute_losses(s, *impl_, ctx, y, y_pred);
    grads = tape.gradient(parts.total, vars, UnconnectedGradients::kNone, reduction.listener());
  }
  grads = reduction.finish(std::move(grads));
  s.optimizer.apply_gradients(grads, vars, {.skip_gradients_aggregation = reduction.active()});
  NoGradGuard no_grad;
  update_trackers(s, ctx, parts, y, y_pred, x.at(0).shape()[0]);
  return get_metrics_result();
}

Logs Model::test_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y) {
  TrainState& s = state();
  LOCKSTEP_CHECK(s.compiled, "evaluate: you must call compile() before evaluating the model");
  NoGradGuard no_grad;
  const std::vector<Tensor> x = prepare_inputs(*impl_, x_in);
  const std::vector<Tensor> y_pred = (*this)(x, {.training = false});
  resolve_outputs(y_pred.size());
  const distribute::ReplicaContext* ctx = distribute::current_replica_context();
  update_trackers(s, ctx, compute_losses(s, *impl_, ctx, y, y_pred), y, y_pred,
                  x.at(0).shape()[0]);
  return get_metrics_result();
}

// ---- Where batches come from: tensors sliced in memory, or a Dataset ----

namespace {

struct Batch {
  std::vector<Tensor> x, y;
  std::string where;  // for error messages: " (examples 64 to 127)"
  // -1: x and y are the global batch (every worker holds it and keeps its
  // replicas' rows). Otherwise they are this worker's part only (auto-shard
  // FILE / OFF) and this is the global batch's size, summed across workers.
  std::int64_t global_rows = -1;
  bool worker_part = false;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches per epoch; 0 when unknown until the data ends.
  virtual std::int64_t steps() const = 0;
  virtual void start_epoch(int epoch) = 0;
  virtual std::optional<Batch> next(std::int64_t step) = 0;
  // The position after the batches of `epoch` taken so far, and back. Not
  // `full`: as little as replaying the input needs (Keras's way: skip the
  // batches already used); `full`: the input's whole state (shuffle buffers
  // and all), exact even for non-deterministic pipelines.
  virtual data::IteratorState save_state(int epoch, bool full) = 0;
  // Positions the source at `step` batches into `epoch` (instead of
  // start_epoch), from save_state's result.
  virtual void restore_state(int epoch, std::int64_t step, const data::IteratorState& state) = 0;
};

class TensorBatches final : public BatchSource {
 public:
  TensorBatches(std::vector<Tensor> x, std::vector<Tensor> y, std::int64_t batch_size,
                std::int64_t steps, bool shuffle)
      : x_(std::move(x)),
        y_(std::move(y)),
        n_(x_.at(0).shape()[0]),
        batch_size_(batch_size),
        steps_(steps > 0 ? steps : (n_ + batch_size - 1) / batch_size),
        shuffle_(shuffle) {
    if (shuffle_) {
      seed_ = detail::next_global_random_key().first ^ 0x5eed5eed5eedULL;
      stream_ = detail::next_global_random_key().second << 20;
    }
  }
  std::int64_t steps() const override { return steps_; }
  void start_epoch(int epoch) override {
    if (shuffle_)
      order_ = random::permutation_indices(n_, seed_, stream_ + static_cast<std::uint64_t>(epoch));
  }
  data::IteratorState save_state(int epoch, bool) override {
    data::IteratorState st;
    st.json = {{"source", "tensors"}, {"examples", n_}, {"batch_size", batch_size_},
               {"shuffle", shuffle_}, {"seed", seed_},  {"stream", stream_},
               {"epoch", epoch}};
    return st;
  }
  void restore_state(int epoch, std::int64_t, const data::IteratorState& st) override {
    const auto& j = st.json;
    LOCKSTEP_CHECK(
        j.value("source", "") == "tensors" && j.value("examples", -1) == n_ &&
            j.value("batch_size", -1) == batch_size_ && j.value("shuffle", !shuffle_) == shuffle_,
        "fit: the saved input position is for other data (", j.dump(), "); this fit has ", n_,
        " examples in batches of ", batch_size_, shuffle_ ? ", shuffled" : "");
    seed_ = j.at("seed").get<std::uint64_t>();
    stream_ = j.at("stream").get<std::uint64_t>();
    start_epoch(epoch);
  }
  std::optional<Batch> next(std::int64_t step) override {
    if (step >= steps_) return std::nullopt;
    const std::int64_t begin = step * batch_size_, end = std::min(n_, begin + batch_size_);
    return Batch{rows_of(x_, order_, begin, end), rows_of(y_, order_, begin, end),
                 " (examples " + std::to_string(begin) + " to " + std::to_string(end - 1) + ")"};
  }

 private:
  std::vector<Tensor> x_, y_;
  std::int64_t n_, batch_size_, steps_;
  bool shuffle_;
  std::uint64_t seed_ = 0, stream_ = 0;
  std::vector<std::int64_t> order_;
};

std::vector<std::string> input_names(const LayerImpl& net) {
  std::vector<std::string> names;
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    for (const KerasTensor& in : f->inputs()) names.push_back(in.node()->input_name);
  }
  return names;
}

std::size_t declared_inputs(const LayerImpl& net) {
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) return f->inputs().size();
  return 1;
}

class DatasetBatches final : public BatchSource {
 public:
  // `needs_targets`: fit / evaluate; predict takes the inputs only.
  // `strategy`: under a multi-worker strategy the dataset's auto-shard
  // policy applies (null: every worker reads all of it, as predict does).
  DatasetBatches(const char* op, data::Dataset ds, const LayerImpl& net, std::int64_t steps,
                 bool needs_targets, const distribute::Strategy* strategy = nullptr)
      : op_(op),
        ds_(std::move(ds)),
        n_in_(declared_inputs(net)),
        n_out_(declared_outputs(net)),
        in_names_(input_names(net)),
        out_names_(output_names(net, declared_outputs(net))),
        fixed_steps_(steps),
        needs_targets_(needs_targets) {
    LOCKSTEP_CHECK(ds_.defined(), op_, ": the dataset is undefined");
    if (strategy && strategy->num_workers() > 1) apply_auto_shard(*strategy);
    const std::int64_t c = ds_.cardinality();
    LOCKSTEP_CHECK(steps > 0 || c != data::kInfiniteCardinality, op_,
                   ": the dataset is infinite (repeat() without a count); give steps_per_epoch "
                   "(or steps) to say how many batches make an epoch");
    LOCKSTEP_CHECK(c != 0, op_, ": the dataset is empty");
    steps_ = steps > 0 ? steps : (c > 0 ? c * parts_ : 0);
  }
  std::int64_t steps() const override { return steps_; }
  void start_epoch(int epoch) override {
    // Without a step count every epoch is a full pass over a new iterator
    // (keyed by the epoch); with one, a single iterator runs on across epochs.
    if (fixed_steps_ == 0 || !it_) {
      it_epoch_ = static_cast<std::uint64_t>(epoch);
      it_ = ds_.make_iterator({.epoch = it_epoch_});
    }
  }
  std::optional<Batch> next(std::int64_t step) override {
    if (steps_ > 0 && step >= steps_) return std::nullopt;
    if (parts_ == 1) {
      auto e = it_->next();
      if (!e) {
        exhausted_ = fixed_steps_ > 0;
        return std::nullopt;
      }
      return split(*e, step);
    }
    // FILE / OFF: each batch of this worker's pipeline is cut into one part
    // per worker, taken one per step (tf.distribute's rebatching).
    if (!current_ || part_ == parts_) {
      current_ = it_->next();
      part_ = 0;
      if (!current_) {
        exhausted_ = fixed_steps_ > 0;
        return std::nullopt;
      }
    }
    const std::int64_t rows = current_->size() > 0 ? (*current_)[0].dim(0) : 0;
    const std::vector<std::int64_t> sizes = distribute::even_split(rows, parts_);
    std::int64_t begin = 0;
    for (int k = 0; k < part_; ++k) begin += sizes[static_cast<std::size_t>(k)];
    const std::int64_t size = sizes[static_cast<std::size_t>(part_)];
    std::vector<Tensor> views;
    for (const Tensor& t : current_->components())
      views.push_back(t.view_rows(begin, begin + size));
    ++part_;
    Batch b = split(data::Element(std::move(views), current_->names()), step);
    b.worker_part = true;
    return b;
  }
  // A fixed step count that the data could not supply.
  bool exhausted() const { return exhausted_; }

  // The policy of the dataset's options: DATA leaves the dataset whole;
  // FILE shards its file list; FILE and OFF cut every batch into parts.
  void apply_auto_shard(const distribute::Strategy& strategy) {
    const int workers = strategy.num_workers();
    const data::AutoShardPolicy policy = ds_.options().experimental_distribute.auto_shard_policy;
    if (policy == data::AutoShardPolicy::kData) return;
    if (policy == data::AutoShardPolicy::kFile || policy == data::AutoShardPolicy::kAuto) {
      data::Dataset sharded = ds_.with_sharded_files(workers, strategy.worker_index());
      if (!sharded.defined()) {
        LOCKSTEP_CHECK(policy == data::AutoShardPolicy::kAuto, op_,
                       ": auto-shard policy FILE needs a pipeline that reads a file list "
                       "(Dataset::from_files / list_files) with at least one file for each of the ",
                       workers,
                       " workers, through transformations that can follow it (not zip, "
                       "concatenate or cache to a file); use DATA or OFF");
        return;  // AUTO: DATA
      }
      ds_ = sharded;
    }
    parts_ = workers;
  }
  data::IteratorState save_state(int, bool full) override {
    if (!full) {
      data::IteratorState st;
      st.json = {{"source", "dataset"}, {"iterator_epoch", it_epoch_}, {"replay", it_->position()}};
      // Every worker has taken as many elements and parts as the chief
      // (they step together): the chief's numbers replay each worker's own
      // pipeline.
      if (parts_ > 1) st.json["part"] = part_;
      return st;
    }
    LOCKSTEP_CHECK(parts_ == 1, op_,
                   ": the full input state cannot be saved under auto-shard FILE or OFF (each "
                   "worker's pipeline is its own); the default replay position resumes every "
                   "worker");
    data::IteratorState st = it_->save();
    st.json = {{"source", "dataset"}, {"iterator_epoch", it_epoch_}, {"iterator", st.json}};
    return st;
  }
  void restore_state(int epoch, std::int64_t step, const data::IteratorState& st) override {
    LOCKSTEP_CHECK(st.json.value("source", "") == "dataset", op_,
                   ": the saved input position is not a dataset's (", st.json.dump(), ")");
    if (fixed_steps_ == 0 && step == 0) {
      start_epoch(epoch);  // a whole new pass: nothing to restore
      return;
    }
    it_epoch_ = st.json.at("iterator_epoch").get<std::uint64_t>();
    it_ = ds_.make_iterator({.epoch = it_epoch_});
    if (st.json.contains("replay")) {
      // Every random choice is a function of the seeds and the iteration key
      // (data/dataset.h), so the same elements come again: skip them.
      auto skip = st.json.at("replay").get<std::int64_t>();
      const int part = st.json.value("part", 0);
      current_.reset();
      part_ = 0;
      const bool mid_element = parts_ > 1 && part > 0 && part < parts_;
      if (mid_element) --skip;  // the element being cut is read again below
      for (std::int64_t i = 0; i < skip; ++i) {
        LOCKSTEP_CHECK(it_->next().has_value(), op_, ": cannot resume: the dataset ended after ", i,
                       " of the ", skip, " elements used before the checkpoint");
      }
      if (mid_element) {
        current_ = it_->next();
        LOCKSTEP_CHECK(current_.has_value(), op_,
                       ": cannot resume: the dataset ended before the element being cut");
        part_ = part;
      }
      return;
    }
    it_->restore({st.json.at("iterator"), st.tensors});
  }

 private:
  // FILE / OFF: the element being cut into parts, and the next part.
  int parts_ = 1;
  int part_ = 0;
  std::optional<data::Element> current_;

  Batch split(const data::Element& e, std::int64_t step) const {
    Batch b;
    b.where = " (dataset element " + std::to_string(it_->position() - 1) + ")";
    (void)step;
    auto named = [&](const std::vector<std::string>& names, std::vector<Tensor>& out) {
      if (e.names().empty() || names.empty()) return false;
      for (const auto& n : names) {
        if (std::find(e.names().begin(), e.names().end(), n) == e.names().end()) return false;
      }
      for (const auto& n : names) out.push_back(e[n]);
      return true;
    };
    if (named(in_names_, b.x)) {
      if (needs_targets_) {
        if (!named(out_names_, b.y)) {
          // The components that are not inputs, in order.
          for (std::size_t i = 0; i < e.size(); ++i) {
            if (std::find(in_names_.begin(), in_names_.end(), e.names()[i]) == in_names_.end())
              b.y.push_back(e[i]);
          }
        }
        LOCKSTEP_CHECK(b.y.size() == n_out_, op_, ": the dataset's elements name the inputs but ",
                       "hold ", b.y.size(), " other components for the model's ", n_out_,
                       " outputs");
      }
      return b;
    }
    const std::size_t want = n_in_ + (needs_targets_ ? n_out_ : 0);
    LOCKSTEP_CHECK(e.size() == want || (!needs_targets_ && e.size() == n_in_ + n_out_), op_,
                   ": the model has ", n_in_, " input(s) and ", n_out_,
                   " output(s), so dataset elements must hold ", want,
                   needs_targets_ ? " components (inputs, then targets)" : " input components",
                   "; got ", e.size());
    b.x.assign(e.components().begin(), e.components().begin() + static_cast<std::ptrdiff_t>(n_in_));
    if (needs_targets_)
      b.y.assign(e.components().begin() + static_cast<std::ptrdiff_t>(n_in_), e.components().end());
    return b;
  }

  const char* op_;
  data::Dataset ds_;
  std::size_t n_in_, n_out_;
  std::vector<std::string> in_names_, out_names_;
  std::int64_t fixed_steps_, steps_ = 0;
  bool needs_targets_;
  bool exhausted_ = false;
  std::optional<data::Iterator> it_;
  std::uint64_t it_epoch_ = 0;  // the key the iterator was made with
};

}  // namespace

// ---- fit / evaluate / predict ----

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

struct Model::Loops {
  static History fit(Model& m, BatchSource& train, const std::optional<ValidationData>& val,
                     const FitOptions& o);
  static Logs evaluate(Model& m, BatchSource& source, const EvaluateOptions& o);
  static std::vector<Tensor> predict(Model& m, BatchSource& source, const PredictOptions& o);

  // ---- Where strategy meets model ----
  static bool distributed(const Model& m) { return !m.state().strategy.is_default(); }
  // Under a multi-worker strategy, whether every worker has a next batch:
  // an epoch ends for all when one runs out (uneven input never hangs).
  static bool all_workers_have_batch(Model& m, std::optional<Batch>& batch);
  // Every worker must train the same model with the same optimizer on
  // input of the same length; a mismatch is named on every worker.
  static void check_workers_agree(Model& m, const char* op, std::int64_t steps);
  static void prepare_replicas(Model& m, const char* op);
  // A global batch cut into each replica's share (zero-copy views).
  struct Shares {
    std::int64_t global = 0;
    std::vector<std::int64_t> sizes;
    std::vector<std::vector<Tensor>> x, y;
  };
  static Shares share_out(Model& m, const Batch& b);
  static Logs train_batch(Model& m, const Batch& b);
  static Logs test_batch(Model& m, const Batch& b);
  static std::vector<Tensor> predict_batch(Model& m, const Batch& b);
  static void build_before_replicas(Model& m, const std::vector<Tensor>& x);
};

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
  const auto agreed = strategy.agree_on_step(
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
    model_config = detail::model_config(*m.impl_).dump();
  } catch (const Error&) {
    // A subclassed model has no config; the variables' broadcast checks shapes.
  }
  strategy.check_workers_agree(op, {{"model config", model_config},
                                    {"optimizer config", m.state().optimizer->config_json()},
                                    {"number of steps per epoch", std::to_string(steps)}});
}

Model::Loops::Shares Model::Loops::share_out(Model& m, const Batch& b) {
  build_before_replicas(m, b.x);
  // x and y cut together, by the strategy's one batch splitter.
  std::vector<Tensor> all = b.x;
  all.insert(all.end(), b.y.begin(), b.y.end());
  distribute::Strategy::LocalBatches local =
      m.state().strategy.split_batch(all, b.worker_part, b.global_rows);
  Shares shares;
  shares.global = local.global_rows;
  shares.sizes = local.sizes;
  for (auto& part : local.parts) {
    const auto nx = static_cast<std::ptrdiff_t>(b.x.size());
    shares.x.emplace_back(part.begin(), part.begin() + nx);
    shares.y.emplace_back(part.begin() + nx, part.end());
  }
  return shares;
}

Logs Model::Loops::train_batch(Model& m, const Batch& b) {
  if (!distributed(m)) return m.train_step(b.x, b.y);
  TrainState& s = m.state();
  const Shares shares = share_out(m, b);
  // Listed once per batch: the replicas only read this list.
  std::vector<Variable> non_trainable = m.impl_->non_trainable_weights();
  s.strategy.run_replicas([&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    ctx.set_batch(shares.global, shares.sizes[i]);
    std::vector<std::uint64_t> versions;
    for (const Variable& v : non_trainable) versions.push_back(v.version());
    if (shares.sizes[i] > 0) {
      m.train_step(shares.x[i], shares.y[i]);
    } else {
      // No examples here: take part in the gradient all-reduce with nothing.
      const std::vector<Variable> vars = m.impl_->trainable_weights();
      s.optimizer.apply_gradients(std::vector<Tensor>(vars.size()), vars);
    }
    ctx.sync_non_trainable(non_trainable, versions);
  });
  return m.get_metrics_result();
}

Logs Model::Loops::test_batch(Model& m, const Batch& b) {
  if (!distributed(m)) return m.test_step(b.x, b.y);
  const Shares shares = share_out(m, b);
  m.state().strategy.run_replicas([&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    if (shares.sizes[i] > 0) m.test_step(shares.x[i], shares.y[i]);
  });
  return m.get_metrics_result();
}

std::vector<Tensor> Model::Loops::predict_batch(Model& m, const Batch& b) {
  auto forward = [&](const std::vector<Tensor>& x) {
    NoGradGuard no_grad;
    return m(prepare_inputs(*m.impl_, x), {.training = false});
  };
  if (!distributed(m)) return forward(b.x);
  const Shares shares = share_out(m, b);
  std::vector<std::vector<Tensor>> outs(shares.sizes.size());
  m.state().strategy.run_replicas([&](distribute::ReplicaContext& ctx) {
    const auto i = static_cast<std::size_t>(ctx.local_replica_id());
    if (shares.sizes[i] > 0) outs[i] = forward(shares.x[i]);
  });
  // Replica order is example order.
  std::vector<Tensor> merged;
  for (std::size_t k = 0; k < outs[0].size(); ++k) {
    std::vector<Tensor> parts;
    for (const auto& o : outs) {
      if (!o.empty()) parts.push_back(o[k]);
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
  return Loops::fit(*this, train, val, o);
}

History Model::fit(const data::Dataset& dataset, const FitOptions& o) {
  LOCKSTEP_CHECK(state().compiled, "fit: you must call compile() before fit()");
  check_fit_options(o);
  LOCKSTEP_CHECK(o.validation_split == 0.0,
                 "fit: validation_split is not supported with a Dataset (it cannot be split "
                 "without reading it); pass validation_data");
  DatasetBatches train("fit", dataset, *impl_, o.steps_per_epoch, true, &state().strategy);
  return Loops::fit(*this, train, o.validation_data, o);
}

History Model::Loops::fit(Model& m, BatchSource& train, const std::optional<ValidationData>& val,
                          const FitOptions& o) {
  TrainState& s = m.state();
  prepare_replicas(m, "fit");
  check_workers_agree(m, "fit", train.steps());
  const LayerImpl& net = *m.impl_;
  std::unique_ptr<BatchSource> val_source;
  if (val) {
    if (val->dataset.defined()) {
      val_source = std::make_unique<DatasetBatches>("fit (validation_data)", val->dataset, net,
                                                    o.validation_steps, true, &s.strategy);
    } else {
      check_data("fit (validation_data)", val->x, val->y);
      val_source =
          std::make_unique<TensorBatches>(val->x, val->y, o.batch_size, o.validation_steps, false);
    }
  }
  const int verbose = effective_verbose(o.verbose);
  CallbackList callbacks = make_callbacks(
      o.callbacks, &m, {.epochs = o.epochs, .steps = train.steps(), .verbose = verbose}, true);

  s.stop = false;
  s.resume.reset();
  // Where training is, for checkpoints taken by callbacks: `done` batches of
  // `at_epoch` applied (at an epoch's end: 0 of the next).
  int at_epoch = o.initial_epoch;
  std::int64_t done = 0;
  s.snapshot = [&](bool full_input_state) {
    TrainingSnapshot snap;
    snap.epoch = at_epoch;
    snap.step = done;
    snap.input = train.save_state(at_epoch, full_input_state);
    // Merges the replicas' metrics into the primary ones. Across workers that
    // is a collective, and the chief alone takes snapshots: there the last
    // batch's logs have merged them already.
    if (s.strategy.num_workers() == 1) (void)m.get_metrics_result();
    for (const Metric& metric : m.metrics())
      snap.metrics.emplace_back(metric.name(), metric.impl()->state());
    std::tie(snap.random_seed, snap.random_stream) = detail::global_random_state();
    return snap;
  };
  struct ForgetSnapshot {
    TrainState& s;
    ~ForgetSnapshot() {
      s.snapshot = nullptr;
      s.resume.reset();
    }
  } forget{s};
  callbacks.each([](Callback& cb) { cb.on_train_begin({}); });
  std::optional<TrainingSnapshot> resume = std::move(s.resume);
  s.resume.reset();
  int first_epoch = o.initial_epoch;
  if (resume) {
    LOCKSTEP_CHECK(resume->epoch >= 0 && resume->step >= 0, "fit: cannot resume at epoch ",
                   resume->epoch, ", batch ", resume->step);
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
    if (resuming) {
      train.restore_state(epoch, resume->step, resume->input);
    } else {
      train.start_epoch(epoch);
    }
    for (std::int64_t step = done;; ++step) {
      std::optional<Batch> batch;
      try {
        batch = train.next(step);
      } catch (const Error&) {
        detail::rethrow_with_prefix("fit: epoch " + std::to_string(epoch + 1) + ", reading batch " +
                                    std::to_string(step) + ": ");
      }
      if (!all_workers_have_batch(m, batch)) break;
      callbacks.each([&](Callback& cb) { cb.on_train_batch_begin(step, {}); });
      Logs logs;
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
      callbacks.each([&](Callback& cb) { cb.on_train_batch_end(step, logs); });
      if (s.stop) break;
    }
    if (auto* d = dynamic_cast<DatasetBatches*>(&train); d && d->exhausted()) {
      // Keras's behaviour: warn, finish this epoch, stop.
      std::cerr << "fit: the dataset ran out of data after " << (epoch - o.initial_epoch + 1)
                << " epoch(s) with steps_per_epoch = " << o.steps_per_epoch
                << "; interrupting training (repeat() the dataset to train longer)\n";
      s.stop = true;
    }
    epoch_logs = m.get_metrics_result();
    if (val_source && (epoch + 1) % o.validation_freq == 0) {
      // Validation runs through the same callbacks, silently (as Keras).
      m.reset_metrics();
      val_source->start_epoch(0);
      callbacks.each([](Callback& cb) { cb.on_test_begin({}); });
      Logs val_logs;
      for (std::int64_t step = 0;; ++step) {
        std::optional<Batch> batch;
        try {
          batch = val_source->next(step);
          if (!all_workers_have_batch(m, batch)) break;
          callbacks.each([&](Callback& cb) { cb.on_test_batch_begin(step, {}); });
          val_logs = test_batch(m, *batch);
        } catch (const Error&) {
          detail::rethrow_with_prefix("fit: validation after epoch " + std::to_string(epoch + 1) +
                                      ", batch " + std::to_string(step) + ": ");
        }
        callbacks.each([&](Callback& cb) { cb.on_test_batch_end(step, val_logs); });
      }
      callbacks.each([&](Callback& cb) { cb.on_test_end(val_logs); });
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
  CallbackList callbacks = make_callbacks(
      o.callbacks, &m,
      {.epochs = 1, .steps = source.steps(), .verbose = effective_verbose(o.verbose)}, false);
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
      detail::rethrow_with_prefix("evaluate: batch " + std::to_string(step) +
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
  if (m.state_) prepare_replicas(m, "predict");
  CallbackList callbacks = make_callbacks(
      o.callbacks, &m,
      {.epochs = 1, .steps = source.steps(), .verbose = effective_verbose(o.verbose)}, false);
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
      for (std::size_t i = 0; i < outs.size(); ++i) per_output[i].push_back(outs[i].copy());
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

Logs Model::train_on_batch(const Tensor& x, const Tensor& y) {
  check_data("train_on_batch", {x}, {y});
  reset_metrics();
  return train_step(x, y);
}

Logs Model::test_on_batch(const Tensor& x, const Tensor& y) {
  check_data("test_on_batch", {x}, {y});
  reset_metrics();
  return test_step(x, y);
}

Tensor Model::predict_on_batch(const Tensor& x) {
  NoGradGuard no_grad;
  return (*this)(prepare_inputs(*impl_, {x}), {.training = false}).at(0).copy();
}

Sequential::Sequential(std::vector<Layer> layers, Options options)
    : Model(std::make_shared<SequentialImpl>(options.name)) {
  auto* seq = static_cast<SequentialImpl*>(impl_.get());
  if (options.input_shape) seq->set_input_shape(*options.input_shape);
  for (const Layer& l : layers) seq->add(l);
}

void Sequential::add(const Layer& layer) const {
  static_cast<SequentialImpl*>(impl_.get())->add(layer);
}

}  // namespace lockstep
