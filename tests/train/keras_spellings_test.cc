// Keras's and tf.distribute's spellings that ports reach for, where C++
// allows them (docs/models.md lists those it does not): each does what the
// Lockstep spelling beside it does.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/lockstep.h"
#include "support/files.h"

namespace lockstep {
namespace {

TEST(KerasSpellings, ReduceOpUpperCaseNamesAreTheSameOps) {
  EXPECT_EQ(distribute::ReduceOp::SUM, distribute::ReduceOp::kSum);
  EXPECT_EQ(distribute::ReduceOp::MEAN, distribute::ReduceOp::kMean);
  EXPECT_EQ(distribute::ReduceOp::MAX, distribute::ReduceOp::kMax);
  EXPECT_EQ(distribute::ReduceOp::MIN, distribute::ReduceOp::kMin);
  distribute::MirroredStrategy strategy({.devices = {&host_device()}, .replicas_per_device = 2});
  const auto ones = strategy.run([] { return Tensor::scalar(1.0f); });
  EXPECT_EQ(strategy.reduce(distribute::ReduceOp::SUM, ones).item<float>(), 2.0f);
}

TEST(KerasSpellings, MirroredStrategyTakesDeviceNames) {
  distribute::MirroredStrategy strategy({"/cpu:0"});
  EXPECT_EQ(strategy.num_replicas_in_sync(), 1);
  EXPECT_THROW(distribute::MirroredStrategy({"/tpu:0"}), ValueError);
  EXPECT_THROW(distribute::with_named_devices({}, {}), ValueError);
  // The options' designated form still picks the options.
  distribute::MirroredStrategy two({.devices = {&host_device()}, .replicas_per_device = 2});
  EXPECT_EQ(two.num_replicas_in_sync(), 2);
}

TEST(KerasSpellings, ModelCheckpointTakesItsPathFirst) {
  testing_support::TempDir dir("lockstep_spellings");
  Sequential model({layers::Dense(2)}, {.input_shape = Shape{3}});
  model.compile({.optimizer = "sgd", .loss = "mse"});
  auto checkpoint = std::make_shared<ModelCheckpoint>(dir / "ckpt-{epoch}.keras");
  model.fit(Tensor::ones({8, 3}), Tensor::zeros({8, 2}),
            {.batch_size = 4, .epochs = 2, .verbose = 0, .callbacks = {checkpoint}});
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt-1.keras"));
  EXPECT_TRUE(std::filesystem::exists(dir / "ckpt-2.keras"));
  EXPECT_THROW(ModelCheckpoint("a.keras", {.filepath = "b.keras"}), ValueError);
}

TEST(KerasSpellings, SequentialAddsAnInputFirst) {
  Sequential model;
  model.add(Input({4}));
  model.add(layers::Dense(3));
  EXPECT_EQ(model.inputs().at(0).sample_shape(), (Shape{4}));
  EXPECT_EQ(model.trainable_variables().size(), 2u) << "built from the Input's shape";
  EXPECT_THROW(model.add(Input({5})), ValueError);
}

TEST(KerasSpellings, DatasetFromTensorsOfPlainNumbers) {
  const data::Element whole = *data::Dataset::from_tensors({1, 2, 3}).make_iterator().next();
  EXPECT_EQ(whole[0].dtype(), DType::kInt32);
  EXPECT_EQ(whole[0].to_vector<std::int32_t>(), (std::vector<std::int32_t>{1, 2, 3}));
  const data::Element fractions = *data::Dataset::from_tensors({1.5f, 2.5f}).make_iterator().next();
  EXPECT_EQ(fractions[0].dtype(), DType::kFloat32);
  EXPECT_EQ(fractions[0].shape(), (Shape{2}));
}

TEST(KerasSpellings, ModelsLoadModelIsLoadModel) {
  testing_support::TempDir dir("lockstep_spellings");
  Sequential model({layers::Dense(2)}, {.input_shape = Shape{3}});
  model.save(dir / "m.keras");
  const Model loaded = models::load_model(dir / "m.keras");
  EXPECT_EQ(loaded.weights().size(), model.weights().size());
}

}  // namespace
}  // namespace lockstep
