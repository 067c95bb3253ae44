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

// What compile(loss="...") and compile(metrics=[...]) resolve: Keras's
// identifiers, Keras's defaults, the name given, and a clear error.
TEST(Losses, KerasIdentifiersGiveTheDefaultLosses) {
  const Tensor y = f({0, 1, 1, 0}, {2, 2}), p = f({0.3f, 0.7f, 0.6f, 0.4f}, {2, 2});
  const Tensor sparse = Tensor::from_vector<std::uint8_t>({1, 0});
  auto value = [](const Loss& l, const Tensor& t, const Tensor& q) {
    return l(t, q).item<float>();
  };
  EXPECT_EQ(value("mse", y, p), value(losses::MeanSquaredError(), y, p));
  EXPECT_EQ(value("MeanSquaredError", y, p), value(losses::MeanSquaredError(), y, p));
  EXPECT_EQ(value("mae", y, p), value(losses::MeanAbsoluteError(), y, p));
  EXPECT_EQ(value("mean_absolute_error", y, p), value(losses::MeanAbsoluteError(), y, p));
  EXPECT_EQ(value("binary_crossentropy", y, p), value(losses::BinaryCrossentropy(), y, p));
  EXPECT_EQ(value("categorical_crossentropy", y, p),
            value(losses::CategoricalCrossentropy(), y, p));
  EXPECT_EQ(value("sparse_categorical_crossentropy", sparse, p),
            value(losses::SparseCategoricalCrossentropy(), sparse, p));
  EXPECT_NE(value("mse", y, p), value("mae", y, p));
  try {
    Loss l("cross_entropy");
    FAIL() << "an unknown loss name was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown loss 'cross_entropy'; known losses: "
                                         "sparse_categorical_crossentropy"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mse"), std::string::npos);
  }
}

TEST(Metrics, KerasIdentifiersResolveByNameAndLoss) {
  // "accuracy" follows the loss and keeps the name given.
  const Tensor probs = f({0.1f, 0.9f, 0.8f, 0.2f, 0.3f, 0.7f}, {3, 2});
  Metric acc = metrics::get("accuracy", losses::SparseCategoricalCrossentropy());
  EXPECT_EQ(acc.name(), "accuracy");
  acc.update_state(Tensor::from_vector<std::uint8_t>({1, 1, 1}), probs);  // uint8 labels
  EXPECT_NEAR(acc.result(), 2.0 / 3, 1e-12);
  Metric cat = metrics::get("acc", losses::CategoricalCrossentropy());
  cat.update_state(f({0, 1, 0, 1, 0, 1}, {3, 2}), probs);
  EXPECT_NEAR(cat.result(), 2.0 / 3, 1e-12);
  Metric bin = metrics::get("accuracy", "binary_crossentropy");
  bin.update_state(f({1, 0}, {2, 1}), f({0.7f, 0.6f}, {2, 1}));
  EXPECT_NEAR(bin.result(), 0.5, 1e-12);
  // A function name names the metric as given; the class name gives the default.
  EXPECT_EQ(metrics::get("mae").name(), "mae");
  EXPECT_EQ(metrics::get("mean_absolute_error").name(), "mean_absolute_error");
  EXPECT_EQ(metrics::get("MeanAbsoluteError").name(), "mean_absolute_error");
  EXPECT_EQ(metrics::get("SparseCategoricalAccuracy").name(), "sparse_categorical_accuracy");
  EXPECT_EQ(metrics::get("ce", "sparse_categorical_crossentropy").name(), "ce");
  try {
    metrics::get("accuracy_score");
    FAIL() << "an unknown metric name was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown metric 'accuracy_score' (did you mean "
                                         "'accuracy'?); known metrics: accuracy, acc"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("mae"), std::string::npos);
  }
}

