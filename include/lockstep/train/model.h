// Model: a network with a training configuration — keras.Model.
//
//   auto inputs = ls::Input({784});
//   auto x = ls::layers::Dense(256, {.activation = "relu"})(inputs);
//   auto outputs = ls::layers::Dense(10)(x);
//   ls::Model model(inputs, outputs);
//   model.compile({.optimizer = ls::optimizers::Adam(),
//                  .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
//                  .metrics = {ls::metrics::SparseCategoricalAccuracy()}});
//   auto history = model.fit(x_train, y_train, {.batch_size = 64, .epochs = 2,
//                                               .validation_data = {{x_val, y_val}}});
//   auto results = model.evaluate(x_test, y_test);
//
// A Model is a Layer handle: copies share the network and the training state.
// The network is a functional graph, a Sequential stack, or a user's LayerImpl
// subclass (make_model<MyNet>(...)). train_step is the one function a
// strategy runs per replica.
#pragma once

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/distribute/cluster_coordinator.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/nn/layer.h"
#include "lockstep/nn/losses.h"
#include "lockstep/nn/metrics.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/train/callbacks.h"
#include "lockstep/train/logs.h"

namespace lockstep {

// A metric for compile: an object, or a Keras name ("accuracy", "mse", ...).
struct MetricSpec {
  MetricSpec(Metric m) : metric(std::move(m)) {}     // NOLINT: implicit by design
  MetricSpec(const char* n) : name(n) {}             // NOLINT
  MetricSpec(std::string n) : name(std::move(n)) {}  // NOLINT
  Metric metric;
  std::string name{};
};

struct CompileOptions {
  Optimizer optimizer{};       // undefined: RMSprop, Keras's default
  Loss loss{};                 // one loss (applied to every output of a multi-output model)
  std::vector<Loss> losses{};  // or one per output
  // or by output name (Keras's dict; the output layers' names): an output
  // left out has no loss, and trains only through the others'.
  std::map<std::string, Loss> loss_by_output{};
  std::vector<double> loss_weights{};                      // per output (default 1)
  std::map<std::string, double> loss_weights_by_output{};  // or by output name
  // Metrics of every output. For a multi-output model each metric is
  // applied to every output and named "<output layer>_<metric>", as Keras
  // names them. (A Keras 3 file's flat list with one entry per output means
  // one metric per output instead: it loads as output_metrics.)
  std::vector<MetricSpec> metrics{};
  // Or each output's own metrics: one list per output, in output order
  // (Keras 3's list of lists), or by output name (Keras's dict).
  std::vector<std::vector<MetricSpec>> output_metrics{};
  std::map<std::string, std::vector<MetricSpec>> metrics_by_output{};
  // Keras's: true runs every training step op by op. False (the default)
  // lets fit record its step once on a GPU and replay it for each batch
  // (docs/gpus.md, "The step as a graph"); on CPUs every step runs op by op
  // either way.
  bool run_eagerly = false;
  // Training steps per call (Keras's): batch-level callbacks run once per
  // call, at its first and last step; under ParameterServerStrategy, the
  // steps of one scheduled function on a worker.
  std::int64_t steps_per_execution = 1;
  // Keras's auto_scale_loss: a model whose dtype policy is mixed_float16
  // wraps its optimizer in a LossScaleOptimizer (unless it is one). The
  // wrapper shares the optimizer's state (optimizers.h): the handle passed
  // in scales too.
  bool auto_scale_loss = true;
};

// Validation inputs and targets: one tensor each, one per model input /
// output, or a batched Dataset of (inputs..., targets...) elements.
struct ValidationData {
  ValidationData(Tensor x_, Tensor y_) : x{std::move(x_)}, y{std::move(y_)} {}
  ValidationData(std::vector<Tensor> x_, std::vector<Tensor> y_)
      : x(std::move(x_)), y(std::move(y_)) {}
  ValidationData(data::Dataset dataset_) : dataset(std::move(dataset_)) {}  // NOLINT: implicit
  std::vector<Tensor> x;
  std::vector<Tensor> y;
  data::Dataset dataset;
};

struct FitOptions {
  std::int64_t batch_size = 32;
  int epochs = 1;
  // 0 silent, 1 live bar (on a terminal; elsewhere the verbose = 2 line),
  // 2 one line per epoch.
  int verbose = 1;
  std::vector<std::shared_ptr<Callback>> callbacks{};
  std::optional<ValidationData> validation_data{};
  double validation_split = 0.0;  // fraction taken from the end of x / y
  int validation_freq = 1;        // validate every N epochs
  // 0: the whole data. With a Dataset: that many batches per epoch from one
  // iterator that continues across epochs (for repeat()ed datasets).
  std::int64_t steps_per_epoch = 0;
  std::int64_t validation_steps = 0;  // 0: the whole validation data
  int initial_epoch = 0;
  bool shuffle = true;  // tensors only: a Dataset brings its own shuffle
};

struct EvaluateOptions {
  std::int64_t batch_size = 32;  // tensors only: a Dataset is already batched
  std::int64_t steps = 0;        // 0: until the data ends
  int verbose = 1;
  std::vector<std::shared_ptr<Callback>> callbacks{};
};

struct SummaryOptions {
  // Total width; 0: Keras's default, min(88, terminal columns - 4) — 76 when
  // the output is not a terminal (108 for graphs that are not a chain).
  int line_length = 0;
};

struct PredictOptions {
  std::int64_t batch_size = 32;  // tensors only
  std::int64_t steps = 0;        // 0: until the data ends
  int verbose = 0;
  std::vector<std::shared_ptr<Callback>> callbacks{};
};

// Keras's load_weights arguments.
struct LoadWeightsOptions {
  // Legacy .h5 only: match layers by name instead of by position.
  bool by_name = false;
  // Skip a layer whose weights do not fit (named on stderr) instead of failing.
  bool skip_mismatch = false;
};

// Where fit is, between two batches: everything besides the weights and
// the optimizer that an exact resume needs. Topology-free (metric states are
// merged across replicas).
struct TrainingSnapshot {
  int epoch = 0;                // the epoch in progress, or the next to start
  std::int64_t step = 0;        // batches of that epoch already applied
  data::IteratorState input{};  // the training data's position
  std::vector<std::pair<std::string, std::vector<double>>> metrics{};  // metrics() order
  std::uint64_t random_seed = 0, random_stream = 0;                    // the global random state
};

class Model : public Layer {
 public:
  Model() = default;
  Model(const KerasTensor& inputs, const KerasTensor& outputs, std::string name = "");
  Model(std::vector<KerasTensor> inputs, std::vector<KerasTensor> outputs, std::string name = "");
  // A new head on another model's graph: Model(base.inputs(), head(base.output())).
  Model(std::vector<KerasTensor> inputs, const KerasTensor& output, std::string name = "");
  // A subclassed model: `network` computes, the Model trains it.
  explicit Model(std::shared_ptr<LayerImpl> network);

