// Cross-entropies from logits and from probabilities against a float64
// oracle: the loss and its gradient with respect to the model's output. The gradient is compared
// norm-wise (the largest error over the gradient's scale). Keras 3.15's own worst in these
// measures, over 240 batches made the same way (bench/peers/keras_loss_accuracy.py): from logits,
// loss 1.2e-7 and gradient 2.6e-7; the bounds below are at or under Keras's. A loss is never
// negative, even on saturated examples.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/nn/losses.h"
#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

struct Batch {
  std::int64_t n, classes;
  std::vector<float> logits;
  std::vector<std::int64_t> labels;
};

Batch make_batch(std::int64_t n, std::int64_t classes, float scale, bool saturated,
                 std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  Batch b{n, classes, {}, {}};
  for (std::int64_t r = 0; r < n; ++r) {
    const auto label = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(classes));
    b.labels.push_back(label);
    for (std::int64_t c = 0; c < classes; ++c) b.logits.push_back(normal(rng));
    if (saturated) b.logits[static_cast<std::size_t>(r * classes + label)] += 30.0f;
  }
  return b;
}

// Mean cross-entropy and its gradient in float64 (one-hot labels).
double oracle(const Batch& b, std::vector<double>& grad) {
  grad.assign(b.logits.size(), 0.0);
  long double total = 0;
  for (std::int64_t r = 0; r < b.n; ++r) {
    const float* x = b.logits.data() + r * b.classes;
    std::int64_t top = 0;
    for (std::int64_t c = 1; c < b.classes; ++c) {
      if (x[c] > x[top]) top = c;
    }
    const double m = x[top];
    long double rest = 0;  // log1p(rest): see tests/tensor/softmax_test.cc
    for (std::int64_t c = 0; c < b.classes; ++c) {
      if (c != top) rest += std::exp(static_cast<long double>(x[c] - m));
    }
    const long double lse = std::log1p(rest);
    const std::int64_t y = b.labels[static_cast<std::size_t>(r)];
    total -= static_cast<long double>(x[y] - m) - lse;
    for (std::int64_t c = 0; c < b.classes; ++c) {
      const long double p = std::exp(static_cast<long double>(x[c] - m) - lse);
      grad[static_cast<std::size_t>(r * b.classes + c)] =
          static_cast<double>((p - (c == y ? 1.0L : 0.0L)) / static_cast<long double>(b.n));
    }
  }
  return static_cast<double>(total / static_cast<long double>(b.n));
}

