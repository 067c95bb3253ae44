// save -> load_model gives a model that predicts exactly what the saved one
// did; architecture mismatches and newer formats are refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("lockstep_save_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(Saving, FunctionalModelWithConvBatchNormSharedLayersRoundTrips) {
  auto in = Input({8, 8, 2});
  auto x = layers::Conv2D(
      4, {3, 3},
      {.padding = "same", .activation = "relu", .kernel_regularizer = regularizers::L2(1e-3f)})(in);
  x = layers::BatchNormalization()(x);
  x = layers::DepthwiseConv2D({3, 3}, {.strides = {2, 2}, .padding = "same"})(x);
  x = layers::MaxPooling2D({2, 2})(x);
  x = layers::GlobalAveragePooling2D()(x);
  layers::Dense shared(4, {.activation = "tanh"});
  auto a = shared(x);
  auto b = shared(a);  // a shared layer, called twice
  auto out = layers::Dense(3)(layers::Concatenate()({a, layers::Add()({a, b})}));
  Model model(in, out);
  model.compile({.optimizer = optimizers::Adam(),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const Tensor data = random::normal({6, 8, 8, 2}, {.seed = 3});
  model.fit(data, Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2}),
            {.batch_size = 3, .epochs = 2, .verbose = 0});
  const auto path = temp_path("functional.safetensors");
  model.save(path);
  Model loaded = load_model(path);
  fs::remove(path);
  EXPECT_EQ(loaded.predict(data).to_vector<float>(), model.predict(data).to_vector<float>());
  ASSERT_EQ(loaded.weights().size(), model.weights().size());
  for (std::size_t i = 0; i < model.weights().size(); ++i) {
    EXPECT_EQ(loaded.weights()[i].name(), model.weights()[i].name());
  }
  // The loaded model trains: regularisers and BN moving statistics came along.
  loaded.compile({.optimizer = optimizers::SGD(),
                  .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  EXPECT_GT(
      loaded.test_on_batch(data, Tensor::from_vector<std::int64_t>({0, 1, 2, 0, 1, 2})).at("loss"),
      0.0);
}

TEST(Saving, SequentialRoundTripsAndWeightsOnly) {
  Sequential model(
      {layers::Dense(5, {.activation = "relu"}), layers::Dropout(0.5f), layers::Dense(2)},
      {.input_shape = Shape{3}});
  const Tensor x = random::normal({4, 3}, {.seed = 4});
  const auto path = temp_path("sequential.safetensors");
  model.save(path);
  EXPECT_EQ(load_model(path).predict(x).to_vector<float>(), model.predict(x).to_vector<float>());
  fs::remove(path);
}

TEST(Saving, WeightsLoadByNameAndMismatchesAreNamed) {
  auto make = [](std::int64_t hidden) {
    auto in = Input({3});
    auto h = layers::Dense(hidden, {.name = "hidden"})(in);
    return Model(in, layers::Dense(2, {.name = "head"})(h));
  };
  Model a = make(4), b = make(4), c = make(5);
  const auto path = temp_path("weights.safetensors");
  a.save_weights(path);
  b.load_weights(path);
  const Tensor x = random::normal({2, 3}, {.seed = 5});
  EXPECT_EQ(b.predict(x).to_vector<float>(), a.predict(x).to_vector<float>());
  try {
    c.load_weights(path);
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "weight 'hidden/kernel' has shape [3, 4] (float32) in the file and [3, 5]"),
              std::string::npos)
        << e.what();
  }
  fs::remove(path);
}

class Net : public LayerImpl {
 public:
  Net() : LayerImpl("Net") { d_ = track(layers::Dense(2)); }
  std::vector<Tensor> call(const std::vector<Tensor>& in, const CallContext& ctx) override {
    return {d_(in[0], ctx)};
  }

 private:
  layers::Dense d_{1};
};

TEST(Saving, SubclassedModelsNeedSaveWeightsAndNewerFormatsAreRefused) {
  Model model = make_model<Net>();
  (void)model(Tensor::zeros({1, 3}));
  EXPECT_THROW(model.save(temp_path("sub.safetensors")), ValueError);
  const auto path = temp_path("future.safetensors");
  io::write_safetensors(
      path, {}, {{"format", "lockstep.model"}, {"format_version", "9"}, {"model_config", "{}"}});
  try {
    load_model(path);
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("format version 9 is newer than this Lockstep reads (2)"),
              std::string::npos);
  }
  fs::remove(path);
}

TEST(Saving, DuplicateLayerNamesAreRejected) {
  auto in = Input({2});
  auto x = layers::Dense(2, {.name = "same"})(in);
  EXPECT_THROW(Model(in, layers::Dense(2, {.name = "same"})(x)), ValueError);
}

}  // namespace
}  // namespace lockstep
