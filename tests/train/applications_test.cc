// keras.applications.MobileNetV2 and fine-tuning, against what Keras 3
// itself built, computed and did (tests/interop/mobilenet_fixtures, made by
// tests/interop/make_mobilenet_fixtures.py with Keras 3.15): layer names,
// output shapes and parameter counts for several widths; outputs of Keras's
// weights in inference and in training mode; and the fine-tuning semantics
// — trainable through nested models, frozen BatchNormalization, the outer
// training flag, compile's snapshot, partial freezing (issue #19).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/lockstep.h"
#include "support/errors.h"
#include "support/files.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing_support::message_of;
using testing_support::slurp;

const fs::path kFixtures = fs::path(LOCKSTEP_SOURCE_DIR) / "tests/interop/mobilenet_fixtures";

const json& structures() {
  static const json j = json::parse(slurp(kFixtures / "structure.json"));
  return j;
}
const json& finetune() {
  static const json j = json::parse(slurp(kFixtures / "finetune.json"));
  return j;
}

std::string fixture(const std::string& name) { return (kFixtures / name).string(); }

// The worst difference of `got` from `want`, relative to the largest
// magnitude in `want` (a feature map's zeros carry no scale of their own).
double worst_relative(const Tensor& got, const Tensor& want) {
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  double scale = 0, worst = 0;
  for (float v : w) scale = std::max(scale, static_cast<double>(std::abs(v)));
  for (std::size_t i = 0; i < g.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(g[i]) - w[i]));
  return worst / scale;
}

void expect_near_keras(const Tensor& got, const Tensor& want, double rel, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const double worst = worst_relative(got, want);
  EXPECT_LE(worst, rel) << what;
  std::printf("%s: worst difference %.3g of the largest value\n", what.c_str(), worst);
}

void expect_near_keras(const Tensor& got, const json& want, double rel, const std::string& what) {
  const auto v = want.get<std::vector<float>>();
  expect_near_keras(got, Tensor::from_vector<float>(v, got.shape()), rel, what);
}

// Each layer's output shape (one example), from the functional graph.
std::map<std::string, Shape> output_shapes(const Model& m) {
  std::map<std::string, Shape> out;
  for (const KerasTensor& in : m.inputs()) out[in.node()->input_name] = in.sample_shape();
  const auto* f = dynamic_cast<const FunctionalImpl*>(m.impl().get());
  for (const auto& step : f->steps()) out[step.node->layer->name()] = step.output.sample_shape();
  return out;
}

std::int64_t params_of(const std::vector<Variable>& vars) {
  std::int64_t n = 0;
  for (const Variable& v : vars) n += v.shape().numel();
  return n;
}

TEST(MobileNetV2, LayerNamesShapesAndParameterCountsEqualKeras) {
  struct Case {
    const char* key;
    applications::MobileNetV2Options options;
  };
  const Case cases[] = {
      {"0.35_96_notop_none", {.input_shape = Shape{96, 96, 3}, .alpha = 0.35, .include_top = false}},
      {"1.0_224_notop_none", {.input_shape = Shape{224, 224, 3}, .include_top = false}},
      {"1.0_224_top_none", {.input_shape = Shape{224, 224, 3}}},
      {"0.35_96_notop_avg",
       {.input_shape = Shape{96, 96, 3}, .alpha = 0.35, .include_top = false, .pooling = "avg"}},
      {"0.5_128_notop_max",
       {.input_shape = Shape{128, 128, 3}, .alpha = 0.5, .include_top = false, .pooling = "max"}},
      {"1.4_224_notop_none", {.alpha = 1.4, .include_top = false}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    const json& want = structures().at("structures").at(c.key);
    clear_session();  // Keras's fixture ran each in a fresh session
    const Model m = applications::MobileNetV2(c.options);
    EXPECT_EQ(m.name(), want.at("name").get<std::string>());
    const std::vector<Layer> layers = m.layers();
    ASSERT_EQ(layers.size(), want.at("layers").size());
    const auto shapes = output_shapes(m);
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const json& w = want.at("layers")[i];
      EXPECT_EQ(layers[i].name(), w.at("name").get<std::string>()) << "layer " << i;
      EXPECT_EQ(layers[i]->class_name(), w.at("class_name").get<std::string>()) << "layer " << i;
      EXPECT_EQ(shapes.at(layers[i].name()),
                Shape(w.at("output_shape").get<std::vector<std::int64_t>>()))
          << layers[i].name();
      EXPECT_EQ(layers[i].count_params(), w.at("params").get<std::int64_t>()) << layers[i].name();
    }
    EXPECT_EQ(m.count_params(), want.at("total_params").get<std::int64_t>());
    EXPECT_EQ(params_of(m.trainable_weights()), want.at("trainable_params").get<std::int64_t>());
    EXPECT_EQ(params_of(m.non_trainable_weights()),
              want.at("non_trainable_params").get<std::int64_t>());
  }
}

