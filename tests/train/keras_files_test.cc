// Keras's own files: what real Keras 3 wrote (tests/interop/keras_fixtures,
// made by tests/interop/make_keras_fixtures.py) loads and predicts what
// Keras predicted, and continues training as Keras did; what we write
// round-trips bitwise, weights and optimizer state, and continues training
// exactly; damaged and foreign files are named and change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "lockstep/lockstep.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/keras_models.h"
#include "support/weights.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing_support::expect_bitwise;
using testing_support::message_of;
using testing_support::slurp;
using testing_support::spit;
using testing_support::TempDir;
using testing_support::weights;

const fs::path kFixtures = fs::path(LOCKSTEP_SOURCE_DIR) / "tests/interop/keras_fixtures";

const json& expected() {
  static const json j = json::parse(slurp(kFixtures / "expected.json"));
  return j;
}

Tensor tensor_of(const json& e, const std::string& key) {
  return Tensor::from_vector<float>(e.at(key).get<std::vector<float>>(),
                                    Shape(e.at(key + "_shape").get<std::vector<std::int64_t>>()));
}

Tensor labels_of(const json& e) {
  const auto values = e.at("step_y").get<std::vector<double>>();
  const Shape shape(e.at("step_y_shape").get<std::vector<std::int64_t>>());
  if (e.at("step_y_dtype") == "int64") {
    std::vector<std::int64_t> v(values.begin(), values.end());
    return Tensor::from_vector<std::int64_t>(v, shape);
  }
  std::vector<float> v(values.begin(), values.end());
  return Tensor::from_vector<float>(v, shape);
}

// Within `rel` of Keras's numbers (relative, with an absolute floor of rel).
void expect_near_keras(const Tensor& got, const std::vector<float>& want, double rel,
                       const std::string& what) {
  const std::vector<float> g = got.to_vector<float>();
  ASSERT_EQ(g.size(), want.size()) << what;
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], rel * std::max(1.0f, std::abs(want[i]))) << what << " [" << i << "]";
}

// The fixture MLP's architecture, built in C++ (other layer names than
// Keras's: matching is by path, not by name).
Model fixture_mlp() {
  auto in = Input({64});
  auto x = layers::Dense(32, {.activation = "relu"})(in);
  x = layers::Dense(32, {.activation = "relu"})(x);
  return Model(in, layers::Dense(10)(x));
}

class KerasFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasFixture, LoadsAndPredictsWhatKerasPredicted) {
  const json& e = expected().at(GetParam());
  Model m = load_model((kFixtures / (GetParam() + ".keras")).string());
  EXPECT_TRUE(m.compiled()) << "the compile config came along";
  expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                    1e-5, GetParam() + " output");
}

TEST_P(KerasFixture, WeightsFileLoadsIntoTheModelFromItsConfig) {
  const json& e = expected().at(GetParam());
  // The architecture from Keras's config.json, fresh weights, then Keras's
  // .weights.h5 by path.
  const std::vector<io::ZipMember> members =
      io::read_zip((kFixtures / (GetParam() + ".keras")).string());
  Model m = model_from_json(members[1].data, "config.json");
  m.load_weights((kFixtures / (GetParam() + ".weights.h5")).string());
  expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                    1e-5, GetParam() + " output");
}

INSTANTIATE_TEST_SUITE_P(Keras3, KerasFixture,
                         ::testing::Values("mlp", "cnn", "nested", "sequential"));

// One more step from the loaded state lands where Keras's step landed:
// the optimizer's iterations and slots came along (a fresh Adam would move
// the weights by the full learning rate, ~1e-2, and fail this).
class KerasStep : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasStep, OneMoreStepMatchesKerasStep) {
  const json& e = expected().at(GetParam());
  Model m = load_model((kFixtures / (GetParam() + ".keras")).string());
  EXPECT_EQ(m.optimizer().iterations(), 3);
  m.train_on_batch(tensor_of(e, "step_x"), labels_of(e));
  EXPECT_EQ(m.optimizer().iterations(), 4);
  expect_near_keras(m.predict(tensor_of(e, "input")),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    GetParam() + " output after one more step");
}

// Not the CNN: its Dropout draws other masks than Keras's.
INSTANTIATE_TEST_SUITE_P(Keras3, KerasStep, ::testing::Values("mlp", "nested", "sequential"));

// keras.optimizers.Ftrl with every argument set (make_ftrl_keras_fixture.py):
// its config and its accumulator and linear slots load, and one more step
// lands where Keras's did; saved again, the file holds Keras's Ftrl config.
TEST(KerasFiles, AnFtrlModelKerasSavedStepsAsKerasStepped) {
  const json e = json::parse(slurp(kFixtures / "ftrl_expected.json"));
  Model m = load_model((kFixtures / "ftrl.keras").string());
  ASSERT_EQ(m.optimizer()->class_name(), "Ftrl");
  EXPECT_EQ(m.optimizer().iterations(), 3);
  std::map<std::string, double> config;
  for (const auto& [k, v] : m.optimizer()->get_config()) {
    if (const double* d = std::get_if<double>(&v)) config[k] = *d;
  }
  EXPECT_NEAR(config.at("learning_rate"), 0.05, 1e-7);
  EXPECT_NEAR(config.at("learning_rate_power"), -0.6, 1e-12);
  EXPECT_NEAR(config.at("l2_shrinkage_regularization_strength"), 0.02, 1e-12);
  EXPECT_NEAR(config.at("beta"), 0.1, 1e-12);
  expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                    1e-5, "ftrl output");
  m.train_on_batch(tensor_of(e, "step_x"), tensor_of(e, "step_y"));
  expect_near_keras(m.predict(tensor_of(e, "input")),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    "ftrl output after one more step");
  TempDir dir("ftrl_keras");
  const std::string again = dir / "again.keras";
  m.save(again);
  Model back = load_model(again);
  EXPECT_EQ(back.optimizer()->class_name(), "Ftrl");
  EXPECT_EQ(back.optimizer().iterations(), 4);
  expect_bitwise(weights(back), weights(m), "ftrl round trip");
}

// A loss-scaled model's optimizer state against what Keras reached.
void expect_loss_scale_state(const Model& model, const json& want, const std::string& what) {
  EXPECT_EQ(model.optimizer()->dynamic_scale(), want.at("dynamic_scale").get<double>()) << what;
  EXPECT_EQ(model.optimizer()->loss_scale_step_counter(), want.at("step_counter").get<int>())
      << what;
  EXPECT_EQ(model.optimizer().iterations(), want.at("iterations").get<int>()) << what;
}

// keras.optimizers.LossScaleOptimizer around Adam
// (make_loss_scale_keras_fixture.py): Keras's scale, step counter and the
// inner optimizer's iterations load from the file; one more step on a batch
// whose gradients overflow is skipped and halves the scale, as Keras's
// was; saved again, the file holds Keras's wrapper config and state.
TEST(KerasFiles, ALossScaleOptimizerKerasSavedSkipsAndScalesAsKeras) {
  const json e = json::parse(slurp(kFixtures / "loss_scale_expected.json"));
  Model m = load_model((kFixtures / "loss_scale.keras").string());
  ASSERT_TRUE(m.optimizer()->loss_scaling().has_value());
  EXPECT_EQ(m.optimizer()->class_name(), "Adam");
  EXPECT_EQ(m.optimizer()->loss_scaling()->initial_scale, 0x1p126);
  EXPECT_EQ(m.optimizer()->loss_scaling()->dynamic_growth_steps, 2);
  expect_loss_scale_state(m, e.at("saved"), "as saved");
  expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                    1e-5, "loss-scaled model's output");
  std::vector<std::int64_t> labels;
  for (const json& v : e.at("step_y")) labels.push_back(v.get<std::int64_t>());
  m.train_on_batch(tensor_of(e, "step_x"), Tensor::from_vector(labels));
  expect_loss_scale_state(m, e.at("after_step"), "after one more step");
  expect_near_keras(m.predict(tensor_of(e, "input")),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    "loss-scaled model's output after one more step");
  TempDir dir("loss_scale_keras");
  const std::string again = dir / "again.keras";
  m.save(again);
  Model back = load_model(again);
  ASSERT_TRUE(back.optimizer()->loss_scaling().has_value());
  expect_loss_scale_state(back, e.at("after_step"), "saved again");
  expect_bitwise(weights(back), weights(m), "loss-scaled round trip");
}

