// Model: construction, compile, metrics, and the train/test steps (the
// model half of Keras 3's trainer; fit / evaluate / predict run in
// fit_loops.cc).
#include "lockstep/train/model.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <tuple>

#include "fit_loops.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/core/hash.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/nn/functional.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "model_internal.h"
#include "saving.h"

namespace lockstep {

using detail::check_data;
using detail::declared_outputs;
using detail::float32_outputs;
using detail::output_names;
using detail::prepare_inputs;

namespace {

Metric resolve_metric(const MetricSpec& spec, const Loss& loss) {
  return spec.metric.defined() ? spec.metric : metrics::get(spec.name, loss);
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

// Builds the per-output losses, weights, metrics and trackers for n outputs.
void Model::resolve_outputs(std::size_t n) const {
  TrainState& s = state();
  if (s.num_outputs == n) return;
  LOCKSTEP_CHECK(s.losses.size() == 1 || s.losses.size() == n, "compile: ", s.losses.size(),
                 " losses for a model with ", n, " outputs; give one loss, or one per output");
  LOCKSTEP_CHECK(s.loss_weights.empty() || s.loss_weights.size() == n,
                 "compile: ", s.loss_weights.size(), " loss_weights for a model with ", n,
                 " outputs");
  LOCKSTEP_CHECK(s.output_metric_specs.empty() || s.output_metric_specs.size() == n,
                 "compile: metrics for ", s.output_metric_specs.size(), " outputs of a model with ",
                 n, " outputs; give one list per output");
  const std::vector<std::string> names = output_names(*impl_, n);
  s.output_metrics.assign(n, {});
  s.output_loss_trackers.clear();
  for (std::size_t i = 0; i < n; ++i) {
    const Loss& loss = s.losses.size() == 1 ? s.losses[0] : s.losses[i];
    const std::vector<MetricSpec>& specs =
        s.output_metric_specs.empty() ? s.metric_specs : s.output_metric_specs[i];
    for (const MetricSpec& spec : specs) {
      Metric m = resolve_metric(spec, loss);
      if (n > 1) {  // one independent metric per output, named after it
        auto impl = spec.metric.defined() ? m.impl()->clone() : m.impl();
        impl->set_name(names[i] + "_" + m.name());
        m = Metric(impl);
      }
      s.output_metrics[i].push_back(m);
    }
    if (n > 1 && loss.defined())
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

void Model::reset_states() const { impl_->reset_states(); }

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

namespace {

// Keras's dicts by output name, as one entry per output (`fallback` for an
// output left out); a name that is no output is a ValueError listing them.
template <typename T>
std::vector<T> by_output(const std::map<std::string, T>& given,
                         const std::vector<std::string>& names, const T& fallback,
                         const char* what) {
  for (const auto& [name, value] : given) {
    if (std::find(names.begin(), names.end(), name) != names.end()) continue;
    std::string all;
    for (const std::string& n : names) all += (all.empty() ? "" : ", ") + n;
    detail::throw_error<ValueError>("compile: ", what, " names the output '", name,
                                    "'; the model's outputs are ", all);
  }
  std::vector<T> out;
  for (const std::string& name : names) {
    auto it = given.find(name);
    out.push_back(it != given.end() ? it->second : fallback);
  }
  return out;
}

}  // namespace

void Model::compile(CompileOptions o) {
  TrainState& s = state();
  const std::vector<std::string> names = output_names(*impl_, declared_outputs(*impl_));
  LOCKSTEP_CHECK((o.loss.defined() ? 1 : 0) + (o.losses.empty() ? 0 : 1) +
                         (o.loss_by_output.empty() ? 0 : 1) <=
                     1,
                 "compile: give the loss one way: loss, losses or loss_by_output");
  LOCKSTEP_CHECK(o.loss_weights.empty() || o.loss_weights_by_output.empty(),
                 "compile: give loss_weights or loss_weights_by_output, not both");
  LOCKSTEP_CHECK((o.metrics.empty() ? 0 : 1) + (o.output_metrics.empty() ? 0 : 1) +
                         (o.metrics_by_output.empty() ? 0 : 1) <=
                     1,
                 "compile: give the metrics one way: metrics, output_metrics or metrics_by_output");
  const bool named = !o.loss_by_output.empty() || !o.loss_weights_by_output.empty() ||
                     !o.metrics_by_output.empty();
  if (!o.loss_by_output.empty()) {
    s.losses = by_output(o.loss_by_output, names, Loss(), "loss_by_output");
  } else {
    s.losses = o.losses.empty() ? std::vector<Loss>{o.loss} : o.losses;
    for (const Loss& l : s.losses) {
      LOCKSTEP_CHECK(l.defined(),
                     "compile: a loss is required, e.g. "
                     "{.loss = ls::losses::SparseCategoricalCrossentropy()}");
    }
  }
  LOCKSTEP_CHECK(
      std::any_of(s.losses.begin(), s.losses.end(), [](const Loss& l) { return l.defined(); }),
      "compile: loss_by_output gives no output a loss");
  s.optimizer = o.optimizer.defined() ? o.optimizer : optimizers::RMSprop();
  if (o.auto_scale_loss && impl_->dtype_policy().name == "mixed_float16" &&
      !s.optimizer->loss_scaling())
    s.optimizer = optimizers::LossScaleOptimizer(s.optimizer);
  s.loss_weights = o.loss_weights_by_output.empty()
                       ? o.loss_weights
                       : by_output(o.loss_weights_by_output, names, 1.0, "loss_weights_by_output");
  s.metric_specs = o.metrics;
  s.output_metric_specs =
      o.metrics_by_output.empty()
          ? o.output_metrics
          : by_output(o.metrics_by_output, names, std::vector<MetricSpec>{}, "metrics_by_output");
  s.named_outputs = named ? names : std::vector<std::string>{};
  LOCKSTEP_CHECK(o.steps_per_execution >= 1, "compile: steps_per_execution must be >= 1, got ",
                 o.steps_per_execution);
  s.steps_per_execution = o.steps_per_execution;
  s.run_eagerly = o.run_eagerly;
  for (const MetricSpec& spec : s.metric_specs)
    (void)resolve_metric(spec, s.losses[0]);  // unknown names fail here
  for (const auto& specs : s.output_metric_specs)
    for (const MetricSpec& spec : specs) (void)resolve_metric(spec, Loss());
  s.num_outputs = 0;
  resolve_outputs(declared_outputs(*impl_));
  if (const distribute::Strategy in_scope = distribute::get_strategy(); !in_scope.is_default())
    s.strategy = in_scope;
  s.replica_metrics.clear();
  {
    std::lock_guard lock(s.trainable_mutex);
    s.trainable.reset();  // the next training step takes what is trainable then
  }
  s.compiled = true;
}

bool Model::compiled() const { return state_ && state_->compiled; }

bool Model::run_eagerly() const { return state().run_eagerly; }

void Model::set_run_eagerly(bool run_eagerly) {
  LOCKSTEP_CHECK(compiled(), "Model.run_eagerly: compile the model first");
  state().run_eagerly = run_eagerly;
}

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
        sum_metric_states(all, [&](std::vector<double>& states) {
          s.strategy.extended().sum_across_workers(states);
        });
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
  // Each output's Keras mask (undefined: none), as float32 weights [batch,
  // steps]: the metrics' sample weights.
  std::vector<Tensor> output_weights;
};

// Keras's loss of an output that carries a mask: the mean of the unreduced
// values over the real steps, Σ values·mask / Σ mask (0 when none is real;
// Keras's apply_mask with sum_over_batch_size). The denominator is the
// global batch's count of real steps, summed across the replicas (Keras
// takes each replica's own, so its N replicas do not train like one).
// Returns {what the gradient is taken of: this replica's share of the
// global mean; what the tracker records: the share scaled to this replica's
// batch, so that merging trackers by batch size gives the global mean}.
std::pair<Tensor, Tensor> masked_loss(const Loss& loss, const Tensor& y, const Tensor& y_pred,
                                      const Tensor& weights, const distribute::ReplicaContext* ctx,
                                      bool scaled, bool counted_across_replicas,
                                      std::size_t output) {
  const Tensor values = loss.unreduced(y, y_pred);
  LOCKSTEP_CHECK_AS(ShapeError, values.shape() == weights.shape(), "output ", output,
                    " carries a Keras mask of shape ", weights.shape(), " but its loss '",
                    loss.name(), "' gives values of shape ", values.shape(),
                    " (Keras weights each value by the mask: a sequence output [batch, steps, "
                    "...] with labels per step)");
  const Tensor weighted = sum(mul(values, weights));
  if (loss.impl()->reduction() == Reduction::kSum) return {weighted, weighted};
  LOCKSTEP_CHECK(loss.impl()->reduction() == Reduction::kSumOverBatchSize, "output ", output,
                 " carries a Keras mask, which needs a loss reduced to one number; '", loss.name(),
                 "' has reduction none");
  Tensor valid = sum(weights);
  if (scaled) {
    LOCKSTEP_CHECK(counted_across_replicas, "output ", output,
                   " carries a Keras mask that its model's graph does not record (a subclassed "
                   "model's), so replicas with no examples could not take part in counting its "
                   "real steps: weight the loss by hand in train_step");
    valid = ctx->all_reduce(distribute::ReduceOp::kSum, valid);
  }
  const double count = valid.item<float>();
  if (count == 0.0) return {mul(weighted, Tensor::scalar(0.0f)), Tensor::scalar(0.0f)};
  const Tensor mean = div(weighted, Tensor::scalar(static_cast<float>(count)));
  if (!scaled) return {mean, mean};
  const double to_local = static_cast<double>(ctx->global_batch_size()) /
                          static_cast<double>(std::max<std::int64_t>(ctx->local_batch_size(), 1));
  return {mean, mul(mean, Tensor::scalar(static_cast<float>(to_local)))};
}

// On a replica of a multi-replica step the loss is scaled for the global
// batch: (mean over this replica's n examples) × n / global batch, plus the
// regularisation / replicas — so the all-reduced sum of gradients is the
// gradient of the global mean loss ("add across replicas, never average").
// An output with a Keras mask is weighted by it (masked_loss).
// `ctx`: the replica running the step (null outside replicas).
LossParts compute_losses(const Model::TrainState& s, const LayerImpl& net,
                         const distribute::ReplicaContext* ctx, const std::vector<Tensor>& y,
                         const std::vector<Tensor>& y_pred) {
  LOCKSTEP_CHECK(y.size() == y_pred.size(), "the model has ", y_pred.size(), " outputs but ",
                 y.size(), " targets were given; pass one target per output");
  const bool scaled = ctx && ctx->num_replicas_in_sync() > 1 && ctx->global_batch_size() > 0;
  const double share = scaled ? static_cast<double>(ctx->local_batch_size()) /
                                    static_cast<double>(ctx->global_batch_size())
                              : 1.0;
  // Keras weights an output's loss and metrics by the mask it carries (a
  // sequence output under Embedding(mask_zero=True) or Masking).
  const std::vector<Tensor> output_masks = net.compute_mask({}, {});
  const std::vector<bool> in_graph = detail::outputs_with_masks(net, y.size());
  LossParts parts;
  Tensor unmasked, masked;  // Σ weight · loss of the outputs without and with masks
  for (std::size_t i = 0; i < y.size(); ++i) {
    const Tensor mask = i < output_masks.size() ? output_masks[i] : Tensor();
    parts.output_weights.push_back(mask.defined() ? cast(mask, DType::kFloat32) : Tensor());
    const Loss& loss = s.losses.size() == 1 ? s.losses[0] : s.losses.at(i);
    if (!loss.defined()) continue;  // an output without a loss (Keras's dict left it out)
    Tensor value, contribution;
    if (mask.defined()) {
      std::tie(contribution, value) = masked_loss(
          loss, y[i], y_pred[i], parts.output_weights.back(), ctx, scaled, in_graph[i], i);
    } else {
      value = loss(y[i], y_pred[i]);
    }
    parts.per_output.push_back(value);
    if (!s.loss_weights.empty()) {
      const Tensor w = Tensor::scalar(static_cast<float>(s.loss_weights[i]));
      value = mul(value, w);
      if (contribution.defined()) contribution = mul(contribution, w);
    }
    parts.reported = parts.reported.defined() ? add(parts.reported, value) : value;
    Tensor& sum_of = contribution.defined() ? masked : unmasked;
    const Tensor& term = contribution.defined() ? contribution : value;
    sum_of = sum_of.defined() ? add(sum_of, term) : term;
  }
  Tensor total = unmasked;
  if (total.defined() && scaled) total = mul(total, Tensor::scalar(static_cast<float>(share)));
  if (masked.defined()) total = total.defined() ? add(total, masked) : masked;
  Tensor penalties;
  for (const Tensor& penalty : net.regularization_losses())
    penalties = penalties.defined() ? add(penalties, penalty) : penalty;
  parts.total = total;
  if (penalties.defined()) {
    const Tensor p =
        scaled ? div(penalties, Tensor::scalar(static_cast<float>(ctx->num_replicas_in_sync())))
               : penalties;
    parts.total = parts.total.defined() ? add(parts.total, p) : p;
    parts.reported = add(parts.reported, stop_gradient(penalties));
  }
  return parts;
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
        mine.at(k++).update_state(y[i], y_pred[i], parts.output_weights.at(i));
    }
    return;
  }
  s.loss_tracker.update_state(parts.reported, weight);
  for (std::size_t i = 0; i < s.output_loss_trackers.size(); ++i) {
    s.output_loss_trackers[i].update_state(parts.per_output[i], weight);
  }
  for (std::size_t i = 0; i < s.output_metrics.size(); ++i) {
    for (const Metric& m : s.output_metrics[i]) {
      m.update_state(y[i], y_pred[i], parts.output_weights.at(i));
    }
  }
}

}  // namespace

namespace detail {

std::vector<bool> outputs_with_masks(const LayerImpl& net, std::size_t outputs) {
  std::vector<bool> out(outputs, false);
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    for (std::size_t i = 0; i < outputs && i < f->outputs().size(); ++i)
      out[i] = f->outputs()[i].has_mask();
  } else if (auto* seq = dynamic_cast<const SequentialImpl*>(&net)) {
    if (outputs > 0 && !seq->layer_outputs().empty())
      out[0] = seq->layer_outputs().back().has_mask();
  }
  return out;
}

void join_loss_reductions(const Model::TrainState& s, const LayerImpl& net,
                          const distribute::ReplicaContext& ctx) {
  if (ctx.num_replicas_in_sync() <= 1 || ctx.global_batch_size() <= 0) return;
  const std::size_t outputs = declared_outputs(net);
  const std::vector<bool> masked = outputs_with_masks(net, outputs);
  for (std::size_t i = 0; i < outputs; ++i) {
    if (s.losses.empty()) break;
    const Loss& loss = s.losses.size() == 1 ? s.losses[0] : s.losses.at(i);
    if (masked[i] && loss.defined() && loss.impl()->reduction() == Reduction::kSumOverBatchSize)
      (void)ctx.all_reduce(distribute::ReduceOp::kSum, Tensor::scalar(0.0f));
  }
}

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

std::vector<Tensor> float32_outputs(std::vector<Tensor> outputs) {
  for (Tensor& t : outputs) {
    if (is_floating(t.dtype()) && t.dtype() != DType::kFloat32) t = cast(t, DType::kFloat32);
  }
  return outputs;
}

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

std::shared_ptr<const TrainableSnapshot> trainable_snapshot(Model::TrainState& s,
                                                            const LayerImpl& network) {
  std::lock_guard lock(s.trainable_mutex);
  if (!s.trainable) {
    auto snap = std::make_shared<TrainableSnapshot>();
    std::function<void(const LayerImpl&)> visit = [&](const LayerImpl& l) {
      if (!l.trainable()) snap->frozen.insert(&l);
      for (const auto& sub : l.sublayers()) visit(*sub);
    };
    visit(network);
    s.trainable = std::move(snap);
  }
  return s.trainable;
}

std::vector<Tensor> view_all(const std::vector<Tensor>& ts, std::int64_t begin, std::int64_t end) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.view_rows(begin, end));
  return out;
}

}  // namespace detail

