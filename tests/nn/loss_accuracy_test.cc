// Cross-entropies from logits against a float64 oracle: the loss and its
// gradient with respect to the logits. The gradient is compared norm-wise
// (the largest error over the gradient's scale), the measure under which
// Keras's own float32 gradients sit near 1e-7 for these shapes;
// a loss is never negative, even on saturated examples.
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

}  // namespace
}  // namespace lockstep
