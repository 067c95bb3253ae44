// Loss functions. Cross-entropies from logits go through log_softmax (a
// log-sum-exp), binary ones through max(x, 0) - x·z + log(1 + exp(-|x|)),
// so no finite input gives an infinite or NaN loss.
#include "lockstep/nn/losses.h"

#include <algorithm>

#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

constexpr float kEpsilon = 1e-7f;  // Keras's backend epsilon

// Mean over the last axis of a [batch, ...] tensor, as Keras's per-sample
// reduction of elementwise losses; a [batch] tensor is returned as is.
Tensor mean_last(const Tensor& t) {
  if (t.rank() <= 1) return t;
  Tensor flat = reshape(t, {t.shape()[0], -1});
  return mean(flat, {.axes = {1}});
}

// Keras's unreduced values of elementwise losses: the mean over the last
// axis only ([batch, steps] for a sequence); a [batch] tensor as is.
Tensor mean_of_last_axis(const Tensor& t) { return t.rank() <= 1 ? t : mean(t, {.axes = {-1}}); }

void check_batch(const char* loss, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(y_true, loss, "y_true");
  check_defined(y_pred, loss, "y_pred");
  LOCKSTEP_CHECK(y_pred.dtype() == DType::kFloat32, loss, ": expected float32 predictions, got ",
                 y_pred.dtype());
  LOCKSTEP_CHECK_AS(
      ShapeError,
      y_pred.rank() >= 1 && y_true.rank() >= 1 && y_true.shape()[0] == y_pred.shape()[0], loss,
      ": y_true ", y_true.shape(), " and y_pred ", y_pred.shape(),
      " must have the same batch size");
}

Tensor as_float(const Tensor& t) {
  return t.dtype() == DType::kFloat32 ? t : cast(t, DType::kFloat32);
}

// The arguments of the three cross-entropies, as Keras names them.
LayerConfig crossentropy_config(LayerConfig c, const losses::CrossentropyOptions& o,
                                bool label_smoothing) {
  c.set("from_logits", o.from_logits);
  if (label_smoothing) c.set("label_smoothing", static_cast<double>(o.label_smoothing));
  return c;
}

