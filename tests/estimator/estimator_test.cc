// The Estimator compatibility layer in one process: feature columns against
// what TensorFlow's own columns made of a batch (fixtures/
// feature_columns.json, make_feature_column_fixture.py); the guide's
// LinearRegressor against the closed form of its SGD steps under both loss
// reductions and 1 or 2 replicas; the same weights under 1 and 2 replicas;
// the canned classifiers' keys and learning; resuming from model_dir; bad
// input named. (Real processes: estimator_process_test.cc.)
#include "lockstep/estimator/estimator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "lockstep/core/dir_lock.h"
#include "lockstep/estimator/canned.h"
#include "lockstep/estimator/feature_column.h"
#include "lockstep/estimator/features.h"
#include "lockstep/estimator/run_config.h"
#include "lockstep/io/safetensors.h"
#include "support/errors.h"
#include "support/estimator_inputs.h"
#include "support/files.h"

namespace lockstep {
namespace {

namespace est = estimator;
namespace fc = feature_column;
namespace fs = std::filesystem;
using json = nlohmann::json;
using testing_support::message_of;
using testing_support::TempDir;

// ---- Feature columns ------------------------------------------------------------------

const json& column_fixture() {
  static const json j = json::parse(testing_support::slurp(fs::path(LOCKSTEP_SOURCE_DIR) /
                                                           "tests/estimator/feature_columns.json"));
  return j;
}

// The fixture's batch as Lockstep features (strings as uint8 [batch, k, width]).
est::Features fixture_features() {
  est::Features out;
  for (const auto& [key, rows] : column_fixture()["features"].items()) {
    const std::string kind = column_fixture()["kinds"][key];
    const auto batch = static_cast<std::int64_t>(rows.size());
    const auto k = static_cast<std::int64_t>(rows[0].size());
    if (kind == "string") {
      std::vector<std::string> flat;
      for (const auto& row : rows)
        for (const auto& v : row) flat.push_back(v.get<std::string>());
      out[key] = est::string_feature(flat, {batch, k});
    } else if (kind == "int") {
      std::vector<std::int64_t> flat;
      for (const auto& row : rows)
        for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
      out[key] = Tensor::from_vector<std::int64_t>(flat, {batch, k});
    } else {
      std::vector<float> flat;
      for (const auto& row : rows)
        for (const auto& v : row) flat.push_back(v.get<float>());
      out[key] = Tensor::from_vector<float>(flat, {batch, k});
    }
  }
  return out;
}

// Row i of every dimension holds i + 0.5 (the fixture's embedding table).
Initializer row_numbers() {
  return Initializer("row_numbers", [](const Shape& shape) {
    std::vector<float> v;
    for (std::int64_t i = 0; i < shape[0]; ++i)
      for (std::int64_t j = 0; j < shape[1]; ++j) v.push_back(static_cast<float>(i) + 0.5f);
    return Tensor::from_vector<float>(v, shape);
  });
}

// The fixture's columns, built with Lockstep's functions.
std::map<std::string, fc::FeatureColumn> fixture_columns() {
  auto price = fc::numeric_column("price");
  std::map<std::string, fc::FeatureColumn> c = {
      {"numeric", fc::numeric_column("pair", {.shape = {2}})},
      {"numeric_normalized", fc::numeric_column("price", {.normalizer_fn =
                                                              [](const Tensor& x) {
                                                                return div(
                                                                    sub(x, Tensor::scalar(1.0f)),
                                                                    Tensor::scalar(2.0f));
                                                              }})},
      {"bucketized", fc::bucketized_column(price, {0.0f, 2.0f, 6.0f})},
      {"bucketized_pair",
       fc::bucketized_column(fc::numeric_column("pair", {.shape = {2}}), {1.0f, 5.0f})},
      {"identity", fc::indicator_column(fc::categorical_column_with_identity("id", 4))},
      {"identity_multi", fc::indicator_column(fc::categorical_column_with_identity("ids", 4))},
      {"vocab", fc::indicator_column(fc::categorical_column_with_vocabulary_list(
                    "word", std::vector<std::string>{"kiwi", "apple", "fig"}))},
      {"vocab_oov",
       fc::indicator_column(fc::categorical_column_with_vocabulary_list(
           "word", std::vector<std::string>{"kiwi", "apple"}, {.num_oov_buckets = 3}))},
      {"vocab_int", fc::indicator_column(fc::categorical_column_with_vocabulary_list(
                        "year", std::vector<std::int64_t>{2024, 1999}))},
      {"hash", fc::indicator_column(fc::categorical_column_with_hash_bucket("words", 10))},
      {"hash_int", fc::indicator_column(
                       fc::categorical_column_with_hash_bucket("year", 7, fc::KeyType::kInteger))},
      {"cross_raw", fc::indicator_column(fc::crossed_column({"word", "year"}, 13))},
      {"cross_columns",
       fc::indicator_column(fc::crossed_column({fc::bucketized_column(price, {0.0f, 2.0f, 6.0f}),
                                                fc::categorical_column_with_identity("ids", 4)},
                                               17))},
      {"cross_mixed", fc::indicator_column(fc::crossed_column(
                          {"words", fc::categorical_column_with_identity("id", 4)}, 11, 42))},
  };
  for (const char* combiner : {"mean", "sum", "sqrtn"}) {
    c[std::string("embedding_") + combiner] =
        fc::embedding_column(fc::categorical_column_with_identity("ids", 4), 3,
                             {.combiner = combiner, .initializer = row_numbers()});
  }
  return c;
}

// Numeric (shape, normalizer), bucketized, identity, vocabulary lists of
// strings and integers (with out-of-vocabulary buckets), hash buckets of
// strings and integers, crosses of raw features and of columns, indicator
// and embedding columns (three combiners): each gives TensorFlow's name and
// TensorFlow's values on the same batch, "no value" entries included.
TEST(FeatureColumns, EachTransformsABatchAsTensorFlowDoes) {
  const est::Features features = fixture_features();
  const auto columns = fixture_columns();
  ASSERT_EQ(columns.size(), column_fixture()["columns"].size());
  for (const auto& [label, want] : column_fixture()["columns"].items()) {
    const fc::FeatureColumn& column = columns.at(label);
    EXPECT_EQ(column.name(), want["name"].get<std::string>()) << label;
    fc::DenseFeatures layer({column});
    const Tensor got = layer(features);
    const auto expected = want["value"].get<std::vector<std::vector<float>>>();
    ASSERT_EQ(got.shape(), Shape({static_cast<std::int64_t>(expected.size()),
                                  static_cast<std::int64_t>(expected[0].size())}))
        << label;
    const auto values = got.to_vector<float>();
    for (std::size_t b = 0; b < expected.size(); ++b)
      for (std::size_t j = 0; j < expected[b].size(); ++j)
        EXPECT_NEAR(values[b * expected[b].size() + j], expected[b][j], 1e-6)
            << label << " example " << b << " value " << j;
  }
}

// DenseFeatures orders columns by name; LinearModel weighs each column with
// its own zero-initialised weights named as TensorFlow's.
TEST(FeatureColumns, DenseFeaturesSortsByNameAndLinearModelNamesItsWeights) {
  const est::Features features = {{"b", Tensor::from_vector<float>({1, 2}, {2, 1})},
                                  {"a", Tensor::from_vector<float>({10, 20}, {2, 1})},
                                  {"k", Tensor::from_vector<std::int64_t>({0, 2}, {2, 1})}};
  fc::DenseFeatures layer({fc::numeric_column("b"), fc::numeric_column("a")});
  EXPECT_EQ(layer(features).to_vector<float>(), (std::vector<float>{10, 1, 20, 2}));
  fc::LinearModel linear({fc::numeric_column("a"), fc::categorical_column_with_identity("k", 3)},
                         {.name = "linear/linear_model"});
  EXPECT_EQ(linear(features).to_vector<float>(), (std::vector<float>{0, 0}));
  std::vector<std::string> names;
  for (const Variable& v : linear.variables()) names.push_back(v.name());
  EXPECT_EQ(names, (std::vector<std::string>{"linear/linear_model/a/weights",
                                             "linear/linear_model/k/weights",
                                             "linear/linear_model/bias_weights"}));
}

TEST(FeatureColumns, BadColumnsAndInputsAreNamed) {
  const est::Features features = {{"x", Tensor::from_vector<float>({1, 2}, {2, 1})}};
  const std::string missing =
      message_of([&] { fc::DenseFeatures({fc::numeric_column("feats")})(features); });
  EXPECT_NE(missing.find("no key 'feats' (they have 'x')"), std::string::npos) << missing;
  const std::string categorical =
      message_of([] { fc::DenseFeatures({fc::categorical_column_with_identity("x", 3)}); });
  EXPECT_NE(categorical.find("'x' is categorical"), std::string::npos) << categorical;
  const std::string out_of_range = message_of([] {
    fc::DenseFeatures({fc::indicator_column(fc::categorical_column_with_identity("k", 3))})(
        {{"k", Tensor::from_vector<std::int64_t>({1, 5}, {2, 1})}});
  });
  EXPECT_NE(out_of_range.find("id 5 is not in [0, 3)"), std::string::npos) << out_of_range;
  EXPECT_THROW(fc::bucketized_column(fc::numeric_column("x"), {2.0f, 1.0f}), ValueError);
  EXPECT_THROW(fc::DenseFeatures({fc::numeric_column("x"), fc::numeric_column("x")}), ValueError);
  const std::string strings = message_of([&] {
    fc::DenseFeatures({fc::indicator_column(fc::categorical_column_with_hash_bucket("x", 5))})(
        features);
  });
  EXPECT_NE(strings.find("must hold strings"), std::string::npos) << strings;
}

// ---- The guide's LinearRegressor, in closed form ----------------------------------------

data::Dataset seed_input() {
  return data::Dataset::from_tensors(
             est::features_and_labels({{"feats", Tensor::from_vector<float>({1.f})}},
                                      Tensor::from_vector<float>({1.f})))
      .repeat(10000)
      .batch(10);
}

struct StepLosses : est::SessionRunHook {
  std::vector<double> losses;
  void after_run(est::RunContext&, const est::SessionRunValues& v) override {
    losses.push_back(v.loss);
  }
};

std::optional<distribute::Strategy> two_replicas() {
  return distribute::MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = 2});
}