// A model Keras 3 built under mixed_float16 and compiled with plain SGD,
// which Keras's compile wrapped in a LossScaleOptimizer
// (make_mixed_float16_keras_fixture.py; its first seven steps overflowed
// float16 and were skipped): loaded under the float32 global policy the file
// decides — float16 layers, the optimizer wrapped again (the compile config
// names SGD alone; the variables say it was wrapped) with Keras's scale,
// count and iterations, Keras's outputs within float16's rounding, and one
// more step lands where Keras's did.
TEST(KerasFiles, AMixedFloat16ModelKerasSavedLoadsScaledAndStepsAsKeras) {
  const json e = json::parse(slurp(kFixtures / "mixed_float16_expected.json"));
  Model m = load_model((kFixtures / "mixed_float16.keras").string());
  const std::vector<std::string> policies = e.at("policies").get<std::vector<std::string>>();
  ASSERT_EQ(m.layers().size(), policies.size());
  for (std::size_t i = 1; i < policies.size(); ++i)  // after the InputLayer
    EXPECT_EQ(m.layers()[i].dtype_policy().name, policies[i]) << m.layers()[i].name();
  ASSERT_TRUE(m.optimizer()->loss_scaling().has_value());
  EXPECT_EQ(m.optimizer()->class_name(), "SGD");
  expect_loss_scale_state(m, e.at("saved"), "as saved");
  // TensorFlow's CPU kernels round float16 at other places than one
  // rounding per op: the outputs (|y| < 0.4) differ by a float16 ulp or so
  // (6.1e-5 at 0.11); 5e-4 is eight ulps at 0.25.
  expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                    5e-4, "mixed_float16 model's output");
  m.train_on_batch(tensor_of(e, "step_x"), tensor_of(e, "step_y"));
  expect_loss_scale_state(m, e.at("after_step"), "after one more step");
  expect_near_keras(m.predict(tensor_of(e, "input")),
                    e.at("output_after_step").get<std::vector<float>>(), 5e-4,
                    "mixed_float16 model's output after one more step");
  TempDir dir("mixed_float16_keras");
  m.save(dir / "again.keras");
  Model back = load_model(dir / "again.keras");
  expect_loss_scale_state(back, e.at("after_step"), "saved again");
  expect_bitwise(weights(back), weights(m), "mixed_float16 round trip");
}

// Nadam, Adamax, Adadelta and Lion, each with its arguments away from
// Keras's defaults (make_optimizers_keras_fixture.py): the file's config
// and slots (Nadam's running product too) load, one more step lands where
// Keras's did (within 1e-6; measured within 2e-7), and saved again the file holds what Keras wrote
// — the same count of optimizer variables, so Keras reads it back.
TEST(KerasFiles, NadamAdamaxAdadeltaAndLionStepAsKeras) {
  const json all = json::parse(slurp(kFixtures / "optimizers_expected.json"));
  for (const std::string name : {"Nadam", "Adamax", "Adadelta", "Lion"}) {
    SCOPED_TRACE(name);
    const json& e = all.at(name);
    std::string file = name;
    std::transform(file.begin(), file.end(), file.begin(), ::tolower);
    Model m = load_model((kFixtures / ("optimizer_" + file + ".keras")).string());
    ASSERT_EQ(m.optimizer()->class_name(), name);
    EXPECT_EQ(m.optimizer().iterations(), 3);
    const std::vector<Variable> trainable = m.trainable_weights();
    EXPECT_EQ(m.optimizer()->keras_variables(trainable).size(),
              e.at("optimizer_variables").get<std::size_t>());
    expect_near_keras(m.predict(tensor_of(e, "input")), e.at("output").get<std::vector<float>>(),
                      1e-6, name + " output");
    m.train_on_batch(tensor_of(e, "step_x"), tensor_of(e, "step_y"));
    expect_near_keras(m.predict(tensor_of(e, "input")),
                      e.at("output_after_step").get<std::vector<float>>(), 1e-6,
                      name + " output after one more step");
    TempDir dir(file + "_keras");
    m.save(dir / "again.keras");
    Model back = load_model(dir / "again.keras");
    EXPECT_EQ(back.optimizer()->class_name(), name);
    EXPECT_EQ(back.optimizer().iterations(), 4);
    EXPECT_EQ(back.optimizer()->get_config(), m.optimizer()->get_config());
    expect_bitwise(weights(back), weights(m), name + " round trip");
  }
  // Keras's check on Lion's beta_1, with its words.
  EXPECT_THROW(optimizers::Lion({.beta_1 = 0.0}), Error);
  EXPECT_EQ(Optimizer("nadam")->class_name(), "Nadam");
  EXPECT_EQ(Optimizer("Adadelta")->class_name(), "Adadelta");
}

// A two-output model compiled by Keras 3 with its forms by output
// (make_multi_output_keras_fixture.py): losses, loss_weights and metrics as
// dicts by output name, and losses as a list with metrics as a list of one
// entry per output (["accuracy", ["mse", "mae"]]: accuracy for the first
// output only). Each loads, evaluates to Keras's numbers under Keras's names,
// and saved again keeps the form, so it evaluates the same once more.
TEST(KerasFiles, CompileFormsByOutputEvaluateAsKeras) {
  const json e = json::parse(slurp(kFixtures / "multi_output_expected.json"));
  const Tensor x = tensor_of(e, "x");
  const auto cls = e.at("y_cls").get<std::vector<std::int64_t>>();
  const Tensor y_cls = Tensor::from_vector(cls, Shape{static_cast<std::int64_t>(cls.size())});
  const Tensor y_reg =
      reshape(Tensor::from_vector(e.at("y_reg").get<std::vector<float>>()), {-1, 1});
  for (const std::string form : {"dict", "list"}) {
    SCOPED_TRACE(form);
    const auto want = e.at(form).get<std::map<std::string, double>>();
    auto check = [&](Model& m, const std::string& what) {
      const Logs got = m.evaluate({x}, {y_cls, y_reg}, {.batch_size = 16, .verbose = 0});
      std::set<std::string> names;
      for (const auto& [name, value] : got) names.insert(name);
      std::set<std::string> want_names;
      for (const auto& [name, value] : want) want_names.insert(name);
      EXPECT_EQ(names, want_names) << what;
      for (const auto& [name, value] : want) {
        if (got.contains(name)) {
          EXPECT_NEAR(got.at(name), value, 1e-5 * std::max(1.0, std::abs(value)))
              << what << " " << name;
        }
      }
    };
    Model m = load_model((kFixtures / ("multi_output_" + form + ".keras")).string());
    check(m, "loaded");
    TempDir dir("multi_output_" + form);
    m.save(dir / "again.keras");
    const json saved = json::parse(m.get_compile_config());
    EXPECT_EQ(saved.at("loss").is_object(), form == "dict");
    EXPECT_EQ(saved.at("metrics").is_object(), form == "dict");
    if (form == "list") {
      EXPECT_EQ(saved.at("metrics").at(0), json({"accuracy"}));  // Keras reads ["accuracy"] alike
      EXPECT_EQ(saved.at("metrics").at(1), json({"mse", "mae"}));
    }
    Model back = load_model(dir / "again.keras");
    check(back, "saved again");
  }
}

// The forms by output from C++: a dict naming no output is an error that
// lists the outputs, and a flat metric list in a Keras 3 file with the
// wrong count for the outputs says how Keras 3 reads it.
TEST(KerasFiles, CompileFormsByOutputRefuseWhatKerasRefuses) {
  const KerasTensor in = Input({4});
  const KerasTensor a = layers::Dense(2, {.name = "a"})(in);
  const KerasTensor b = layers::Dense(1, {.name = "b"})(in);
  Model m({in}, {a, b});
  const std::string unknown = message_of([&] {
    m.compile({.loss_by_output = {{"c", losses::MeanSquaredError()}}});
  });
  for (const char* part : {"loss_by_output", "'c'", "a, b"})
    EXPECT_NE(unknown.find(part), std::string::npos) << unknown;
  m.compile({.loss_by_output = {{"b", losses::MeanSquaredError()}},
             .metrics_by_output = {{"a", {"mae"}}}});
  const Logs logs = m.evaluate({Tensor::ones({3, 4})},
                               {Tensor::zeros({3, 2}), Tensor::zeros({3, 1})}, {.verbose = 0});
  EXPECT_TRUE(logs.contains("a_mae"));
  EXPECT_FALSE(logs.contains("a_loss"));  // no loss on "a": it trains through "b" only
  EXPECT_TRUE(logs.contains("b_loss"));
  json config = json::parse(m.get_compile_config());
  config["metrics"] = json::array({"mae"});
  const std::string flat = message_of([&] { m.compile_from_config(config.dump()); });
  for (const char* part : {"1 entries for a model with 2 outputs", "one entry per output"})
    EXPECT_NE(flat.find(part), std::string::npos) << flat;
}