  // Keras's model.layers: a Sequential's stack; a functional model's
  // InputLayers, then each layer once in the order the graph runs them (a
  // nested model is one entry); a subclassed model's tracked layers.
  std::vector<Layer> layers() const;
  // The layer of that name among layers() (model.get_layer); a ValueError
  // that lists the names when there is none.
  Layer get_layer(const std::string& name) const;
  // Forgets the states of every stateful layer (recurrent layers with
  // stateful = true; nn/recurrent_layers.h): the next batch starts from
  // zeros. TF 2's model.reset_states(); Keras 3 has it per layer.
  void reset_states() const;
  // The symbolic inputs and outputs of a functional model (or of a
  // Sequential whose input shape is known): model.inputs / model.outputs,
  // and model.input / model.output for a model with exactly one.
  std::vector<KerasTensor> inputs() const;
  std::vector<KerasTensor> outputs() const;
  KerasTensor input() const;
  KerasTensor output() const;

  void compile(CompileOptions options);
  bool compiled() const;
  // Keras's model.run_eagerly: compile's setting, which may be changed on a
  // compiled model (one loaded compiled from a file included).
  bool run_eagerly() const;
  void set_run_eagerly(bool run_eagerly);

  // Single-input / single-output models take tensors; models with several
  // inputs or outputs take one tensor per input and per output, in order.
  History fit(const Tensor& x, const Tensor& y, const FitOptions& options = {});
  History fit(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
              const FitOptions& options = {});
  Logs evaluate(const Tensor& x, const Tensor& y, const EvaluateOptions& options = {});
  Logs evaluate(const std::vector<Tensor>& x, const std::vector<Tensor>& y,
                const EvaluateOptions& options = {});
  // Outputs for every example, in input order (the first output for a
  // multi-output model; the vector form returns them all).
  Tensor predict(const Tensor& x, const PredictOptions& options = {});
  std::vector<Tensor> predict(const std::vector<Tensor>& x, const PredictOptions& options = {});

