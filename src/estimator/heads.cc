// The canned heads: losses, predictions and metrics with TensorFlow's
// definitions and keys (the v2 heads: tensorflow_estimator/python/
// estimator/head/). Losses are one value per label value, weighted by the
// weight column, then summed (SUM) or summed and divided by their count
// (SUM_OVER_BATCH_SIZE); in training a SUM_OVER_BATCH_SIZE loss is also
// divided by the replicas in sync (TensorFlow's scale_loss_for_distribution),
// since the replica contexts sum the replicas' gradients.
#include "estimator/heads.h"

#include <algorithm>
#include <cmath>

#include "lockstep/core/error.h"
#include "lockstep/distribute/replica_context.h"
#include "lockstep/nn/metrics.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::estimator::detail {
namespace {

// [batch, d] float32 values as [batch · d], with [batch] weights repeated d
// times (undefined stays undefined), for the per-value Mean metrics.
std::pair<Tensor, Tensor> flat_with_weights(const Tensor& values, const Tensor& weights) {
  const Tensor v = reshape(values.to(DType::kFloat32), {values.numel()});
  if (!weights.defined()) return {v, Tensor()};
  const std::int64_t batch = values.dim(0), d = values.numel() / std::max<std::int64_t>(batch, 1);
  return {v, reshape(broadcast_to(reshape(weights, {batch, 1}), {batch, d}), {batch * d})};
}

EvalMetricOp mean_of(const Tensor& values, const Tensor& weights) {
  auto [v, w] = flat_with_weights(values, weights);
  return {.metric = metrics::Mean(), .y_true = v, .y_pred = {}, .sample_weight = w};
}

// max(label mean, 1 − label mean): the accuracy of always predicting the
// more common class (TensorFlow's accuracy_baseline). State: {Σ w·label, Σ w}.
class AccuracyBaseline : public MetricImpl {
 public:
  AccuracyBaseline() : MetricImpl("accuracy_baseline") { state_.assign(2, 0.0); }
  void update_state(const Tensor& y_true, const Tensor&, const Tensor& sample_weight) override {
    const auto labels = y_true.to_vector<double>();
    const auto w = sample_weight.defined() ? sample_weight.to_vector<double>()
                                           : std::vector<double>(labels.size(), 1.0);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      state_[0] += w[i] * labels[i];
      state_[1] += w[i];
    }
  }
  double result() const override {
    const double mean = state_[1] == 0 ? 0 : state_[0] / state_[1];
    return std::max(mean, 1 - mean);
  }
  std::shared_ptr<MetricImpl> clone() const override {
    return std::make_shared<AccuracyBaseline>();
  }
};

// Class ids as the strings TensorFlow's "classes" prediction holds.
Tensor class_strings(const Tensor& class_ids) {
  std::vector<std::string> names;
  for (std::int64_t id : class_ids.to_vector<std::int64_t>()) names.push_back(std::to_string(id));
  return string_feature(names, class_ids.shape().to_vector());
}

class RegressionHead : public Head {
 public:
  RegressionHead(std::string owner, std::int64_t d, std::string weight_column, LossReduction r)
      : Head(std::move(owner), std::move(weight_column), r), d_(d) {
    LOCKSTEP_CHECK(d_ >= 1, owner_, ": label_dimension must be >= 1, got ", d_);
  }
  std::int64_t logits_dimension() const override { return d_; }

 protected:
  Tensor processed_labels(const Tensor& labels, std::int64_t batch) const override {
    LOCKSTEP_CHECK(labels.dtype() != DType::kBool && labels.dtype() != DType::kUInt8, owner_,
                   ": labels must be numbers, got ", labels.dtype());
    const bool fits = (labels.rank() == 2 && labels.dim(0) == batch && labels.dim(1) == d_) ||
                      (labels.rank() == 1 && labels.dim(0) == batch && d_ == 1);
    LOCKSTEP_CHECK_AS(ShapeError, fits, owner_, ": labels have shape ", labels.shape(),
                      "; expected [batch, label_dimension] = [", batch, ", ", d_, "]",
                      d_ == 1 ? " (or [batch])" : "",
                      ". Hint: label_dimension must match the labels' last dimension");
    return reshape(labels.to(DType::kFloat32), {batch, d_});
  }
  Tensor unweighted_loss(const Tensor& logits, const Tensor& labels) const override {
    return square(sub(logits, labels));
  }
  std::map<std::string, Tensor> predictions(const Tensor& logits) const override {
    return {{"predictions", logits}};
  }
  void add_metrics(std::map<std::string, EvalMetricOp>& ops, const Tensor& logits,
                   const Tensor& labels, const Tensor& weights) const override {
    ops["label/mean"] = mean_of(labels, weights);
    ops["prediction/mean"] = mean_of(logits, weights);
  }