// A classifier fixture of one make_*_keras_fixture.py: Keras's outputs on
// its input within 1e-5, then one more step on its batch (class ids) and
// the outputs after it within 2e-5.
void predicts_and_steps_as_keras(Model& m, const json& e, const std::string& what,
                                 DType input_dtype = DType::kFloat32) {
  auto input = [&](const std::string& key) {
    const Tensor t = tensor_of(e, key);
    return input_dtype == DType::kFloat32 ? t : cast(t, input_dtype);
  };
  expect_near_keras(m.predict(input("input")), e.at("output").get<std::vector<float>>(), 1e-5,
                    what + " output");
  const auto ids = e.at("step_y").get<std::vector<double>>();
  m.train_on_batch(input("step_x"),
                   Tensor::from_vector<std::int64_t>({ids.begin(), ids.end()},
                                                     Shape{static_cast<std::int64_t>(ids.size())}));
  expect_near_keras(m.predict(input("input")), e.at("output_after_step").get<std::vector<float>>(),
                    2e-5, what + " output after one more step");
}

// `m` saved as .keras and loaded back: the same weights, bit for bit, and
// the same architecture; the loaded model, for more checks.
Model saved_and_loaded(const Model& m, const std::string& what) {
  TempDir dir(what + "_keras");
  m.save(dir / "again.keras");
  Model back = load_model(dir / "again.keras");
  expect_bitwise(weights(back), weights(m), what + " round trip");
  EXPECT_EQ(json::parse(back.to_json()), json::parse(m.to_json())) << what;
  return back;
}

// Keras's structured-data model (make_normalization_keras_fixture.py): a
// Normalization adapted before it joined the model keeps its statistics as
// weights (mean, variance, int64 count) and null in its config. They load,
// the model predicts and steps as Keras did, and saved again the layer still
// keeps them as weights.
TEST(KerasFiles, AnAdaptedNormalizationLoadsItsStatisticsFromWeights) {
  const json e = json::parse(slurp(kFixtures / "normalization_expected.json"));
  Model m = load_model((kFixtures / "normalization.keras").string());
  const auto* norm = dynamic_cast<const layers::NormalizationImpl*>(m.layers().at(1).impl().get());
  ASSERT_NE(norm, nullptr);
  const auto mean = e.at("mean").get<std::vector<double>>();
  const auto variance = e.at("variance").get<std::vector<double>>();
  for (std::size_t i = 0; i < mean.size(); ++i) {
    EXPECT_EQ(norm->mean()[i], mean[i]) << i;
    EXPECT_EQ(norm->variance()[i], variance[i]) << i;
  }
  predicts_and_steps_as_keras(m, e, "normalization");
  const Model back = saved_and_loaded(m, "normalization");
  EXPECT_FALSE(back.layers().at(1).impl()->get_config().has("mean"));
}

// Every activation Keras names, each a Dense layer's by its string, and the
// LeakyReLU, ELU and PReLU layers (make_activation_keras_fixture.py): the
// model predicts and takes one more step as Keras did, and saved again it
// loads to the same weights and architecture.
TEST(KerasFiles, EveryActivationPredictsAndStepsAsKeras) {
  const json e = json::parse(slurp(kFixtures / "activations_expected.json"));
  Model m = load_model((kFixtures / "activations.keras").string());
  std::set<std::string> activations;
  for (const Layer& layer : m.layers()) {
    const LayerConfig c = layer.impl()->get_config();
    if (c.has("activation")) activations.insert(c.get<std::string>("activation"));
  }
  // Keras writes its aliases under their own names (swish as silu).
  for (auto name : e.at("activations").get<std::vector<std::string>>()) {
    if (name == "swish" || name == "hard_swish") name = name == "swish" ? "silu" : "hard_silu";
    EXPECT_TRUE(activations.contains(name)) << name;
  }
  predicts_and_steps_as_keras(m, e, "activations");
  saved_and_loaded(m, "activations");
}

// Every Keras initializer with its arguments (make_initializer_keras_fixture.py)
// loads as that initializer with those arguments, and survives our save:
// the file we write names the same ones (Keras's Identity writes no gain,
// so it comes back as 1).
TEST(KerasFiles, InitializersKeepTheirArguments) {
  Model m = load_model((kFixtures / "initializers.keras").string());
  using Args = Initializer::Args;
  const std::map<std::string, std::pair<std::string, Args>> want{
      {"dense_variance_scaling",
       {"variance_scaling", {{"scale", 0.5}, {"mode", "fan_out"}, {"distribution", "uniform"}}}},
      {"dense_variance_scaling_normal",
       {"variance_scaling",
        {{"scale", 2.0}, {"mode", "fan_avg"}, {"distribution", "untruncated_normal"}}}},
      {"dense_orthogonal", {"orthogonal", {{"gain", 2.0}}}},
      {"dense_identity", {"identity", {{"gain", 1.0}}}},
      {"dense_random_normal", {"random_normal", {{"mean", 0.1}, {"stddev", 0.3}}}},
      {"dense_random_uniform", {"random_uniform", {{"minval", -1.0}, {"maxval", 2.0}}}},
      {"dense_truncated_normal", {"truncated_normal", {{"mean", 0.0}, {"stddev", 0.02}}}},
      {"dense_constant", {"constant", {{"value", 0.7}}}},
      {"dense_lecun_uniform", {"lecun_uniform", {}}},
      {"dense_lecun_normal", {"lecun_normal", {}}},
      {"dense_he_uniform", {"he_uniform", {}}},
      {"dense_glorot_normal", {"glorot_normal", {}}},
      {"dense_ones", {"ones", {}}}};
  const Model back = saved_and_loaded(m, "initializers");
  for (const Model* model : {static_cast<const Model*>(&m), &back}) {
    std::size_t seen = 0;
    for (const Layer& layer : model->layers()) {
      const auto it = want.find(layer.name());
      if (it == want.end()) continue;
      ++seen;
      // The layer's config: the initializer's name, its arguments under
      // "kernel_initializer.argument" (what the file is written from).
      const LayerConfig c = layer.impl()->get_config();
      EXPECT_EQ(c.get<std::string>("kernel_initializer"), it->second.first) << layer.name();
      std::size_t arguments = 0;
      for (const auto& [k, v] : c.entries()) arguments += k.rfind("kernel_initializer.", 0) == 0;
      EXPECT_EQ(arguments, it->second.second.size()) << layer.name();
      for (const auto& [key, value] : it->second.second) {
        const std::string k = "kernel_initializer." + key;
        if (const double* d = std::get_if<double>(&value)) {
          EXPECT_NEAR(c.get<double>(k), *d, 1e-6) << layer.name() << " " << key;
        } else {
          EXPECT_EQ(c.get<std::string>(k), std::get<std::string>(value)) << layer.name();
        }
      }
    }
    EXPECT_EQ(seen, want.size());
  }
}

// A text classifier with every sequence layer and LayerNormalization
// (make_sequence_keras_fixture.py): it predicts and steps as Keras did, and
// saved again loads to the same weights and architecture.
TEST(KerasFiles, ASequenceModelPredictsAndStepsAsKeras) {
  const json e = json::parse(slurp(kFixtures / "sequence_expected.json"));
  Model m = load_model((kFixtures / "sequence.keras").string());
  predicts_and_steps_as_keras(m, e, "sequence", DType::kInt32);
  saved_and_loaded(m, "sequence");
}

// Keras's merging layers (make_merge_keras_fixture.py): they predict and
// step as Keras did, and survive our save.
TEST(KerasFiles, MergeLayersPredictAndStepAsKeras) {
  const json e = json::parse(slurp(kFixtures / "merge_expected.json"));
  Model m = load_model((kFixtures / "merge.keras").string());
  predicts_and_steps_as_keras(m, e, "merge");
  saved_and_loaded(m, "merge");
}