TEST(MobileNetV2, SummaryPrintsKerasTotals) {
  clear_session();
  const Model m = applications::MobileNetV2({.include_top = false});
  std::ostringstream out;
  m.summary(out, {.line_length = 100});
  std::vector<std::string> totals;
  std::istringstream lines(out.str());
  for (std::string line; std::getline(lines, line);)
    if (line.find("params:") != std::string::npos) totals.push_back(line);
  EXPECT_EQ(totals, structures()
                        .at("structures")
                        .at("1.0_224_notop_none")
                        .at("summary_totals")
                        .get<std::vector<std::string>>());
}

TEST(MobileNetV2, OutputsOfKerasWeightsEqualKerasInInferenceAndTrainingMode) {
  clear_session();
  const Model m = applications::MobileNetV2({.input_shape = Shape{96, 96, 3},
                                             .alpha = 0.35,
                                             .include_top = false,
                                             .weights = fixture("mobilenet_v2_0.35_96.weights.h5")});
  const Tensor pixels = data::read_npy(fixture("input.npy"));  // uint8 [2, 96, 96, 3]
  const Tensor x = applications::mobilenet_v2::preprocess_input(pixels);
  // x / 127.5 - 1 rounds the same way in numpy and here: bitwise equal.
  EXPECT_EQ(x.to_vector<float>(), data::read_npy(fixture("preprocessed.npy")).to_vector<float>());
  // Inference: Keras's float32 outputs, and the exact ones (Keras in float64).
  const Tensor inference = m(x);
  expect_near_keras(inference, data::read_npy(fixture("inference.npy")), 1e-4, "inference");
  expect_near_keras(inference, data::read_npy(fixture("inference64.npy")), 1e-4,
                    "inference against float64");
  // Training: batch statistics over as few as 18 positions per channel
  // (batch 2, 3 × 3 at the end), which amplify float32 rounding: Keras's
  // own float32 outputs are 1.3e-4 from the exact ones. Lockstep must be
  // within 1e-4 of the exact outputs and no further from them than Keras.
  const Tensor training = m(x, {.training = true});
  const Tensor keras32 = data::read_npy(fixture("training.npy"));
  const Tensor exact = data::read_npy(fixture("training64.npy"));
  expect_near_keras(training, exact, 1e-4, "training against float64");
  const double keras_error = worst_relative(keras32, exact);
  EXPECT_LE(worst_relative(training, exact), keras_error);
  expect_near_keras(training, keras32, 2 * keras_error, "training against Keras's float32");
  std::printf("(Keras's float32 training outputs: %.3g of the largest value from float64)\n",
              keras_error);
  // The moving averages moved with momentum 0.999.
  for (const char* name : {"bn_Conv1", "Conv_1_bn"}) {
    const auto bn = m.get_layer(name);
    const json& want = structures().at("moving_after_training_call").at(name);
    const auto* impl = dynamic_cast<layers::BatchNormalizationImpl*>(bn.impl().get());
    ASSERT_NE(impl, nullptr);
    expect_near_keras(impl->moving_mean().value(), want.at("moving_mean"), 1e-6,
                      std::string(name) + " moving_mean");
    expect_near_keras(impl->moving_variance().value(), want.at("moving_variance"), 1e-6,
                      std::string(name) + " moving_variance");
  }
}

TEST(MobileNetV2, ResizingEqualsTensorFlowsResize) {
  for (const json& c : structures().at("resizing")) {
    const Tensor image = Tensor::from_vector<float>(
        c.at("input").get<std::vector<float>>(),
        Shape(c.at("input_shape").get<std::vector<std::int64_t>>()));
    const std::int64_t h = c.at("height"), w = c.at("width");
    const Tensor got = layers::Resizing(h, w)(image);
    const auto want = c.at("output").get<std::vector<float>>();
    const auto g = got.to_vector<float>();
    ASSERT_EQ(g.size(), want.size());
    for (std::size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], want[i], 1e-6 * std::max(1.0f, std::abs(want[i]))) << h << "x" << w;
  }
}

// Every layer's config survives Keras's file format: a .keras file of the
// network loads back as the same network with the same outputs.
TEST(MobileNetV2, SavedAsKerasFileLoadsBackWithTheSameLayersAndOutputs) {
  testing_support::TempDir dir;
  clear_session();
  const Model m = applications::MobileNetV2(
      {.input_shape = Shape{32, 32, 3}, .alpha = 0.35, .classes = 7, .name = "small"});
  const std::string path = dir / "small.keras";
  if (const char* keep = std::getenv("LOCKSTEP_KEEP_KERAS_FILE")) {
    m.save(keep);  // for checking by hand that Keras loads it too
  }
  m.save(path);
  const Model loaded = load_model(path);
  ASSERT_EQ(loaded.layers().size(), m.layers().size());
  for (std::size_t i = 0; i < m.layers().size(); ++i) {
    EXPECT_EQ(loaded.layers()[i].name(), m.layers()[i].name());
    EXPECT_EQ(loaded.layers()[i]->get_config().entries(), m.layers()[i]->get_config().entries())
        << m.layers()[i].name();
  }
  const Tensor x = random::uniform({2, 32, 32, 3}, {.minval = -1, .seed = 3});
  EXPECT_EQ(loaded(x).to_vector<float>(), m(x).to_vector<float>());
}