  // A Dataset yields batches (Keras: the dataset is batched, batch_size is
  // not used). Each element holds the model's inputs then its targets, in
  // order — or, when the element is named, the components named after the
  // model's inputs and outputs. Every epoch makes a new iterator keyed by the
  // epoch number, so a seeded shuffle reshuffles per epoch reproducibly.
  // predict ignores target components and returns the first output
  // (predict_outputs: every output).
  History fit(const data::Dataset& dataset, const FitOptions& options = {});
  // Under ParameterServerStrategy: every worker builds its own input with
  // the registered dataset function (tf.keras.utils.experimental.
  // DatasetCreator); steps_per_epoch is required. Under ParameterServerStrategy
  // fit also takes a Dataset or tensors, read here and sent to the workers
  // batch by batch; only epoch-level callbacks are allowed (Keras's rule).
  History fit(const distribute::DatasetCreator& creator, const FitOptions& options = {});
  Logs evaluate(const data::Dataset& dataset, const EvaluateOptions& options = {});
  Tensor predict(const data::Dataset& dataset, const PredictOptions& options = {});
  std::vector<Tensor> predict_outputs(const data::Dataset& dataset,
                                      const PredictOptions& options = {});

  Logs train_on_batch(const Tensor& x, const Tensor& y);
  Logs test_on_batch(const Tensor& x, const Tensor& y);
  Tensor predict_on_batch(const Tensor& x);

  // One optimisation step on a batch: forward, loss (+ regularisation),
  // gradients, update, metrics. Returns the metrics so far.
  virtual Logs train_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y);
  virtual Logs test_step(const std::vector<Tensor>& x, const std::vector<Tensor>& y);
  Logs train_step(const Tensor& x, const Tensor& y) {
    return train_step(std::vector<Tensor>{x}, std::vector<Tensor>{y});
  }
  Logs test_step(const Tensor& x, const Tensor& y) {
    return test_step(std::vector<Tensor>{x}, std::vector<Tensor>{y});
  }

  // The loss of a batch: each output's loss (sum over the batch divided by
  // its size) times its weight, plus the layers' regularisation penalties.
  Tensor compute_loss(const std::vector<Tensor>& y, const std::vector<Tensor>& y_pred) const;
  Tensor compute_loss(const Tensor& y, const Tensor& y_pred) const {
    return compute_loss(std::vector<Tensor>{y}, std::vector<Tensor>{y_pred});
  }

  // "loss" and the compiled metrics, in Keras's order (sorted by name).
  Logs get_metrics_result() const;
  void reset_metrics() const;
  std::vector<Metric> metrics() const;
  const Optimizer& optimizer() const;
  // Keras's model.distribute_strategy: the strategy the model was created
  // under (or compiled under, if that was none).
  const distribute::Strategy& distribute_strategy() const;

  // Keras's table of layers, output shapes and parameter counts, then the
  // total / trainable / non-trainable (and optimizer) parameter counts:
  // printed through the log sink (core/log.h, as kOutput), or onto `out`.
  void summary(const SummaryOptions& options = {}) const;
  void summary(std::ostream& out, const SummaryOptions& options = {}) const;