// Keras's recurrent layers over an Embedding (make_recurrent_keras_fixture.py):
// LSTM, TimeDistributed Dense, GRU both ways of reset_after, SimpleRNN going
// backwards, Bidirectional concatenated and summed. They predict and step as
// Keras did, and survive our save (the cell's weights under cell/vars, a
// Bidirectional's layers under forward_layer and backward_layer, a
// TimeDistributed's under layer).
TEST(KerasFiles, RecurrentLayersPredictAndStepAsKeras) {
  const json e = json::parse(slurp(kFixtures / "recurrent_expected.json"));
  Model m = load_model((kFixtures / "recurrent.keras").string());
  predicts_and_steps_as_keras(m, e, "recurrent", DType::kInt32);
  saved_and_loaded(m, "recurrent");
}

// A small transformer encoder Keras saved (make_attention_keras_fixture.py):
// MultiHeadAttention for self-attention and with a separate key, value_dim
// and output_shape, EinsumDense with and without a bias, LayerNormalization
// and gelu. It predicts and steps as Keras did, and survives our save (the
// heads' projections under query_dense ... output_dense).
TEST(KerasFiles, AttentionLayersPredictAndStepAsKeras) {
  const json e = json::parse(slurp(kFixtures / "attention_expected.json"));
  Model m = load_model((kFixtures / "attention.keras").string());
  predicts_and_steps_as_keras(m, e, "attention", DType::kInt32);
  saved_and_loaded(m, "attention");
}

// Keras's masks (make_masking_keras_fixture.py): token sequences padded
// with 0 through Embedding(mask_zero=True) into the recurrent layers
// (Bidirectional's zero_output_for_mask among them) and pooling over the
// real steps; into MultiHeadAttention, a causal one (use_causal_mask, a
// call argument in Keras's file) and Attention dot and additive; and float
// sequences through Masking. Each predicts and steps as Keras did, and
// survives our save (mask_zero, zero_output_for_mask and use_causal_mask
// written back).
TEST(KerasFiles, MaskedModelsPredictAndStepAsKeras) {
  for (const std::string name : {"masked_recurrent", "masked_attention", "masked_floats"}) {
    SCOPED_TRACE(name);
    const json e = json::parse(slurp(kFixtures / (name + "_expected.json")));
    Model m = load_model((kFixtures / (name + ".keras")).string());
    predicts_and_steps_as_keras(m, e, name,
                                name == "masked_floats" ? DType::kFloat32 : DType::kInt32);
    saved_and_loaded(m, name);
  }
}

// The recurrent layers in Keras's legacy HDF5 format
// (make_legacy_recurrent_keras_fixture.py): the file names no modules, so
// the NotEqual that made Embedding(mask_zero=True)'s mask is listed as a
// layer and skipped by its class; the LSTM's and the Bidirectional GRU's
// weights sit under their cells' names. It predicts and steps as Keras did.
TEST(KerasFiles, RecurrentLayersLoadFromALegacyH5) {
  const json e = json::parse(slurp(kFixtures / "recurrent_legacy_expected.json"));
  Model m = load_model((kFixtures / "recurrent_legacy.h5").string());
  predicts_and_steps_as_keras(m, e, "recurrent_legacy", DType::kInt32);
  saved_and_loaded(m, "recurrent_legacy");
}

// A Bidirectional decoder started from a Bidirectional encoder's four final
// states (make_bidirectional_states_keras_fixture.py): Keras's
// initial_state split in half between the two layers, read from the file
// and written back.
TEST(KerasFiles, BidirectionalStartsFromInitialStatesAsKeras) {
  const json e = json::parse(slurp(kFixtures / "bidirectional_states_expected.json"));
  Model m = load_model((kFixtures / "bidirectional_states.keras").string());
  predicts_and_steps_as_keras(m, e, "bidirectional_states");
  saved_and_loaded(m, "bidirectional_states");
}

