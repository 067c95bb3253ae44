// Losses and metrics against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

Tensor f(std::vector<float> v, Shape s) { return Tensor::from_vector(v, s); }

TEST(Losses, SparseCategoricalCrossentropyFromLogitsAndProbabilities) {
  const Tensor logits = f({2, 1, 0, 0, 0, 0}, {2, 3});
  const Tensor labels = Tensor::from_vector<std::int64_t>({0, 2});
  const double l0 = std::log(1 + std::exp(-1.0) + std::exp(-2.0));  // -log softmax(2,1,0)[0]
  const double l1 = std::log(3.0);
  // oneDNN's log-softmax is accurate to about 5e-6 relative (its exp/log
  // are polynomial approximations), hence 1e-5.
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  EXPECT_NEAR(loss(labels, logits).item<float>(), (l0 + l1) / 2, 1e-5);
  const auto per = loss.per_example(labels, logits).to_vector<float>();
  EXPECT_NEAR(per[0], l0, 1e-5);
  // Probabilities: the same numbers after softmax; labels as [batch, 1] and as uint8.
  auto probs_loss = losses::SparseCategoricalCrossentropy();
  EXPECT_NEAR(
      probs_loss(Tensor::from_vector<std::uint8_t>({0, 2}, {2, 1}), softmax(logits)).item<float>(),
      (l0 + l1) / 2, 1e-5);
  // Extreme logits stay finite.
  EXPECT_TRUE(std::isfinite(
      loss(Tensor::from_vector<std::int64_t>({1}), f({1000, -1000}, {1, 2})).item<float>()));
}

TEST(Losses, LabelOutOfRangeIsAnErrorNotANaN) {
  auto loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  try {
    loss(Tensor::from_vector<std::int64_t>({0, 3}), Tensor::zeros({2, 3}));
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_STREQ(
        e.what(),
        "SparseCategoricalCrossentropy: label 3 at position 1 is out of range for 3 classes "
        "(valid: 0 to 2)");
  }
  EXPECT_THROW(loss(f({0.5f}, {1}), Tensor::zeros({1, 3})), IndexError);  // not an integer
}

TEST(Losses, CategoricalWithLabelSmoothingAndBinary) {
  const Tensor y = f({0, 1, 0}, {1, 3});
  const Tensor logits = f({1, 2, 3}, {1, 3});
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  const double smooth[3] = {0.1 / 3, 0.9 + 0.1 / 3, 0.1 / 3};
  double want = 0;
  for (int c = 0; c < 3; ++c) want -= smooth[c] * (c + 1 - lse);
  EXPECT_NEAR(
      losses::CategoricalCrossentropy({.from_logits = true, .label_smoothing = 0.1f})(y, logits)
          .item<float>(),
      want, 1e-5);
  // BCE from logits: x = 0.5, z = 1 -> log(1 + e^-0.5); x = -2, z = 0 -> log(1 + e^-2).
  const double b = (std::log(1 + std::exp(-0.5)) + std::log(1 + std::exp(-2.0))) / 2;
  EXPECT_NEAR(
      losses::BinaryCrossentropy({.from_logits = true})(f({1, 0}, {2, 1}), f({0.5f, -2}, {2, 1}))
          .item<float>(),
      b, 1e-6);
  EXPECT_NEAR(
      losses::BinaryCrossentropy()(f({1, 0}, {2, 1}), sigmoid(f({0.5f, -2}, {2, 1}))).item<float>(),
      b, 1e-5);
}

TEST(Losses, RegressionLossesAndReductions) {
  const Tensor y = f({0, 0, 0, 0}, {2, 2}), p = f({1, -3, 0.5f, 0}, {2, 2});
  EXPECT_NEAR(losses::MeanSquaredError()(y, p).item<float>(), ((1 + 9) / 2.0 + 0.25 / 2) / 2, 1e-6);
  EXPECT_NEAR(losses::MeanAbsoluteError()(y, p).item<float>(), ((1 + 3) / 2.0 + 0.5 / 2) / 2, 1e-6);
  // Huber, delta 1: 0.5·1, 1·(3 − 0.5), 0.5·0.25, 0.
  EXPECT_NEAR(losses::Huber()(y, p).item<float>(), ((0.5 + 2.5) / 2 + 0.125 / 2) / 2, 1e-6);
  EXPECT_NEAR(losses::MeanSquaredError({.reduction = Reduction::kSum})(y, p).item<float>(),
              5.0 + 0.125, 1e-6);
  EXPECT_EQ(losses::MeanSquaredError({.reduction = Reduction::kNone})(y, p).shape(), (Shape{2}));
  // Sample weights scale examples; the mean still divides by the batch size.
  EXPECT_NEAR(losses::MeanSquaredError()(y, p, f({0, 2}, {2})).item<float>(), 2 * 0.125 / 2, 1e-6);
}

