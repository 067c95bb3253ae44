// Mixed precision as Keras has it: dtype policies by name, layers computing
// in bfloat16 (or float16) over float32 variables, float32 statistics,
// softmax, outputs and losses, master weights updated by the optimizer's
// rule applied to the bfloat16-computed gradient, policies kept in Keras's
// files; under mixed_float16 compile's LossScaleOptimizer, which skips a
// step whose float16 backward overflowed and halves its scale.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "lockstep/lockstep.h"
#include "support/errors.h"
#include "support/files.h"

namespace lockstep {
namespace {

using testing_support::message_of;

// The message `f` throws as a ValueError names every one of `parts`.
void expect_error_mentions(const std::function<void()>& f, std::vector<std::string> parts) {
  EXPECT_THROW(f(), ValueError);
  const std::string m = message_of(f);
  for (const std::string& p : parts) EXPECT_NE(m.find(p), std::string::npos) << m;
}

// Sets the global policy for one test and restores float32 after it.
struct GlobalPolicy {
  explicit GlobalPolicy(const std::string& name) { mixed_precision::set_global_policy(name); }
  ~GlobalPolicy() { mixed_precision::set_global_policy("float32"); }
};

bool bfloat16_exact(float v) { return (std::bit_cast<std::uint32_t>(v) & 0xffffu) == 0; }
bool float16_exact(float v) { return static_cast<float>(float16(v)) == v; }

TEST(MixedPrecision, PoliciesByKerasNamesAndTheRefusedOnesSayWhy) {
  const DTypePolicy mixed = DTypePolicy::from_name("mixed_bfloat16");
  EXPECT_EQ(mixed.compute_dtype, DType::kBFloat16);
  EXPECT_EQ(mixed.variable_dtype, DType::kFloat32);
  EXPECT_EQ(DTypePolicy::from_name("float32").compute_dtype, DType::kFloat32);
  const DTypePolicy half = DTypePolicy::from_name("mixed_float16");
  EXPECT_EQ(half.compute_dtype, DType::kFloat16);
  EXPECT_EQ(half.variable_dtype, DType::kFloat32);
  expect_error_mentions([] { DTypePolicy::from_name("bfloat16"); },
                        {"variables in bfloat16", "mixed_bfloat16"});
  expect_error_mentions([] { DTypePolicy::from_name("float16"); },
                        {"variables in float16", "mixed_float16"});
  expect_error_mentions([] { mixed_precision::set_global_policy("mixed_bf16"); },
                        {"mixed_bf16", "float32, mixed_bfloat16, mixed_float16"});
  EXPECT_EQ(mixed_precision::global_policy().name, "float32");  // a refused policy changes nothing

  // Layers take the global policy when constructed; their own dtype wins.
  GlobalPolicy policy("mixed_bfloat16");
  layers::Dense mixed_dense(4);
  layers::Dense float_dense(4, {.dtype = "float32"});
  mixed_precision::set_global_policy("float32");
  layers::Dense later(4);
  EXPECT_EQ(mixed_dense.dtype_policy().name, "mixed_bfloat16");
  EXPECT_EQ(float_dense.dtype_policy().name, "float32");
  EXPECT_EQ(later.dtype_policy().name, "float32");
  later.set_dtype_policy("mixed_bfloat16");
  EXPECT_EQ(later->compute_dtype(), DType::kBFloat16);
}

TEST(MixedPrecision, LayersComputeInBFloat16OverFloat32Variables) {
  GlobalPolicy policy("mixed_bfloat16");
  set_random_seed(3);
  auto in = Input({6, 6, 2});
  auto h = layers::Conv2D(4, {3, 3}, {.activation = "relu"})(in);
  layers::BatchNormalization bn;
  h = bn(h);
  h = layers::Flatten()(h);
  h = layers::Dense(8, {.activation = "relu"})(h);
  h = layers::Dropout(0.25f)(h);
  auto logits = layers::Dense(3)(h);
  auto probs = layers::Softmax()(logits);
  EXPECT_EQ(h.dtype(), DType::kBFloat16);
  EXPECT_EQ(logits.dtype(), DType::kBFloat16);
  EXPECT_EQ(probs.dtype(), DType::kFloat32);  // softmax stays float32
  Model model(in, logits);
  for (const Variable& v : model.impl()->weights()) {
    EXPECT_EQ(v.dtype(), DType::kFloat32) << v.name();
  }
  model.compile({.optimizer = "sgd",
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  const Tensor x = random::uniform({16, 6, 6, 2}, {.seed = 1});
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>(16, 1));
  const Logs logs = model.train_on_batch(x, y);
  EXPECT_GT(logs.at("loss"), 0.0);
  // Moving statistics are float32 and hold more than bfloat16's 8 bits.
  bool fine = false;
  for (float v : bn->moving_mean().value().to_vector<float>()) fine |= !bfloat16_exact(v);
  EXPECT_TRUE(fine) << "BatchNormalization's moving mean looks computed in bfloat16";
  // A model's outputs reach the user, losses and metrics as float32.
  const Tensor out = model.predict(x, {.verbose = 0});
  EXPECT_EQ(out.dtype(), DType::kFloat32);
  for (float v : out.to_vector<float>()) EXPECT_TRUE(bfloat16_exact(v));  // computed in bfloat16
}

// MobileNetV2 (ReLU6, depthwise convolutions, ZeroPadding2D, Add, global
// pooling, batch norm) trains under `policy`: float32 variables, every one
// moved by the step, float32 outputs computed in the policy's type
// (`exact` says a value is one of that type's), a finite loss.
void expect_mobilenet_v2_trains(const std::string& policy_name, bool (*exact)(float),
                                bool auto_scale_loss) {
  GlobalPolicy policy(policy_name);
  set_random_seed(5);
  Model model = applications::MobileNetV2(
      {.input_shape = Shape{32, 32, 3}, .alpha = 0.35, .classes = 4, .classifier_activation = ""});
  for (const Variable& v : model.impl()->weights())
    EXPECT_EQ(v.dtype(), DType::kFloat32) << v.name();
  model.compile({.optimizer = "sgd",
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .auto_scale_loss = auto_scale_loss});
  const Tensor x = random::uniform({4, 32, 32, 3}, {.minval = -1, .seed = 2});
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3});
  std::vector<std::vector<float>> before;
  for (const Variable& v : model.impl()->trainable_weights())
    before.push_back(v.value().to_vector<float>());
  const Logs logs = model.train_on_batch(x, y);
  EXPECT_TRUE(std::isfinite(logs.at("loss"))) << logs.at("loss");
  // The gradient reaches every trainable variable through the reduced-precision ops.
  const std::vector<Variable> trainable = model.impl()->trainable_weights();
  for (std::size_t i = 0; i < trainable.size(); ++i)
    EXPECT_NE(trainable[i].value().to_vector<float>(), before[i]) << trainable[i].name();
  const Tensor out = model.predict(x, {.verbose = 0});
  EXPECT_EQ(out.dtype(), DType::kFloat32);
  for (float v : out.to_vector<float>()) EXPECT_TRUE(exact(v)) << v;
}

TEST(MixedPrecision, MobileNetV2TrainsUnderMixedBFloat16) {
  expect_mobilenet_v2_trains("mixed_bfloat16", bfloat16_exact, true);
}

// One SGD step on a mixed-precision model: every float32 master weight
// moves by exactly −lr · g, where g is the gradient of the bfloat16
// computation (bfloat16 values, which the tape returns in float32).
TEST(MixedPrecision, MasterWeightsChangeByTheOptimizersRuleAppliedToTheBFloat16Gradient) {
  GlobalPolicy policy("mixed_bfloat16");
  set_random_seed(5);
  auto in = Input({12});
  auto h = layers::Dense(16, {.activation = "relu"})(in);
  Model model(in, layers::Dense(4)(h));
  const float lr = 0.05f;
  const Loss loss = losses::SparseCategoricalCrossentropy({.from_logits = true});
  model.compile({.optimizer = optimizers::SGD({.learning_rate = lr}), .loss = loss});
  const Tensor x = random::normal({32, 12}, {.seed = 2});
  std::vector<std::int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 4);
  const Tensor y = Tensor::from_vector(labels);

