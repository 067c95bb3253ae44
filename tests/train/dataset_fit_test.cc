// fit / evaluate / predict on a Dataset: the same numbers as on tensors.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"
#include "support/synthetic.h"
#include "support/weights.h"

namespace lockstep {
namespace {

using data::Dataset;
using data::Element;

using testing_support::blobs;

Model small_classifier() {
  set_random_seed(1234);  // identical initial weights in every call
  auto in = Input({8}, DType::kFloat32, "features");
  auto h = layers::Dense(16, {.activation = "relu"})(in);
  Model model(in, layers::Dense(2, {.name = "logits"})(h));
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  return model;
}

std::vector<float> weights_of(const Model& m) {
  std::vector<float> all;
  for (const Variable& v : m.impl()->weights()) {
    const auto w = v.value().to_vector<float>();
    all.insert(all.end(), w.begin(), w.end());
  }
  return all;
}

TEST(FitDataset, SameBatchesGiveBitwiseTheSameTrainingAsTensors) {
  auto [x, y] = blobs(200, 1);
  Model a = small_classifier();
  const History ha = a.fit(x, y, {.batch_size = 16, .epochs = 2, .verbose = 0, .shuffle = false});
  Model b = small_classifier();
  const History hb =
      b.fit(Dataset::from_tensor_slices({x, y}).batch(16), {.epochs = 2, .verbose = 0});
  EXPECT_EQ(weights_of(a), weights_of(b));
  EXPECT_EQ(ha["loss"], hb["loss"]);
  EXPECT_EQ(b.optimizer().iterations(), 2 * 13);  // ceil(200 / 16) batches per epoch
  // evaluate and predict agree with their tensor forms.
  auto [xt, yt] = blobs(70, 2);
  const Logs ea = a.evaluate(xt, yt, {.batch_size = 16, .verbose = 0});
  const Logs eb = b.evaluate(Dataset::from_tensor_slices({xt, yt}).batch(16), {.verbose = 0});
  EXPECT_EQ(ea.at("loss"), eb.at("loss"));
  EXPECT_EQ(ea.at("accuracy"), eb.at("accuracy"));
  // predict ignores the targets of (x, y) elements; order is kept.
  const Tensor pa = a.predict(xt, {.batch_size = 16});
  EXPECT_EQ(b.predict(Dataset::from_tensor_slices({xt, yt}).batch(16)).to_vector<float>(),
            pa.to_vector<float>());
  // Batches of 9 against batches of 16: within float rounding, since a
  // row's GEMM rounding depends on the batch's row count on AVX2 (oneDNN's
  // M-tail kernel; model_test.cc's Predict test has the measurement).
  testing_support::expect_close(
      {b.predict(Dataset::from_tensor_slices(xt).batch(9)).to_vector<float>()},
      {pa.to_vector<float>()}, 1e-5, "predict in batches of 9 against batches of 16");
}

TEST(FitDataset, ShuffledPipelineLearnsAndValidatesOnADataset) {
  auto [x, y] = blobs(1000, 3);
  auto [xv, yv] = blobs(200, 4);
  Model m = small_classifier();
  Dataset train = Dataset::from_tensor_slices({x, y})
                      .shuffle(1000, {.seed = 1})
                      .batch(32)
                      .prefetch(data::kAutotune);
  Dataset val = Dataset::from_tensor_slices({xv, yv}).batch(64);
  const History h = m.fit(train, {.epochs = 3, .verbose = 0, .validation_data = val});
  EXPECT_EQ(h["val_loss"].size(), 3u);
  EXPECT_GE(h["val_accuracy"].back(), 0.99);
  EXPECT_NEAR(h["val_loss"].back(), m.evaluate(val, {.verbose = 0}).at("loss"), 1e-9);
}

TEST(FitDataset, NamedElementsMatchInputAndOutputNames) {
  auto [x, y] = blobs(64, 5);
  Model a = small_classifier();
  a.fit(Dataset::from_tensor_slices({y, x}, {"logits", "features"}).batch(16),
        {.epochs = 1, .verbose = 0});
  Model b = small_classifier();
  b.fit(Dataset::from_tensor_slices({x, y}).batch(16), {.epochs = 1, .verbose = 0});
  EXPECT_EQ(weights_of(a), weights_of(b));
}

TEST(FitDataset, RepeatedDatasetNeedsStepsPerEpochAndRunsOnAcrossEpochs) {
  auto [x, y] = blobs(64, 6);
  Model m = small_classifier();
  Dataset forever = Dataset::from_tensor_slices({x, y}).batch(16).repeat();
  try {
    m.fit(forever, {.epochs = 1, .verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("give steps_per_epoch"), std::string::npos) << e.what();
  }
  const History h = m.fit(forever, {.epochs = 3, .verbose = 0, .steps_per_epoch = 3});
  EXPECT_EQ(h["loss"].size(), 3u);
  EXPECT_EQ(m.optimizer().iterations(), 9);
  // A finite dataset that runs out stops training after that epoch (Keras).
  Model m2 = small_classifier();
  testing::internal::CaptureStderr();
  const History h2 = m2.fit(Dataset::from_tensor_slices({x, y}).batch(16),
                            {.epochs = 5, .verbose = 0, .steps_per_epoch = 3});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(h2["loss"].size(), 2u);  // 3 batches, then 1 and the data ends
  EXPECT_EQ(m2.optimizer().iterations(), 4);
  EXPECT_NE(err.find("ran out of data"), std::string::npos) << err;
}

TEST(FitDataset, WrongElementsNameTheExpectation) {
  auto [x, y] = blobs(32, 7);
  Model m = small_classifier();
  try {
    m.fit(Dataset::from_tensor_slices(x).batch(8), {.verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("1 input(s) and 1 output(s)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fit: epoch 1"), std::string::npos) << msg;
  }
  try {
    m.fit(Dataset::range(0), {.verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("the dataset is empty"), std::string::npos);
  }
}

}  // namespace
}  // namespace lockstep