Tensor Model::compute_loss(const std::vector<Tensor>& y, const std::vector<Tensor>& y_pred) const {
  return compute_losses(state(), *impl_, distribute::current_replica_context(), y, y_pred).total;
}

Logs Model::train_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y) {
  Loops::train_step_body(*this, x_in, y)();
  return get_metrics_result();
}

std::function<void()> Model::Loops::train_step_body(Model& m, const std::vector<Tensor>& x_in,
                                                    const std::vector<Tensor>& y) {
  TrainState& s = m.state();
  LOCKSTEP_CHECK(s.compiled, "fit: you must call compile() before training the model");
  LayerImpl* const impl_ = m.impl_.get();
  const std::vector<Tensor> x = prepare_inputs(*impl_, x_in);
  // What compile fixed as trainable (taken at the first step after it).
  const std::shared_ptr<const detail::TrainableSnapshot> snap =
      detail::trainable_snapshot(s, *impl_);
  const CallContext call{.training = true, .frozen_layers = &snap->frozen};
  std::vector<Variable> vars = impl_->trainable_weights(call);
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
    y_pred = float32_outputs(m(x, call));
    // A model whose layers make their weights on its first call has them now.
    if (vars.empty() && !reduction.active()) vars = impl_->trainable_weights(call);
    m.resolve_outputs(y_pred.size());
    parts = compute_losses(s, *impl_, ctx, y, y_pred);
    // Under a LossScaleOptimizer the scaled loss (the trackers keep the
    // loss itself), as Keras 3's train_step.
    grads = tape.gradient(s.optimizer.scale_loss(parts.total), vars, UnconnectedGradients::kNone,
                          reduction.listener());
  }
  grads = reduction.finish(std::move(grads));
  s.optimizer.apply_gradients(grads, vars, {.skip_gradients_aggregation = reduction.active()});
  // The metrics from the step's outputs: now, or after each replay of a
  // recorded step (train/step_graph.h), whose outputs each replay rewrites.
  return [&s, ctx, parts = std::move(parts), y, y_pred = std::move(y_pred),
          batch = x.at(0).shape()[0]] {
    NoGradGuard no_grad;
    update_trackers(s, ctx, parts, y, y_pred, batch);
  };
}