  // The whole model, written atomically; the suffix decides the format:
  //   .keras        Keras 3's file (a zip of config.json — the architecture
  //                 and the compile config — and model.weights.h5 with the
  //                 weights and the optimizer's variables); Keras loads it;
  //   .safetensors  Lockstep's checkpoint container (the architecture and
  //                 compile config as Keras's JSON in its metadata, the
  //                 weights by name; the optimizer's state is Checkpoint's).
  // Any other suffix is a ValueError naming these. Functional and
  // Sequential models only: a subclassed model has no config (use
  // save_weights).
  void save(const std::string& path) const;
  // Keras's model.get_compile_config(): the optimizer, losses, loss weights
  // and metrics compile() was given, as Keras's JSON; empty when the model
  // is not compiled.
  std::string get_compile_config() const;
  // Keras's model.compile_from_config(config): compiles as such JSON says,
  // read as Keras 3 reads it for this model's outputs; a setting Lockstep
  // cannot honour is a ValueError naming it.
  void compile_from_config(const std::string& config);
  // The architecture alone as Keras's JSON (model.to_json()); Keras's
  // model_from_json reads it, and so does ours (with fresh weights).
  std::string to_json() const;
  // Weights alone: `.weights.h5` in Keras 3's layout (with the optimizer's
  // variables once compiled, as Keras), or `.safetensors` by name.
  // load_weights also reads a `.keras` file's weights and Keras 2's legacy
  // `.h5` (by position, or by layer name). Everything is checked before any
  // weight changes.
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path, LoadWeightsOptions options = {}) const;

  // Callbacks call this to end fit after the current batch.
  void stop_training() const;
  bool stop_training_requested() const;

  // Exact resume (BackupAndRestore, Checkpoint): where the running fit is
  // now — nullopt outside fit — and, called from on_train_begin, where the
  // fit that is starting must continue from (epoch, batch, input position,
  // metric and random states; the weights and the optimizer are restored
  // by the caller).
  //
  // The input's position is, by default, what replaying needs: the
  // iteration key and how many elements were used (Keras's BackupAndRestore
  // skips used batches too) — exact because every random choice of a
  // pipeline is a function of its seeds and the key, as long as the
  // pipeline is deterministic (no map or interleave with deterministic =
  // false). `full_input_state` saves the iterator's whole state instead
  // (shuffle buffers included: large, but exact for any pipeline).
  std::optional<TrainingSnapshot> training_snapshot(bool full_input_state = false) const;
  void resume_training_from(TrainingSnapshot snapshot) const;

  struct TrainState;  // implementer-facing (opaque outside train/)

 private:
  struct Loops;  // the fit / evaluate / predict loops over any batch source
  friend struct Loops;

 protected:
  TrainState& state() const;
  // Builds per-output losses, metrics and trackers for a model with n outputs.
  void resolve_outputs(std::size_t n) const;
  std::shared_ptr<TrainState> state_;
};

// Rebuilds a model from a file, by its suffix: `.keras` (Keras's or ours:
// architecture, weights, compile settings and optimizer state, so training
// continues exactly), Keras 2's legacy `.h5`, or Model::save's
// `.safetensors` (compiled again if it was compiled). The same layers,
// names and weights: it predicts exactly what the saved model did.
Model load_model(const std::string& path);
// A model from Keras's JSON (Model::to_json(), Keras's model.to_json()):
// new weights; compile it to train.
// `source` names the text in errors (a file name).
Model model_from_json(const std::string& text, const std::string& source = "<json>");

template <typename Impl, typename... Args>
Model make_model(Args&&... args) {
  return Model(std::make_shared<Impl>(std::forward<Args>(args)...));
}

struct SequentialOptions {
  std::optional<Shape> input_shape{};  // shape of one example; builds layers as they are added
  std::string name{};
  // The input's static batch size (Keras's Input(batch_shape=...); see
  // Input()); 0: any.
  std::int64_t batch_size = 0;
};

// A linear stack of layers (keras.Sequential).
class Sequential : public Model {
 public:
  // Outside the class, so that its default member initializers can serve
  // the constructor's default argument.
  using Options = SequentialOptions;
  explicit Sequential(std::vector<Layer> layers = {}, Options options = {});
  void add(const Layer& layer) const;
  // Keras's model.add(keras.Input(shape=(784,))): the input shape (and
  // dtype) of what follows.
  void add(const KerasTensor& input) const;
};

// keras.models.load_model and model_from_json under Keras's module path.
namespace models {
using ::lockstep::load_model;
using ::lockstep::model_from_json;
}  // namespace models

}  // namespace lockstep