TEST(Metrics, RegressionAndProbabilisticMetricsByHand) {
  // Two examples of two values each: y_true, y_pred.
  const Tensor t = f({1, 2, 0, 4}, {2, 2}), p = f({1.5f, 1, 0.5f, 4}, {2, 2});
  auto result = [&](const std::string& name) {
    Metric m = metrics::get(name);
    m.update_state(t, p);
    return m.result();
  };
  EXPECT_NEAR(result("mae"), (0.5 + 1 + 0.5 + 0) / 4, 1e-7);
  EXPECT_NEAR(result("mse"), (0.25 + 1 + 0.25 + 0) / 4, 1e-7);
  EXPECT_NEAR(result("root_mean_squared_error"), std::sqrt((0.25 + 1 + 0.25 + 0) / 4), 1e-7);
  EXPECT_NEAR(result("mape"), 100 * (0.5 / 1 + 1 / 2.0 + 0.5 / 1e-7 + 0) / 4, 1e-2);
  const double msle = (std::pow(std::log(2.5) - std::log(2), 2) +
                       std::pow(std::log(2) - std::log(3), 2) + std::pow(std::log(1.5), 2)) /
                      4;
  EXPECT_NEAR(result("msle"), msle, 1e-7);
  EXPECT_NEAR(result("logcosh"), (2 * std::log(std::cosh(0.5)) + std::log(std::cosh(1.0))) / 4,
              1e-7);
  EXPECT_NEAR(result("poisson"),
              ((1.5 - std::log(1.5 + 1e-7)) + (1 - 2 * std::log(1 + 1e-7)) + 0.5 +
               (4 - 4 * std::log(4 + 1e-7))) /
                  4,
              1e-6);
  // Hinge with 0/1 labels mapped to -1/1: max(1 - t p, 0).
  Metric hinge = metrics::get("hinge");
  hinge.update_state(f({1, 0}, {2, 1}), f({0.25f, 0.5f}, {2, 1}));
  EXPECT_NEAR(hinge.result(), (0.75 + 1.5) / 2, 1e-7);
  Metric sq = metrics::get("squared_hinge");
  sq.update_state(f({1, 0}, {2, 1}), f({0.25f, 0.5f}, {2, 1}));
  EXPECT_NEAR(sq.result(), (0.75 * 0.75 + 1.5 * 1.5) / 2, 1e-7);
  Metric cos = metrics::get("cosine_similarity");
  cos.update_state(f({1, 0, 1, 1}, {2, 2}), f({1, 1, 2, 2}, {2, 2}));
  EXPECT_NEAR(cos.result(), (1 / std::sqrt(2.0) + 1) / 2, 1e-7);
  Metric kl = metrics::get("kl_divergence");
  kl.update_state(f({0.5f, 0.5f}, {1, 2}), f({0.25f, 0.75f}, {1, 2}));
  EXPECT_NEAR(kl.result(), 0.5 * std::log(2.0) + 0.5 * std::log(0.5 / 0.75), 1e-7);
  // Cross-entropy metrics are the losses' means.
  const Tensor logits = f({2, 1, 0, 0, 0, 3}, {2, 3});
  const Tensor labels = Tensor::from_vector<std::uint8_t>({0, 2});
  metrics::SparseCategoricalCrossentropy sce({.from_logits = true});
  sce.update_state(labels, logits);
  EXPECT_NEAR(
      sce.result(),
      losses::SparseCategoricalCrossentropy({.from_logits = true})(labels, logits).item<float>(),
      1e-6);
  metrics::SparseTopKCategoricalAccuracy top1({.k = 1});
  top1.update_state(Tensor::from_vector<std::uint8_t>({0, 1}), logits);
  EXPECT_NEAR(top1.result(), 0.5, 1e-12);
}

TEST(Utils, ToCategoricalAcceptsEveryLabelTypeAndNamesABadLabel) {
  const Tensor expected = f({0, 1, 0, 1, 0, 0, 0, 0, 1}, {3, 3});
  for (const Tensor& labels :
       {Tensor::from_vector<std::uint8_t>({1, 0, 2}), Tensor::from_vector<std::int32_t>({1, 0, 2}),
        Tensor::from_vector<std::int64_t>({1, 0, 2}, {3, 1}), f({1, 0, 2}, {3})}) {
    const Tensor y = utils::to_categorical(labels, 3);
    EXPECT_EQ(y.shape(), Shape({3, 3})) << labels.dtype();
    EXPECT_EQ(y.to_vector<float>(), expected.to_vector<float>()) << labels.dtype();
  }
  // num_classes inferred from the largest label.
  EXPECT_EQ(utils::to_categorical(Tensor::from_vector<std::uint8_t>({4})).shape(), Shape({1, 5}));
  // uint8 indices in one_hot itself.
  EXPECT_EQ(one_hot(Tensor::from_vector<std::uint8_t>({2}), 3).to_vector<float>(),
            (std::vector<float>{0, 0, 1}));
  EXPECT_THROW(utils::to_categorical(Tensor::from_vector<std::uint8_t>({3}), 3), IndexError);
  EXPECT_THROW(utils::to_categorical(f({0.5f}, {1}), 3), ValueError);
}