 private:
  std::int64_t d_;
};

class ClassificationHead : public Head {
 public:
  ClassificationHead(std::string owner, std::int64_t n, std::string weight_column, LossReduction r)
      : Head(std::move(owner), std::move(weight_column), r), n_(n) {
    LOCKSTEP_CHECK(n_ >= 2, owner_, ": n_classes must be >= 2, got ", n_);
  }
  std::int64_t logits_dimension() const override { return n_ == 2 ? 1 : n_; }

 protected:
  // Binary: [batch, 1] float 0/1; multi-class: [batch] int64 ids.
  Tensor processed_labels(const Tensor& labels, std::int64_t batch) const override {
    const bool fits = (labels.rank() == 1 && labels.dim(0) == batch) ||
                      (labels.rank() == 2 && labels.dim(0) == batch && labels.dim(1) == 1);
    LOCKSTEP_CHECK_AS(ShapeError, fits, owner_, ": labels have shape ", labels.shape(),
                      "; expected class ids of shape [", batch, "] or [", batch, ", 1]");
    LOCKSTEP_CHECK(labels.dtype() != DType::kBool, owner_, ": labels must be class ids, got bool");
    const auto values = labels.to_vector<double>();
    for (double v : values) {
      LOCKSTEP_CHECK(v >= 0 && v < static_cast<double>(n_) && v == std::floor(v), owner_,
                     ": label ", v, " is not a class id in [0, ", n_, ")",
                     n_ == 2 ? ". Hint: binary labels are 0 or 1" : "");
    }
    if (n_ == 2) return reshape(labels.to(DType::kFloat32), {batch, 1});
    return reshape(labels.to(DType::kInt64), {batch});
  }
  Tensor unweighted_loss(const Tensor& logits, const Tensor& labels) const override {
    if (n_ == 2) {
      // Sigmoid cross-entropy from logits, stable: max(x, 0) − x·z + log(1 + e^−|x|).
      return add(sub(relu(logits), mul(logits, labels)), log1p(exp(neg(abs(logits)))));
    }
    // Sparse softmax cross-entropy: −log_softmax(logits)[label].
    return neg(sum(mul(one_hot(labels, n_), log_softmax(logits)), {.axes = {1}, .keepdims = true}));
  }
  std::map<std::string, Tensor> predictions(const Tensor& logits) const override {
    std::map<std::string, Tensor> p{{"logits", logits}};
    Tensor class_ids;
    if (n_ == 2) {
      const Tensor logistic = sigmoid(logits);
      p["logistic"] = logistic;
      p["probabilities"] = concat({sub(Tensor::scalar(1.0f), logistic), logistic}, 1);
      class_ids = cast(greater(logits, Tensor::scalar(0.0f)), DType::kInt64);
    } else {
      p["probabilities"] = softmax(logits);
      class_ids = reshape(argmax(logits, 1), {logits.dim(0), 1});
    }
    p["class_ids"] = class_ids;
    p["classes"] = class_strings(class_ids);
    return p;
  }
  void add_metrics(std::map<std::string, EvalMetricOp>& ops, const Tensor& logits,
                   const Tensor& labels, const Tensor& weights) const override {
    if (n_ > 2) {
      ops["accuracy"] = {.metric = metrics::SparseCategoricalAccuracy(),
                         .y_true = labels,
                         .y_pred = logits,
                         .sample_weight = weights};
      return;
    }
    const Tensor logistic = sigmoid(logits);
    auto op = [&](Metric m) {
      return EvalMetricOp{
          .metric = std::move(m), .y_true = labels, .y_pred = logistic, .sample_weight = weights};
    };
    ops["accuracy"] = op(metrics::BinaryAccuracy());
    ops["precision"] = op(metrics::Precision());
    ops["recall"] = op(metrics::Recall());
    ops["auc"] = op(metrics::AUC());
    ops["accuracy_baseline"] = op(Metric(std::make_shared<AccuracyBaseline>()));
    ops["label/mean"] = mean_of(labels, weights);
    ops["prediction/mean"] = mean_of(logistic, weights);
  }

