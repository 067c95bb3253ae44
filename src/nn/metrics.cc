// Metric implementations: each reduces a batch to additive float64 state.
#include "lockstep/nn/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>

#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"

namespace lockstep {
namespace {

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

// Per-example weights: ones, or the sample_weight values.
std::vector<double> weights_for(const Tensor& sample_weight, std::int64_t batch,
                                const std::string& name) {
  if (!sample_weight.defined()) return std::vector<double>(static_cast<std::size_t>(batch), 1.0);
  const std::int64_t given = sample_weight.numel();
  LOCKSTEP_CHECK_AS(ShapeError, given == batch || (given > 0 && batch % given == 0), "metric '",
                    name, "': sample_weight has ", given, " values for ", batch, " values");
  if (given == batch) return host(sample_weight);
  // One weight per example over values per step (a sequence output): each
  // example's weight for each of its steps, as Keras broadcasts it.
  const std::vector<double> w = host(sample_weight);
  const std::int64_t steps = batch / given;
  std::vector<double> out(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i)
    out[static_cast<std::size_t>(i)] = w[static_cast<std::size_t>(i / steps)];
  return out;
}

void check_pair(const std::string& name, const Tensor& y_true, const Tensor& y_pred) {
  check_defined(y_true, name.c_str(), "y_true");
  check_defined(y_pred, name.c_str(), "y_pred");
  LOCKSTEP_CHECK_AS(
      ShapeError,
      y_true.rank() >= 1 && y_pred.rank() >= 1 && y_true.shape()[0] == y_pred.shape()[0],
      "metric '", name, "': y_true ", y_true.shape(), " and y_pred ", y_pred.shape(),
      " must have the same batch size");
}

// A metric that is the weighted mean (or sum) of one value per example:
// state = {weighted total, total weight}.
class PerExample : public MetricImpl {
 public:
  using Fn = std::function<std::vector<double>(const Tensor& y_true, const Tensor& y_pred)>;
  enum class Result { kMean, kSum, kRootMean };
  PerExample(std::string name, Fn fn, Result result = Result::kMean)
      : MetricImpl(std::move(name)), fn_(std::move(fn)), result_(result) {
    state_.assign(2, 0.0);
  }
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight) override {
    const std::vector<double> v = fn_(y_true, y_pred);
    const std::vector<double> w =
        weights_for(sample_weight, static_cast<std::int64_t>(v.size()), name());
    for (std::size_t i = 0; i < v.size(); ++i) {
      state_[0] += v[i] * w[i];
      state_[1] += w[i];
    }
  }
  double result() const override {
    if (result_ == Result::kSum) return state_[0];
    const double mean = state_[1] == 0.0 ? 0.0 : state_[0] / state_[1];
    return result_ == Result::kRootMean ? std::sqrt(mean) : mean;
  }
  std::shared_ptr<MetricImpl> clone() const override {
    auto copy = std::make_shared<PerExample>(name(), fn_, result_);
    copy->set_keras(keras_class(), keras_settings());
    return copy;
  }