// Feature 1, label 1, batches of 10 per replica, SGD at Estimator's linear
// rate 0.2, weight w and bias b from 0. With e = w + b − 1 (prediction −
// label), both move by −0.2·∂loss/∂w, so each step multiplies e by
//   SUM_OVER_BATCH_SIZE: 1 − 4·0.2 = 0.2 (the replicas' means, each divided
//                        by N, summed: the gradient of one mean);
//   SUM:                 1 − 4·0.2·10·N (every example of every replica adds).
// Each step's reported loss is the replicas' losses summed (N·e² or N·10·e²),
// and evaluate() gives average_loss e², loss e² or 10·e², prediction/mean
// 1 + e, label/mean 1. Checked through e, to float32 rounding: within
// 1e-5 relative, plus 4 ulps of 1 where e itself is down at rounding level.
void expect_closed_form(bool compat_v1, int replicas) {
  SCOPED_TRACE(std::string(compat_v1 ? "SUM (compat.v1)" : "SUM_OVER_BATCH_SIZE") + ", " +
               std::to_string(replicas) + " replica(s)");
  TempDir dir("lockstep_estimator_closed_form");
  est::RunConfig config{.model_dir = dir.path.string()};
  if (replicas == 2) config.train_distribute = config.eval_distribute = two_replicas();
  est::LinearRegressorOptions options{
      .feature_columns = {fc::numeric_column("feats")}, .optimizer = "SGD", .config = config};
  std::unique_ptr<est::Estimator> regressor =
      compat_v1 ? std::unique_ptr<est::Estimator>(
                      std::make_unique<compat::v1::estimator::LinearRegressor>(options))
                : std::make_unique<est::LinearRegressor>(options);
  auto hook = std::make_shared<StepLosses>();
  regressor->train(seed_input, {.steps = 10, .hooks = {hook}});

  const double lr = 0.2, batch = 10, n = replicas;
  const double ratio = compat_v1 ? 1 - 4 * lr * batch * n : 1 - 4 * lr;
  const double per_example = compat_v1 ? batch : 1.0;  // loss per replica / e²
  auto expect_e = [](double got_abs_e, double e, const std::string& what) {
    EXPECT_NEAR(got_abs_e, std::abs(e), 1e-5 * std::abs(e) + 4.8e-7) << what;
  };
  double e = -1;
  ASSERT_EQ(hook->losses.size(), 10u);
  for (int k = 0; k < 10; ++k) {
    expect_e(std::sqrt(hook->losses[static_cast<std::size_t>(k)] / (n * per_example)), e,
             "the loss of step " + std::to_string(k + 1));
    e *= ratio;
  }
  const est::EvalResults r = regressor->evaluate(seed_input, {.steps = 10});
  EXPECT_EQ(r.at("global_step"), 10);
  EXPECT_EQ(r.at("label/mean"), 1.0);
  expect_e(std::sqrt(r.at("average_loss")), e, "average_loss");
  expect_e(std::sqrt(r.at("loss") / per_example), e, "loss");
  EXPECT_NEAR(r.at("prediction/mean"), 1 + e, 1e-5 * std::abs(e) + 4.8e-7);
  // w = b = (1 + e) / 2, in the checkpoint under TensorFlow's names.
  for (const char* name : {"linear/linear_model/feats/weights", "linear/linear_model/bias_weights"})
    EXPECT_NEAR(regressor->get_variable_value(name).item<float>(), (1 + e) / 2,
                1e-5 * std::abs(e) + 4.8e-7)
        << name;
  EXPECT_EQ(regressor->get_variable_value("global_step").item<std::int64_t>(), 10);
}