TEST(MobileNetV2, BadArgumentsAreNamedErrors) {
  EXPECT_THROW(applications::MobileNetV2({.input_shape = Shape{31, 64, 3}, .include_top = false}),
               ShapeError);
  EXPECT_THROW(applications::MobileNetV2({.include_top = false, .pooling = "sum"}), ValueError);
  EXPECT_THROW(applications::MobileNetV2({.include_top = false, .weights = "imagenet"}),
               ValueError);
  const std::string imagenet =
      message_of([] { applications::MobileNetV2({.include_top = false, .weights = "imagenet"}); });
  EXPECT_NE(imagenet.find("pass its path"), std::string::npos) << imagenet;
  const std::string missing = message_of([] {
    applications::MobileNetV2({.include_top = false, .weights = "/nonexistent/w.weights.h5"});
  });
  EXPECT_NE(missing.find("/nonexistent/w.weights.h5"), std::string::npos) << missing;
}

// ---- fine-tuning, as Keras 3 does it --------------------------------------------------

// make_mobilenet_fixtures.py's small_base: Conv2D → BatchNormalization →
// Dropout → GlobalAveragePooling2D, on 6 × 6 × 2 inputs.
Model small_base(const std::string& name = "base", float dropout = 0.5f) {
  auto inputs = Input({6, 6, 2});
  auto x = layers::Conv2D(3, {3, 3}, {.name = "conv"})(inputs);
  x = layers::BatchNormalization({.name = "bn"})(x);
  x = layers::Dropout(dropout, {.name = "drop"})(x);
  x = layers::GlobalAveragePooling2D({.name = "gap"})(x);
  return Model(inputs, x, name);
}

// Input → base → Dense(1) "head".
Model with_head(const Model& base) {
  auto inputs = Input({6, 6, 2});
  return Model(inputs, layers::Dense(1, {.name = "head"})(base(inputs)));
}

Tensor moving_mean_of(const Model& m, const std::string& layer) {
  const auto* bn = dynamic_cast<layers::BatchNormalizationImpl*>(m.get_layer(layer).impl().get());
  return bn->moving_mean().value();
}

json counts(const Model& m) {
  return {{"trainable_weights", m.trainable_weights().size()},
          {"non_trainable_weights", m.non_trainable_weights().size()},
          {"trainable_params", params_of(m.trainable_weights())}};
}

TEST(FineTuning, TrainableReachesEveryLayerOfANestedModelBothWays) {
  const json& want = finetune().at("recursion");
  Model base = small_base();
  Model model = with_head(base);
  EXPECT_EQ(counts(model), want.at("initial"));
  base.set_trainable(false);
  EXPECT_EQ(counts(model), want.at("base_frozen"));
  EXPECT_EQ(base.get_layer("conv").trainable(), want.at("conv_trainable_after_freeze").get<bool>());
  base.set_trainable(true);
  EXPECT_EQ(counts(model), want.at("base_unfrozen"));
  base.get_layer("bn").set_trainable(false);
  EXPECT_EQ(counts(model), want.at("bn_frozen"));
  model.set_trainable(false);
  model.set_trainable(true);
  EXPECT_EQ(counts(model), want.at("model_toggled"));
  EXPECT_EQ(base.get_layer("bn").trainable(), want.at("bn_trainable_after_toggle").get<bool>());
}

TEST(FineTuning, AFrozenBatchNormalizationRunsInInferenceModeWhenTraining) {
  const json& want = finetune().at("frozen_bn");
  Model m = small_base("frozen_bn", 0.0f);
  m.load_weights(fixture("finetune_frozen_bn.weights.h5"));
  m.get_layer("bn").set_trainable(false);
  const Tensor x = data::read_npy(fixture("finetune_x.npy"));
  expect_near_keras(m(x, {.training = true}), want.at("training_output"), 1e-5, "training");
  expect_near_keras(m(x), want.at("inference_output"), 1e-5, "inference");
  expect_near_keras(moving_mean_of(m, "bn"), want.at("moving_mean_after"), 1e-6,
                    "moving_mean (unchanged)");
}