 private:
  Fn fn_;
  Result result_;
};

// [batch, classes] predictions as rows.
struct Rows {
  std::vector<double> v;
  std::int64_t batch, classes;
  const double* row(std::int64_t i) const { return v.data() + i * classes; }
};
Rows rows_of(const Tensor& t, const std::string& name) {
  LOCKSTEP_CHECK_AS(ShapeError, t.rank() >= 2, "metric '", name,
                    "': expected predictions of shape [batch, classes], got ", t.shape());
  const std::int64_t classes = t.shape()[t.rank() - 1];
  return {host(t), t.numel() / std::max<std::int64_t>(classes, 1), classes};
}
std::int64_t argmax_row(const double* r, std::int64_t n) { return std::max_element(r, r + n) - r; }

std::vector<double> sparse_accuracy(const Tensor& y_true, const Tensor& y_pred,
                                    const std::string& name) {
  check_pair(name, y_true, y_pred);
  const Rows p = rows_of(y_pred, name);
  const std::vector<double> labels = host(y_true);
  LOCKSTEP_CHECK_AS(ShapeError, static_cast<std::int64_t>(labels.size()) == p.batch, "metric '",
                    name, "': expected one label per example, got y_true ", y_true.shape(),
                    " for y_pred ", y_pred.shape());
  std::vector<double> out(static_cast<std::size_t>(p.batch));
  for (std::int64_t i = 0; i < p.batch; ++i) {
    out[static_cast<std::size_t>(i)] =
        static_cast<double>(argmax_row(p.row(i), p.classes)) == labels[static_cast<std::size_t>(i)];
  }
  return out;
}

std::vector<double> categorical_accuracy(const Tensor& y_true, const Tensor& y_pred,
                                         const std::string& name) {
  check_pair(name, y_true, y_pred);
  LOCKSTEP_CHECK_AS(ShapeError, y_true.shape() == y_pred.shape(), "metric '", name, "': y_true ",
                    y_true.shape(), " and y_pred ", y_pred.shape(), " must have the same shape");
  const Rows p = rows_of(y_pred, name), t = rows_of(y_true, name);
  std::vector<double> out(static_cast<std::size_t>(p.batch));
  for (std::int64_t i = 0; i < p.batch; ++i) {
    out[static_cast<std::size_t>(i)] =
        argmax_row(p.row(i), p.classes) == argmax_row(t.row(i), t.classes);
  }
  return out;
}

// Mean over the last axis of f(true, pred): one value per example, or per
// step of a sequence output (as Keras's metric functions reduce; a mask on
// the output then weights each step).
std::vector<double> per_example_mean(const Tensor& y_true, const Tensor& y_pred,
                                     const std::string& name,
                                     const std::function<double(double, double)>& f) {
  check_pair(name, y_true, y_pred);
  LOCKSTEP_CHECK_AS(ShapeError, y_true.numel() == y_pred.numel(), "metric '", name, "': y_true ",
                    y_true.shape(), " and y_pred ", y_pred.shape(),
                    " must have the same number of values");
  const std::vector<double> t = host(y_true), p = host(y_pred);
  const std::int64_t per = y_pred.rank() >= 2 ? y_pred.shape()[y_pred.rank() - 1] : 1;
  const std::int64_t batch = per == 0 ? 0 : y_pred.numel() / per;
  std::vector<double> out(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) {
    double s = 0;
    for (std::int64_t j = 0; j < per; ++j)
      s += f(t[static_cast<std::size_t>(i * per + j)], p[static_cast<std::size_t>(i * per + j)]);
    out[static_cast<std::size_t>(i)] = per ? s / static_cast<double>(per) : 0.0;
  }
  return out;
}

// Confusion counts at thresholds: precision, recall and AUC.
class Confusion : public MetricImpl {
 public:
  enum class Kind { kPrecision, kRecall, kAuc };
  Confusion(std::string name, Kind kind, std::vector<double> thresholds)
      : MetricImpl(std::move(name)), kind_(kind), thresholds_(std::move(thresholds)) {
    state_.assign(thresholds_.size() * 4, 0.0);  // tp, fp, tn, fn per threshold
  }
  void update_state(const Tensor& y_true, const Tensor& y_pred,
                    const Tensor& sample_weight) override {
    check_pair(name(), y_true, y_pred);
    LOCKSTEP_CHECK_AS(ShapeError, y_true.numel() == y_pred.numel(), "metric '", name(),
                      "': y_true ", y_true.shape(), " and y_pred ", y_pred.shape(),
                      " must have the same number of values");
    const std::vector<double> t = host(y_true), p = host(y_pred);
    const std::int64_t batch = y_pred.shape()[0];
    const std::vector<double> w = weights_for(sample_weight, batch, name());
    const std::size_t per = batch ? p.size() / static_cast<std::size_t>(batch) : 0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double weight = w[per ? i / per : 0];
      const bool positive = t[i] > 0.5;
      for (std::size_t k = 0; k < thresholds_.size(); ++k) {
        const bool predicted = p[i] > thresholds_[k];
        state_[k * 4 + (positive ? (predicted ? 0 : 3) : (predicted ? 1 : 2))] += weight;
      }
    }
  }
  double result() const override {
    auto tp = [&](std::size_t k) { return state_[k * 4]; };
    auto fp = [&](std::size_t k) { return state_[k * 4 + 1]; };
    auto tn = [&](std::size_t k) { return state_[k * 4 + 2]; };
    auto fn = [&](std::size_t k) { return state_[k * 4 + 3]; };
    auto ratio = [](double a, double b) { return b == 0.0 ? 0.0 : a / b; };
    if (kind_ == Kind::kPrecision) return ratio(tp(0), tp(0) + fp(0));
    if (kind_ == Kind::kRecall) return ratio(tp(0), tp(0) + fn(0));
    double auc = 0.0;
    for (std::size_t k = 0; k + 1 < thresholds_.size(); ++k) {
      const double tpr0 = ratio(tp(k), tp(k) + fn(k)),
                   tpr1 = ratio(tp(k + 1), tp(k + 1) + fn(k + 1));
      const double fpr0 = ratio(fp(k), fp(k) + tn(k)),
                   fpr1 = ratio(fp(k + 1), fp(k + 1) + tn(k + 1));
      auc += (fpr0 - fpr1) * (tpr0 + tpr1) / 2.0;
    }
    return auc;
  }
  std::shared_ptr<MetricImpl> clone() const override {
    auto copy = std::make_shared<Confusion>(name(), kind_, thresholds_);
    copy->set_keras(keras_class(), keras_settings());
    return copy;
  }