TEST(Estimator, TheGuidesLinearRegressorFollowsTheClosedFormUnderBothReductions) {
  for (bool compat_v1 : {false, true})
    for (int replicas : {1, 2}) expect_closed_form(compat_v1, replicas);
}

// ---- One device and two replicas --------------------------------------------------------

// The shared 40 examples, repeated, in batches of `batch`.
data::Dataset regression_input(std::int64_t batch) {
  return testing_support::regression_examples().repeat().batch(batch);
}

std::map<std::string, std::vector<float>> trained_variables(const est::Estimator& e) {
  std::map<std::string, std::vector<float>> out;
  for (const std::string& name : e.get_variable_names()) {
    if (name != "global_step") out[name] = e.get_variable_value(name).to_vector<float>();
  }
  return out;
}

// A per-replica batch of 10 on each of 2 replicas takes the same 20
// examples per step as a batch of 20 on one device (replica r takes the
// worker's batch 2·step + r), so the weights agree to float rounding, under
// both reductions (Ftrl, the linear default, on a numeric, a bucketized and
// a categorical column).
TEST(Estimator, TwoReplicasTrainTheWeightsOfOneDevice) {
  for (bool compat_v1 : {false, true}) {
    std::map<std::string, std::vector<float>> weights[2];
    for (int replicas : {1, 2}) {
      TempDir dir("lockstep_estimator_replicas");
      est::RunConfig config{.model_dir = dir.path.string()};
      if (replicas == 2) config.train_distribute = two_replicas();
      est::LinearRegressorOptions options{
          .feature_columns = {fc::numeric_column("x"),
                              fc::bucketized_column(fc::numeric_column("x"), {-0.5f, 0.0f, 0.5f}),
                              fc::categorical_column_with_identity("k", 4)},
          .config = config};
      std::unique_ptr<est::Estimator> e =
          compat_v1 ? std::unique_ptr<est::Estimator>(
                          std::make_unique<compat::v1::estimator::LinearRegressor>(options))
                    : std::make_unique<est::LinearRegressor>(options);
      const std::int64_t batch = 20 / replicas;
      int calls = 0;
      e->train(
          [batch, &calls] {
            ++calls;
            return regression_input(batch);
          },
          {.steps = 30});
      EXPECT_EQ(calls, 1) << "input_fn is called once per worker, not per replica";
      weights[replicas - 1] = trained_variables(*e);
    }
    ASSERT_EQ(weights[0].size(), 4u);
    for (const auto& [name, one] : weights[0]) {
      const auto& two = weights[1].at(name);
      ASSERT_EQ(one.size(), two.size()) << name;
      for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_NEAR(two[i], one[i], 1e-5 * std::max(1.0f, std::abs(one[i])))
            << (compat_v1 ? "SUM " : "SUM_OVER_BATCH_SIZE ") << name << "[" << i << "]";
    }
  }
}