// MultiHeadAttention given an explicit attention_mask, a model input
// (make_attention_mask_keras_fixture.py), joined with the Embedding's
// padding mask and, in the second, the causal mask: read as the layer's
// last input, it predicts and steps as Keras did, and is written back as
// Keras's attention_mask argument.
TEST(KerasFiles, AnAttentionMaskArgumentIsKerasOwn) {
  const json e = json::parse(slurp(kFixtures / "attention_mask_expected.json"));
  Model m = load_model((kFixtures / "attention_mask.keras").string());
  const std::vector<Tensor> x{cast(tensor_of(e, "tokens"), DType::kInt32), tensor_of(e, "allowed")};
  expect_near_keras(m.predict(x, {.verbose = 0}).at(0), e.at("output").get<std::vector<float>>(),
                    1e-5, "attention_mask output");
  const auto ids = e.at("step_y").get<std::vector<std::int64_t>>();
  m.fit(std::vector<Tensor>{cast(tensor_of(e, "step_tokens"), DType::kInt32),
                            tensor_of(e, "step_allowed")},
        {Tensor::from_vector<std::int64_t>(ids, Shape{8})},
        {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  expect_near_keras(m.predict(x, {.verbose = 0}).at(0),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    "attention_mask output after one more step");
  const Model back = saved_and_loaded(m, "attention_mask");
  const json config = json::parse(back.to_json());
  int with_mask = 0;
  for (const json& layer : config.at("config").at("layers")) {
    if (layer.at("class_name") == "MultiHeadAttention")
      with_mask += layer.at("inbound_nodes").at(0).at("kwargs").contains("attention_mask");
  }
  EXPECT_EQ(with_mask, 2);
}

// MultiHeadAttention over several axes (make_attention_axes_keras_fixture.py):
// over both axes of an image with an attention_mask input, over its second
// axis with the scores returned, over axes (1, 3) of a rank-5 input. The
// model predicts and steps as Keras did; the scores are Keras's, in its
// layout; the axes are written back.
TEST(KerasFiles, AttentionOverSeveralAxesIsKerasOwn) {
  const json e = json::parse(slurp(kFixtures / "attention_axes_expected.json"));
  Model m = load_model((kFixtures / "attention_axes.keras").string());
  const std::vector<Tensor> x{tensor_of(e, "image"), tensor_of(e, "allowed")};
  expect_near_keras(m.predict(x, {.verbose = 0}).at(0), e.at("output").get<std::vector<float>>(),
                    1e-5, "attention_axes output");
  const Layer rows = m.get_layer("rows");
  const std::vector<Tensor> scored = rows->apply({x[0], x[0]}, {}, {});
  ASSERT_EQ(scored.size(), 2u);
  EXPECT_EQ(scored[1].shape(), Shape(e.at("rows_scores_shape").get<std::vector<std::int64_t>>()));
  expect_near_keras(scored[1], e.at("rows_scores").get<std::vector<float>>(), 1e-5,
                    "attention scores over axis 2");
  const auto ids = e.at("step_y").get<std::vector<std::int64_t>>();
  m.fit(std::vector<Tensor>{tensor_of(e, "step_image"), tensor_of(e, "step_allowed")},
        {Tensor::from_vector<std::int64_t>(ids, Shape{8})},
        {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  expect_near_keras(m.predict(x, {.verbose = 0}).at(0),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    "attention_axes output after one more step");
  const Model back = saved_and_loaded(m, "attention_axes");
  std::vector<json> axes;
  const json config = json::parse(back.to_json());
  for (const json& layer : config.at("config").at("layers")) {
    if (layer.at("class_name") == "MultiHeadAttention")
      axes.push_back(layer.at("config").at("attention_axes"));
  }
  EXPECT_EQ(axes, (std::vector<json>{json{1, 2}, json{2}, json{1, 3}}));
}

// Stateful recurrent layers (make_stateful_keras_fixture.py) on an Input
// of static batch size 8: loaded with zero states (Keras saves none), a
// first predict is Keras's; a second starts from the states the first
// left, a step from those the second left, and a predict after it — all
// Keras's. reset_states() starts again from zeros; a batch of another size
// is refused by name; the batch size is written back.
TEST(KerasFiles, StatefulLayersCarryStatesAsKeras) {
  const json e = json::parse(slurp(kFixtures / "stateful_expected.json"));
  Model m = load_model((kFixtures / "stateful.keras").string());
  const Tensor x = tensor_of(e, "input");
  const Tensor first = m.predict(x, {.verbose = 0});
  expect_near_keras(first, e.at("output").get<std::vector<float>>(), 1e-5, "stateful output");
  expect_near_keras(m.predict(x, {.verbose = 0}), e.at("output_again").get<std::vector<float>>(),
                    1e-5, "stateful output from the states the first call left");
  const auto ids = e.at("step_y").get<std::vector<std::int64_t>>();
  m.train_on_batch(tensor_of(e, "step_x"), Tensor::from_vector<std::int64_t>(ids, Shape{8}));
  expect_near_keras(m.predict(x, {.verbose = 0}),
                    e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                    "stateful output after one more step");
  const Model back = saved_and_loaded(m, "stateful");
  const json config = json::parse(back.to_json());
  EXPECT_EQ(config.at("config").at("layers").at(0).at("config").at("batch_shape"), (json{8, 5, 3}));
  int stateful = 0;
  for (const json& layer : config.at("config").at("layers"))
    stateful += layer.at("config").value("stateful", false);
  EXPECT_EQ(stateful, 3);
  // From zeros again: the first call's outputs, bitwise.
  Model again = load_model((kFixtures / "stateful.keras").string());
  const Tensor fresh = again.predict(x, {.verbose = 0});
  (void)again.predict(x, {.verbose = 0});
  again.reset_states();
  expect_bitwise({again.predict(x, {.verbose = 0}).to_vector<float>()}, {fresh.to_vector<float>()},
                 "after reset_states()");
  testing_support::expect_error_containing<ValueError>(
      [&] { (void)again.predict(x.view_rows(0, 4), {.verbose = 0}); },
      "is stateful: its states hold a batch of 8, these sequences a batch of 4");
}

// An output that carries a Keras mask (make_masked_output_keras_fixture.py):
// a sequence tagger (Embedding(mask_zero=True) → LSTM → Dense logits per
// step, sparse cross-entropy and accuracy) and a regression per step under
// Masking (mean squared error, mean absolute error). Keras weights the loss
// and the metrics by the mask (the mean over the real steps); evaluate, a
// step's logs and the weights after it agree with Keras's.
TEST(KerasFiles, AMaskedOutputWeightsLossAndMetricsAsKeras) {
  for (const std::string name : {"masked_output_tagger", "masked_output_regression"}) {
    SCOPED_TRACE(name);
    const json e = json::parse(slurp(kFixtures / (name + "_expected.json")));
    Model m = load_model((kFixtures / (name + ".keras")).string());
    const bool tokens = name == "masked_output_tagger";
    auto input = [&](const std::string& key) {
      const Tensor t = tensor_of(e, key);
      return tokens ? cast(t, DType::kInt32) : t;
    };
    const Tensor y =
        tokens ? cast(tensor_of(e, "train_y"), DType::kInt64) : tensor_of(e, "train_y");
    expect_near_keras(m.predict(input("input")), e.at("output").get<std::vector<float>>(), 1e-5,
                      name + " output");
    const Tensor x = input("train_x");
    const Logs evaluated = m.evaluate(x, y, {.batch_size = 8, .verbose = 0});
    for (const auto& [metric, value] : e.at("evaluate").items())
      EXPECT_NEAR(evaluated.at(metric), value.get<double>(), 2e-6) << "evaluate " << metric;
    const Logs step = m.train_on_batch(x.view_rows(0, 8), y.view_rows(0, 8));
    for (const auto& [metric, value] : e.at("step_logs").items())
      EXPECT_NEAR(step.at(metric), value.get<double>(), 2e-6) << "train_on_batch " << metric;
    expect_near_keras(m.predict(input("input")),
                      e.at("output_after_step").get<std::vector<float>>(), 2e-5,
                      name + " output after one more step");
    saved_and_loaded(m, name);
  }
}

// Layers with several outputs (make_states_keras_fixture.py): LSTM, GRU,
// SimpleRNN and Bidirectional with return_state, MultiHeadAttention and
// Attention with return_attention_scores (a call argument in Keras's file),
// each output read by later layers through its index in the file. The
// model predicts and steps as Keras did, and survives our save.
TEST(KerasFiles, LayersWithSeveralOutputsPredictAndStepAsKeras) {
  const json e = json::parse(slurp(kFixtures / "states_expected.json"));
  Model m = load_model((kFixtures / "states.keras").string());
  predicts_and_steps_as_keras(m, e, "states", DType::kInt32);
  saved_and_loaded(m, "states");
}

// Metrics with settings, as Keras 3 compiled and saved them
// (make_metrics_keras_fixture.py): each arrives with its threshold, k,
// num_thresholds, label_smoothing and name, evaluates to Keras's numbers,
// and is written back with them; AUC's PR curve, which Lockstep lacks, is
// refused by name.
TEST(KerasFiles, MetricSettingsSurviveLoadingAndSaving) {
  const json e = json::parse(slurp(kFixtures / "metrics_expected.json"));
  const Tensor x = tensor_of(e, "x");
  const auto yb = e.at("y_binary").get<std::vector<float>>();
  const auto yc = e.at("y_classes").get<std::vector<std::int64_t>>();
  struct Case {
    const char* file;
    const char* key;
    Tensor y;
  };
  for (const Case& c :
       {Case{"metrics_binary.keras", "binary",
             Tensor::from_vector(yb, Shape{static_cast<std::int64_t>(yb.size()), 1})},
        Case{"metrics_topk.keras", "topk", Tensor::from_vector(yc)}}) {
    SCOPED_TRACE(c.file);
    Model m = load_model((kFixtures / c.file).string());
    const Logs got = m.evaluate(x, c.y, {.batch_size = 64, .verbose = 0});
    for (const auto& [name, want] : e.at(c.key).items()) {
      ASSERT_TRUE(got.contains(name)) << "no metric named " << name;
      EXPECT_NEAR(got.at(name), want.get<double>(), 1e-5) << name;
    }
    TempDir dir("metric_settings");
    m.save(dir / "again.keras");
    Model back = load_model(dir / "again.keras");
    EXPECT_EQ(json::parse(back.get_compile_config())["metrics"],
              json::parse(m.get_compile_config())["metrics"]);
    const Logs again = back.evaluate(x, c.y, {.batch_size = 64, .verbose = 0});
    for (const auto& [name, value] : got) EXPECT_EQ(again.at(name), value) << name;
  }
  const json binary = json::parse(
      load_model((kFixtures / "metrics_binary.keras").string()).get_compile_config())["metrics"];
  EXPECT_EQ(binary[0]["config"]["threshold"], 0.7);
  EXPECT_EQ(binary[1]["config"]["num_thresholds"], 50);
  EXPECT_EQ(binary[3]["config"]["name"], "rec");
  try {
    (void)load_model((kFixtures / "metrics_auc_pr.keras").string());
    ADD_FAILURE() << "AUC(curve=\"PR\") loaded";
  } catch (const ValueError& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("metrics_auc_pr.keras"), std::string::npos) << what;
    EXPECT_NE(what.find("curve = \"PR\""), std::string::npos) << what;
  }
}

// Keras's reshaping and combining layers (make_reshaping_keras_fixture.py):
// Cropping2D, UpSampling2D nearest and bilinear, Permute, RepeatVector, Dot
// with axes and normalize. They predict and step as Keras did, and survive
// our save.
TEST(KerasFiles, ReshapingLayersPredictAndStepAsKeras) {
  const json e = json::parse(slurp(kFixtures / "reshaping_expected.json"));
  Model m = load_model((kFixtures / "reshaping.keras").string());
  predicts_and_steps_as_keras(m, e, "reshaping");
  saved_and_loaded(m, "reshaping");
}

// SeparableConv2D (make_conv_keras_fixtures.py): strides 2 with "same"
// padding, depth_multiplier 2, a ReLU and a random bias, then one without a
// bias on a 2×3 window. Its depthwise and pointwise kernels load from
// Keras's file, it predicts and steps as Keras did, and survives our save.
TEST(KerasFiles, SeparableConv2DPredictsAndStepsAsKeras) {
  const json e = json::parse(slurp(kFixtures / "separable_expected.json"));
  Model m = load_model((kFixtures / "separable.keras").string());
  predicts_and_steps_as_keras(m, e, "separable");
  saved_and_loaded(m, "separable");
}

// Conv2DTranspose (make_conv_keras_fixtures.py): "same" with
// strides 2 and a ReLU, then "valid" with a 2×3 window and no bias. Its
// kernels [kh, kw, filters, in] load from Keras's file, it predicts and
// steps as Keras did, and survives our save.
TEST(KerasFiles, Conv2DTransposePredictsAndStepsAsKeras) {
  const json e = json::parse(slurp(kFixtures / "conv_transpose_expected.json"));
  Model m = load_model((kFixtures / "conv_transpose.keras").string());
  predicts_and_steps_as_keras(m, e, "conv_transpose");
  saved_and_loaded(m, "conv_transpose");
}

TEST(KerasFiles, TheFixtureMlpKeepsItsCompileSettings) {
  Model m = load_model((kFixtures / "mlp.keras").string());
  EXPECT_EQ(m.optimizer()->class_name(), "Adam");
  EXPECT_NEAR(m.optimizer().learning_rate(), 0.01, 1e-8);
  std::vector<std::string> names;
  for (const Metric& metric : m.metrics()) names.push_back(metric.name());
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "accuracy"}));
}