 private:
  Kind kind_;
  std::vector<double> thresholds_;
};

// A float setting as the decimal it was written as (0.7f records as 0.7,
// not 0.699999988), as Keras records its Python floats.
double decimal(float v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

std::string or_default(const std::string& name, const char* fallback) {
  return name.empty() ? fallback : name;
}

}  // namespace

void MetricImpl::set_state(const std::vector<double>& state) {
  LOCKSTEP_CHECK(state.size() == state_.size(), "metric '", name_, "': expected a state of ",
                 state_.size(), " numbers, got ", state.size());
  state_ = state;
}

void MetricImpl::merge(const MetricImpl& other) {
  LOCKSTEP_CHECK(other.state_.size() == state_.size(), "metric '", name_,
                 "': cannot merge metric '", other.name_, "' with a state of ", other.state_.size(),
                 " numbers into one of ", state_.size());
  for (std::size_t i = 0; i < state_.size(); ++i) state_[i] += other.state_[i];
}

void sum_metric_states(const std::vector<Metric>& metrics,
                       const std::function<void(std::vector<double>&)>& sum) {
  std::vector<double> states;
  for (const Metric& m : metrics)
    states.insert(states.end(), m.impl()->state().begin(), m.impl()->state().end());
  sum(states);
  std::size_t at = 0;
  for (const Metric& m : metrics) {
    const std::size_t n = m.impl()->state().size();
    m.impl()->set_state(std::vector<double>(states.begin() + static_cast<std::ptrdiff_t>(at),
                                            states.begin() + static_cast<std::ptrdiff_t>(at + n)));
    at += n;
  }
}

namespace metrics {

Mean::Mean(MetricOptions o)
    : Metric(std::make_shared<PerExample>(or_default(o.name, "mean"),
                                          [](const Tensor& v, const Tensor&) { return host(v); })) {
  impl_->set_keras("Mean", {});
}

Sum::Sum(MetricOptions o)
    : Metric(std::make_shared<PerExample>(
          or_default(o.name, "sum"), [](const Tensor& v, const Tensor&) { return host(v); },
          PerExample::Result::kSum)) {
  impl_->set_keras("Sum", {});
}

Accuracy::Accuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "accuracy");
  impl_ = std::make_shared<PerExample>(name, [name](const Tensor& t, const Tensor& p) {
    return per_example_mean(t, p, name, [](double a, double b) { return a == b ? 1.0 : 0.0; });
  });
  impl_->set_keras("Accuracy", {});
}

SparseCategoricalAccuracy::SparseCategoricalAccuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "sparse_categorical_accuracy");
  impl_ = std::make_shared<PerExample>(
      name, [name](const Tensor& t, const Tensor& p) { return sparse_accuracy(t, p, name); });
  impl_->set_keras("SparseCategoricalAccuracy", {});
}

CategoricalAccuracy::CategoricalAccuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "categorical_accuracy");
  impl_ = std::make_shared<PerExample>(
      name, [name](const Tensor& t, const Tensor& p) { return categorical_accuracy(t, p, name); });
  impl_->set_keras("CategoricalAccuracy", {});
}

BinaryAccuracy::BinaryAccuracy(ThresholdOptions o) {
  const std::string name = or_default(o.name, "binary_accuracy");
  const double threshold = o.threshold;
  impl_ = std::make_shared<PerExample>(name, [name, threshold](const Tensor& t, const Tensor& p) {
    return per_example_mean(t, p, name, [threshold](double a, double b) {
      return (b > threshold) == (a > 0.5) ? 1.0 : 0.0;
    });
  });
  impl_->set_keras("BinaryAccuracy", {{"threshold", decimal(o.threshold)}});
}