// An untrained linear model predicts 0, so each example's loss is y²:
// weight_column weighs average_loss and label/mean; the SUM_OVER_BATCH_SIZE
// loss divides the weighted sum by the count of loss values.
TEST(Estimator, WeightColumnAndLabelDimensionFollowTensorFlowsDefinitions) {
  TempDir dir("lockstep_estimator_weights");
  auto input = [] {
    return data::Dataset::from_tensor_slices({Tensor::from_vector<float>({1, 1, 1, 1}, {4, 1}),
                                              Tensor::from_vector<float>({1, 0, 1, 0}, {4}),
                                              Tensor::from_vector<float>({1, 2, 3, 4}, {4, 1})},
                                             {"x", "w", est::kLabels})
        .batch(4);
  };
  est::LinearRegressor weighted({.feature_columns = {fc::numeric_column("x")},
                                 .weight_column = "w",
                                 .config = {.model_dir = dir.path.string()}});
  const est::EvalResults r = weighted.evaluate(input);
  EXPECT_DOUBLE_EQ(r.at("average_loss"), (1.0 + 9.0) / 2);
  EXPECT_DOUBLE_EQ(r.at("loss"), (1.0 + 9.0) / 4);
  EXPECT_DOUBLE_EQ(r.at("label/mean"), 2.0);
  EXPECT_DOUBLE_EQ(r.at("prediction/mean"), 0.0);

  TempDir dir2("lockstep_estimator_label_dimension");
  auto two = [] {
    return data::Dataset::from_tensor_slices(
               {Tensor::from_vector<float>({1, 2, 3, 4}, {4, 1}),
                Tensor::from_vector<float>({1, -1, 2, -2, 3, -3, 4, -4}, {4, 2})},
               {"x", est::kLabels})
        .repeat()
        .batch(4);
  };
  est::LinearRegressor regressor({.feature_columns = {fc::numeric_column("x")},
                                  .label_dimension = 2,
                                  .optimizer = "SGD",
                                  .config = {.model_dir = dir2.path.string()}});
  regressor.train(two, {.steps = 200});
  EXPECT_LT(regressor.evaluate(two, {.steps = 1}).at("average_loss"), 1e-3);
  const auto p = regressor.predict([two] { return two().take(1); });
  ASSERT_EQ(p.size(), 4u);
  const auto y = p[2].at("predictions").to_vector<float>();  // x = 3: (3, -3)
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], 3, 0.05);
  EXPECT_NEAR(y[1], -3, 0.05);
  EXPECT_EQ(regressor.get_variable_value("linear/linear_model/x/weights").shape(), Shape({1, 2}));
}

// Estimator's defaults: a linear model trains with Ftrl at min(0.2,
// 1/sqrt(columns)) — one step of the guide's input from zero gives
// w = b = 2·0.2/sqrt(0.1 + 2²) (accumulator 0.1, gradient −2, no L1/L2) — and
// a DNN with Adagrad.
TEST(Estimator, CannedDefaultsAreFtrlForLinearModelsAndAdagradForDnns) {
  TempDir dir("lockstep_estimator_defaults"), dnn_dir("lockstep_estimator_defaults_dnn");
  est::LinearRegressor linear({.feature_columns = {fc::numeric_column("feats")},
                               .config = {.model_dir = dir.path.string()}});
  linear.train(seed_input, {.steps = 1});
  EXPECT_NEAR(linear.get_variable_value("linear/linear_model/feats/weights").item<float>(),
              0.4 / std::sqrt(4.1), 1e-6);
  EXPECT_NEAR(linear.get_variable_value("linear/linear_model/bias_weights").item<float>(),
              0.4 / std::sqrt(4.1), 1e-6);
  EXPECT_EQ(io::read_safetensors(*linear.latest_checkpoint()).metadata.at("optimizer"), "Ftrl");
  est::DNNRegressor dnn({.hidden_units = {4},
                         .feature_columns = {fc::numeric_column("feats")},
                         .config = {.model_dir = dnn_dir.path.string()}});
  dnn.train(seed_input, {.steps = 1});
  EXPECT_EQ(io::read_safetensors(*dnn.latest_checkpoint()).metadata.at("optimizer"), "Adagrad");
}