// The largest error over the gradient's scale: its largest element, or 1/n
// (a mean over n examples) when every element is smaller — on saturated
// batches p − 1 cancels to ~1e-15 and one float32 rounding of p is all any
// float32 implementation (Keras's included) can give.
double normwise_error(const std::vector<float>& got, const std::vector<double>& want, double n) {
  double err = 0, scale = 1.0 / n;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

void check(const Loss& loss, const Batch& b, bool one_hot, double* worst_loss, double* worst_grad) {
  const Tensor logits = Tensor::from_vector(b.logits, Shape({b.n, b.classes}));
  Tensor y;
  if (one_hot) {
    std::vector<float> hot(static_cast<std::size_t>(b.n * b.classes), 0.0f);
    for (std::int64_t r = 0; r < b.n; ++r)
      hot[static_cast<std::size_t>(r * b.classes + b.labels[static_cast<std::size_t>(r)])] = 1.0f;
    y = Tensor::from_vector(hot, Shape({b.n, b.classes}));
  } else {
    y = Tensor::from_vector(b.labels, Shape({b.n}));
  }
  GradientTape tape;
  tape.watch(logits);
  const Tensor value = loss(y, logits);
  const std::vector<float> grad = tape.gradient(value, logits).to_vector<float>();
  std::vector<double> want_grad;
  const double want = oracle(b, want_grad);
  const float got = value.item<float>();
  ASSERT_GE(got, 0.0f) << loss.name() << ": a cross-entropy is never negative";
  *worst_loss = std::max(*worst_loss, std::abs(got - want) / std::max(want, 1e-30));
  *worst_grad = std::max(*worst_grad, normwise_error(grad, want_grad, static_cast<double>(b.n)));
}

TEST(LossAccuracy, CrossEntropiesFromLogitsMatchFloat64) {
  const Loss sparse = losses::SparseCategoricalCrossentropy({.from_logits = true});
  const Loss categorical = losses::CategoricalCrossentropy({.from_logits = true});
  double sparse_loss = 0, sparse_grad = 0, cat_loss = 0, cat_grad = 0;
  std::uint32_t seed = 1;
  for (std::int64_t classes : {2, 10, 100}) {
    for (float scale : {1.0f, 5.0f}) {
      for (bool saturated : {false, true}) {
        const Batch b = make_batch(64, classes, scale, saturated, seed++);
        check(sparse, b, false, &sparse_loss, &sparse_grad);
        check(categorical, b, true, &cat_loss, &cat_grad);
      }
    }
  }
  // The loss is a mean of 64 float32 terms: a few roundings of its size.
  EXPECT_LE(sparse_loss, 1e-6);
  EXPECT_LE(cat_loss, 1e-6);
  EXPECT_LE(sparse_grad, 2e-7);
  EXPECT_LE(cat_grad, 2e-7);
  std::printf("worst relative error: sparse loss %.2e grad %.2e, categorical loss %.2e grad %.2e\n",
              sparse_loss, sparse_grad, cat_loss, cat_grad);
}

// Binary cross-entropy from logits against float64: the loss (with
// confident, correct logits whose terms are ~1e-9, which log(1 + exp(-|x|))
// rounded away) and its gradient (sigmoid(x) − z) / (n·k).
TEST(LossAccuracy, BinaryCrossEntropyFromLogitsMatchesFloat64) {
  const Loss bce = losses::BinaryCrossentropy({.from_logits = true});
  double worst_loss = 0, worst_grad = 0;
  std::mt19937 rng(5);
  for (float scale : {1.0f, 4.0f, 25.0f}) {
    for (bool confident : {false, true}) {
      const std::int64_t n = 64, k = 4;
      std::normal_distribution<float> normal(0.0f, scale);
      std::vector<float> x(static_cast<std::size_t>(n * k)), z(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        z[i] = static_cast<float>(rng() % 2);
        x[i] =
            confident ? (z[i] > 0 ? 1.0f : -1.0f) * (20.0f + std::abs(normal(rng))) : normal(rng);
      }
      const Tensor logits = Tensor::from_vector(x, Shape({n, k}));
      GradientTape tape;
      tape.watch(logits);
      const Tensor value = bce(Tensor::from_vector(z, Shape({n, k})), logits);
      const std::vector<float> grad = tape.gradient(value, logits).to_vector<float>();
      long double total = 0;
      std::vector<double> want_grad(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        const long double xi = x[i], zi = z[i];
        total += std::max(xi, 0.0L) - xi * zi + std::log1p(std::exp(-std::fabs(xi)));
        want_grad[i] = static_cast<double>((1.0L / (1.0L + std::exp(-xi)) - zi) /
                                           static_cast<long double>(n * k));
      }
      const double want = static_cast<double>(total / static_cast<long double>(n * k));
      const float got = value.item<float>();
      ASSERT_GE(got, 0.0f);
      worst_loss = std::max(worst_loss, std::abs(got - want) / want);
      worst_grad =
          std::max(worst_grad, normwise_error(grad, want_grad, static_cast<double>(n * k)));
    }
  }
  EXPECT_LE(worst_loss, 1e-6);
  EXPECT_LE(worst_grad, 2e-7);
  std::printf("worst relative error: binary loss %.2e grad %.2e\n", worst_loss, worst_grad);
}

// Cross-entropies from probabilities, with Keras 3's clipping (ε = 1e-7):
// categorical renormalises p then clips; sparse clips p and renormalises
// its logs as logits; binary clips. The oracle computes the same formulas
// in float64 from the same float32 inputs, with clip's gradient (zero
// outside [ε, 1 − ε]). Batches include rows where some p are far below ε
// (the clip is active) and saturated rows (p_y rounds to 1).
struct ProbBatch {
  std::int64_t n, classes;
  std::vector<float> p;  // rows of probabilities, each summing to ~1 in float32
  std::vector<std::int64_t> labels;
};

ProbBatch make_probabilities(const Batch& b) {
  ProbBatch out{b.n, b.classes, std::vector<float>(b.logits.size()), b.labels};
  for (std::int64_t r = 0; r < b.n; ++r) {
    const float* x = b.logits.data() + r * b.classes;
    long double total = 0;
    for (std::int64_t c = 0; c < b.classes; ++c) total += std::exp(static_cast<long double>(x[c]));
    for (std::int64_t c = 0; c < b.classes; ++c)
      out.p[static_cast<std::size_t>(r * b.classes + c)] =
          static_cast<float>(std::exp(static_cast<long double>(x[c])) / total);
  }
  return out;
}

// Keras's clip bounds as float32 holds them: ε = 1e-7f and 1 − ε rounded to
// float32 (0.99999988), which is what both Keras and Lockstep clip to.
constexpr long double kEps = 1e-7f;
constexpr long double kOneMinusEps = 1.0f - 1e-7f;

long double clipped(long double v) { return std::min(std::max(v, kEps), kOneMinusEps); }
bool passes(long double v) { return v >= kEps && v <= kOneMinusEps; }

// Elements whose gradient no float32 implementation can pin down: rows
// whose exact q_y lies within 4 float32 ulps of a clip bound, where the
// clip's gradient jumps and one rounding of q_y decides the side (Keras's
// own gradients are measured the same way, bench/peers/keras_loss_accuracy.py).
std::vector<bool> g_ambiguous;

// Categorical: q = p / Σp, loss_r = −log(clip(q_y)); gradient through q.
double categorical_oracle(const ProbBatch& b, std::vector<double>& grad) {
  grad.assign(b.p.size(), 0.0);
  g_ambiguous.assign(b.p.size(), false);
  long double total = 0;
  for (std::int64_t r = 0; r < b.n; ++r) {
    const float* p = b.p.data() + r * b.classes;
    long double s = 0;
    for (std::int64_t c = 0; c < b.classes; ++c) s += p[c];
    const std::int64_t y = b.labels[static_cast<std::size_t>(r)];
    const long double qy = p[y] / s;
    total -= std::log(clipped(qy));
    if (std::abs(qy - kOneMinusEps) <= 0x1p-22L || std::abs(qy - kEps) <= 0x1p-22L * kEps) {
      for (std::int64_t c = 0; c < b.classes; ++c)
        g_ambiguous[static_cast<std::size_t>(r * b.classes + c)] = true;
      continue;
    }
    // d/dp_c of −log(q_y)/n with q_y = p_y / s: −(δ_cy − q_y) / (n · q_y · s)
    if (!passes(qy)) continue;
    for (std::int64_t c = 0; c < b.classes; ++c)
      grad[static_cast<std::size_t>(r * b.classes + c)] = static_cast<double>(
          -((c == y ? 1.0L : 0.0L) - qy) / (static_cast<long double>(b.n) * qy * s));
  }
  return static_cast<double>(total / static_cast<long double>(b.n));
}

// Sparse: l_c = log(clip(p_c)), loss_r = −(l_y − log Σ exp(l_c)).
double sparse_oracle(const ProbBatch& b, std::vector<double>& grad) {
  grad.assign(b.p.size(), 0.0);
  g_ambiguous.assign(b.p.size(), false);
  long double total = 0;
  for (std::int64_t r = 0; r < b.n; ++r) {
    const float* p = b.p.data() + r * b.classes;
    long double s = 0;
    for (std::int64_t c = 0; c < b.classes; ++c) s += clipped(p[c]);
    const std::int64_t y = b.labels[static_cast<std::size_t>(r)];
    total -= std::log(clipped(p[y]) / s);
    // d/dl_c = softmax(l)_c − δ_cy; dl_c/dp_c = 1/p_c where the clip passes.
    for (std::int64_t c = 0; c < b.classes; ++c) {
      if (!passes(p[c])) continue;
      const long double soft = clipped(p[c]) / s - (c == y ? 1.0L : 0.0L);
      grad[static_cast<std::size_t>(r * b.classes + c)] =
          static_cast<double>(soft / (static_cast<long double>(p[c]) * b.n));
    }
  }
  return static_cast<double>(total / static_cast<long double>(b.n));
}

void check_probabilities(const Loss& loss, const ProbBatch& b, bool one_hot,
                         double (*oracle_fn)(const ProbBatch&, std::vector<double>&),
                         double* worst_loss, double* worst_grad) {
  const Tensor p = Tensor::from_vector(b.p, Shape({b.n, b.classes}));
  Tensor y;
  if (one_hot) {
    std::vector<float> hot(b.p.size(), 0.0f);
    for (std::int64_t r = 0; r < b.n; ++r)
      hot[static_cast<std::size_t>(r * b.classes + b.labels[static_cast<std::size_t>(r)])] = 1.0f;
    y = Tensor::from_vector(hot, Shape({b.n, b.classes}));
  } else {
    y = Tensor::from_vector(b.labels, Shape({b.n}));
  }
  GradientTape tape;
  tape.watch(p);
  const Tensor value = loss(y, p);
  std::vector<float> grad = tape.gradient(value, p).to_vector<float>();
  std::vector<double> want_grad;
  const double want = oracle_fn(b, want_grad);
  for (std::size_t i = 0; i < grad.size(); ++i) {
    if (g_ambiguous[i]) grad[i] = static_cast<float>(want_grad[i]);
  }
  const float got = value.item<float>();
  ASSERT_GE(got, 0.0f) << loss.name() << ": a cross-entropy is never negative";
  // Relative to max(loss, 1): a loss of ~1e-7 is −log(q) of a q within
  // ulps of 1, where one rounding of the input probabilities moves it by
  // its own size in any float32 implementation.
  *worst_loss = std::max(*worst_loss, std::abs(got - want) / std::max(want, 1.0));
  *worst_grad = std::max(*worst_grad, normwise_error(grad, want_grad, static_cast<double>(b.n)));
}

TEST(LossAccuracy, CrossEntropiesFromProbabilitiesMatchFloat64WithKerasClipping) {
  const Loss sparse = losses::SparseCategoricalCrossentropy();
  const Loss categorical = losses::CategoricalCrossentropy();
  double sparse_loss = 0, sparse_grad = 0, cat_loss = 0, cat_grad = 0;
  std::uint32_t seed = 11;
  for (std::int64_t classes : {2, 10, 100}) {
    for (float scale : {1.0f, 5.0f}) {  // 5: many p below ε, the clip active
      for (bool saturated : {false, true}) {
        const ProbBatch b = make_probabilities(make_batch(64, classes, scale, saturated, seed++));
        check_probabilities(sparse, b, false, sparse_oracle, &sparse_loss, &sparse_grad);
        check_probabilities(categorical, b, true, categorical_oracle, &cat_loss, &cat_grad);
      }
    }
  }
  // Keras 3.15's own worst over 240 such batches: losses 9.9e-8, sparse
  // gradient 1.96e-6 (softmax of float32 logs: log p_c rounds by up to
  // |log p_c|·2^-24, 1e-6 at p_c = ε), categorical gradient 1.97e-7.
  EXPECT_LE(sparse_loss, 1e-6);
  EXPECT_LE(cat_loss, 1e-6);
  EXPECT_LE(sparse_grad, 2e-6);
  EXPECT_LE(cat_grad, 2e-7);
  std::printf("worst relative error: sparse loss %.2e grad %.2e, categorical loss %.2e grad %.2e\n",
              sparse_loss, sparse_grad, cat_loss, cat_grad);
}

// Binary from probabilities: −(z·log(clip(p)) + (1 − z)·log(1 − clip(p))).
TEST(LossAccuracy, BinaryCrossEntropyFromProbabilitiesMatchesFloat64WithKerasClipping) {
  const Loss bce = losses::BinaryCrossentropy();
  double worst_loss = 0, worst_grad = 0;
  std::mt19937 rng(7);
  for (float scale : {1.0f, 4.0f, 25.0f}) {  // 25: most p within ε of 0 or 1
    const std::int64_t n = 64, k = 4;
    std::normal_distribution<float> normal(0.0f, scale);
    std::vector<float> p(static_cast<std::size_t>(n * k)), z(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      z[i] = static_cast<float>(rng() % 2);
      p[i] = static_cast<float>(1.0L / (1.0L + std::exp(-static_cast<long double>(normal(rng)))));
    }
    const Tensor probs = Tensor::from_vector(p, Shape({n, k}));
    GradientTape tape;
    tape.watch(probs);
    const Tensor value = bce(Tensor::from_vector(z, Shape({n, k})), probs);
    const std::vector<float> grad = tape.gradient(value, probs).to_vector<float>();
    long double total = 0;
    std::vector<double> want_grad(p.size(), 0.0);
    const long double count = static_cast<long double>(n * k);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const long double c = clipped(p[i]), zi = z[i];
      total -= zi * std::log(c) + (1 - zi) * std::log(1 - c);
      if (passes(p[i])) want_grad[i] = static_cast<double>((-zi / c + (1 - zi) / (1 - c)) / count);
    }
    const double want = static_cast<double>(total / count);
    const float got = value.item<float>();
    ASSERT_GE(got, 0.0f);
    worst_loss = std::max(worst_loss, std::abs(got - want) / want);
    worst_grad = std::max(worst_grad, normwise_error(grad, want_grad, static_cast<double>(n * k)));
  }
  EXPECT_LE(worst_loss, 1e-6);
  EXPECT_LE(worst_grad, 2e-7);
  std::printf("worst relative error: binary loss %.2e grad %.2e\n", worst_loss, worst_grad);
}

}  // namespace
}  // namespace lockstep
