// Losses (keras.losses), numerically stable, with Keras's reductions.
//
//   auto loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true});
//   Tensor value = loss(labels, logits);          // mean over the batch
//
// Every loss first computes per-example values (`per_example`, shape
// [batch]); the reduction then sums them and divides by the batch size
// ("sum_over_batch_size"), or sums, or returns them. A strategy calls
// per_example and divides the sum by the *global* batch size instead, so
// that adding the replicas' losses gives the loss of the global batch.
#pragma once

#include <memory>
#include <string>

#include "lockstep/nn/config.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep {

enum class Reduction { kSumOverBatchSize, kSum, kNone };

class LossImpl {
 public:
  LossImpl(std::string name, Reduction reduction) : name_(std::move(name)), reduction_(reduction) {}
  virtual ~LossImpl() = default;
  // Loss of each example: shape [batch].
  virtual Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const = 0;
  // Keras's loss values before the reduction: y_pred's shape without its
  // last axis ([batch], or [batch, steps] for a sequence output), what
  // Keras weights by an output's mask. The built-in losses override it; by
  // default, per_example.
  virtual Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const {
    return per_example(y_true, y_pred);
  }
  const std::string& name() const { return name_; }
  Reduction reduction() const { return reduction_; }
  // Keras's class ("SparseCategoricalCrossentropy") and arguments: name,
  // reduction as Keras spells it, and the class's own (from_logits,
  // label_smoothing, delta). losses::from_config takes them back.
  virtual std::string class_name() const = 0;
  virtual LayerConfig get_config() const;

 private:
  std::string name_;
  Reduction reduction_;
};

// A handle to a LossImpl; copies share it.
class Loss {
 public:
  Loss() = default;
  explicit Loss(std::shared_ptr<const LossImpl> impl) : impl_(std::move(impl)) {}
  // A Keras identifier with Keras's defaults, as compile(loss="mse"):
  // losses::get(name).
  Loss(const char* name);         // NOLINT(google-explicit-constructor): as Keras's strings
  Loss(const std::string& name);  // NOLINT(google-explicit-constructor)
  // The reduced loss; `sample_weight` (shape [batch]) scales each example.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight = {}) const;
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const {
    return impl_->per_example(y_true, y_pred);
  }
  Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const {
    return impl_->unreduced(y_true, y_pred);
  }
  const std::string& name() const { return impl_->name(); }
  bool defined() const { return impl_ != nullptr; }
  const LossImpl* impl() const { return impl_.get(); }

 protected:
  std::shared_ptr<const LossImpl> impl_;
};

namespace losses {

struct CrossentropyOptions {
  bool from_logits = false;
  float label_smoothing = 0.0f;  // CategoricalCrossentropy and BinaryCrossentropy
  Reduction reduction = Reduction::kSumOverBatchSize;
};
struct ReductionOptions {
  Reduction reduction = Reduction::kSumOverBatchSize;
};
struct HuberOptions {
  float delta = 1.0f;
  Reduction reduction = Reduction::kSumOverBatchSize;
};

// Integer labels [batch] or [batch, 1] (int32, int64, or integral floats)
// against logits or probabilities [batch, classes]; for a sequence output
// [batch, steps, classes], labels [batch, steps] (or [..., 1]), one value
// per step. A label outside [0, classes) is an IndexError naming its
// position and value.
class SparseCategoricalCrossentropy : public Loss {
 public:
  explicit SparseCategoricalCrossentropy(CrossentropyOptions options = {});
};
// One-hot (or soft) labels [batch, classes].
class CategoricalCrossentropy : public Loss {
 public:
  explicit CategoricalCrossentropy(CrossentropyOptions options = {});
};
// Labels in {0, 1} (or soft), averaged over the last axis.
class BinaryCrossentropy : public Loss {
 public:
  explicit BinaryCrossentropy(CrossentropyOptions options = {});
};
class MeanSquaredError : public Loss {
 public:
  explicit MeanSquaredError(ReductionOptions options = {});
};
class MeanAbsoluteError : public Loss {
 public:
  explicit MeanAbsoluteError(ReductionOptions options = {});
};
class Huber : public Loss {
 public:
  explicit Huber(HuberOptions options = {});
};

// By Keras identifier, with Keras's defaults: the function name
// ("sparse_categorical_crossentropy", "mse", "mae", ...) or the class name
// ("SparseCategoricalCrossentropy"). An unknown name is a ValueError that
// lists the known ones.
Loss get(const std::string& name);

// A loss from its Keras class name and arguments (get_config's keys); an
// argument the class does not take, or a reduction Keras does not name, is
// a ValueError naming it.
Loss from_config(const std::string& class_name, const LayerConfig& config);

}  // namespace losses
}  // namespace lockstep