  const std::vector<Variable> vars = model.trainable_variables();
  std::vector<std::vector<float>> before, grads;
  for (const Variable& v : vars) before.push_back(v.value().to_vector<float>());
  {
    GradientTape tape;
    const Tensor out = cast(model(x, {.training = true}), DType::kFloat32);
    const std::vector<Tensor> g = tape.gradient(loss(y, out), vars);
    for (const Tensor& t : g) {
      ASSERT_EQ(t.dtype(), DType::kFloat32);
      grads.push_back(t.to_vector<float>());
    }
  }
  model.train_on_batch(x, y);
  bool moved_off_bfloat16 = false;
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const std::vector<float> after = vars[k].value().to_vector<float>();
    for (std::size_t i = 0; i < after.size(); ++i) {
      ASSERT_TRUE(bfloat16_exact(grads[k][i]))
          << vars[k].name() << "[" << i << "]: the gradient was not computed in bfloat16";
      const float want = before[k][i] - lr * grads[k][i];
      ASSERT_EQ(after[i], want) << vars[k].name() << "[" << i << "]";
      moved_off_bfloat16 |= !bfloat16_exact(after[i]);
    }
  }
  EXPECT_TRUE(moved_off_bfloat16) << "the master weights should keep float32 precision";
}

TEST(MixedPrecision, CheckpointsAndKerasFilesKeepFloat32VariablesAndThePolicy) {
  GlobalPolicy policy("mixed_bfloat16");
  set_random_seed(9);
  auto in = Input({5});
  auto h = layers::Dense(7, {.activation = "relu"})(in);
  Model model(in, layers::Dense(2, {.dtype = "float32"})(h));
  model.compile(
      {.optimizer = "adam", .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  model.train_on_batch(random::normal({8, 5}, {.seed = 1}),
                       Tensor::from_vector(std::vector<std::int64_t>{0, 1, 0, 1, 0, 1, 0, 1}));
  testing_support::TempDir dir;
  const std::string path = dir / "mixed.keras";
  model.save(path);
  mixed_precision::set_global_policy("float32");  // the file, not the global policy, decides
  Model loaded = load_model(path);
  ASSERT_EQ(loaded.layers().size(), model.layers().size());
  for (std::size_t i = 1; i < model.layers().size(); ++i) {  // after the InputLayer
    EXPECT_EQ(loaded.layers()[i].dtype_policy().name, model.layers()[i].dtype_policy().name)
        << model.layers()[i].name();
  }
  EXPECT_EQ(loaded.layers()[1].dtype_policy().name, "mixed_bfloat16");
  EXPECT_EQ(loaded.layers()[2].dtype_policy().name, "float32");
  const auto a = model.impl()->weights(), b = loaded.impl()->weights();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(b[i].dtype(), DType::kFloat32);
    EXPECT_EQ(a[i].value().to_vector<float>(), b[i].value().to_vector<float>()) << a[i].name();
  }
  const Tensor probe = random::normal({3, 5}, {.seed = 4});
  EXPECT_EQ(model.predict(probe, {.verbose = 0}).to_vector<float>(),
            loaded.predict(probe, {.verbose = 0}).to_vector<float>());
}

TEST(MixedFloat16, LayersComputeInFloat16OverFloat32VariablesAndOutputsAreFloat32) {
  GlobalPolicy policy("mixed_float16");
  set_random_seed(3);
  auto in = Input({6, 6, 2});
  auto h = layers::Conv2D(4, {3, 3}, {.activation = "relu"})(in);
  h = layers::BatchNormalization()(h);
  h = layers::Flatten()(h);
  h = layers::Dense(8, {.activation = "relu"})(h);
  auto logits = layers::Dense(3)(h);
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(logits.dtype(), DType::kFloat16);
  EXPECT_EQ(layers::Softmax()(logits).dtype(), DType::kFloat32);
  Model model(in, logits);
  for (const Variable& v : model.impl()->weights()) EXPECT_EQ(v.dtype(), DType::kFloat32);
  model.compile(
      {.optimizer = "sgd", .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const Tensor x = random::uniform({16, 6, 6, 2}, {.seed = 1});
  const Logs logs = model.train_on_batch(x, Tensor::from_vector(std::vector<std::int64_t>(16, 1)));
  EXPECT_TRUE(std::isfinite(logs.at("loss")));
  const Tensor out = model.predict(x, {.verbose = 0});
  EXPECT_EQ(out.dtype(), DType::kFloat32);
  for (float v : out.to_vector<float>()) EXPECT_TRUE(float16_exact(v)) << v;  // computed in float16
}

// The sequence models Keras users have (Embedding, Conv1D, LSTM, GRU,
// MultiHeadAttention, LayerNormalization, 1-D pooling) train under both
// mixed policies: a finite loss, every trainable variable moved, float32
// outputs — float16 takes every op bfloat16 does.
TEST(MixedFloat16, SequenceAndAttentionModelsTrainUnderBothMixedPolicies) {
  for (const std::string name : {"mixed_bfloat16", "mixed_float16"}) {
    SCOPED_TRACE(name);
    GlobalPolicy policy(name);
    set_random_seed(11);
    auto ids = Input({12}, DType::kInt32);
    auto h = layers::Embedding(50, 16)(ids);
    h = layers::Conv1D(16, 3, {.padding = "same", .activation = "relu"})(h);
    h = layers::LSTM(16, {.return_sequences = true})(h);
    auto attended = layers::MultiHeadAttention(2, 8)({h, h});
    h = layers::LayerNormalization()(layers::Add()({h, attended}));
    h = layers::GRU(8, {.return_sequences = true})(h);
    h = layers::GlobalAveragePooling1D()(h);
    Model model(ids, layers::Dense(3)(h));
    model.compile({.optimizer = "adam",
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .auto_scale_loss = false});
    std::vector<std::int32_t> tokens(8 * 12);
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<std::int32_t>(i * 7 % 50);
    const Tensor x = Tensor::from_vector(tokens, Shape({8, 12}));
    const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0, 1});
    std::vector<std::vector<float>> before;
    for (const Variable& v : model.trainable_variables())
      before.push_back(v.value().to_vector<float>());
    const Logs logs = model.train_on_batch(x, y);
    EXPECT_TRUE(std::isfinite(logs.at("loss"))) << logs.at("loss");
    const std::vector<Variable> vars = model.trainable_variables();
    for (std::size_t i = 0; i < vars.size(); ++i)
      EXPECT_NE(vars[i].value().to_vector<float>(), before[i]) << vars[i].name();
    EXPECT_EQ(model.predict(x, {.verbose = 0}).dtype(), DType::kFloat32);
  }
}

// The same under mixed_float16, loss scaling off so that the step cannot be
// a skipped one.
TEST(MixedFloat16, MobileNetV2TrainsUnderMixedFloat16) {
  expect_mobilenet_v2_trains("mixed_float16", float16_exact, false);
}

// Keras 3's compile: a mixed_float16 model's optimizer is wrapped in a
// LossScaleOptimizer (2^15, doubling after 2000 finite steps), unless it is
// one or auto_scale_loss is off; other policies keep the optimizer as given.
TEST(MixedFloat16, CompileWrapsTheOptimizerInALossScaleOptimizerAsKeras3) {
  const auto build = [] {
    auto in = Input({4});
    return Model(in, layers::Dense(1)(in));
  };
  const Loss mse = losses::MeanSquaredError();
  {
    GlobalPolicy policy("mixed_float16");
    Model wrapped = build();
    wrapped.compile({.optimizer = optimizers::SGD(), .loss = mse});
    ASSERT_TRUE(wrapped.optimizer()->loss_scaling().has_value());
    EXPECT_EQ(wrapped.optimizer()->dynamic_scale(), 32768.0);
    EXPECT_EQ(wrapped.optimizer()->loss_scaling()->dynamic_growth_steps, 2000);
    Model own = build();
    own.compile(
        {.optimizer = optimizers::LossScaleOptimizer(optimizers::SGD(), {.initial_scale = 8.0}),
         .loss = mse});
    EXPECT_EQ(own.optimizer()->dynamic_scale(), 8.0);  // not wrapped twice
    Model off = build();
    off.compile({.optimizer = optimizers::SGD(), .loss = mse, .auto_scale_loss = false});
    EXPECT_FALSE(off.optimizer()->loss_scaling().has_value());
  }
  GlobalPolicy policy("mixed_bfloat16");
  Model bf16 = build();
  bf16.compile({.optimizer = optimizers::SGD(), .loss = mse});
  EXPECT_FALSE(bf16.optimizer()->loss_scaling().has_value());
}

// Issue #35's acceptance: targets far from the outputs make the scaled
// loss's gradient overflow float16 in the backward (2 · 100 / 32 · 2^15 is
// past 65504): the step is skipped — no weight moves, iterations stays 0 —
// and the scale halves. Each later overflow halves it again until the
// gradients fit; from then on the steps train. Every step is one or the
// other: iterations + halvings == steps.
TEST(MixedFloat16, AnOverflowInTheFloat16BackwardSkipsTheStepAndHalvesTheScale) {
  GlobalPolicy policy("mixed_float16");
  set_random_seed(7);
  auto in = Input({8});
  auto h = layers::Dense(16, {.activation = "relu"})(in);
  Model model(in, layers::Dense(1)(h));
  model.compile(
      {.optimizer = optimizers::SGD({.learning_rate = 1e-4}), .loss = losses::MeanSquaredError()});
  const Tensor x = random::uniform({32, 8}, {.seed = 2});
  const Tensor y = Tensor::full({32, 1}, 100.0f);
  std::vector<std::vector<float>> before;
  for (const Variable& v : model.trainable_variables())
    before.push_back(v.value().to_vector<float>());

  const Logs first = model.train_on_batch(x, y);
  EXPECT_TRUE(std::isfinite(first.at("loss"))) << "the logged loss is the unscaled one";
  const Optimizer& opt = model.optimizer();
  EXPECT_EQ(opt.iterations(), 0);
  EXPECT_EQ(opt->dynamic_scale(), 16384.0);
  const std::vector<Variable> vars = model.trainable_variables();
  for (std::size_t i = 0; i < vars.size(); ++i)
    EXPECT_EQ(vars[i].value().to_vector<float>(), before[i]) << vars[i].name();

  const int steps = 20;
  for (int s = 1; s < steps; ++s) model.train_on_batch(x, y);
  const double halvings = std::log2(32768.0 / opt->dynamic_scale());
  EXPECT_EQ(halvings, std::floor(halvings));
  EXPECT_GE(halvings, 2.0);
  EXPECT_GT(opt.iterations(), 0) << "the scale never came down far enough to train";
  EXPECT_EQ(static_cast<double>(opt.iterations()) + halvings, steps);
  bool moved = false;
  for (std::size_t i = 0; i < vars.size(); ++i)
    moved |= vars[i].value().to_vector<float>() != before[i];
  EXPECT_TRUE(moved);
  for (const Variable& v : vars)
    for (float w : v.value().to_vector<float>()) ASSERT_TRUE(std::isfinite(w)) << v.name();
}

}  // namespace
}  // namespace lockstep