// ---- Classifiers --------------------------------------------------------------------------

// Two features; class 1 when x0 + x1 > 0 (binary), or the quadrant (4 classes).
data::Dataset classification_input(int classes, std::int64_t batch, std::int64_t repeat = -1) {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (int i = 0; i < 64; ++i) {
    const float a = static_cast<float>((i * 13) % 64) / 32.0f - 1.0f + 0.01f;
    const float b = static_cast<float>((i * 29) % 64) / 32.0f - 1.0f + 0.02f;
    x.push_back(a);
    x.push_back(b);
    y.push_back(classes == 2 ? (a + b > 0) : (a > 0) * 2 + (b > 0));
  }
  return data::Dataset::from_tensor_slices(
             {Tensor::from_vector<float>(x, {64, 2}), Tensor::from_vector<std::int64_t>(y, {64})},
             {"x", est::kLabels})
      .repeat(repeat)
      .batch(batch);
}

std::set<std::string> keys_of(const est::EvalResults& r) {
  std::set<std::string> keys;
  for (const auto& [k, v] : r) keys.insert(k);
  return keys;
}

// The binary head's keys are TensorFlow's; the DNN learns the classes.
TEST(Estimator, DnnClassifierLearnsAndReportsTensorFlowsKeys) {
  TempDir dir("lockstep_estimator_dnn");
  est::DNNClassifier classifier({.hidden_units = {16},
                                 .feature_columns = {fc::numeric_column("x", {.shape = {2}})},
                                 .optimizer = optimizers::Adam({.learning_rate = 0.05}),
                                 .config = {.model_dir = dir.path.string(), .tf_random_seed = 3}});
  classifier.train([] { return classification_input(2, 16); }, {.steps = 200});
  const est::EvalResults r = classifier.evaluate([] { return classification_input(2, 16, 1); });
  EXPECT_EQ(keys_of(r), (std::set<std::string>{"accuracy", "accuracy_baseline", "auc",
                                               "average_loss", "global_step", "label/mean", "loss",
                                               "precision", "prediction/mean", "recall"}));
  EXPECT_GT(r.at("accuracy"), 0.9);
  EXPECT_GT(r.at("auc"), 0.95);
  EXPECT_EQ(r.at("global_step"), 200);
  EXPECT_NEAR(r.at("accuracy_baseline"), std::max(r.at("label/mean"), 1 - r.at("label/mean")),
              1e-6);
  // SUM_OVER_BATCH_SIZE: loss is the mean over batches of each batch's
  // mean, which equals average_loss when every batch has 16 examples.
  EXPECT_NEAR(r.at("loss"), r.at("average_loss"), 1e-5);
  const auto predictions = classifier.predict([] { return classification_input(2, 16, 1); });
  ASSERT_EQ(predictions.size(), 64u);
  const auto& p = predictions.front();
  for (const char* key : {"logits", "logistic", "probabilities", "class_ids", "classes"})
    EXPECT_TRUE(p.contains(key)) << key;
  EXPECT_EQ(p.at("probabilities").shape(), Shape({2}));
  const auto names = classifier.get_variable_names();
  for (const char* name : {"dnn/hiddenlayer_0/kernel", "dnn/hiddenlayer_0/bias",
                           "dnn/logits/kernel", "dnn/logits/bias", "global_step"})
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
}

TEST(Estimator, MultiClassLinearClassifierReportsAccuracyAndLosses) {
  TempDir dir("lockstep_estimator_multiclass");
  est::LinearClassifier classifier(
      {.feature_columns = {fc::bucketized_column(fc::numeric_column("x", {.shape = {2}}), {0.0f})},
       .n_classes = 4,
       .config = {.model_dir = dir.path.string()}});
  classifier.train([] { return classification_input(4, 16); }, {.steps = 100});
  const est::EvalResults r = classifier.evaluate([] { return classification_input(4, 16, 1); });
  EXPECT_EQ(keys_of(r), (std::set<std::string>{"accuracy", "average_loss", "global_step", "loss"}));
  EXPECT_GT(r.at("accuracy"), 0.95);
}

// ---- model_dir: resume, custom model_fn -----------------------------------------------------