TopKCategoricalAccuracy::TopKCategoricalAccuracy(TopKOptions o) {
  const std::string name = or_default(o.name, "top_k_categorical_accuracy");
  const int k = o.k;
  LOCKSTEP_CHECK(k >= 1, "TopKCategoricalAccuracy: k must be >= 1, got ", k);
  impl_ = std::make_shared<PerExample>(name, [name, k](const Tensor& t, const Tensor& p) {
    check_pair(name, t, p);
    const Rows pr = rows_of(p, name), tr = rows_of(t, name);
    std::vector<double> out(static_cast<std::size_t>(pr.batch));
    for (std::int64_t i = 0; i < pr.batch; ++i) {
      const double target = pr.row(i)[argmax_row(tr.row(i), tr.classes)];
      std::int64_t greater = 0;
      for (std::int64_t c = 0; c < pr.classes; ++c) greater += pr.row(i)[c] > target;
      out[static_cast<std::size_t>(i)] = greater < k ? 1.0 : 0.0;
    }
    return out;
  });
  impl_->set_keras("TopKCategoricalAccuracy", {{"k", static_cast<std::int64_t>(o.k)}});
}

Precision::Precision(ThresholdOptions o)
    : Metric(std::make_shared<Confusion>(or_default(o.name, "precision"),
                                         Confusion::Kind::kPrecision,
                                         std::vector<double>{o.threshold})) {
  impl_->set_keras("Precision", {{"thresholds", decimal(o.threshold)}});
}

Recall::Recall(ThresholdOptions o)
    : Metric(std::make_shared<Confusion>(or_default(o.name, "recall"), Confusion::Kind::kRecall,
                                         std::vector<double>{o.threshold})) {
  impl_->set_keras("Recall", {{"thresholds", decimal(o.threshold)}});
}

AUC::AUC(AUCOptions o) {
  LOCKSTEP_CHECK(o.num_thresholds > 1, "AUC: num_thresholds must be > 1, got ", o.num_thresholds);
  // Keras's thresholds: {-eps, 1/(n-1), ..., (n-2)/(n-1), 1 + eps}.
  std::vector<double> thresholds;
  const double eps = 1e-7;
  thresholds.push_back(-eps);
  for (int i = 1; i < o.num_thresholds - 1; ++i)
    thresholds.push_back(static_cast<double>(i) / (o.num_thresholds - 1));
  thresholds.push_back(1.0 + eps);
  impl_ = std::make_shared<Confusion>(or_default(o.name, "auc"), Confusion::Kind::kAuc, thresholds);
  impl_->set_keras("AUC", {{"num_thresholds", static_cast<std::int64_t>(o.num_thresholds)},
                           {"curve", std::string("ROC")},
                           {"summation_method", std::string("interpolation")},
                           {"multi_label", false},
                           {"from_logits", false}});
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(TopKOptions o) {
  const std::string name = or_default(o.name, "sparse_top_k_categorical_accuracy");
  const int k = o.k;
  LOCKSTEP_CHECK(k >= 1, "SparseTopKCategoricalAccuracy: k must be >= 1, got ", k);
  impl_ = std::make_shared<PerExample>(name, [name, k](const Tensor& t, const Tensor& p) {
    check_pair(name, t, p);
    const Rows pr = rows_of(p, name);
    const std::vector<double> labels = host(t);
    LOCKSTEP_CHECK_AS(ShapeError, static_cast<std::int64_t>(labels.size()) == pr.batch, "metric '",
                      name, "': expected one label per example, got y_true ", t.shape(),
                      " for y_pred ", p.shape());
    std::vector<double> out(static_cast<std::size_t>(pr.batch));
    for (std::int64_t i = 0; i < pr.batch; ++i) {
      const double label = labels[static_cast<std::size_t>(i)];
      LOCKSTEP_CHECK_AS(IndexError, label >= 0 && label < static_cast<double>(pr.classes),
                        "metric '", name, "': label ", label, " at position ", i,
                        " is out of range for ", pr.classes, " classes");
      const double target = pr.row(i)[static_cast<std::int64_t>(label)];
      std::int64_t greater = 0;
      for (std::int64_t c = 0; c < pr.classes; ++c) greater += pr.row(i)[c] > target;
      out[static_cast<std::size_t>(i)] = greater < k ? 1.0 : 0.0;
    }
    return out;
  });
  impl_->set_keras("SparseTopKCategoricalAccuracy", {{"k", static_cast<std::int64_t>(o.k)}});
}

namespace {

constexpr double kEpsilon = 1e-7;  // Keras's backend epsilon

// A metric that is the mean over the last axis of f(y_true, y_pred), per
// example (Keras's MeanMetricWrapper of an elementwise function).
std::shared_ptr<MetricImpl> elementwise_mean(
    const std::string& name, double (*f)(double, double),
    PerExample::Result result = PerExample::Result::kMean) {
  return std::make_shared<PerExample>(
      name, [name, f](const Tensor& t, const Tensor& p) { return per_example_mean(t, p, name, f); },
      result);
}

// A metric that is the mean of a loss's per-example values.
std::shared_ptr<MetricImpl> loss_mean(const std::string& name, const Loss& loss) {
  return std::make_shared<PerExample>(
      name, [loss](const Tensor& t, const Tensor& p) { return host(loss.per_example(t, p)); });
}

// Per-example sums over the last axis of g(t_row, p_row): row functions.
std::shared_ptr<MetricImpl> row_metric(const std::string& name,
                                       double (*g)(const double* t, const double* p,
                                                   std::int64_t n)) {
  return std::make_shared<PerExample>(name, [name, g](const Tensor& t, const Tensor& p) {
    check_pair(name, t, p);
    LOCKSTEP_CHECK_AS(ShapeError, t.shape() == p.shape(), "metric '", name, "': y_true ", t.shape(),
                      " and y_pred ", p.shape(), " must have the same shape");
    const Rows pr = rows_of(p, name), tr = rows_of(t, name);
    std::vector<double> out(static_cast<std::size_t>(pr.batch));
    for (std::int64_t i = 0; i < pr.batch; ++i)
      out[static_cast<std::size_t>(i)] = g(tr.row(i), pr.row(i), pr.classes);
    return out;
  });
}

}  // namespace

MeanSquaredError::MeanSquaredError(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "mean_squared_error"),
                              [](double a, double b) { return (a - b) * (a - b); })) {
  impl_->set_keras("MeanSquaredError", {});
}