// A saturated cross-entropy is a tiny positive number; log-softmax's
// rounding made it print as -1.43e-06. Nothing may be negative.
TEST(Losses, CrossEntropyOfSaturatedLogitsIsNeverNegative) {
  int examples = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    Tensor logits = random::normal({256, 10}, {.seed = seed});
    std::vector<std::int64_t> labels(256);
    float* p = logits.data<float>();
    for (std::int64_t i = 0; i < 256; ++i) {
      labels[static_cast<std::size_t>(i)] = i % 10;
      p[i * 10 + i % 10] += 15.0f + static_cast<float>(seed);  // the true class far ahead
    }
    const Tensor sparse = Tensor::from_vector(labels);
    const Tensor onehot = one_hot(sparse, 10);
    for (const Tensor& per :
         {losses::SparseCategoricalCrossentropy({.from_logits = true}).per_example(sparse, logits),
          losses::CategoricalCrossentropy({.from_logits = true}).per_example(onehot, logits)}) {
      for (float v : per.to_vector<float>()) {
        ASSERT_GE(v, 0.0f) << "seed " << seed;
        ++examples;
      }
    }
    EXPECT_GE(
        losses::SparseCategoricalCrossentropy({.from_logits = true})(sparse, logits).item<float>(),
        0.0f);
  }
  EXPECT_EQ(examples, 2 * 20 * 256);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// metrics::from_config (what a Keras file's compile_config goes through):
// settings arrive, a setting a metric lacks is refused by name.
TEST(MetricsFromConfig, SettingsArriveAndUnknownOnesAreRefused) {
  const Metric top =
      metrics::from_config("SparseTopKCategoricalAccuracy", {{"k", std::int64_t{2}}}, "top2");
  EXPECT_EQ(top.name(), "top2");
  EXPECT_EQ(top.impl()->keras_class(), "SparseTopKCategoricalAccuracy");
  // One example, true class 1 ranked second of three: in the top 2, not the top 1.
  top.update_state(Tensor::from_vector<std::int64_t>({1}),
                   Tensor::from_vector<float>({0.5f, 0.3f, 0.2f}, Shape{1, 3}));
  EXPECT_EQ(top.result(), 1.0);
  const Metric one =
      metrics::from_config("SparseTopKCategoricalAccuracy", {{"k", std::int64_t{1}}}, "");
  one.update_state(Tensor::from_vector<std::int64_t>({1}),
                   Tensor::from_vector<float>({0.5f, 0.3f, 0.2f}, Shape{1, 3}));
  EXPECT_EQ(one.result(), 0.0);
  const Metric strict = metrics::from_config("BinaryAccuracy", {{"threshold", 0.7}}, "");
  strict.update_state(Tensor::from_vector<float>({1.0f}, Shape{1, 1}),
                      Tensor::from_vector<float>({0.6f}, Shape{1, 1}));
  EXPECT_EQ(strict.result(), 0.0) << "0.6 is below the threshold 0.7";
  auto refused = [](const std::string& cls, const MetricSettings& s, const std::string& text) {
    try {
      (void)metrics::from_config(cls, s, "");
      ADD_FAILURE() << cls << " took " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  refused("AUC", {{"curve", std::string("PR")}}, "curve = \"PR\"");
  refused("Precision", {{"top_k", std::int64_t{2}}}, "top_k = 2");
  refused("BinaryAccuracy", {{"thresold", 0.7}}, "thresold");
  refused("Accurracy", {}, "unknown metric 'Accurracy' (did you mean 'Accuracy'?)");
}

}  // namespace
}  // namespace lockstep