Logs Model::test_step(const std::vector<Tensor>& x_in, const std::vector<Tensor>& y) {
  TrainState& s = state();
  LOCKSTEP_CHECK(s.compiled, "evaluate: you must call compile() before evaluating the model");
  NoGradGuard no_grad;
  const std::vector<Tensor> x = prepare_inputs(*impl_, x_in);
  const std::vector<Tensor> y_pred = float32_outputs((*this)(x, {.training = false}));
  resolve_outputs(y_pred.size());
  const distribute::ReplicaContext* ctx = distribute::current_replica_context();
  update_trackers(s, ctx, compute_losses(s, *impl_, ctx, y, y_pred), y, y_pred, x.at(0).shape()[0]);
  return get_metrics_result();
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
  return float32_outputs((*this)(prepare_inputs(*impl_, {x}), {.training = false})).at(0).copy();
}

Sequential::Sequential(std::vector<Layer> layers, Options options)
    : Model(std::make_shared<SequentialImpl>(options.name)) {
  auto* seq = static_cast<SequentialImpl*>(impl_.get());
  if (options.input_shape)
    seq->set_input_shape(*options.input_shape, DType::kFloat32, options.batch_size);
  for (const Layer& l : layers) seq->add(l);
}

void Sequential::add(const Layer& layer) const {
  static_cast<SequentialImpl*>(impl_.get())->add(layer);
}

void Sequential::add(const KerasTensor& input) const {
  auto* seq = static_cast<SequentialImpl*>(impl_.get());
  LOCKSTEP_CHECK(seq->layers().empty(), "Sequential.add(Input(", input.sample_shape(),
                 ")): an Input comes first, before any layer (this model has ",
                 seq->layers().size(), ")");
  seq->set_input_shape(input.sample_shape(), input.dtype(), input.node()->input_batch_size);
}

}  // namespace lockstep
