// Metrics (keras.metrics): stateful accumulators.
//
//   ls::metrics::SparseCategoricalAccuracy acc;
//   acc.update_state(labels, logits);
//   double value = acc.result();
//
// State is a short vector of float64 numbers that adds up: merge() adds
// another instance's state (a strategy merges replicas' metrics before they
// are read), and state()/set_state() let checkpoints save it. Accumulating
// in float64 keeps epoch-long sums exact where Keras's float32 drifts.
//
// Not thread-safe: each replica updates its own instance.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "lockstep/nn/losses.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep {

// One setting of a metric as Keras's config records it ("threshold": 0.7).
using MetricSetting = std::variant<bool, std::int64_t, double, std::string>;
using MetricSettings = std::vector<std::pair<std::string, MetricSetting>>;

class MetricImpl {
 public:
  explicit MetricImpl(std::string name) : name_(std::move(name)) {}
  virtual ~MetricImpl() = default;
  // `sample_weight` (optional, shape [batch]) weights each example.
  virtual void update_state(const Tensor& y_true, const Tensor& y_pred,
                            const Tensor& sample_weight) = 0;
  virtual double result() const = 0;
  void reset_state() { std::fill(state_.begin(), state_.end(), 0.0); }
  const std::vector<double>& state() const { return state_; }
  void set_state(const std::vector<double>& state);
  void merge(const MetricImpl& other);
  // A new metric of the same kind and configuration, with empty state.
  virtual std::shared_ptr<MetricImpl> clone() const = 0;
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Keras's class and settings besides the name (what a model file records
  // and metrics::from_config takes back): set by each built-in metric, kept
  // by clone(); empty for a custom metric.
  const std::string& keras_class() const { return keras_class_; }
  const MetricSettings& keras_settings() const { return keras_settings_; }
  void set_keras(std::string class_name, MetricSettings settings) {
    keras_class_ = std::move(class_name);
    keras_settings_ = std::move(settings);
  }

 protected:
  std::vector<double> state_;

 private:
  std::string name_;
  std::string keras_class_;
  MetricSettings keras_settings_;
};

// A handle to a MetricImpl; copies share the state.
class Metric {
 public:
  Metric() = default;
  explicit Metric(std::shared_ptr<MetricImpl> impl) : impl_(std::move(impl)) {}
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) const {
    impl_->update_state(y_true, y_pred, sample_weight);
  }
  double result() const { return impl_->result(); }
  void reset_state() const { impl_->reset_state(); }
  void merge(const Metric& other) const { impl_->merge(*other.impl_); }
  const std::string& name() const { return impl_->name(); }
  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<MetricImpl>& impl() const { return impl_; }

 protected:
  std::shared_ptr<MetricImpl> impl_;
};

// Sync on read across processes: the metrics' states, laid end to end, go
// through `sum` (a strategy's sum over its workers) and come back as each
// metric's state — every worker's counts added up. Used by fit's and the
// Estimator's merge of their replicas' metrics.
void sum_metric_states(const std::vector<Metric>& metrics,
                       const std::function<void(std::vector<double>&)>& sum);