class SparseCCE : public LossImpl {
 public:
  explicit SparseCCE(losses::CrossentropyOptions o)
      : LossImpl("sparse_categorical_crossentropy", o.reduction), o_(o) {}
  std::string class_name() const override { return "SparseCategoricalCrossentropy"; }
  LayerConfig get_config() const override {
    return crossentropy_config(LossImpl::get_config(), o_, false);
  }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_last(unreduced(y_true, y_pred));
  }
  // One value per example, or per step of a sequence [batch, steps, classes]:
  // the rows before the classes axis, each with its label.
  Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const override {
    constexpr const char* op = "SparseCategoricalCrossentropy";
    check_batch(op, y_true, y_pred);
    LOCKSTEP_CHECK_AS(ShapeError, y_pred.rank() >= 2, op,
                      ": expected y_pred of shape [batch, classes] (or [batch, steps, classes]), "
                      "got ",
                      y_pred.shape());
    std::vector<std::int64_t> value_shape = y_pred.shape().to_vector();
    const std::int64_t classes = value_shape.back();
    value_shape.pop_back();
    const std::int64_t batch = y_pred.numel() / std::max<std::int64_t>(classes, 1);
    LOCKSTEP_CHECK_AS(ShapeError, y_true.numel() == batch, op, ": expected one label per ",
                      y_pred.rank() == 2 ? "example" : "step", " (shape ", Shape(value_shape),
                      " or ", Shape(value_shape), " + [1]), got y_true ", y_true.shape());
    if (y_pred.rank() > 2)
      return reshape(unreduced(reshape(y_true, {batch}), reshape(y_pred, {batch, classes})),
                     value_shape);
    // Checked on the host (labels on a GPU are copied back for it): a bad
    // label is an error naming it, never a silent read out of range.
    const auto checked = [op, batch, classes](const Tensor& labels_in) {
      const std::vector<double> host_labels = labels_in.to_vector<double>();
      if (labels_in.dtype() == DType::kFloat32) {  // float labels must hold integers
        for (std::int64_t i = 0; i < batch; ++i) {
          const double p = host_labels[static_cast<std::size_t>(i)];
          LOCKSTEP_CHECK_AS(IndexError, p == static_cast<double>(static_cast<std::int64_t>(p)), op,
                            ": label ", p, " at position ", i, " is not an integer class id");
        }
      }
      std::vector<std::int64_t> pl(host_labels.begin(), host_labels.end());
      for (std::int64_t i = 0; i < batch; ++i) {
        LOCKSTEP_CHECK_AS(IndexError, pl[i] >= 0 && pl[i] < classes, op, ": label ", pl[i],
                          " at position ", i, " is out of range for ", classes,
                          " classes (valid: 0 to ", classes - 1, ")");
      }
      return pl;
    };
    Tensor labels = y_true;
    if (detail::recording_step() && !y_true.device().host_accessible()) {
      // A recorded step (fit's, on a GPU): the labels checked on the host
      // before each replay, by the recorder, and read on the device here.
      detail::check_before_each_replay(y_true, [checked](const Tensor& host) { checked(host); });
      if (y_true.dtype() != DType::kInt64) labels = cast(y_true, DType::kInt64);
    } else {
      const std::vector<std::int64_t> pl = checked(y_true);
      // In host memory (checked there; an op on a GPU copies them over
      // without waiting, where a GPU tensor's check would have to).
      if (y_true.dtype() != DType::kInt64 || !y_true.device().host_accessible()) {
        labels = Tensor::empty_on(host_device(), {batch}, DType::kInt64);
        std::copy(pl.begin(), pl.end(), labels.data<std::int64_t>());
      }
    }
    labels = reshape(labels, {batch, 1});
    Tensor log_p;
    if (o_.from_logits) {
      log_p = log_softmax(y_pred, -1);
    } else {
      // Probabilities, as Keras 3 takes them: clipped to [ε, 1 − ε], then
      // their logs renormalised as logits (−log(clip(p_y) / Σ clip(p))).
      log_p = log_softmax(log(clip(y_pred, kEpsilon, 1.0f - kEpsilon)), -1);
    }
    // relu: a cross-entropy is never negative, but log-softmax's rounding
    // can put a saturated example a few ulps above 0 (oneDNN's measured
    // -1.4e-6); clamped, with the gradient kept where the loss is positive.
    const Tensor picked = detail::recording_step() && !y_true.device().host_accessible()
                              ? detail::take_along_axis_checked_by_caller(log_p, labels, 1)
                              : take_along_axis(log_p, labels, 1);
    return reshape(relu(neg(picked)), {batch});
  }

 private:
  losses::CrossentropyOptions o_;
};

class CategoricalCCE : public LossImpl {
 public:
  explicit CategoricalCCE(losses::CrossentropyOptions o)
      : LossImpl("categorical_crossentropy", o.reduction), o_(o) {
    LOCKSTEP_CHECK(o.label_smoothing >= 0.0f && o.label_smoothing <= 1.0f,
                   "CategoricalCrossentropy: label_smoothing must be in [0, 1], got ",
                   o.label_smoothing);
  }
  std::string class_name() const override { return "CategoricalCrossentropy"; }
  LayerConfig get_config() const override {
    return crossentropy_config(LossImpl::get_config(), o_, true);
  }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override {
    const Tensor per = unreduced(y_true, y_pred);
    return per.rank() == 1 ? per : mean_last(per);
  }
  Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const override {
    constexpr const char* op = "CategoricalCrossentropy";
    check_batch(op, y_true, y_pred);
    LOCKSTEP_CHECK_AS(
        ShapeError, y_true.shape() == y_pred.shape(), op, ": y_true ", y_true.shape(),
        " and y_pred ", y_pred.shape(),
        " must have the same shape. Hint: for integer labels use SparseCategoricalCrossentropy");
    Tensor y = as_float(y_true);
    if (o_.label_smoothing > 0.0f) {
      const float classes = static_cast<float>(y_pred.shape()[y_pred.rank() - 1]);
      y = add(mul(y, Tensor::scalar(1.0f - o_.label_smoothing)),
              Tensor::scalar(o_.label_smoothing / classes));
    }
    Tensor log_p;
    if (o_.from_logits) {
      log_p = log_softmax(y_pred, -1);
    } else {
      const Tensor p = div(y_pred, sum(y_pred, {.axes = {-1}, .keepdims = true}));
      log_p = log(clip(p, kEpsilon, 1.0f - kEpsilon));
    }
    return relu(neg(sum(mul(y, log_p), {.axes = {-1}})));  // never negative, as above
  }

