// The canned estimators: each a model_fn over feature columns and a head
// (heads.cc), with TensorFlow's variable names, default optimizers and
// learning rates (canned/linear.py, canned/dnn.py, canned/optimizers.py).
#include "lockstep/estimator/canned.h"

#include <cmath>

#include "estimator/heads.h"
#include "lockstep/nn/layers.h"

namespace lockstep::estimator {
namespace {

// linear.py's and dnn.py's _LEARNING_RATE.
constexpr double kLinearLearningRate = 0.2;
constexpr double kDnnLearningRate = 0.05;

// What a canned model_fn holds across calls: its layers, head and
// optimizer, made once.
struct LinearState {
  feature_column::LinearModel model;
  std::shared_ptr<detail::Head> head;
  Optimizer optimizer;
};

ModelFn linear_model_fn(std::shared_ptr<LinearState> s) {
  return [s](const Features& features, const Tensor& labels, ModeKeys mode, const Params&,
             const RunConfig&) {
    return s->head->create_estimator_spec(features, mode, s->model(features), labels, s->optimizer);
  };
}

// linear.py's _get_default_optimizer_v2: Ftrl at min(0.2, 1/sqrt(columns)).
Optimizer linear_optimizer(const OptimizerArg& arg, std::size_t columns) {
  if (!arg.empty()) return get_optimizer_instance(arg, kLinearLearningRate);
  return optimizers::Ftrl(
      {.learning_rate =
           std::min(kLinearLearningRate,
                    1.0 / std::sqrt(static_cast<double>(std::max<std::size_t>(columns, 1))))});
}

std::shared_ptr<LinearState> linear_state(const std::string& owner,
                                          std::vector<feature_column::FeatureColumn> columns,
                                          std::int64_t units, const std::string& sparse_combiner,
                                          std::unique_ptr<detail::Head> head,
                                          const OptimizerArg& optimizer) {
  LOCKSTEP_CHECK(!columns.empty(), owner, ": feature_columns must not be empty");
  const std::size_t n = columns.size();
  return std::make_shared<LinearState>(LinearState{
      feature_column::LinearModel(
          std::move(columns),
          {.units = units, .sparse_combiner = sparse_combiner, .name = "linear/linear_model"}),
      std::move(head), linear_optimizer(optimizer, n)});
}

struct DnnState {
  feature_column::DenseFeatures input;
  std::vector<Layer> hidden;
  std::vector<Layer> dropouts;
  Layer logits;
  std::shared_ptr<detail::Head> head;
  Optimizer optimizer;
};

std::shared_ptr<DnnState> dnn_state(const std::string& owner,
                                    const std::vector<std::int64_t>& hidden_units,
                                    std::vector<feature_column::FeatureColumn> columns,
                                    const std::string& activation, std::optional<float> dropout,
                                    std::unique_ptr<detail::Head> head,
                                    const OptimizerArg& optimizer) {
  LOCKSTEP_CHECK(!hidden_units.empty(), owner, ": hidden_units must not be empty");
  LOCKSTEP_CHECK(!dropout || (*dropout >= 0 && *dropout < 1), owner,
                 ": dropout must be in [0, 1), got ", dropout.value_or(0));
  auto s = std::make_shared<DnnState>(
      DnnState{feature_column::DenseFeatures(
                   std::move(columns), {.name = "dnn/input_from_feature_columns/input_layer"}),
               {},
               {},
               Layer(),
               nullptr,
               Optimizer()});
  for (std::size_t i = 0; i < hidden_units.size(); ++i) {
    LOCKSTEP_CHECK(hidden_units[i] >= 1, owner, ": hidden_units[", i, "] must be >= 1, got ",
                   hidden_units[i]);
    s->hidden.push_back(
        layers::Dense(hidden_units[i],
                      {.activation = activation, .name = "dnn/hiddenlayer_" + std::to_string(i)}));
    if (dropout) s->dropouts.push_back(layers::Dropout(*dropout));
  }
  s->logits = layers::Dense(head->logits_dimension(), {.name = "dnn/logits"});
  s->head = std::move(head);
  s->optimizer = optimizer.empty()
                     ? Optimizer(optimizers::Adagrad({.learning_rate = kDnnLearningRate}))
                     : get_optimizer_instance(optimizer, kDnnLearningRate);
  return s;
}

ModelFn dnn_model_fn(std::shared_ptr<DnnState> s) {
  return [s](const Features& features, const Tensor& labels, ModeKeys mode, const Params&,
             const RunConfig&) {
    const CallContext ctx{.training = mode == ModeKeys::kTrain};
    Tensor x = s->input(features);
    for (std::size_t i = 0; i < s->hidden.size(); ++i) {
      x = s->hidden[i](x, ctx);
      if (!s->dropouts.empty()) x = s->dropouts[i](x, ctx);
    }
    return s->head->create_estimator_spec(features, mode, s->logits(x, ctx), labels, s->optimizer);
  };
}

EstimatorOptions options_of(const std::string& model_dir, const RunConfig& config) {
  return {.model_dir = model_dir, .config = config, .params = {}, .log = nullptr};
}

}  // namespace

Optimizer get_optimizer_instance(const OptimizerArg& optimizer, double learning_rate) {
  if (optimizer.optimizer().defined()) return optimizer.optimizer();
  const std::string& name = optimizer.name();
  if (name == "Adagrad") return optimizers::Adagrad({.learning_rate = learning_rate});
  if (name == "Adam") return optimizers::Adam({.learning_rate = learning_rate});
  if (name == "Ftrl") return optimizers::Ftrl({.learning_rate = learning_rate});
  if (name == "RMSProp") return optimizers::RMSprop({.learning_rate = learning_rate});
  if (name == "SGD") return optimizers::SGD({.learning_rate = learning_rate});
  lockstep::detail::throw_error<ValueError>(
      "Unsupported optimizer name: '", name,
      "'. Supported names are: ('Adagrad', 'Adam', 'Ftrl', 'RMSProp', "
      "'SGD'), or pass an optimizer (ls::optimizers::Adam(...))");
}

LinearRegressor::LinearRegressor(LinearRegressorOptions o)
    : LinearRegressor(std::move(o), LossReduction::kSumOverBatchSize) {}

LinearRegressor::LinearRegressor(LinearRegressorOptions o, LossReduction api_default)
    : Estimator(linear_model_fn(linear_state(
                    "LinearRegressor", o.feature_columns, o.label_dimension, o.sparse_combiner,
                    detail::regression_head("LinearRegressor", o.label_dimension, o.weight_column,
                                            o.loss_reduction.value_or(api_default)),
                    o.optimizer)),
                options_of(o.model_dir, o.config)) {}

LinearClassifier::LinearClassifier(LinearClassifierOptions o)
    : LinearClassifier(std::move(o), LossReduction::kSumOverBatchSize) {}

LinearClassifier::LinearClassifier(LinearClassifierOptions o, LossReduction api_default)
    : Estimator(linear_model_fn(linear_state(
                    "LinearClassifier", o.feature_columns, o.n_classes == 2 ? 1 : o.n_classes,
                    o.sparse_combiner,
                    detail::classification_head("LinearClassifier", o.n_classes, o.weight_column,
                                                o.loss_reduction.value_or(api_default)),
                    o.optimizer)),
                options_of(o.model_dir, o.config)) {}

DNNClassifier::DNNClassifier(DNNClassifierOptions o)
    : DNNClassifier(std::move(o), LossReduction::kSumOverBatchSize) {}

DNNClassifier::DNNClassifier(DNNClassifierOptions o, LossReduction api_default)
    : Estimator(dnn_model_fn(dnn_state(
                    "DNNClassifier", o.hidden_units, o.feature_columns, o.activation_fn, o.dropout,
                    detail::classification_head("DNNClassifier", o.n_classes, o.weight_column,
                                                o.loss_reduction.value_or(api_default)),
                    o.optimizer)),
                options_of(o.model_dir, o.config)) {}

DNNRegressor::DNNRegressor(DNNRegressorOptions o)
    : DNNRegressor(std::move(o), LossReduction::kSumOverBatchSize) {}

DNNRegressor::DNNRegressor(DNNRegressorOptions o, LossReduction api_default)
    : Estimator(dnn_model_fn(dnn_state(
                    "DNNRegressor", o.hidden_units, o.feature_columns, o.activation_fn, o.dropout,
                    detail::regression_head("DNNRegressor", o.label_dimension, o.weight_column,
                                            o.loss_reduction.value_or(api_default)),
                    o.optimizer)),
                options_of(o.model_dir, o.config)) {}

}  // namespace lockstep::estimator