// A new Estimator on the same model_dir continues from the newest
// checkpoint: 6 steps, then up to max_steps 12, give the weights of 12 in
// one go (the input restarts, and repeats every 2 steps: 40 examples, 20
// a step).
TEST(Estimator, ANewEstimatorResumesFromModelDirByGlobalStep) {
  TempDir a("lockstep_estimator_resume_a"), b("lockstep_estimator_resume_b");
  auto make = [](const TempDir& dir) {
    return est::LinearRegressor({.feature_columns = {fc::numeric_column("x")},
                                 .optimizer = "Adam",
                                 .config = {.model_dir = dir.path.string(),
                                            .save_checkpoints_steps = 4,
                                            .keep_checkpoint_max = 2}});
  };
  auto input = [] { return regression_input(20); };
  make(a).train(input, {.max_steps = 12});
  make(b).train(input, {.steps = 6});
  est::LinearRegressor resumed = make(b);
  resumed.train(input, {.max_steps = 12});
  EXPECT_EQ(trained_variables(resumed), trained_variables(make(a)));
  EXPECT_EQ(resumed.get_variable_value("global_step").item<std::int64_t>(), 12);
  // Checkpoints at 4, 6 (the first train's end), 8, 12: the newest 2 kept.
  std::vector<std::string> kept;
  for (const auto& entry : fs::directory_iterator(b.path)) {
    if (entry.path().extension() == ".safetensors")
      kept.push_back(entry.path().filename().string());
  }
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept,
            (std::vector<std::string>{"model.ckpt-12.safetensors", "model.ckpt-8.safetensors"}));
  // Training past max_steps again does nothing.
  resumed.train(input, {.max_steps = 12});
  EXPECT_EQ(resumed.get_variable_value("global_step").item<std::int64_t>(), 12);
}

// Issue #41: a damaged newest checkpoint is named and skipped for the one
// before it (training then goes on as if it had not been there); a number
// in a checkpoint's metadata past int64 is an IOError naming the file (it
// was std::out_of_range from stoll); and a second trainer in a model_dir
// is refused while the first holds it.
TEST(Estimator, ADamagedNewestCheckpointIsSkippedAndASecondTrainerIsRefused) {
  TempDir a("lockstep_estimator_damaged_a"), b("lockstep_estimator_damaged_b");
  auto make = [](const TempDir& dir) {
    return est::LinearRegressor({.feature_columns = {fc::numeric_column("x")},
                                 .optimizer = "Adam",
                                 .config = {.model_dir = dir.path.string(),
                                            .save_checkpoints_steps = 4,
                                            .keep_checkpoint_max = 5}});
  };
  auto input = [] { return regression_input(20); };
  make(a).train(input, {.max_steps = 8});
  make(b).train(input, {.steps = 4});
  testing_support::spit(b.path / "model.ckpt-6.safetensors", "not a checkpoint");
  est::LinearRegressor resumed = make(b);
  testing::internal::CaptureStderr();
  resumed.train(input, {.max_steps = 8});
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      said.find("skipping a damaged checkpoint: " + (b.path / "model.ckpt-6.safetensors").string()),
      std::string::npos)
      << said;
  EXPECT_NE(
      said.find("Restoring parameters from " + (b.path / "model.ckpt-4.safetensors").string()),
      std::string::npos)
      << said;
  EXPECT_EQ(trained_variables(resumed), trained_variables(make(a)));

  // Every checkpoint damaged: the newest's error, not a fresh start.
  TempDir c("lockstep_estimator_damaged_c");
  testing_support::spit(c.path / "model.ckpt-3.safetensors", "junk");
  const std::string all_bad = message_of([&] { make(c).train(input, {.steps = 1}); });
  EXPECT_NE(all_bad.find("model.ckpt-3.safetensors"), std::string::npos) << all_bad;

  // A global_step past int64 in an otherwise valid checkpoint.
  TempDir d("lockstep_estimator_damaged_d");
  io::write_safetensors((d.path / "model.ckpt-1.safetensors").string(),
                        {{"model/x", Tensor::zeros(Shape{1})}},
                        {{"format", "lockstep.estimator"},
                         {"format_version", "1"},
                         {"global_step", "99999999999999999999"}});
  const std::string big = message_of([&] { make(d).train(input, {.steps = 1}); });
  EXPECT_NE(big.find("model.ckpt-1.safetensors: its metadata 'global_step' is "
                     "'99999999999999999999', not an integer"),
            std::string::npos)
      << big;

  // A second trainer while the first holds the model_dir.
  const DirectoryLock held(b.path.string(), "model_dir");
  const std::string second = message_of([&] { make(b).train(input, {.steps = 1}); });
  EXPECT_NE(second.find(b.path.string()), std::string::npos) << second;
  EXPECT_NE(second.find("model_dir"), std::string::npos) << second;
}

// A hook that asks to stop ends training at that step, which is saved.
TEST(Estimator, AHookStopsTrainingAtItsStep) {
  struct StopAt3 : est::SessionRunHook {
    void after_run(est::RunContext& run_context, const est::SessionRunValues& v) override {
      if (v.global_step == 3) run_context.request_stop();
    }
    void end(std::int64_t global_step) override { ended_at = global_step; }
    std::int64_t ended_at = -1;
  };
  TempDir dir("lockstep_estimator_stop");
  est::LinearRegressor r(
      {.feature_columns = {fc::numeric_column("x")}, .config = {.model_dir = dir.path.string()}});
  auto hook = std::make_shared<StopAt3>();
  r.train([] { return regression_input(20); }, {.steps = 100, .hooks = {hook}});
  EXPECT_EQ(hook->ended_at, 3);
  EXPECT_EQ(r.get_variable_value("global_step").item<std::int64_t>(), 3);
}