TEST(KerasFiles, LegacyH5LoadsAsAModelAndAsWeights) {
  const json& e = expected().at("mlp");
  const auto want = e.at("output").get<std::vector<float>>();
  const std::string legacy = (kFixtures / "mlp_legacy.h5").string();
  Model whole = load_model(legacy);
  expect_near_keras(whole.predict(tensor_of(e, "input")), want, 1e-5, "load_model(.h5)");
  EXPECT_EQ(whole.optimizer().iterations(), 3);

  Model by_position = fixture_mlp();
  by_position.load_weights(legacy);
  expect_near_keras(by_position.predict(tensor_of(e, "input")), want, 1e-5, "by position");

  // by_name: the file's layers are dense, dense_1, dense_2.
  auto in = Input({64});
  auto x = layers::Dense(32, {.activation = "relu", .name = "dense"})(in);
  x = layers::Dense(32, {.activation = "relu", .name = "dense_1"})(x);
  Model by_name(in, layers::Dense(10, {.name = "dense_2"})(x));
  by_name.load_weights(legacy, {.by_name = true});
  expect_near_keras(by_name.predict(tensor_of(e, "input")), want, 1e-5, "by name");
}

TEST(KerasFiles, LegacySkipMismatchSkipsOnlyTheLayerThatDoesNotFit) {
  auto in = Input({64});
  auto x = layers::Dense(32, {.activation = "relu", .name = "dense"})(in);
  x = layers::Dense(32, {.activation = "relu", .name = "dense_1"})(x);
  Model m(in, layers::Dense(7, {.name = "dense_2"})(x));  // 7 outputs: does not fit
  const std::string legacy = (kFixtures / "mlp_legacy.h5").string();
  const auto before = weights(m);
  EXPECT_THROW(m.load_weights(legacy, {.by_name = true}), ValueError);
  expect_bitwise(weights(m), before, "a failed load changes nothing");
  m.load_weights(legacy, {.by_name = true, .skip_mismatch = true});
  const auto after = weights(m);
  EXPECT_NE(after[0], before[0]);  // dense/kernel loaded
  EXPECT_EQ(after[4], before[4]);  // dense_2/kernel skipped
}

Model trained_mlp(const distribute::Strategy& strategy, std::uint64_t seed) {
  Model m;
  {
    auto scope = strategy.scope();
    set_random_seed(seed);
    m = fixture_mlp();
    m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.003}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .metrics = {"accuracy"}});
  }
  return m;
}

Tensor batch_x(int k) {
  return random::normal({16, 64}, {.seed = 100 + static_cast<std::uint64_t>(k)});
}
Tensor batch_y(int k) {
  std::vector<std::int64_t> y(16);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>((i * 7 + k) % 10);
  return Tensor::from_vector<std::int64_t>(y, Shape({16}));
}

// Steps [from, to) of a fixed sequence of batches, through fit (which runs
// every replica of the model's strategy).
void train_steps(Model& m, int from, int to) {
  std::vector<Tensor> xs, ys;
  for (int k = from; k < to; ++k) {
    xs.push_back(batch_x(k));
    ys.push_back(batch_y(k));
  }
  m.fit(concat(xs, 0), concat(ys, 0),
        {.batch_size = 16, .epochs = 1, .verbose = 0, .shuffle = false});
}

// Save after 3 steps, load, run 5 more: bitwise what 8 uninterrupted steps
// give, under one replica and under two.
class KerasResume : public ::testing::TestWithParam<int> {};

TEST_P(KerasResume, FiveMoreStepsAreBitwiseTheUninterruptedRun) {
  const int replicas = GetParam();
  // Two replicas on the host's cores, a fresh strategy for each model.
  auto strategy = [&] {
    return replicas == 1 ? distribute::Strategy()
                         : distribute::Strategy(distribute::MirroredStrategy(
                               {.devices = {&host_device()}, .replicas_per_device = 2}));
  };
  TempDir dir("lockstep_keras");
  const std::string path = dir / "m.keras";
  Model straight = trained_mlp(strategy(), 11);
  Model first = trained_mlp(strategy(), 11);
  train_steps(straight, 0, 3);
  train_steps(first, 0, 3);
  first.save(path);
  Model resumed;
  {
    auto scope = strategy().scope();
    resumed = load_model(path);
  }
  expect_bitwise(weights(resumed), weights(first), "weights after the round trip");
  const auto slots = [](const Model& m) {
    std::vector<std::vector<float>> out;
    for (const Tensor& t : m.optimizer()->keras_variables(m.impl()->trainable_weights()))
      out.push_back(t.to(DType::kFloat32).to_vector<float>());
    return out;
  };
  expect_bitwise(slots(resumed), slots(first), "optimizer variables after the round trip");
  EXPECT_EQ(resumed.distribute_strategy().num_replicas_in_sync(), replicas);
  train_steps(straight, 3, 8);
  train_steps(resumed, 3, 8);
  expect_bitwise(weights(resumed), weights(straight), "5 steps after the resume");
}

INSTANTIATE_TEST_SUITE_P(Replicas, KerasResume, ::testing::Values(1, 2));

TEST(KerasFiles, NestedModelsAndSharedLayersRoundTrip) {
  auto base_in = Input({6});
  auto b = layers::Dense(5, {.activation = "relu"})(base_in);
  b = layers::BatchNormalization()(b);
  Model base(base_in, b, "base");
  auto in = Input({6});
  layers::Dense shared(5, {.activation = "tanh"});
  auto h = shared(base(in));
  h = layers::Add()({h, shared(h)});
  Model head(in, layers::Dense(2)(h), "head");
  head.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9}),
                .loss = losses::MeanSquaredError()});
  const Tensor x = random::normal({8, 6}, {.seed = 9});
  head.train_on_batch(x, random::normal({8, 2}, {.seed = 10}));
  TempDir dir("lockstep_keras");
  head.save(dir / "head.keras");
  Model back = load_model(dir / "head.keras");
  EXPECT_EQ(back.predict(x).to_vector<float>(), head.predict(x).to_vector<float>());
  expect_bitwise(weights(back), weights(head), "nested weights");
  EXPECT_EQ(back.get_layer("base").count_params(), base.count_params());
}

TEST(KerasFiles, SeveralOutputsKeepTheirLossesAndOrder) {
  auto in = Input({5});
  auto h = layers::Dense(4, {.activation = "relu"})(in);
  auto a = layers::Dense(3, {.name = "class_head"})(h);
  auto b = layers::Dense(1, {.name = "value_head"})(h);
  Model m({in}, {a, b}, "two_heads");
  m.compile({.optimizer = optimizers::Adam(),
             .losses = {losses::SparseCategoricalCrossentropy({.from_logits = true}),
                        losses::MeanSquaredError()},
             .loss_weights = {1.0, 0.5}});
  TempDir dir("lockstep_keras");
  m.save(dir / "heads.keras");
  Model back = load_model(dir / "heads.keras");
  const Tensor x = random::normal({3, 5}, {.seed = 2});
  const std::vector<Tensor> want = m.predict(std::vector<Tensor>{x});
  const std::vector<Tensor> got = back.predict(std::vector<Tensor>{x});
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].to_vector<float>(), want[0].to_vector<float>());
  EXPECT_EQ(got[1].to_vector<float>(), want[1].to_vector<float>());
  const json compile = json::parse(back.get_compile_config());
  EXPECT_EQ(compile["loss"][0]["class_name"], "SparseCategoricalCrossentropy");
  EXPECT_EQ(compile["loss"][1]["class_name"], "MeanSquaredError");
  EXPECT_EQ(compile["loss_weights"], json::array({1.0, 0.5}));
}

