// TensorFlow's canned heads (regression_head.py, binary_class_head.py,
// multi_class_head.py): from a model's logits and the labels to the
// EstimatorSpec of each mode — predictions, the reduced loss, the train op
// and the evaluation metrics under TensorFlow's keys.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lockstep/estimator/canned.h"

namespace lockstep::estimator::detail {

class Head {
 public:
  Head(std::string owner, std::string weight_column, LossReduction loss_reduction)
      : owner_(std::move(owner)),
        weight_column_(std::move(weight_column)),
        loss_reduction_(loss_reduction) {}
  virtual ~Head() = default;
  virtual std::int64_t logits_dimension() const = 0;
  EstimatorSpec create_estimator_spec(const Features& features, ModeKeys mode, const Tensor& logits,
                                      const Tensor& labels, const Optimizer& optimizer) const;

 protected:
  // The labels checked and shaped for the loss ([batch, d] float for
  // regression and binary, [batch] int64 for multi-class).
  virtual Tensor processed_labels(const Tensor& labels, std::int64_t batch) const = 0;
  // One loss value per label value, [batch, d].
  virtual Tensor unweighted_loss(const Tensor& logits, const Tensor& labels) const = 0;
  virtual std::map<std::string, Tensor> predictions(const Tensor& logits) const = 0;
  // The head's own metrics beyond average_loss and loss; `weights` is
  // [batch] (undefined: 1).
  virtual void add_metrics(std::map<std::string, EvalMetricOp>& ops, const Tensor& logits,
                           const Tensor& labels, const Tensor& weights) const = 0;

  std::string owner_;

 private:
  Tensor example_weights(const Features& features, std::int64_t batch) const;
  std::string weight_column_;
  LossReduction loss_reduction_;
};

std::unique_ptr<Head> regression_head(std::string owner, std::int64_t label_dimension,
                                      std::string weight_column, LossReduction reduction);
// Binary (n_classes 2) or multi-class.
std::unique_ptr<Head> classification_head(std::string owner, std::int64_t n_classes,
                                          std::string weight_column, LossReduction reduction);

}  // namespace lockstep::estimator::detail