// A custom model_fn: layers made outside it, the optimizer too; predict
// yields one map per example; a model_fn that makes its layer anew on each
// call is stopped on its second call, naming the variable.
TEST(Estimator, CustomModelFnTrainsPredictsAndMustReuseItsVariables) {
  TempDir dir("lockstep_estimator_custom");
  layers::Dense dense(1, {.kernel_initializer = initializers::Zeros(), .name = "custom_dense"});
  Optimizer sgd = optimizers::SGD({.learning_rate = 0.1});
  auto model_fn = [dense, sgd](const est::Features& f, const Tensor& labels, est::ModeKeys mode,
                               const est::Params& params, const est::RunConfig&) {
    EXPECT_EQ(std::get<double>(params.at("scale")), 2.0);
    Tensor y = dense(f.at("x"));
    est::EstimatorSpec spec{.mode = mode, .predictions = {{"y", y}}};
    if (mode == est::ModeKeys::kPredict) return spec;
    spec.loss = mean(square(sub(y, labels)));
    spec.train_op = {.optimizer = sgd};
    return spec;
  };
  std::ostringstream log;
  est::Estimator e(model_fn, {.model_dir = dir.path.string(),
                              .config = {.log_step_count_steps = 20},
                              .params = {{"scale", 2.0}},
                              .log = &log});
  e.train([] { return regression_input(20); }, {.steps = 50});
  // TensorFlow's lines: the first step's loss, then every 20 steps with the
  // time since the last and the steps per second.
  const std::string lines = log.str();
  for (const char* line : {"INFO:lockstep:loss = ", ", step = 0\n", ", step = 20 (",
                           "global_step/sec: ", ", step = 40 (", "Saving checkpoints for 50 into ",
                           "Loss for final step: "})
    EXPECT_NE(lines.find(line), std::string::npos) << line << " in\n" << lines;
  const auto r = e.evaluate([] { return regression_input(20).take(2); });
  EXPECT_EQ(keys_of(r), (std::set<std::string>{"global_step", "loss"}));
  const auto p = e.predict([] { return regression_input(20).take(1); });
  ASSERT_EQ(p.size(), 20u);
  EXPECT_EQ(p[0].at("y").shape(), Shape({1}));

  TempDir dir2("lockstep_estimator_custom_bad");
  auto remakes = [](const est::Features& f, const Tensor& labels, est::ModeKeys mode,
                    const est::Params&, const est::RunConfig&) {
    static Optimizer opt = optimizers::SGD();
    Tensor y = layers::Dense(1, {.name = "made_each_call"})(f.at("x"));
    return est::EstimatorSpec{
        .mode = mode, .loss = mean(square(sub(y, labels))), .train_op = {.optimizer = opt}};
  };
  est::Estimator bad(remakes, {.model_dir = dir2.path.string()});
  const std::string m =
      message_of([&] { bad.train([] { return regression_input(20); }, {.steps = 2}); });
  EXPECT_NE(m.find("made the variable 'made_each_call/kernel' on a call after its first"),
            std::string::npos)
      << m;
}

// A model_fn whose train_op holds a LossScaleOptimizer: the Estimator
// differentiates the scaled loss (apply_gradients unscales it), so training
// is bit for bit that of the plain optimizer.
TEST(Estimator, ALossScaleOptimizerInTheTrainOpTrainsAsThePlainOptimizer) {
  auto trained = [](const Optimizer& opt, const std::string& name) {
    TempDir dir(name);
    layers::Dense dense(1, {.kernel_initializer = initializers::Zeros(), .name = "scaled_dense"});
    auto model_fn = [dense, opt](const est::Features& f, const Tensor& labels, est::ModeKeys mode,
                                 const est::Params&, const est::RunConfig&) {
      Tensor y = dense(f.at("x"));
      est::EstimatorSpec spec{.mode = mode, .predictions = {{"y", y}}};
      if (mode == est::ModeKeys::kPredict) return spec;
      spec.loss = mean(square(sub(y, labels)));
      spec.train_op = {.optimizer = opt};
      return spec;
    };
    std::ostringstream log;
    est::Estimator e(model_fn, {.model_dir = dir.path.string(), .log = &log});
    e.train([] { return regression_input(20); }, {.steps = 30});
    std::vector<float> out;
    for (const auto& p : e.predict([] { return regression_input(20).take(1); }))
      out.push_back(p.at("y").item<float>());
    return out;
  };
  const std::vector<float> plain =
      trained(optimizers::SGD({.learning_rate = 0.1}), "lockstep_estimator_unscaled");
  const optimizers::LossScaleOptimizer scaled(optimizers::SGD({.learning_rate = 0.1}),
                                              {.initial_scale = 1024, .dynamic_growth_steps = 7});
  EXPECT_EQ(trained(scaled, "lockstep_estimator_scaled"), plain);
  EXPECT_EQ(scaled.dynamic_scale(), 1024 * 16);  // doubled after steps 7, 14, 21 and 28
}

// ---- Bad input ----------------------------------------------------------------------------