MeanAbsoluteError::MeanAbsoluteError(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "mean_absolute_error"),
                              [](double a, double b) { return std::fabs(a - b); })) {
  impl_->set_keras("MeanAbsoluteError", {});
}

MeanAbsolutePercentageError::MeanAbsolutePercentageError(MetricOptions o)
    : Metric(elementwise_mean(
          or_default(o.name, "mean_absolute_percentage_error"), [](double a, double b) {
            return 100.0 * std::fabs((a - b) / std::max(std::fabs(a), kEpsilon));
          })) {
  impl_->set_keras("MeanAbsolutePercentageError", {});
}

MeanSquaredLogarithmicError::MeanSquaredLogarithmicError(MetricOptions o)
    : Metric(elementwise_mean(
          or_default(o.name, "mean_squared_logarithmic_error"), [](double a, double b) {
            const double d =
                std::log(std::max(b, kEpsilon) + 1.0) - std::log(std::max(a, kEpsilon) + 1.0);
            return d * d;
          })) {
  impl_->set_keras("MeanSquaredLogarithmicError", {});
}

RootMeanSquaredError::RootMeanSquaredError(MetricOptions o)
    : Metric(elementwise_mean(
          or_default(o.name, "root_mean_squared_error"),
          [](double a, double b) { return (a - b) * (a - b); }, PerExample::Result::kRootMean)) {
  impl_->set_keras("RootMeanSquaredError", {});
}

LogCoshError::LogCoshError(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "logcosh"), [](double a, double b) {
        // log(cosh(x)) = x + log1p(exp(-2x)) - log 2, stable for large |x|.
        const double x = std::fabs(b - a);
        return x + std::log1p(std::exp(-2.0 * x)) - std::log(2.0);
      })) {
  impl_->set_keras("LogCoshError", {});
}

KLDivergence::KLDivergence(MetricOptions o)
    : Metric(row_metric(or_default(o.name, "kl_divergence"),
                        [](const double* t, const double* p, std::int64_t n) {
                          double s = 0;
                          for (std::int64_t j = 0; j < n; ++j) {
                            const double a = std::clamp(t[j], kEpsilon, 1.0);
                            const double b = std::clamp(p[j], kEpsilon, 1.0);
                            s += a * std::log(a / b);
                          }
                          return s;
                        })) {
  impl_->set_keras("KLDivergence", {});
}

Poisson::Poisson(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "poisson"),
                              [](double a, double b) { return b - a * std::log(b + kEpsilon); })) {
  impl_->set_keras("Poisson", {});
}

namespace {
// Keras's hinge labels: 0/1 become -1/1; -1/1 stay.
double hinge_label(double t) { return t == 0.0 ? -1.0 : t; }
}  // namespace

Hinge::Hinge(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "hinge"), [](double a, double b) {
        return std::max(1.0 - hinge_label(a) * b, 0.0);
      })) {
  impl_->set_keras("Hinge", {});
}

