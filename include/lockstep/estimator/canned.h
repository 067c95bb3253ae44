// Canned estimators (tf.estimator.LinearRegressor, LinearClassifier,
// DNNClassifier, DNNRegressor): a model of feature columns and one of
// TensorFlow's heads (regression, binary or multi-class classification),
// with Estimator's defaults.
//
//   ls::estimator::LinearRegressor regressor(
//       {.feature_columns = {ls::feature_column::numeric_column("feats")},
//        .optimizer = "SGD", .config = config});
//   regressor.train(input_fn, {.steps = 10});
//
// Defaults, as TensorFlow's: linear models train with Ftrl at learning rate
// min(0.2, 1/sqrt(number of columns)), DNNs with Adagrad at 0.05; an
// optimizer named by a string ('Adagrad', 'Adam', 'Ftrl', 'RMSProp', 'SGD')
// gets the model's rate (0.2 linear, 0.05 DNN). The loss is reduced with
// SUM_OVER_BATCH_SIZE (tf.estimator, the v2 API) unless loss_reduction says
// SUM (tf.compat.v1.estimator's default; compat::v1::estimator below). Under
// a strategy a SUM_OVER_BATCH_SIZE loss is also divided by the replica
// count before its gradients are summed (TensorFlow's heads do the same).
//
// evaluate() returns TensorFlow's keys: "loss" (the mean over the
// evaluated batches of each replica's batch loss, reduced as above),
// "average_loss" (the weighted mean loss per example), "label/mean",
// "prediction/mean" (regression; binary: of the probability), "global_step",
// and for classifiers "accuracy", with "accuracy_baseline", "auc",
// "precision" and "recall" for two classes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lockstep/estimator/estimator.h"
#include "lockstep/estimator/feature_column.h"
#include "lockstep/optim/optimizers.h"

namespace lockstep::estimator {

// tf.losses.Reduction, for heads.
enum class LossReduction {
  kSum,               // the sum over the batch (per replica)
  kSumOverBatchSize,  // that sum / the number of loss values in the batch
};

// A canned estimator's optimizer: an Optimizer, or one of Estimator's names
// ('Adagrad', 'Adam', 'Ftrl', 'RMSProp', 'SGD', with the model's learning
// rate; any other is a ValueError listing them). Empty: the model's default.
class OptimizerArg {
 public:
  OptimizerArg() = default;
  OptimizerArg(const char* name) : name_(name) {}             // NOLINT(google-explicit-constructor)
  OptimizerArg(std::string name) : name_(std::move(name)) {}  // NOLINT(google-explicit-constructor)
  OptimizerArg(Optimizer optimizer)                           // NOLINT(google-explicit-constructor)
      : optimizer_(std::move(optimizer)) {}
  const std::string& name() const { return name_; }
  const Optimizer& optimizer() const { return optimizer_; }
  bool empty() const { return name_.empty() && !optimizer_.defined(); }

 private:
  std::string name_;
  Optimizer optimizer_;
};

// TensorFlow's canned/optimizers.py get_optimizer_instance: the named
// optimizer at `learning_rate`, or the given one.
Optimizer get_optimizer_instance(const OptimizerArg& optimizer, double learning_rate);

// The options of each canned estimator, fields in TensorFlow's argument order.
struct LinearRegressorOptions {
  std::vector<feature_column::FeatureColumn> feature_columns{};
  std::string model_dir{};
  std::int64_t label_dimension = 1;
  // The feature holding each example's weight (empty: weight 1).
  std::string weight_column{};
  OptimizerArg optimizer{};  // empty: Ftrl
  RunConfig config{};
  std::optional<LossReduction> loss_reduction{};  // none: the API's default
  std::string sparse_combiner = "sum";
};
class LinearRegressor : public Estimator {
 public:
  explicit LinearRegressor(LinearRegressorOptions options);

 protected:
  LinearRegressor(LinearRegressorOptions options, LossReduction api_default);
};

struct LinearClassifierOptions {
  std::vector<feature_column::FeatureColumn> feature_columns{};
  std::string model_dir{};
  std::int64_t n_classes = 2;
  std::string weight_column{};
  OptimizerArg optimizer{};  // empty: Ftrl
  RunConfig config{};
  std::optional<LossReduction> loss_reduction{};
  std::string sparse_combiner = "sum";
};
class LinearClassifier : public Estimator {
 public:
  explicit LinearClassifier(LinearClassifierOptions options);

 protected:
  LinearClassifier(LinearClassifierOptions options, LossReduction api_default);
};

struct DNNClassifierOptions {
  std::vector<std::int64_t> hidden_units{};
  std::vector<feature_column::FeatureColumn> feature_columns{};
  std::string model_dir{};
  std::int64_t n_classes = 2;
  std::string weight_column{};
  OptimizerArg optimizer{};  // empty: Adagrad
  std::string activation_fn = "relu";
  // The probability of dropping a hidden unit in training (none: no dropout).
  std::optional<float> dropout{};
  RunConfig config{};
  std::optional<LossReduction> loss_reduction{};
};
class DNNClassifier : public Estimator {
 public:
  explicit DNNClassifier(DNNClassifierOptions options);

 protected:
  DNNClassifier(DNNClassifierOptions options, LossReduction api_default);
};

struct DNNRegressorOptions {
  std::vector<std::int64_t> hidden_units{};
  std::vector<feature_column::FeatureColumn> feature_columns{};
  std::string model_dir{};
  std::int64_t label_dimension = 1;
  std::string weight_column{};
  OptimizerArg optimizer{};  // empty: Adagrad
  std::string activation_fn = "relu";
  std::optional<float> dropout{};
  RunConfig config{};
  std::optional<LossReduction> loss_reduction{};
};
class DNNRegressor : public Estimator {
 public:
  explicit DNNRegressor(DNNRegressorOptions options);

 protected:
  DNNRegressor(DNNRegressorOptions options, LossReduction api_default);
};

}  // namespace lockstep::estimator

// tf.compat.v1.estimator: the same estimators with the v1 API's default
// loss reduction, SUM (what programs of the TF 1.x era, such as the
// distribution guide's LinearRegressor, ran).
namespace lockstep::compat::v1::estimator {

class LinearRegressor : public lockstep::estimator::LinearRegressor {
 public:
  explicit LinearRegressor(lockstep::estimator::LinearRegressorOptions options)
      : lockstep::estimator::LinearRegressor(std::move(options),
                                             lockstep::estimator::LossReduction::kSum) {}
};
class LinearClassifier : public lockstep::estimator::LinearClassifier {
 public:
  explicit LinearClassifier(lockstep::estimator::LinearClassifierOptions options)
      : lockstep::estimator::LinearClassifier(std::move(options),
                                              lockstep::estimator::LossReduction::kSum) {}
};
class DNNClassifier : public lockstep::estimator::DNNClassifier {
 public:
  explicit DNNClassifier(lockstep::estimator::DNNClassifierOptions options)
      : lockstep::estimator::DNNClassifier(std::move(options),
                                           lockstep::estimator::LossReduction::kSum) {}
};
class DNNRegressor : public lockstep::estimator::DNNRegressor {
 public:
  explicit DNNRegressor(lockstep::estimator::DNNRegressorOptions options)
      : lockstep::estimator::DNNRegressor(std::move(options),
                                          lockstep::estimator::LossReduction::kSum) {}
};

}  // namespace lockstep::compat::v1::estimator