 private:
  losses::CrossentropyOptions o_;
};

class BinaryCE : public LossImpl {
 public:
  explicit BinaryCE(losses::CrossentropyOptions o)
      : LossImpl("binary_crossentropy", o.reduction), o_(o) {}
  std::string class_name() const override { return "BinaryCrossentropy"; }
  LayerConfig get_config() const override {
    return crossentropy_config(LossImpl::get_config(), o_, true);
  }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_last(elementwise(y_true, y_pred));
  }
  Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_of_last_axis(elementwise(y_true, y_pred));
  }

 private:
  Tensor elementwise(const Tensor& y_true, const Tensor& y_pred) const {
    constexpr const char* op = "BinaryCrossentropy";
    check_batch(op, y_true, y_pred);
    Tensor z = as_float(y_true);
    if (z.shape() != y_pred.shape()) {
      LOCKSTEP_CHECK_AS(ShapeError, z.numel() == y_pred.numel(), op, ": y_true ", y_true.shape(),
                        " and y_pred ", y_pred.shape(), " must have the same shape");
      z = reshape(z, y_pred.shape().to_vector());
    }
    if (o_.label_smoothing > 0.0f) {
      z = add(mul(z, Tensor::scalar(1.0f - o_.label_smoothing)),
              Tensor::scalar(0.5f * o_.label_smoothing));
    }
    Tensor values;
    if (o_.from_logits) {
      // max(x, 0) - x·z + log1p(exp(-|x|)): finite for every x, and exact
      // for confident logits (log(1 + exp(-20)) would round to 0), as
      // TensorFlow's sigmoid_cross_entropy_with_logits computes it.
      const Tensor& x = y_pred;
      values = add(sub(relu(x), mul(x, z)), log1p(exp(neg(abs(x)))));
    } else {
      const Tensor p = clip(y_pred, kEpsilon, 1.0f - kEpsilon);
      values = neg(add(mul(z, log(p)),
                       mul(sub(Tensor::scalar(1.0f), z), log(sub(Tensor::scalar(1.0f), p)))));
    }
    return values;
  }

  losses::CrossentropyOptions o_;
};

class Elementwise : public LossImpl {
 public:
  enum class Kind { kMse, kMae, kHuber };
  Elementwise(Kind kind, Reduction reduction, float delta = 1.0f)
      : LossImpl(kind == Kind::kMse   ? "mean_squared_error"
                 : kind == Kind::kMae ? "mean_absolute_error"
                                      : "huber_loss",
                 reduction),
        kind_(kind),
        delta_(delta) {}
  std::string class_name() const override {
    return kind_ == Kind::kMse   ? "MeanSquaredError"
           : kind_ == Kind::kMae ? "MeanAbsoluteError"
                                 : "Huber";
  }
  LayerConfig get_config() const override {
    LayerConfig c = LossImpl::get_config();
    if (kind_ == Kind::kHuber) c.set("delta", static_cast<double>(delta_));
    return c;
  }
  Tensor per_example(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_last(elementwise(y_true, y_pred));
  }
  Tensor unreduced(const Tensor& y_true, const Tensor& y_pred) const override {
    return mean_of_last_axis(elementwise(y_true, y_pred));
  }