TEST(Metrics, AccuraciesByHand) {
  const Tensor probs = f({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  metrics::SparseCategoricalAccuracy sparse;
  sparse.update_state(Tensor::from_vector<std::int64_t>({1, 1, 1}), probs);
  EXPECT_NEAR(sparse.result(), 2.0 / 3, 1e-12);
  metrics::CategoricalAccuracy cat;
  cat.update_state(f({0, 1, 0, 1, 0, 1}, {3, 2}), probs);  // all class 1
  EXPECT_NEAR(cat.result(), 2.0 / 3, 1e-12);
  metrics::BinaryAccuracy bin;
  bin.update_state(f({1, 0, 1, 0}, {4, 1}), f({0.7f, 0.2f, 0.4f, 0.6f}, {4, 1}));
  EXPECT_NEAR(bin.result(), 0.5, 1e-12);
  metrics::TopKCategoricalAccuracy top2({.k = 2});
  top2.update_state(f({0, 0, 1, 0, 0, 1}, {2, 3}), f({0.1f, 0.5f, 0.4f, 0.6f, 0.3f, 0.1f}, {2, 3}));
  EXPECT_NEAR(top2.result(), 0.5, 1e-12);
  metrics::Accuracy acc;
  acc.update_state(f({1, 2, 3, 4}, {4}), f({1, 2, 0, 4}, {4}));
  EXPECT_NEAR(acc.result(), 0.75, 1e-12);
}

TEST(Metrics, PrecisionRecallAuc) {
  const Tensor y = f({1, 0, 1, 1}, {4}), p = f({0.9f, 0.6f, 0.4f, 0.8f}, {4});
  metrics::Precision precision;
  metrics::Recall recall;
  precision.update_state(y, p);
  recall.update_state(y, p);
  EXPECT_NEAR(precision.result(), 2.0 / 3, 1e-12);  // tp 2, fp 1
  EXPECT_NEAR(recall.result(), 2.0 / 3, 1e-12);     // tp 2, fn 1
  metrics::AUC auc;
  auc.update_state(f({0, 0, 1, 1}, {4}), f({0.1f, 0.4f, 0.35f, 0.8f}, {4}));
  EXPECT_NEAR(auc.result(), 0.75, 1e-9);  // scikit-learn's roc_auc_score of the same data
  metrics::AUC perfect;
  perfect.update_state(f({0, 1}, {2}), f({0.2f, 0.9f}, {2}));
  EXPECT_NEAR(perfect.result(), 1.0, 1e-9);
}

TEST(Metrics, MeanWeightsResetAndMerge) {
  metrics::Mean mean;
  mean.update_state(f({1, 2, 3}, {3}), f({1, 1, 2}, {3}));
  EXPECT_NEAR(mean.result(), (1 + 2 + 6) / 4.0, 1e-12);
  // Two replicas' metrics merged read like one metric over all the data.
  metrics::SparseCategoricalAccuracy a, b, whole;
  const Tensor probs = f({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f, 0.6f, 0.4f}, {4, 2});
  const Tensor labels = Tensor::from_vector<std::int64_t>({1, 1, 1, 0});
  a.update_state(labels.view_rows(0, 1), probs.view_rows(0, 1));
  b.update_state(labels.view_rows(1, 4), probs.view_rows(1, 4));
  whole.update_state(labels, probs);
  a.merge(b);
  EXPECT_EQ(a.result(), whole.result());
  a.reset_state();
  EXPECT_EQ(a.result(), 0.0);
  metrics::AUC other_kind;
  EXPECT_THROW(mean.merge(other_kind), ValueError);
}

}  // namespace
}  // namespace lockstep