namespace metrics {

struct MetricOptions {
  std::string name{};  // default: the Keras name
};
struct ThresholdOptions {
  float threshold = 0.5f;
  std::string name{};
};

// Weighted mean of the values passed (as y_true) — Keras's Mean.
class Mean : public Metric {
 public:
  explicit Mean(MetricOptions options = {});
  void update_state(const Tensor& values, const Tensor& sample_weight = {}) const {
    impl_->update_state(values, Tensor(), sample_weight);
  }
};
class Sum : public Metric {
 public:
  explicit Sum(MetricOptions options = {});
  void update_state(const Tensor& values, const Tensor& sample_weight = {}) const {
    impl_->update_state(values, Tensor(), sample_weight);
  }
};
// Fraction of elements where y_pred == y_true.
class Accuracy : public Metric {
 public:
  explicit Accuracy(MetricOptions options = {});
};
// argmax(y_pred) == integer label.
class SparseCategoricalAccuracy : public Metric {
 public:
  explicit SparseCategoricalAccuracy(MetricOptions options = {});
};
// argmax(y_pred) == argmax(y_true).
class CategoricalAccuracy : public Metric {
 public:
  explicit CategoricalAccuracy(MetricOptions options = {});
};
// (y_pred > threshold) == y_true, averaged over the last axis per example.
class BinaryAccuracy : public Metric {
 public:
  explicit BinaryAccuracy(ThresholdOptions options = {});
};
struct TopKOptions {
  int k = 5;
  std::string name{};
};
// The true class (argmax of one-hot y_true) is among the k largest predictions
// (ties at the boundary count as inside, as tf.math.in_top_k).
class TopKCategoricalAccuracy : public Metric {
 public:
  explicit TopKCategoricalAccuracy(TopKOptions options = {});
};
class Precision : public Metric {
 public:
  explicit Precision(ThresholdOptions options = {});
};
class Recall : public Metric {
 public:
  explicit Recall(ThresholdOptions options = {});
};
struct AUCOptions {
  int num_thresholds = 200;
  std::string name{};
};
// Area under the ROC curve from confusion counts at evenly spaced thresholds,
// trapezoidal (Keras's default "interpolation" summation for ROC).
class AUC : public Metric {
 public:
  explicit AUC(AUCOptions options = {});
};
// The true class (an integer label) is among the k largest predictions.
class SparseTopKCategoricalAccuracy : public Metric {
 public:
  explicit SparseTopKCategoricalAccuracy(TopKOptions options = {});
};

// Means over the last axis, per example, then over the examples (Keras's
// MeanMetricWrapper of the function of the same name).
class MeanSquaredError : public Metric {
 public:
  explicit MeanSquaredError(MetricOptions options = {});
};
class MeanAbsoluteError : public Metric {
 public:
  explicit MeanAbsoluteError(MetricOptions options = {});
};
// 100 · |y_true − y_pred| / max(|y_true|, 1e-7).
class MeanAbsolutePercentageError : public Metric {
 public:
  explicit MeanAbsolutePercentageError(MetricOptions options = {});
};
// (log(max(y_pred, 1e-7) + 1) − log(max(y_true, 1e-7) + 1))².
class MeanSquaredLogarithmicError : public Metric {
 public:
  explicit MeanSquaredLogarithmicError(MetricOptions options = {});
};
// sqrt of the mean squared error over all values seen.
class RootMeanSquaredError : public Metric {
 public:
  explicit RootMeanSquaredError(MetricOptions options = {});
};
// log(cosh(y_pred − y_true)).
class LogCoshError : public Metric {
 public:
  explicit LogCoshError(MetricOptions options = {});
};
// Σ y_true · log(y_true / y_pred), both clipped to [1e-7, 1].
class KLDivergence : public Metric {
 public:
  explicit KLDivergence(MetricOptions options = {});
};
// y_pred − y_true · log(y_pred + 1e-7).
class Poisson : public Metric {
 public:
  explicit Poisson(MetricOptions options = {});
};
// max(1 − t · y_pred, 0) with labels t in {−1, 1} (0/1 labels are mapped).
class Hinge : public Metric {
 public:
  explicit Hinge(MetricOptions options = {});
};
class SquaredHinge : public Metric {
 public:
  explicit SquaredHinge(MetricOptions options = {});
};
// Σ over the last axis of the L2-normalised y_true · y_pred.
class CosineSimilarity : public Metric {
 public:
  explicit CosineSimilarity(MetricOptions options = {});
};

// The mean of a cross-entropy loss over the examples seen.
struct CrossentropyMetricOptions {
  bool from_logits = false;
  float label_smoothing = 0.0f;  // BinaryCrossentropy and CategoricalCrossentropy
  std::string name{};
};
class BinaryCrossentropy : public Metric {
 public:
  explicit BinaryCrossentropy(CrossentropyMetricOptions options = {});
};
class CategoricalCrossentropy : public Metric {
 public:
  explicit CategoricalCrossentropy(CrossentropyMetricOptions options = {});
};
class SparseCategoricalCrossentropy : public Metric {
 public:
  explicit SparseCategoricalCrossentropy(CrossentropyMetricOptions options = {});
};

// By Keras identifier, as compile(metrics=[...]) resolves strings: a
// function name ("mae", "mean_absolute_error", "sparse_categorical_accuracy",
// ...) names the metric by the string given; a class name
// ("MeanAbsoluteError") gives the class's default name. "accuracy" / "acc"
// and "crossentropy" / "ce" pick the variant that matches `loss` (sparse
// categorical, categorical or binary; plain Accuracy, or categorical
// cross-entropy, for any other loss). An unknown name is a ValueError that
// lists the known ones.
Metric get(const std::string& name, const Loss& loss = {});

// A metric from Keras's class name and config settings (a model file's
// compile_config), named `name` (empty: the class's default name). A
// setting Lockstep's metric does not take, or takes at another value only
// (AUC's curve "PR", Precision's top_k), is a ValueError naming it.
Metric from_config(const std::string& class_name, const MetricSettings& settings,
                   const std::string& name);

}  // namespace metrics
}  // namespace lockstep