SquaredHinge::SquaredHinge(MetricOptions o)
    : Metric(elementwise_mean(or_default(o.name, "squared_hinge"), [](double a, double b) {
        const double h = std::max(1.0 - hinge_label(a) * b, 0.0);
        return h * h;
      })) {
  impl_->set_keras("SquaredHinge", {});
}

CosineSimilarity::CosineSimilarity(MetricOptions o)
    : Metric(row_metric(or_default(o.name, "cosine_similarity"),
                        [](const double* t, const double* p, std::int64_t n) {
                          double tt = 0, pp = 0, tp = 0;
                          for (std::int64_t j = 0; j < n; ++j) {
                            tt += t[j] * t[j];
                            pp += p[j] * p[j];
                            tp += t[j] * p[j];
                          }
                          // Keras's l2_normalize: x / sqrt(max(sum x², 1e-12)).
                          return tp / std::sqrt(std::max(tt, 1e-12) * std::max(pp, 1e-12));
                        })) {
  impl_->set_keras("CosineSimilarity", {});
}

BinaryCrossentropy::BinaryCrossentropy(CrossentropyMetricOptions o)
    : Metric(loss_mean(or_default(o.name, "binary_crossentropy"),
                       losses::BinaryCrossentropy(
                           {.from_logits = o.from_logits, .label_smoothing = o.label_smoothing}))) {
  impl_->set_keras("BinaryCrossentropy", {{"from_logits", o.from_logits},
                                          {"label_smoothing", decimal(o.label_smoothing)}});
}

CategoricalCrossentropy::CategoricalCrossentropy(CrossentropyMetricOptions o)
    : Metric(loss_mean(or_default(o.name, "categorical_crossentropy"),
                       losses::CategoricalCrossentropy(
                           {.from_logits = o.from_logits, .label_smoothing = o.label_smoothing}))) {
  impl_->set_keras("CategoricalCrossentropy", {{"from_logits", o.from_logits},
                                               {"label_smoothing", decimal(o.label_smoothing)},
                                               {"axis", std::int64_t{-1}}});
}

SparseCategoricalCrossentropy::SparseCategoricalCrossentropy(CrossentropyMetricOptions o)
    : Metric(loss_mean(or_default(o.name, "sparse_categorical_crossentropy"),
                       losses::SparseCategoricalCrossentropy({.from_logits = o.from_logits}))) {
  impl_->set_keras("SparseCategoricalCrossentropy",
                   {{"from_logits", o.from_logits}, {"axis", std::int64_t{-1}}});
}