TEST(KerasFiles, EveryLayerClassRoundTrips) {
  Model m = testing_support::every_layer_model();
  m.compile({.optimizer = optimizers::Adam(), .loss = losses::SparseCategoricalCrossentropy()});
  const std::vector<Tensor> x = testing_support::every_layer_inputs(5, 3);
  TempDir dir("lockstep_keras");
  m.save(dir / "every.keras");
  Model back = load_model(dir / "every.keras");
  EXPECT_EQ(back.predict(x)[0].to_vector<float>(), m.predict(x)[0].to_vector<float>());
  // The architecture, layer by layer, is what was saved: Keras's JSON of
  // the loaded model is the saved one's.
  EXPECT_EQ(json::parse(back.to_json()), json::parse(m.to_json()));
}

// RandomFlip and RandomRotation as Keras 3 saved them
// (tests/interop/make_image_fixtures.py): every setting arrives, and saving
// again writes the same architecture.
TEST(KerasFiles, KerasAugmentationLayersLoadWithTheirSettings) {
  const fs::path file =
      fs::path(LOCKSTEP_SOURCE_DIR) / "tests/interop/image_fixtures/keras_layers.keras";
  Model m = load_model(file.string());
  const std::vector<Layer> ls = m.layers();
  ASSERT_GE(ls.size(), 4u);
  auto* flip = dynamic_cast<layers::RandomFlipImpl*>(ls[0].impl().get());
  auto* rotation = dynamic_cast<layers::RandomRotationImpl*>(ls[1].impl().get());
  auto* flip_default = dynamic_cast<layers::RandomFlipImpl*>(ls[2].impl().get());
  auto* rotation_default = dynamic_cast<layers::RandomRotationImpl*>(ls[3].impl().get());
  ASSERT_TRUE(flip && rotation && flip_default && rotation_default);
  EXPECT_EQ(flip->mode(), "horizontal");
  EXPECT_EQ(flip->get_config().get<std::int64_t>("seed"), 3);
  EXPECT_EQ(flip_default->mode(), "horizontal_and_vertical");
  EXPECT_FALSE(flip_default->get_config().has("seed"));
  EXPECT_EQ(rotation->factor(), (std::array<double, 2>{-0.2, 0.3}));
  const LayerConfig rc = rotation->get_config();
  EXPECT_EQ(rc.get<std::string>("fill_mode"), "constant");
  EXPECT_EQ(rc.get<double>("fill_value"), 1.5);
  EXPECT_EQ(rc.get<std::string>("interpolation"), "nearest");
  EXPECT_EQ(rc.get<std::int64_t>("seed"), 5);
  EXPECT_EQ(rotation_default->factor(), (std::array<double, 2>{-0.1, 0.1}));
  EXPECT_EQ(rotation_default->get_config().get<std::string>("fill_mode"), "reflect");
  TempDir dir("lockstep_keras");
  m.save(dir / "again.keras");
  // The same layers (a Sequential's InputLayer takes a fresh name on loading).
  json again = json::parse(load_model(dir / "again.keras").to_json())["config"]["layers"];
  json first = json::parse(m.to_json())["config"]["layers"];
  again.erase(0);
  first.erase(0);
  EXPECT_EQ(again, first);
}

// A user's layer, registered by class name (Keras's
// register_keras_serializable): saved under "lockstep>Scale".
class ScaleImpl : public SingleInputLayerImpl {
 public:
  explicit ScaleImpl(double factor, std::string name = "")
      : SingleInputLayerImpl("Scale", std::move(name)), factor_(factor) {}
  Tensor call(const Tensor& x, const CallContext&) override {
    return mul(x, Tensor::scalar(static_cast<float>(factor_)));
  }
  LayerConfig get_config() const override {
    LayerConfig c = LayerImpl::get_config();
    c.set("factor", factor_);
    return c;
  }

 private:
  double factor_;
};

TEST(KerasFiles, RegisteredLayersAreSavedUnderTheLockstepPackage) {
  register_layer("Scale", [](const LayerConfig& c) {
    return make_layer<ScaleImpl>(c.get<double>("factor"), c.get_or<std::string>("name", ""));
  });
  auto in = Input({3});
  Model m(in, make_layer<ScaleImpl>(2.5)(layers::Dense(3)(in)));
  TempDir dir("lockstep_keras");
  m.save(dir / "scale.keras");
  const json config = json::parse(io::read_zip(dir / "scale.keras")[1].data);
  EXPECT_EQ(config["config"]["layers"][2]["registered_name"], "lockstep>Scale");
  Model back = load_model(dir / "scale.keras");
  const Tensor x = random::normal({2, 3}, {.seed = 1});
  EXPECT_EQ(back.predict(x).to_vector<float>(), m.predict(x).to_vector<float>());
}

// A Keras Lambda holds Python code: without a C++ layer registered under
// its name it is refused with the way to supply one; with register_lambda
// the model loads, predicts and steps as Keras did
// (make_lambda_keras_fixture.py: x * 2 between two Dense layers).
TEST(KerasFiles, ALambdaLoadsWithTheCxxLayerRegisteredUnderItsName) {
  const std::string file = (kFixtures / "lambda.keras").string();
  const std::string refused = message_of([&] { (void)load_model(file); });
  EXPECT_NE(refused.find("layer 'double' (Lambda): a Lambda layer holds Python code"),
            std::string::npos)
      << refused;
  EXPECT_NE(refused.find("register_lambda(\"double\", factory)"), std::string::npos) << refused;
  register_lambda("double", [](const LayerConfig& c) {
    return make_layer<ScaleImpl>(2.0, c.get<std::string>("name"));
  });
  const json e = json::parse(slurp(kFixtures / "lambda_expected.json"));
  Model m = load_model(file);
  predicts_and_steps_as_keras(m, e, "lambda");
}

// Saved under two replicas, loaded under one: training continues (within
// float rounding: one replica sums the batch's gradient in another order).
TEST(KerasFiles, AModelSavedUnderTwoReplicasTrainsOnUnderOne) {
  auto two = distribute::Strategy(
      distribute::MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = 2}));
  Model first = trained_mlp(two, 12);
  Model straight = trained_mlp(two, 12);
  train_steps(first, 0, 3);
  train_steps(straight, 0, 3);
  TempDir dir("lockstep_keras");
  first.save(dir / "two.keras");
  Model resumed = load_model(dir / "two.keras");
  EXPECT_EQ(resumed.distribute_strategy().num_replicas_in_sync(), 1);
  expect_bitwise(weights(resumed), weights(first), "weights after the round trip");
  train_steps(straight, 3, 8);
  train_steps(resumed, 3, 8);
  testing_support::expect_close(weights(resumed), weights(straight), 1e-5,
                                "5 steps under one replica against two");
}