TEST(Estimator, BadInputIsAClearErrorNamingTheKeyOrFile) {
  TempDir dir("lockstep_estimator_bad");
  auto regressor = [&](const std::string& column, est::OptimizerArg optimizer = {},
                       std::int64_t label_dimension = 1) {
    return est::LinearRegressor({.feature_columns = {fc::numeric_column(column)},
                                 .label_dimension = label_dimension,
                                 .optimizer = std::move(optimizer),
                                 .config = {.model_dir = dir.path.string()}});
  };
  auto input = [] { return regression_input(10); };
  // A feature missing from the features.
  const std::string missing = message_of([&] { regressor("feats").train(input, {.steps = 1}); });
  EXPECT_NE(missing.find("no key 'feats' (they have 'k', 'x')"), std::string::npos) << missing;
  // Labels of the wrong shape.
  const std::string shape = message_of([&] {
    est::LinearRegressor({.feature_columns = {fc::numeric_column("x")},
                          .config = {.model_dir = dir.path.string() + "/shape"}})
        .train(
            [] {
              return data::Dataset::from_tensors(
                         est::features_and_labels({{"x", Tensor::from_vector<float>({1.f})}},
                                                  Tensor::from_vector<float>({1.f, 2.f})))
                  .repeat(3)
                  .batch(3);
            },
            {.steps = 1});
  });
  EXPECT_NE(shape.find("labels have shape [3, 2]; expected [batch, label_dimension] = [3, 1]"),
            std::string::npos)
      << shape;
  // An unknown optimizer name.
  const std::string optimizer = message_of([&] { regressor("x", "Adamax"); });
  EXPECT_NE(optimizer.find("Unsupported optimizer name: 'Adamax'. Supported names are: "
                           "('Adagrad', 'Adam', 'Ftrl', 'RMSProp', 'SGD')"),
            std::string::npos)
      << optimizer;
  // A model_dir holding another model's checkpoint.
  regressor("x").train(input, {.steps = 2});
  const std::string other = message_of([&] { regressor("k").train(input, {.steps = 1}); });
  EXPECT_NE(other.find("model.ckpt-2.safetensors: the model's variable "
                       "'linear/linear_model/k/weights' is not in this checkpoint"),
            std::string::npos)
      << other;
  EXPECT_NE(other.find("another model's checkpoints"), std::string::npos) << other;
  // Unnamed input, steps and max_steps together, a RunConfig that saves both ways.
  const std::string unnamed = message_of([&] {
    regressor("x").train(
        [] {
          return data::Dataset::from_tensor_slices({Tensor::zeros({4, 1}), Tensor::zeros({4})});
        },
        {.steps = 1});
  });
  EXPECT_NE(unnamed.find("unnamed components"), std::string::npos) << unnamed;
  EXPECT_THROW(regressor("x").train(input, {.steps = 1, .max_steps = 3}), ValueError);
  EXPECT_THROW(est::LinearRegressor(
                   {.feature_columns = {fc::numeric_column("x")},
                    .config = {.save_checkpoints_steps = 10, .save_checkpoints_secs = 5.0}}),
               ValueError);
}

// serve() runs a worker or ps task of a ParameterServerStrategy job: with no
// TF_CONFIG, on the chief, or with a strategy of its own it says what to do
// instead (PsJobTest runs the job itself).
TEST(Estimator, ServeIsRefusedOutsideAServingTaskWithAHint) {
  TempDir dir("lockstep_estimator_serve");
  auto regressor = [&](std::optional<distribute::Strategy> strategy) {
    return est::LinearRegressor(
        {.feature_columns = {fc::numeric_column("x")},
         .config = {.model_dir = dir.path.string(), .train_distribute = strategy}});
  };
  auto input = [] { return regression_input(10); };
  ASSERT_EQ(std::getenv("TF_CONFIG"), nullptr);
  testing_support::expect_error_containing<ValueError>(
      [&] { regressor(std::nullopt).serve(input); }, "Estimator.serve: no cluster: set TF_CONFIG");
  const std::string cluster =
      R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}, )";
  ::setenv("TF_CONFIG", (cluster + R"("task": {"type": "chief", "index": 0}})").c_str(), 1);
  testing_support::expect_error_containing<ValueError>(
      [&] { regressor(std::nullopt).serve(input); },
      "the chief trains: construct ParameterServerStrategy");
  ::setenv("TF_CONFIG", (cluster + R"("task": {"type": "worker", "index": 0}})").c_str(), 1);
  testing_support::expect_error_containing<ValueError>(
      [&] { regressor(distribute::MirroredStrategy()).serve(input); },
      "leave train_distribute and eval_distribute unset on the tasks that serve");
  ::unsetenv("TF_CONFIG");
}

TEST(Estimator, FormatResultsPrintsThePythonDictionary) {
  EXPECT_EQ(est::format_results({{"average_loss", 1.4210855e-14},
                                 {"global_step", 10},
                                 {"label/mean", 1.0},
                                 {"prediction/mean", 0.99999994},
                                 {"auc", 123456.7},
                                 {"big", 282475260.0}}),
            "{'auc': 123456.7, 'average_loss': 1.4210855e-14, 'big': 2.8247526e+08, "
            "'global_step': 10, 'label/mean': 1.0, 'prediction/mean': 0.99999994}");
}

}  // namespace
}  // namespace lockstep