Metric get(const std::string& name, const Loss& loss) {
  const std::string loss_name = loss.defined() ? loss.name() : "";
  if (name == "accuracy" || name == "acc") {
    // Keras picks the accuracy that matches the loss, keeping the name given.
    if (loss_name == "sparse_categorical_crossentropy")
      return SparseCategoricalAccuracy({.name = name});
    if (loss_name == "categorical_crossentropy") return CategoricalAccuracy({.name = name});
    if (loss_name == "binary_crossentropy") return BinaryAccuracy({.name = name});
    return Accuracy({.name = name});
  }
  if (name == "crossentropy" || name == "ce") {
    if (loss_name == "sparse_categorical_crossentropy")
      return SparseCategoricalCrossentropy({.name = name});
    if (loss_name == "binary_crossentropy") return BinaryCrossentropy({.name = name});
    return CategoricalCrossentropy({.name = name});
  }
  // {function names, class name, factory(name)}: a function name names the
  // metric as given, the class name leaves the default.
  struct Known {
    std::vector<std::string> names;
    const char* class_name;
    Metric (*make)(const std::string& name);
  };
  static const std::vector<Known> known = {
      {{"sparse_categorical_accuracy"},
       "SparseCategoricalAccuracy",
       [](const std::string& n) -> Metric { return SparseCategoricalAccuracy({.name = n}); }},
      {{"categorical_accuracy"},
       "CategoricalAccuracy",
       [](const std::string& n) -> Metric { return CategoricalAccuracy({.name = n}); }},
      {{"binary_accuracy"},
       "BinaryAccuracy",
       [](const std::string& n) -> Metric { return BinaryAccuracy({.name = n}); }},
      {{"top_k_categorical_accuracy"},
       "TopKCategoricalAccuracy",
       [](const std::string& n) -> Metric { return TopKCategoricalAccuracy({.name = n}); }},
      {{"sparse_top_k_categorical_accuracy"},
       "SparseTopKCategoricalAccuracy",
       [](const std::string& n) -> Metric { return SparseTopKCategoricalAccuracy({.name = n}); }},
      {{"mean_squared_error", "mse"},
       "MeanSquaredError",
       [](const std::string& n) -> Metric { return MeanSquaredError({.name = n}); }},
      {{"mean_absolute_error", "mae"},
       "MeanAbsoluteError",
       [](const std::string& n) -> Metric { return MeanAbsoluteError({.name = n}); }},
      {{"mean_absolute_percentage_error", "mape"},
       "MeanAbsolutePercentageError",
       [](const std::string& n) -> Metric { return MeanAbsolutePercentageError({.name = n}); }},
      {{"mean_squared_logarithmic_error", "msle"},
       "MeanSquaredLogarithmicError",
       [](const std::string& n) -> Metric { return MeanSquaredLogarithmicError({.name = n}); }},
      {{"root_mean_squared_error"},
       "RootMeanSquaredError",
       [](const std::string& n) -> Metric { return RootMeanSquaredError({.name = n}); }},
      {{"logcosh", "log_cosh"},
       "LogCoshError",
       [](const std::string& n) -> Metric { return LogCoshError({.name = n}); }},
      {{"kl_divergence", "kld", "kullback_leibler_divergence"},
       "KLDivergence",
       [](const std::string& n) -> Metric { return KLDivergence({.name = n}); }},
      {{"poisson"}, "Poisson", [](const std::string& n) -> Metric { return Poisson({.name = n}); }},
      {{"hinge"}, "Hinge", [](const std::string& n) -> Metric { return Hinge({.name = n}); }},
      {{"squared_hinge"},
       "SquaredHinge",
       [](const std::string& n) -> Metric { return SquaredHinge({.name = n}); }},
      {{"cosine_similarity"},
       "CosineSimilarity",
       [](const std::string& n) -> Metric { return CosineSimilarity({.name = n}); }},
      {{"binary_crossentropy"},
       "BinaryCrossentropy",
       [](const std::string& n) -> Metric { return BinaryCrossentropy({.name = n}); }},
      {{"categorical_crossentropy"},
       "CategoricalCrossentropy",
       [](const std::string& n) -> Metric { return CategoricalCrossentropy({.name = n}); }},
      {{"sparse_categorical_crossentropy"},
       "SparseCategoricalCrossentropy",
       [](const std::string& n) -> Metric { return SparseCategoricalCrossentropy({.name = n}); }},
      {{"precision"},
       "Precision",
       [](const std::string& n) -> Metric { return Precision({.name = n}); }},
      {{"recall"}, "Recall", [](const std::string& n) -> Metric { return Recall({.name = n}); }},
      {{"auc"}, "AUC", [](const std::string& n) -> Metric { return AUC({.name = n}); }},
  };
  std::string all = "accuracy, acc, crossentropy, ce";
  std::vector<std::string> names = {"accuracy", "acc", "crossentropy", "ce", "Accuracy"};
  for (const Known& k : known) {
    for (const std::string& n : k.names) {
      if (n == name) return k.make(name);
      all += ", " + n;
      names.push_back(n);
    }
    if (name == k.class_name) return k.make("");
    all += ", " + std::string(k.class_name);
    names.emplace_back(k.class_name);
  }
  detail::throw_error<ValueError>("unknown metric '", name, "' (did you mean '",
                                  nearest_name(name, names), "'?); known metrics: ", all);
}

namespace {

// The settings of a Keras metric config, read one by one: each taken is
// marked, and what is left unread at the end is refused by name.
class SettingsReader {
 public:
  SettingsReader(const std::string& cls, const MetricSettings& settings)
      : cls_(cls), settings_(settings), used_(settings.size(), false) {}
  double number(const std::string& key, double fallback) {
    for (std::size_t i = 0; i < settings_.size(); ++i) {
      if (settings_[i].first != key) continue;
      used_[i] = true;
      if (const auto* d = std::get_if<double>(&settings_[i].second)) return *d;
      if (const auto* n = std::get_if<std::int64_t>(&settings_[i].second))
        return static_cast<double>(*n);
      detail::throw_error<ValueError>(cls_, ": ", key, " must be a number");
    }
    return fallback;
  }
  bool flag(const std::string& key, bool fallback) {
    for (std::size_t i = 0; i < settings_.size(); ++i) {
      if (settings_[i].first != key) continue;
      used_[i] = true;
      if (const auto* b = std::get_if<bool>(&settings_[i].second)) return *b;
      detail::throw_error<ValueError>(cls_, ": ", key, " must be true or false");
    }
    return fallback;
  }
  // A setting Lockstep implements at one value only.
  template <typename T>
  void only(const std::string& key, const T& value, const std::string& why) {
    for (std::size_t i = 0; i < settings_.size(); ++i) {
      if (settings_[i].first != key) continue;
      used_[i] = true;
      const auto* v = std::get_if<T>(&settings_[i].second);
      bool same = v != nullptr && *v == value;
      if constexpr (std::is_same_v<T, double>) {
        if (const auto* n = std::get_if<std::int64_t>(&settings_[i].second))
          same = static_cast<double>(*n) == value;
      }
      LOCKSTEP_CHECK(same, cls_, ": ", key, " = ", text(settings_[i].second), "; ", why);
    }
  }
  void done() const {
    for (std::size_t i = 0; i < settings_.size(); ++i) {
      LOCKSTEP_CHECK(used_[i], cls_, ": ", settings_[i].first, " = ", text(settings_[i].second),
                     " is a setting Lockstep's ", cls_, " does not have");
    }
  }

