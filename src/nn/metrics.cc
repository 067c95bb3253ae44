// Metric implementations: each reduces a batch to additive float64 state.
#include "lockstep/nn/metrics.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "lockstep/core/error.h"

namespace lockstep {
namespace {

std::vector<double> host(const Tensor& t) { return t.to_vector<double>(); }

// Per-example weights: ones, or the sample_weight values.
std::vector<double> weights_for(const Tensor& sample_weight, std::int64_t batch,
                                const std::string& name) {
  if (!sample_weight.defined()) return std::vector<double>(static_cast<std::size_t>(batch), 1.0);
  LOCKSTEP_CHECK_AS(ShapeError, sample_weight.numel() == batch, "metric '", name,
                    "': sample_weight has ", sample_weight.numel(), " values for ", batch,
                    " examples");
  return host(sample_weight);
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
  PerExample(std::string name, Fn fn, bool sum_only = false)
      : MetricImpl(std::move(name)), fn_(std::move(fn)), sum_only_(sum_only) {
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
    if (sum_only_) return state_[0];
    return state_[1] == 0.0 ? 0.0 : state_[0] / state_[1];
  }
  std::shared_ptr<MetricImpl> clone() const override {
    return std::make_shared<PerExample>(name(), fn_, sum_only_);
  }

 private:
  Fn fn_;
  bool sum_only_;
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

// Mean over the last axis of f(true, pred) per example.
std::vector<double> per_example_mean(const Tensor& y_true, const Tensor& y_pred,
                                     const std::string& name,
                                     const std::function<double(double, double)>& f) {
  check_pair(name, y_true, y_pred);
  LOCKSTEP_CHECK_AS(ShapeError, y_true.numel() == y_pred.numel(), "metric '", name, "': y_true ",
                    y_true.shape(), " and y_pred ", y_pred.shape(),
                    " must have the same number of values");
  const std::vector<double> t = host(y_true), p = host(y_pred);
  const std::int64_t batch = y_pred.shape()[0];
  const std::int64_t per = batch == 0 ? 0 : y_pred.numel() / batch;
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
    return std::make_shared<Confusion>(name(), kind_, thresholds_);
  }

 private:
  Kind kind_;
  std::vector<double> thresholds_;
};

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

namespace metrics {

Mean::Mean(MetricOptions o)
    : Metric(std::make_shared<PerExample>(
          or_default(o.name, "mean"), [](const Tensor& v, const Tensor&) { return host(v); })) {}

Sum::Sum(MetricOptions o)
    : Metric(std::make_shared<PerExample>(
          or_default(o.name, "sum"), [](const Tensor& v, const Tensor&) { return host(v); },
          true)) {}

Accuracy::Accuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "accuracy");
  impl_ = std::make_shared<PerExample>(name, [name](const Tensor& t, const Tensor& p) {
    return per_example_mean(t, p, name, [](double a, double b) { return a == b ? 1.0 : 0.0; });
  });
}

SparseCategoricalAccuracy::SparseCategoricalAccuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "sparse_categorical_accuracy");
  impl_ = std::make_shared<PerExample>(
      name, [name](const Tensor& t, const Tensor& p) { return sparse_accuracy(t, p, name); });
}

CategoricalAccuracy::CategoricalAccuracy(MetricOptions o) {
  const std::string name = or_default(o.name, "categorical_accuracy");
  impl_ = std::make_shared<PerExample>(
      name, [name](const Tensor& t, const Tensor& p) { return categorical_accuracy(t, p, name); });
}

BinaryAccuracy::BinaryAccuracy(ThresholdOptions o) {
  const std::string name = or_default(o.name, "binary_accuracy");
  const double threshold = o.threshold;
  impl_ = std::make_shared<PerExample>(name, [name, threshold](const Tensor& t, const Tensor& p) {
    return per_example_mean(t, p, name, [threshold](double a, double b) {
      return (b > threshold) == (a > 0.5) ? 1.0 : 0.0;
    });
  });
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
}

Precision::Precision(ThresholdOptions o)
    : Metric(std::make_shared<Confusion>(or_default(o.name, "precision"),
                                         Confusion::Kind::kPrecision,
                                         std::vector<double>{o.threshold})) {}

Recall::Recall(ThresholdOptions o)
    : Metric(std::make_shared<Confusion>(or_default(o.name, "recall"), Confusion::Kind::kRecall,
                                         std::vector<double>{o.threshold})) {}

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
}

MeanSquaredError::MeanSquaredError(MetricOptions o) {
  const std::string name = or_default(o.name, "mean_squared_error");
  impl_ = std::make_shared<PerExample>(name, [name](const Tensor& t, const Tensor& p) {
    return per_example_mean(t, p, name, [](double a, double b) { return (a - b) * (a - b); });
  });
}

}  // namespace metrics
}  // namespace lockstep