// Keras 3 gives every layer of a graph the flag of the graph's own call:
// a base called with training=False inside a model that fit trains runs in
// training mode all the same (keras-team/keras#20285; the fixture's Keras
// 3.15 moved the base's moving mean). Lockstep's graphs do the same — the
// way to keep a base's BatchNormalization in inference mode is to freeze it.
TEST(FineTuning, ABaseInsideAGraphFollowsTheOuterTrainingFlagAsInKeras3) {
  Model base = small_base();
  Model model = with_head(base);
  model.load_weights(fixture("finetune_inference_base.weights.h5"));
  const Tensor x = data::read_npy(fixture("finetune_x.npy"));
  (void)model(x, {.training = true});
  expect_near_keras(moving_mean_of(base, "bn"),
                    finetune().at("inference_base").at("moving_mean_after"), 1e-6,
                    "moving_mean after a training call");
}

// What one fit step moves, per variable, through Keras's sequence: compile,
// freeze without recompiling, recompile, unfreeze without recompiling,
// recompile.
TEST(FineTuning, CompileFixesWhatIsTrainableUntilTheNextCompile) {
  Model base = small_base();
  Model model = with_head(base);
  model.load_weights(fixture("finetune_snapshot.weights.h5"));
  const Tensor x = data::read_npy(fixture("finetune_x.npy"));
  const Tensor y = data::read_npy(fixture("finetune_y.npy"));
  auto compile = [&] {
    model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}), .loss = "mse"});
  };
  auto moved = [&] {
    std::map<std::string, std::vector<float>> before;
    for (const Variable& v : model.weights()) before[v.name()] = v.value().to_vector<float>();
    model.fit(x, y, {.batch_size = 4, .epochs = 1, .verbose = 0, .shuffle = false});
    json changed = json::object();
    for (const Variable& v : model.weights())
      changed[v.name()] = v.value().to_vector<float>() != before[v.name()];
    return changed;
  };
  const json& steps = finetune().at("compile_snapshot");
  compile();
  EXPECT_EQ(moved(), steps[0].at("changed")) << steps[0].at("step");
  base.set_trainable(false);
  EXPECT_EQ(moved(), steps[1].at("changed")) << steps[1].at("step");
  compile();
  EXPECT_EQ(moved(), steps[2].at("changed")) << steps[2].at("step");
  base.set_trainable(true);
  EXPECT_EQ(moved(), steps[3].at("changed")) << steps[3].at("step");
  compile();
  EXPECT_EQ(moved(), steps[4].at("changed")) << steps[4].at("step");
}

// Keras's `layer.momentum = 0.25` (examples/fine_tune_mobilenet.cc lowers
// MobileNetV2's 0.999 so that a briefly pretrained base has usable moving
// statistics): the next training call moves the moving mean from 0 by
// (1 - 0.25) of the way to the batch mean, 3, and the variance from 1 to
// the batch's, 6.5; get_config says 0.25.
TEST(FineTuning, BatchNormalizationMomentumSetOnTheLayerDrivesTheMovingAverages) {
  layers::BatchNormalization bn;
  const Tensor x = Tensor::from_vector<float>({0, 1, 5, 6}, {4, 1});  // mean 3, variance 6.5
  (void)bn(x);                                                        // builds; inference
  bn->set_momentum(0.25f);
  EXPECT_EQ(bn->momentum(), 0.25f);
  (void)bn(x, {.training = true});
  EXPECT_NEAR(bn->moving_mean().value().to_vector<float>()[0], 0.75f * 3.0f, 1e-6);
  EXPECT_NEAR(bn->moving_variance().value().to_vector<float>()[0], 0.25f + 0.75f * 6.5f, 1e-5);
  EXPECT_EQ(bn->get_config().get<double>("momentum"), 0.25);
  const std::string bad = message_of([&] { bn->set_momentum(1.5f); });
  EXPECT_NE(bad.find("momentum must be in [0, 1], got 1.5"), std::string::npos) << bad;
}

TEST(FineTuning, FreezingTheFirst100LayersOfMobileNetV2) {
  const json& want = finetune().at("partial_freeze");
  clear_session();
  Model base = applications::MobileNetV2(
      {.input_shape = Shape{96, 96, 3}, .alpha = 0.35, .include_top = false});
  base.set_trainable(true);
  const std::vector<Layer> all = base.layers();
  ASSERT_EQ(all.size(), want.at("num_layers").get<std::size_t>());
  EXPECT_EQ(all[100].name(), want.at("layer_100").get<std::string>());
  for (std::size_t i = 0; i < 100; ++i) all[i].set_trainable(false);
  auto inputs = Input({96, 96, 3});
  const Model model(inputs,
                    layers::Dense(1)(layers::GlobalAveragePooling2D()(base(inputs))));
  EXPECT_EQ(counts(base), want.at("base"));
  EXPECT_EQ(counts(model), want.at("model"));
}

}  // namespace
}  // namespace lockstep