TEST(KerasFiles, LearningRateSchedulesRoundTrip) {
  TempDir dir("lockstep_keras");
  const std::vector<LearningRateSchedule> made = {
      schedules::ExponentialDecay(0.01, 100, 0.9, true),
      schedules::PiecewiseConstantDecay({10, 20}, {0.1, 0.01, 0.001}),
      schedules::CosineDecay(0.1, 50, {.alpha = 0.1, .warmup_target = 0.2, .warmup_steps = 5}),
      schedules::PolynomialDecay(0.1, 40, 0.001, 2.0, true),
      schedules::RampUp({.start = 1e-4, .max = 1e-2, .rampup = 3, .steps_per_unit = 7})};
  for (const LearningRateSchedule& schedule : made) {
    Model m = fixture_mlp();
    m.compile({.optimizer = optimizers::SGD({.learning_rate = schedule}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    m.save(dir / "s.keras");
    Model back = load_model(dir / "s.keras");
    EXPECT_EQ(back.optimizer()->learning_rate_schedule().name(), schedule.name());
    for (std::int64_t step : {0, 1, 4, 9, 10, 11, 25, 60, 1000})
      EXPECT_EQ(back.optimizer()->learning_rate_schedule()(step), schedule(step))
          << schedule.name() << " at step " << step;
  }
  // A bare function has no config to save: refused by name, nothing written.
  Model m = fixture_mlp();
  m.compile({.optimizer = optimizers::SGD(
                 {.learning_rate = LearningRateSchedule("mine", [](std::int64_t) { return 0.1; })}),
             .loss = losses::MeanSquaredError()});
  const std::string msg = message_of([&] { m.save(dir / "bare.keras"); });
  EXPECT_NE(msg.find("'mine' is a bare function"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir.path / "bare.keras"));
}

TEST(KerasFiles, SaveWeightsWritesKerasLayoutWithTheOptimizer) {
  Model m = trained_mlp(distribute::Strategy(), 4);
  m.train_on_batch(batch_x(0), batch_y(0));
  TempDir dir("lockstep_keras");
  m.save_weights(dir / "w.weights.h5");
  const io::H5Group tree = io::read_h5(dir / "w.weights.h5");
  ASSERT_NE(tree.find_dataset("layers/dense_2/vars/1"), nullptr);
  EXPECT_EQ(tree.find_dataset("layers/dense_2/vars/1")->shape(), Shape({10}));
  EXPECT_EQ(*tree.find_group("layers/dense/vars")->string_attribute("name"), m.layers()[1].name());
  ASSERT_NE(tree.find_dataset("optimizer/vars/13"), nullptr);  // 2 + 2 slots x 6 variables
  EXPECT_EQ(tree.find_dataset("optimizer/vars/0")->data<std::int64_t>()[0], 1);
  Model other = trained_mlp(distribute::Strategy(), 5);
  other.load_weights(dir / "w.weights.h5");
  expect_bitwise(weights(other), weights(m), "weights by path");
  EXPECT_EQ(other.optimizer().iterations(), 1);
}

// Issue #41: a negative step count or learning rate in a weights file is
// refused naming the file, and nothing is loaded.
TEST(KerasFiles, ANegativeStepOrLearningRateInAWeightsFileIsRefused) {
  Model m = trained_mlp(distribute::Strategy(), 4);
  m.train_on_batch(batch_x(0), batch_y(0));
  TempDir dir("lockstep_keras");
  m.save_weights(dir / "w.weights.h5");
  const io::H5Group tree = io::read_h5(dir / "w.weights.h5");
  for (const int which : {0, 1}) {
    io::H5Group bad = tree;
    Tensor& t = bad.group("optimizer/vars").datasets.at(std::to_string(which));
    if (which == 0) {
      t = Tensor::from_vector<std::int64_t>({-5}, t.shape());
    } else {
      t = Tensor::from_vector<float>({-0.25f}, t.shape());
    }
    const fs::path path = dir.path / ("bad" + std::to_string(which) + ".weights.h5");
    io::write_h5(path.string(), bad);
    Model other = trained_mlp(distribute::Strategy(), 5);
    const auto before = weights(other);
    const std::string msg = message_of([&] { other.load_weights(path); });
    EXPECT_NE(msg.find(path.filename().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(which == 0 ? "(iterations) is -5; a step count is >= 0"
                                  : "(learning_rate) is -0.25; a learning rate is a number >= 0"),
              std::string::npos)
        << msg;
    expect_bitwise(weights(other), before, "nothing loaded");
  }
}

TEST(KerasFiles, SuffixDecidesAndOthersAreNamed) {
  Model m = fixture_mlp();
  TempDir dir("lockstep_keras");
  std::string msg = message_of([&] { m.save(dir / "m.bin"); });
  EXPECT_NE(msg.find(".keras"), std::string::npos) << msg;
  EXPECT_NE(msg.find(".safetensors"), std::string::npos) << msg;
  msg = message_of([&] { m.save_weights(dir / "m.h5"); });
  EXPECT_NE(msg.find("must end in .weights.h5"), std::string::npos) << msg;
  // A .keras file under another name is named for what it is.
  fs::copy_file(kFixtures / "mlp.keras", dir.path / "m.safetensors");
  msg = message_of([&] { load_model(dir / "m.safetensors"); });
  EXPECT_NE(msg.find("this file is a zip archive (a .keras file)"), std::string::npos) << msg;
  // A .keras path gets a real zip that Keras opens, not safetensors.
  m.save(dir / "real.keras");
  EXPECT_TRUE(io::looks_like_zip(slurp(dir.path / "real.keras").substr(0, 4)));
}

TEST(KerasFiles, DamagedAndForeignFilesAreNamedAndChangeNothing) {
  TempDir dir("lockstep_keras");
  const std::string bytes = slurp(kFixtures / "mlp.keras");
  spit(dir.path / "cut.keras", bytes.substr(0, bytes.size() / 2));
  std::string msg = message_of([&] { load_model(dir / "cut.keras"); });
  EXPECT_NE(msg.find("cut.keras: not a readable zip archive"), std::string::npos) << msg;

  // A layer class Lockstep does not have, named with where it is.
  std::vector<io::ZipMember> members = io::read_zip((kFixtures / "mlp.keras").string());
  json config = json::parse(members[1].data);
  config["config"]["layers"][2]["class_name"] = "ConvLSTM2D";
  members[1].data = config.dump();
  spit(dir.path / "foreign.keras", io::zip_archive_image(members, 0));
  msg = message_of([&] { load_model(dir / "foreign.keras"); });
  EXPECT_NE(msg.find("foreign.keras: config.json: layer 'dense_1'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown layer class 'ConvLSTM2D' (did you mean 'Conv2D'?)"),
            std::string::npos)
      << msg;

  // A setting Lockstep cannot honour is refused, not dropped.
  config = json::parse(io::read_zip((kFixtures / "mlp.keras").string())[1].data);
  config["config"]["layers"][1]["config"]["kernel_constraint"] = {{"class_name", "NonNeg"}};
  members[1].data = config.dump();
  spit(dir.path / "constraint.keras", io::zip_archive_image(members, 0));
  msg = message_of([&] { load_model(dir / "constraint.keras"); });
  EXPECT_NE(msg.find("kernel_constraint"), std::string::npos) << msg;

  // A weights file of another architecture: the group and shapes named,
  // nothing of the model changed.
  auto in = Input({64});
  Model other(in, layers::Dense(10)(layers::Dense(16)(in)));
  const auto before = weights(other);
  msg = message_of([&] { other.load_weights((kFixtures / "mlp.weights.h5").string()); });
  EXPECT_NE(msg.find("mlp.weights.h5: layers/dense/vars/0 has shape [64, 32]; the model's"),
            std::string::npos)
      << msg;
  expect_bitwise(weights(other), before, "a failed load changes nothing");
}

// Errors raised by the model's and the layers' own checks (a shape, a dtype,
// the graph's ends, compile's loss and metrics), not by the config reader,
// still name the file and the member: the probe of issue #41 found each of
// these printed with no file at all.
TEST(KerasFiles, ErrorsFromTheModelsOwnChecksNameTheFile) {
  TempDir dir("lockstep_keras");
  const std::vector<io::ZipMember> original = io::read_zip((kFixtures / "mlp.keras").string());
  struct Case {
    const char* what;
    std::function<void(json&)> change;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"a negative input dimension",
       [](json& c) { c["config"]["layers"][0]["config"]["batch_shape"][1] = -1; },
       "dimensions must be >= 0"},
      {"an unknown input dtype", [](json& c) { c["config"]["layers"][0]["config"]["dtype"] = "x"; },
       "unknown dtype 'x'"},
      {"no input layers", [](json& c) { c["config"]["input_layers"] = json::array(); },
       "expected at least one input"},
      {"no output layers", [](json& c) { c["config"]["output_layers"] = json::array(); },
       "expected at least one output"},
      {"no loss", [](json& c) { c["compile_config"]["loss"] = json::array(); },
       "a loss is required"},
      {"an unknown metric", [](json& c) { c["compile_config"]["metrics"] = {"x"}; },
       "unknown metric 'x'"},
  };
  int n = 0;
  for (const Case& c : cases) {
    std::vector<io::ZipMember> members = original;
    json config = json::parse(members[1].data);
    c.change(config);
    members[1].data = config.dump();
    const std::string name = "case" + std::to_string(n++) + ".keras";
    spit(dir.path / name, io::zip_archive_image(members, 0));
    const std::string msg = message_of([&] { load_model(dir / name); });
    EXPECT_NE(msg.find(name + ": config.json"), std::string::npos) << c.what << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.find(name), msg.rfind(name)) << c.what << ": the file named once: " << msg;
  }
}

TEST(KerasFiles, ToJsonIsKerasJson) {
  Model m = fixture_mlp();
  const json j = json::parse(m.to_json());
  EXPECT_EQ(j.at("class_name"), "Functional");
  EXPECT_EQ(j.at("config").at("layers").at(1).at("class_name"), "Dense");
  EXPECT_EQ(
      j.at("config").at("layers").at(1).at("config").at("kernel_initializer").at("class_name"),
      "GlorotUniform");
  Model back = model_from_json(m.to_json());
  EXPECT_EQ(back.count_params(), m.count_params());
}

}  // namespace
}  // namespace lockstep
