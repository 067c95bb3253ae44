// What the three files of Model share (model.cc: the Model API and its
// train/test steps; batch_sources.h: where batches come from;
// fit_loops.cc: fit / evaluate / predict): its training state and how its
// inputs are checked and prepared.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/nn/functional.h"
#include "lockstep/nn/losses.h"
#include "lockstep/nn/metrics.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/train/model.h"

namespace lockstep {
namespace detail {

// The layers frozen at the first training step after compile: what fit
// trains until the next compile (Keras traces its train step then, and only
// compile makes it trace again). Passed to the layers as
// CallContext::frozen_layers; the variables that train follow from it.
struct TrainableSnapshot {
  std::unordered_set<const LayerImpl*> frozen;
};

class StepGraph;  // train/step_graph.h

}  // namespace detail

struct Model::TrainState {
  bool compiled = false;
  bool run_eagerly = false;  // compile's: no recorded step (step_graph.h)
  Optimizer optimizer;
  // One shared by every output, or one per output (undefined: that output
  // has no loss, Keras's dict without it).
  std::vector<Loss> losses;
  std::vector<double> loss_weights;
  std::vector<MetricSpec> metric_specs;                      // every output's
  std::vector<std::vector<MetricSpec>> output_metric_specs;  // or each output's
  // The output names when compile named outputs (Keras's dicts): saving
  // writes the dicts back.
  std::vector<std::string> named_outputs;
  std::int64_t steps_per_execution = 1;
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
  // Null until the first training step after compile, which takes it
  // (replicas may ask at once: under the mutex).
  std::shared_ptr<const detail::TrainableSnapshot> trainable;
  std::mutex trainable_mutex;
  // While fit runs: each local replica's step, recorded and replayed on its
  // device when the device records (train/step_graph.h); empty where fit
  // records nothing (several workers, replicas summing through the host or
  // with NCCL).
  std::vector<std::shared_ptr<detail::StepGraph>> step_graphs;
};

namespace detail {

// Registers the functions a ParameterServerStrategy worker runs for fit
// (ps_fit.cc); called at start-up by every program that links fit.
void register_fit_functions();
// Under ParameterServerStrategy: the model's weights here take the
// parameter servers' values (before evaluate, predict, save).
void pull_from_parameter_servers(const Model& m);

// Names of a model's outputs (the producing layers), for per-output logs.
std::vector<std::string> output_names(const LayerImpl& net, std::size_t n);
std::size_t declared_outputs(const LayerImpl& net);
// Models declared with float inputs accept other dtypes (uint8 images) and
// cast them, as Keras does when it converts inputs.
std::vector<Tensor> prepare_inputs(const LayerImpl& network, const std::vector<Tensor>& xs);
// A model's outputs as losses and metrics take them: bfloat16 outputs of a
// mixed-precision model are cast to float32 (nn/mixed_precision.h).
std::vector<Tensor> float32_outputs(std::vector<Tensor> outputs);
// Which outputs carry a Keras mask, as the built graph says (a functional
// model's or a Sequential's); false for a subclassed model's.
std::vector<bool> outputs_with_masks(const LayerImpl& net, std::size_t outputs);
// For a replica with no examples in a step: takes part in the reductions
// that the others' losses make (the count of real steps of each masked
// output with a loss), so that none waits for it.
void join_loss_reductions(const Model::TrainState& s, const LayerImpl& net,
                          const distribute::ReplicaContext& ctx);
// The number of examples of x and y, which must agree; errors name `op`.
std::int64_t check_data(const char* op, const std::vector<Tensor>& x, const std::vector<Tensor>& y);
// The model's TrainableSnapshot, taken now if this is the first training
// step since compile.
std::shared_ptr<const TrainableSnapshot> trainable_snapshot(Model::TrainState& s,
                                                            const LayerImpl& network);
// Rows [begin, end) of every tensor, as views.
std::vector<Tensor> view_all(const std::vector<Tensor>& ts, std::int64_t begin, std::int64_t end);

}  // namespace detail
}  // namespace lockstep