 private:
  Tensor elementwise(const Tensor& y_true, const Tensor& y_pred) const {
    const char* op = kind_ == Kind::kMse   ? "MeanSquaredError"
                     : kind_ == Kind::kMae ? "MeanAbsoluteError"
                                           : "Huber";
    check_batch(op, y_true, y_pred);
    Tensor y = as_float(y_true);
    if (y.shape() != y_pred.shape() && y.numel() == y_pred.numel())
      y = reshape(y, y_pred.shape().to_vector());
    LOCKSTEP_CHECK_AS(ShapeError, y.shape() == y_pred.shape(), op, ": y_true ", y_true.shape(),
                      " and y_pred ", y_pred.shape(), " must have the same shape");
    const Tensor diff = sub(y_pred, y);
    switch (kind_) {
      case Kind::kMse:
        return square(diff);
      case Kind::kMae:
        return abs(diff);
      case Kind::kHuber:
        break;
    }
    const Tensor a = abs(diff);
    const Tensor quadratic = mul(Tensor::scalar(0.5f), square(diff));
    const Tensor linear =
        sub(mul(Tensor::scalar(delta_), a), Tensor::scalar(0.5f * delta_ * delta_));
    return where(less_equal(a, Tensor::scalar(delta_)), quadratic, linear);
  }

  Kind kind_;
  float delta_;
};

}  // namespace

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred,
                        const Tensor& sample_weight) const {
  LOCKSTEP_CHECK(defined(), "calling an undefined loss");
  Tensor per = impl_->per_example(y_true, y_pred);
  if (sample_weight.defined()) {
    LOCKSTEP_CHECK_AS(ShapeError, sample_weight.numel() == per.numel(), impl_->name(),
                      ": sample_weight of shape ", sample_weight.shape(), " does not match ",
                      per.numel(), " examples");
    per = mul(per, reshape(as_float(sample_weight), per.shape().to_vector()));
  }
  switch (impl_->reduction()) {
    case Reduction::kNone:
      return per;
    case Reduction::kSum:
      return sum(per);
    case Reduction::kSumOverBatchSize:
      break;
  }
  const std::int64_t n = per.numel();
  return n == 0 ? Tensor::scalar(0.0f) : div(sum(per), Tensor::scalar(static_cast<float>(n)));
}

namespace {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::kSumOverBatchSize:
      return "sum_over_batch_size";
    case Reduction::kSum:
      return "sum";
    case Reduction::kNone:
      return "none";
  }
  return "?";
}

}  // namespace

LayerConfig LossImpl::get_config() const {
  LayerConfig c;
  c.set("name", name_);
  c.set("reduction", std::string(reduction_name(reduction_)));
  return c;
}

