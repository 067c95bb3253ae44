// Writes Lockstep's Keras files for the Keras interop test
// (keras_interop.py): the fixture script's four models (an MLP trained with
// Adam and a top-3 accuracy renamed "top3", a CNN with BatchNormalization and Dropout, a base model
// nested in a head with a shared layer, a Sequential stack), the stack under a
// LossScaleOptimizer, a two-output model compiled with
// Keras's dicts by output name, and a model holding every layer class Lockstep has, each as
// <name>.keras and <name>.weights.h5, and expected.json with a fixed input and the outputs Lockstep
// predicts for it.
//
// usage: keras_writer OUT_DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/lockstep.h"
#include "support/keras_models.h"

namespace ls = lockstep;

namespace {

ls::Model mlp() {
  auto in = ls::Input({64});
  auto x = ls::layers::Dense(32, {.activation = "relu"})(in);
  x = ls::layers::Dense(32, {.activation = "relu"})(x);
  ls::Model m(in, ls::layers::Dense(10)(x));
  m.compile({.optimizer = ls::optimizers::Adam(
                 {.learning_rate = ls::schedules::ExponentialDecay(0.01, 100, 0.9)}),
             .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy",
                         ls::metrics::SparseTopKCategoricalAccuracy({.k = 3, .name = "top3"})}});
  return m;
}

ls::Model cnn() {
  auto in = ls::Input({12, 12, 1});
  auto x = ls::layers::Conv2D(4, {3, 3}, {.activation = "relu"})(in);
  x = ls::layers::BatchNormalization()(x);
  x = ls::layers::MaxPooling2D()(x);
  x = ls::layers::Dropout(0.25f)(x);
  x = ls::layers::Flatten()(x);
  ls::Model m(in, ls::layers::Dense(10)(x));
  m.compile({.optimizer = ls::optimizers::SGD({.learning_rate = 0.01, .momentum = 0.9}),
             .loss = "sparse_categorical_crossentropy",
             .metrics = {"accuracy"}});
  return m;
}

ls::Model nested() {
  auto base_in = ls::Input({16});
  auto b = ls::layers::Dense(8, {.activation = "relu"})(base_in);
  b = ls::layers::BatchNormalization()(b);
  ls::Model base(base_in, b, "base");
  auto in = ls::Input({16});
  ls::layers::Dense shared(8, {.activation = "tanh"});
  auto h = shared(base(in));
  h = ls::layers::Add()({h, shared(h)});
  ls::Model m(in, ls::layers::Dense(1)(ls::layers::Dense(4, {.activation = "relu"})(h)), "head");
  m.compile({.optimizer = ls::optimizers::RMSprop(), .loss = "mse", .metrics = {"mae"}});
  return m;
}

ls::Model sequential() {
  ls::Sequential m({ls::layers::Dense(6, {.activation = "tanh"}),
                    ls::layers::Dense(3, {.activation = "softmax"})},
                   {.input_shape = ls::Shape{8}});
  m.compile({.optimizer = ls::optimizers::Adam(),
             .loss = "sparse_categorical_crossentropy",
             .metrics = {"accuracy"}});
  return m;
}

// Keras 3's LossScaleOptimizer around Adam: a scale near float32's top, so
// that it doubles once in the three steps.
ls::Model loss_scaled() {
  ls::Model m = sequential();
  m.compile({.optimizer = ls::optimizers::LossScaleOptimizer(
                 ls::optimizers::Adam(), {.initial_scale = 0x1p125, .dynamic_growth_steps = 2}),
             .loss = "sparse_categorical_crossentropy",
             .metrics = {"accuracy"}});
  return m;
}

// Built under mixed_float16: float16 layers, and compile's LossScaleOptimizer
// around Adam (Keras 3's auto_scale_loss).
ls::Model mixed_float16() {
  ls::mixed_precision::set_global_policy("mixed_float16");
  ls::Model m = sequential();
  ls::mixed_precision::set_global_policy("float32");
  return m;
}