 private:
  static std::string text(const MetricSetting& v) {
    if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
    if (const auto* n = std::get_if<std::int64_t>(&v)) return std::to_string(*n);
    if (const auto* d = std::get_if<double>(&v)) return std::to_string(*d);
    return "\"" + std::get<std::string>(v) + "\"";
  }
  std::string cls_;
  const MetricSettings& settings_;
  std::vector<bool> used_;
};

}  // namespace

Metric from_config(const std::string& cls, const MetricSettings& settings,
                   const std::string& name) {
  SettingsReader r(cls, settings);
  Metric m;
  auto threshold = [&](const char* key) { return static_cast<float>(r.number(key, 0.5)); };
  if (cls == "BinaryAccuracy") {
    m = BinaryAccuracy({.threshold = threshold("threshold"), .name = name});
  } else if (cls == "Precision" || cls == "Recall") {
    const float t = threshold("thresholds");
    r.only<double>("top_k", -1, "Lockstep's Precision and Recall take no top_k yet");
    r.only<double>("class_id", -1, "Lockstep's Precision and Recall take no class_id yet");
    m = cls == "Precision" ? Metric(Precision({.threshold = t, .name = name}))
                           : Metric(Recall({.threshold = t, .name = name}));
  } else if (cls == "TopKCategoricalAccuracy" || cls == "SparseTopKCategoricalAccuracy") {
    const int k = static_cast<int>(r.number("k", 5));
    m = cls == "TopKCategoricalAccuracy"
            ? Metric(TopKCategoricalAccuracy({.k = k, .name = name}))
            : Metric(SparseTopKCategoricalAccuracy({.k = k, .name = name}));
  } else if (cls == "AUC") {
    const int n = static_cast<int>(r.number("num_thresholds", 200));
    r.only<std::string>("curve", "ROC",
                        "Lockstep's AUC is the ROC curve's (PR is not written yet)");
    r.only<std::string>("summation_method", "interpolation",
                        "Lockstep's AUC sums by interpolation (Keras's default) only");
    r.only<bool>("multi_label", false, "Lockstep's AUC is single-label");
    r.only<bool>("from_logits", false, "Lockstep's AUC takes probabilities");
    m = AUC({.num_thresholds = n, .name = name});
  } else if (cls == "BinaryCrossentropy" || cls == "CategoricalCrossentropy" ||
             cls == "SparseCategoricalCrossentropy") {
    const CrossentropyMetricOptions o{
        .from_logits = r.flag("from_logits", false),
        .label_smoothing = static_cast<float>(r.number("label_smoothing", 0.0)),
        .name = name};
    r.only<double>("axis", -1, "Lockstep's cross-entropy metrics use the last axis");
    LOCKSTEP_CHECK(cls != "SparseCategoricalCrossentropy" || o.label_smoothing == 0.0f, cls,
                   ": label_smoothing is not a setting of the sparse cross-entropy");
    if (cls == "BinaryCrossentropy") m = BinaryCrossentropy(o);
    if (cls == "CategoricalCrossentropy") m = CategoricalCrossentropy(o);
    if (cls == "SparseCategoricalCrossentropy") m = SparseCategoricalCrossentropy(o);
  } else if (cls == "Accuracy") {
    m = Accuracy({.name = name});
  } else if (cls == "Mean" || cls == "Sum") {
    m = cls == "Mean" ? Metric(Mean({.name = name})) : Metric(Sum({.name = name}));
  } else {
    m = get(cls);  // a class without settings (an unknown one: get's error lists them)
    if (!name.empty()) m.impl()->set_name(name);
  }
  r.done();
  return m;
}

}  // namespace metrics
}  // namespace lockstep