namespace losses {

SparseCategoricalCrossentropy::SparseCategoricalCrossentropy(CrossentropyOptions o)
    : Loss(std::make_shared<SparseCCE>(o)) {}
CategoricalCrossentropy::CategoricalCrossentropy(CrossentropyOptions o)
    : Loss(std::make_shared<CategoricalCCE>(o)) {}
BinaryCrossentropy::BinaryCrossentropy(CrossentropyOptions o)
    : Loss(std::make_shared<BinaryCE>(o)) {}
MeanSquaredError::MeanSquaredError(ReductionOptions o)
    : Loss(std::make_shared<Elementwise>(Elementwise::Kind::kMse, o.reduction)) {}
MeanAbsoluteError::MeanAbsoluteError(ReductionOptions o)
    : Loss(std::make_shared<Elementwise>(Elementwise::Kind::kMae, o.reduction)) {}
Huber::Huber(HuberOptions o)
    : Loss(std::make_shared<Elementwise>(Elementwise::Kind::kHuber, o.reduction, o.delta)) {}

Loss get(const std::string& name) {
  // {identifiers, factory}: the function name and its aliases, then the class name.
  struct Known {
    std::vector<std::string> names;
    Loss (*make)();
  };
  static const std::vector<Known> known = {
      {{"sparse_categorical_crossentropy", "SparseCategoricalCrossentropy"},
       [] { return Loss(SparseCategoricalCrossentropy()); }},
      {{"categorical_crossentropy", "CategoricalCrossentropy"},
       [] { return Loss(CategoricalCrossentropy()); }},
      {{"binary_crossentropy", "BinaryCrossentropy"}, [] { return Loss(BinaryCrossentropy()); }},
      {{"mean_squared_error", "mse", "MeanSquaredError"}, [] { return Loss(MeanSquaredError()); }},
      {{"mean_absolute_error", "mae", "MeanAbsoluteError"},
       [] { return Loss(MeanAbsoluteError()); }},
      {{"huber", "huber_loss", "Huber"}, [] { return Loss(Huber()); }},
  };
  std::string all;
  for (const Known& k : known) {
    for (const std::string& n : k.names) {
      if (n == name) return k.make();
      all += (all.empty() ? "" : ", ") + n;
    }
  }
  detail::throw_error<ValueError>("unknown loss '", name, "'; known losses: ", all);
}

Loss from_config(const std::string& class_name, const LayerConfig& config) {
  Reduction reduction = Reduction::kSumOverBatchSize;
  if (config.has("reduction")) {
    const std::string r = config.get<std::string>("reduction");
    if (r == "sum") {
      reduction = Reduction::kSum;
    } else if (r == "none") {
      reduction = Reduction::kNone;
    } else {
      LOCKSTEP_CHECK(r == "sum_over_batch_size" || r == "auto", class_name, ": reduction '", r,
                     "' is not one of sum_over_batch_size, sum, none");
    }
  }
  const CrossentropyOptions ce{
      .from_logits = config.get_or("from_logits", false),
      .label_smoothing = static_cast<float>(config.get_or<double>("label_smoothing", 0.0)),
      .reduction = reduction};
  std::vector<std::string> takes = {"name", "reduction"};
  Loss made;
  if (class_name == "SparseCategoricalCrossentropy") {
    made = SparseCategoricalCrossentropy(ce);
    takes.insert(takes.end(), {"from_logits"});
  } else if (class_name == "CategoricalCrossentropy") {
    made = CategoricalCrossentropy(ce);
    takes.insert(takes.end(), {"from_logits", "label_smoothing"});
  } else if (class_name == "BinaryCrossentropy") {
    made = BinaryCrossentropy(ce);
    takes.insert(takes.end(), {"from_logits", "label_smoothing"});
  } else if (class_name == "MeanSquaredError") {
    made = MeanSquaredError({.reduction = reduction});
  } else if (class_name == "MeanAbsoluteError") {
    made = MeanAbsoluteError({.reduction = reduction});
  } else if (class_name == "Huber") {
    made = Huber(
        {.delta = static_cast<float>(config.get_or<double>("delta", 1.0)), .reduction = reduction});
    takes.push_back("delta");
  } else {
    detail::throw_error<ValueError>(
        "unknown loss class '", class_name,
        "'; Lockstep has SparseCategoricalCrossentropy, CategoricalCrossentropy, "
        "BinaryCrossentropy, MeanSquaredError, MeanAbsoluteError and Huber");
  }
  for (const auto& [key, value] : config.entries()) {
    LOCKSTEP_CHECK(std::find(takes.begin(), takes.end(), key) != takes.end(), class_name,
                   ": argument '", key, "' is not one Lockstep's ", class_name, " takes");
  }
  return made;
}

}  // namespace losses

Loss::Loss(const char* name) : Loss(losses::get(name)) {}
Loss::Loss(const std::string& name) : Loss(losses::get(name)) {}
}  // namespace lockstep