std::vector<std::int64_t> dims(const ls::Tensor& t) { return t.shape().to_vector(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: keras_writer OUT_DIR\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::filesystem::create_directories(out);
  ls::set_random_seed(7);
  struct Case {
    const char* name;
    ls::Model (*make)();
    std::vector<std::int64_t> sample;
    int classes;  // 0: regression
  };
  const Case cases[] = {{"mlp", mlp, {64}, 10},
                        {"cnn", cnn, {12, 12, 1}, 10},
                        {"nested", nested, {16}, 0},
                        {"sequential", sequential, {8}, 3},
                        {"loss_scaled", loss_scaled, {8}, 3},
                        {"mixed_float16", mixed_float16, {8}, 3}};
  nlohmann::json expected;
  std::uint64_t seed = 1;
  for (const Case& c : cases) {
    ls::Model m = c.make();
    std::vector<std::int64_t> batch = {24};
    batch.insert(batch.end(), c.sample.begin(), c.sample.end());
    const ls::Tensor x_train = ls::random::normal(ls::Shape(batch), {.seed = seed++});
    ls::Tensor y_train;
    if (c.classes > 0) {
      std::vector<std::int64_t> y(24);
      for (std::size_t i = 0; i < y.size(); ++i)
        y[i] = static_cast<std::int64_t>(i * 7 % c.classes);
      y_train = ls::Tensor::from_vector<std::int64_t>(y, ls::Shape({24}));
    } else {
      y_train = ls::random::normal({24, 1}, {.seed = seed++});
    }
    m.fit(x_train, y_train, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    batch[0] = 4;
    const ls::Tensor x = ls::random::normal(ls::Shape(batch), {.seed = seed++});
    const ls::Tensor y = m.predict(x);
    m.save((out / (std::string(c.name) + ".keras")).string());
    m.save_weights((out / (std::string(c.name) + ".weights.h5")).string());
    expected[c.name] = {{"input_shape", dims(x)},
                        {"input", x.to_vector<float>()},
                        {"output_shape", dims(y)},
                        {"output", y.to_vector<float>()},
                        {"iterations", m.optimizer().iterations()}};
    // float16 layers: Keras's kernels round at other places than ours.
    if (std::string(c.name) == "mixed_float16") expected[c.name]["tolerance"] = 2e-3;
    if (m.optimizer()->loss_scaling()) {
      expected[c.name]["dynamic_scale"] = m.optimizer()->dynamic_scale();
      expected[c.name]["step_counter"] = m.optimizer()->loss_scale_step_counter();
    }
  }
  // Two outputs compiled with Keras's forms by output name: losses, loss
  // weights and metrics as dicts (Keras reads them back as given).
  {
    const ls::KerasTensor in = ls::Input({6});
    const ls::KerasTensor h = ls::layers::Dense(8, {.activation = "relu", .name = "trunk"})(in);
    ls::Model two(
        {in}, {ls::layers::Dense(3, {.name = "cls"})(h), ls::layers::Dense(1, {.name = "reg"})(h)});
    two.compile({.optimizer = ls::optimizers::Adam(),
                 .loss_by_output = {{"cls", ls::losses::SparseCategoricalCrossentropy(
                                                {.from_logits = true})},
                                    {"reg", ls::losses::MeanSquaredError()}},
                 .loss_weights_by_output = {{"cls", 1.0}, {"reg", 0.5}},
                 .metrics_by_output = {{"cls", {"accuracy"}}, {"reg", {"mae"}}}});
    std::vector<std::int64_t> ids(24);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 3);
    two.fit({ls::random::normal({24, 6}, {.seed = seed++})},
            {ls::Tensor::from_vector<std::int64_t>(ids, ls::Shape({24})),
             ls::random::normal({24, 1}, {.seed = seed++})},
            {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
    const ls::Tensor x = ls::random::normal({4, 6}, {.seed = seed++});
    const std::vector<ls::Tensor> ys = two.predict(std::vector<ls::Tensor>{x});
    two.save((out / "two_outputs.keras").string());
    two.save_weights((out / "two_outputs.weights.h5").string());
    nlohmann::json outputs = nlohmann::json::array();
    for (const ls::Tensor& y : ys) outputs.push_back(y.to_vector<float>());
    expected["two_outputs"] = {{"input_shape", dims(x)},
                               {"input", x.to_vector<float>()},
                               {"outputs", outputs},
                               {"iterations", two.optimizer().iterations()},
                               {"metrics", {"cls_accuracy", "reg_mae", "cls_loss", "reg_loss"}}};
  }
  // Stateful recurrent layers on an Input of static batch size 4 (which
  // Keras needs to build them): trained with states carried across
  // batches, reset, then predicted from zeros as Keras starts a loaded model.
  {
    const ls::KerasTensor in = ls::Input({5, 3}, ls::DType::kFloat32, "sequences", 4);
    ls::KerasTensor h = ls::layers::LSTM(4, {.return_sequences = true, .stateful = true})(in);
    h = ls::layers::GRU(3, {.stateful = true})(h);
    ls::Model stateful(in, ls::layers::Dense(3)(h));
    stateful.compile({.optimizer = ls::optimizers::Adam(),
                      .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
    std::vector<std::int64_t> ids(24);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i % 3);
    stateful.fit(ls::random::normal({24, 5, 3}, {.seed = seed++}),
                 ls::Tensor::from_vector<std::int64_t>(ids, ls::Shape({24})),
                 {.batch_size = 4, .epochs = 1, .verbose = 0, .shuffle = false});
    stateful.reset_states();
    const ls::Tensor x = ls::random::normal({4, 5, 3}, {.seed = seed++});
    const ls::Tensor y = stateful.predict(x);
    stateful.save((out / "stateful.keras").string());
    stateful.save_weights((out / "stateful.weights.h5").string());
    expected["stateful"] = {{"input_shape", dims(x)},
                            {"input", x.to_vector<float>()},
                            {"output_shape", dims(y)},
                            {"output", y.to_vector<float>()},
                            {"iterations", stateful.optimizer().iterations()}};
  }
  // Every layer class Lockstep has, in one model with two inputs.
  ls::Model every = lockstep::testing_support::every_layer_model();
  every.compile(
      {.optimizer = ls::optimizers::Adam(), .loss = ls::losses::SparseCategoricalCrossentropy()});
  const std::vector<ls::Tensor> xs = lockstep::testing_support::every_layer_inputs(4, 5);
  const ls::Tensor y = every.predict(xs)[0];
  every.save((out / "every_layer.keras").string());
  every.save_weights((out / "every_layer.weights.h5").string());
  nlohmann::json inputs = nlohmann::json::array();
  for (const ls::Tensor& x : xs) {
    const ls::Tensor f = x.to(ls::DType::kFloat32);
    inputs.push_back({{"shape", dims(x)},
                      {"values", f.to_vector<float>()},
                      {"dtype", std::string(ls::dtype_name(x.dtype()))}});
  }
  expected["every_layer"] = {{"inputs", inputs},
                             {"output_shape", dims(y)},
                             {"output", y.to_vector<float>()},
                             {"iterations", 0}};
  std::ofstream(out / "expected.json") << expected.dump();
  return 0;
}