 private:
  std::int64_t n_;
};

}  // namespace

Tensor Head::example_weights(const Features& features, std::int64_t batch) const {
  if (weight_column_.empty()) return Tensor();
  auto it = features.find(weight_column_);
  LOCKSTEP_CHECK(it != features.end(), owner_, ": weight_column '", weight_column_,
                 "' is not among the features. Hint: input_fn must yield it");
  const Tensor& w = it->second;
  LOCKSTEP_CHECK_AS(ShapeError, w.rank() >= 1 && w.dim(0) == batch && w.numel() == batch, owner_,
                    ": weight_column '", weight_column_, "' has shape ", w.shape(),
                    "; expected one weight per example, [", batch, "] or [", batch, ", 1]");
  return reshape(w.to(DType::kFloat32), {batch});
}

EstimatorSpec Head::create_estimator_spec(const Features& features, ModeKeys mode,
                                          const Tensor& logits, const Tensor& labels,
                                          const Optimizer& optimizer) const {
  LOCKSTEP_CHECK_AS(ShapeError, logits.rank() == 2 && logits.dim(1) == logits_dimension(), owner_,
                    ": logits have shape ", logits.shape(), "; expected [batch, ",
                    logits_dimension(), "]");
  EstimatorSpec spec{.mode = mode};
  // Only predict() reads them (TensorFlow's graph computed them only when
  // fetched): training and evaluation skip the softmax and the class names.
  if (mode == ModeKeys::kPredict) {
    spec.predictions = predictions(logits);
    return spec;
  }
  LOCKSTEP_CHECK(labels.defined(), owner_, ": no labels in ", mode_name(mode),
                 " mode. Hint: input_fn must yield features_and_labels(features, labels)");
  const std::int64_t batch = logits.dim(0);
  const Tensor y = processed_labels(labels, batch);
  const Tensor loss_values = unweighted_loss(logits, y);  // [batch, d]
  const Tensor w = example_weights(features, batch);
  const Tensor weighted = w.defined() ? mul(loss_values, reshape(w, {batch, 1})) : loss_values;
  Tensor loss = sum(weighted);
  if (loss_reduction_ == LossReduction::kSumOverBatchSize)
    loss = div(loss,
               Tensor::scalar(static_cast<float>(std::max<std::int64_t>(loss_values.numel(), 1))));
  spec.loss = loss;
  if (mode == ModeKeys::kTrain) {
    const int replicas = distribute::get_replica_context().num_replicas_in_sync();
    spec.train_op = {.optimizer = optimizer,
                     .loss = loss_reduction_ == LossReduction::kSumOverBatchSize && replicas > 1
                                 ? div(loss, Tensor::scalar(static_cast<float>(replicas)))
                                 : loss,
                     .var_list = {}};
    return spec;
  }
  spec.eval_metric_ops["average_loss"] = mean_of(loss_values, w);
  add_metrics(spec.eval_metric_ops, logits, y, w);
  return spec;
}

std::unique_ptr<Head> regression_head(std::string owner, std::int64_t label_dimension,
                                      std::string weight_column, LossReduction reduction) {
  return std::make_unique<RegressionHead>(std::move(owner), label_dimension,
                                          std::move(weight_column), reduction);
}

std::unique_ptr<Head> classification_head(std::string owner, std::int64_t n_classes,
                                          std::string weight_column, LossReduction reduction) {
  return std::make_unique<ClassificationHead>(std::move(owner), n_classes, std::move(weight_column),
                                              reduction);
}

}  // namespace lockstep::estimator::detail
