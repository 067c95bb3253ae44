// Layers and networks (functional, Sequential, subclassed) wrapped in a
// Model and trained: what nn's tests cannot do without the train layer —
// the errors a Keras user meets first, freezing, regularisation, and small
// models that learn.
#include <gtest/gtest.h>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

TEST(Layers, WrongInputShapeNamesLayerAndHintsFlatten) {
  clear_session();
  auto inputs = Input({784});
  layers::Dense dense(10);
  Model model(inputs, dense(inputs));
  try {
    (void)dense(Tensor::zeros({2, 28, 28}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(),
                 "Dense 'dense': expected input of last dimension 784, got 28 (shape [2, 28, 28]). "
                 "Hint: add a Flatten layer.");
  }
  try {
    (void)model(Tensor::zeros({2, 28, 28}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "expected input 0 of shape (None, 784), got [2, 28, 28]. Hint: add a Flatten"),
              std::string::npos)
        << e.what();
  }
}

TEST(Functional, SharedLayersResidualsAndSeveralOutputs) {
  auto a = Input({4}), b = Input({4});
  layers::Dense shared(4, {.activation = "tanh"});
  layers::Add add;
  layers::Concatenate concat_layer;
  layers::Dense head1(2), head2(1);
  auto ha = shared(a), hb = shared(b);  // one layer, two calls
  auto residual = add({ha, a});         // skip connection
  auto merged = concat_layer({residual, hb});
  auto out1 = head1(merged);
  auto out2 = head2(hb);
  Model model({a, b}, {out1, out2});
  EXPECT_EQ(out1.shape_string(), "(None, 2)");
  EXPECT_EQ(merged.shape_string(), "(None, 8)");
  EXPECT_EQ(model.weights().size(), 6u);  // the shared layer counts once
  const Tensor xa = random::normal({3, 4}, {.seed = 1}), xb = random::normal({3, 4}, {.seed = 2});
  const auto outs = model({xa, xb});
  ASSERT_EQ(outs.size(), 2u);
  // The graph computes exactly what the layers compute when called by hand.
  const Tensor sb = shared(xb);
  const Tensor want1 = head1(concat_layer({add({shared(xa), xa})[0], sb})[0]);
  EXPECT_EQ(outs[0].to_vector<float>(), want1.to_vector<float>());
  EXPECT_EQ(outs[1].to_vector<float>(), head2(sb).to_vector<float>());
}

// A graph's intermediate tensor lives until its last reader has run, not
// until the forward pass ends: a chain of 7 tanh layers with a skip from
// the first to the end holds 3 of its 16 MiB activations at a time, not 8.
TEST(Functional, AnIntermediateTensorIsFreedAfterItsLastReader) {
  constexpr std::int64_t n = std::int64_t{4} << 20;  // floats: 16 MiB an activation
  constexpr std::size_t bytes = n * sizeof(float);
  auto in = Input({n});
  const auto first = layers::Activation("tanh")(in);
  auto h = first;
  for (int i = 0; i < 6; ++i) h = layers::Activation("tanh")(h);
  Model model(in, layers::Add()({h, first}));
  const Tensor x = random::uniform({1, n}, {.seed = 3});
  NoGradGuard no_grad;  // no tape keeps anything: only the graph does
  CachingAllocator& allocator = x.device().allocator();
  allocator.reset_peak_stats();
  const std::size_t before = allocator.stats().bytes_in_use;
  const Tensor out = model(x);
  const std::size_t peak = allocator.stats().peak_bytes_in_use - before;
  EXPECT_GE(peak, 3 * bytes);  // the skip, the chain's current input and output
  EXPECT_LT(peak, 4 * bytes) << peak / bytes << " activations alive at once";
  Tensor want = tanh(x);
  Tensor chain = want;
  for (int i = 0; i < 6; ++i) chain = tanh(chain);
  EXPECT_EQ(out.to_vector<float>(), add(chain, want).to_vector<float>());
}

const FunctionalImpl& graph_of(const Model& model) {
  return dynamic_cast<const FunctionalImpl&>(*model.impl());
}

// The output, the input's gradient and the kernel's of a loss on `call`'s
// output, for the comparisons below.
std::vector<std::vector<float>> values_and_gradients(
    const Tensor& x, const Variable& kernel, const std::function<Tensor(const Tensor&)>& call) {
  GradientTape tape({.persistent = true});
  tape.watch(x);
  const Tensor out = call(x);
  const Tensor loss = sum(square(out));
  const std::vector<Tensor> dx = tape.gradient(loss, std::vector<Tensor>{x});
  const std::vector<Tensor> dk = tape.gradient(loss, std::vector<Variable>{kernel});
  return {out.to_vector<float>(), dx.at(0).to_vector<float>(), dk.at(0).to_vector<float>()};
}

void expect_close(const std::vector<std::vector<float>>& got,
                  const std::vector<std::vector<float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << "part " << k;
    for (std::size_t i = 0; i < got[k].size(); ++i)
      ASSERT_NEAR(got[k][i], want[k][i], 1e-5f * (1.0f + std::abs(want[k][i])))
          << "part " << k << " element " << i;
  }
}

// MobileNetV2's stride-2 blocks: ZeroPadding2D then a 'valid' depthwise
// convolution. The graph does not make the padded copy (the convolution
// pads with oneDNN), and computes what the two layers called by hand do,
// forward and backward.
TEST(Functional, AZeroPaddingBeforeAValidConvolutionIsFoldedIntoIt) {
  clear_session();
  constexpr std::int64_t side = 256, channels = 16;
  auto in = Input({side, side, channels});
  layers::ZeroPadding2D pad({{{0, 1}, {0, 1}}});
  layers::DepthwiseConv2D depthwise({3, 3}, {.strides = {2, 2}});
  Model model(in, depthwise(pad(in)));
  ASSERT_TRUE(graph_of(model).steps().at(0).folded);
  ASSERT_TRUE(graph_of(model).steps().at(1).zero_padding.has_value());

  const Tensor x = random::normal({1, side, side, channels}, {.seed = 4});
  {
    NoGradGuard no_grad;
    CachingAllocator& allocator = x.device().allocator();
    allocator.reset_peak_stats();
    const std::size_t before = allocator.stats().bytes_in_use;
    const Tensor out = model(x);
    const std::size_t peak = allocator.stats().peak_bytes_in_use - before;
    const std::size_t out_bytes = static_cast<std::size_t>(out.numel()) * sizeof(float);
    const std::size_t padded_bytes = (side + 1) * (side + 1) * channels * sizeof(float);
    EXPECT_LT(peak, out_bytes + padded_bytes / 2)
        << "the 4 MiB padded copy was made: " << peak << " bytes at the peak";
  }
  const Variable& kernel = depthwise->depthwise_kernel();
  expect_close(values_and_gradients(x, kernel, [&](const Tensor& t) { return model(t); }),
               values_and_gradients(x, kernel, [&](const Tensor& t) { return depthwise(pad(t)); }));
}

// Not folded where the padded tensor is needed as it is: another layer or
// the model's outputs read it, or its reader pads 'same' itself.
TEST(Functional, AZeroPaddingAnotherReaderNeedsIsNotFolded) {
  clear_session();
  auto in = Input({9, 8, 3});
  layers::ZeroPadding2D pad({{{1, 2}, {0, 1}}});
  layers::Conv2D valid(4, {3, 3}), same(4, {3, 3}, {.padding = "same"});
  const auto padded = pad(in);
  const Model two_outputs(std::vector<KerasTensor>{in}, {valid(padded), padded});
  const Model same_padding(in, same(pad(in)));
  for (const Model* model : {&two_outputs, &same_padding}) {
    for (const auto& step : graph_of(*model).steps()) {
      EXPECT_FALSE(step.folded) << step.node->layer->name();
      EXPECT_FALSE(step.zero_padding.has_value()) << step.node->layer->name();
    }
  }
  const Tensor x = random::normal({2, 9, 8, 3}, {.seed = 5});
  const auto outs = two_outputs(std::vector<Tensor>{x});
  EXPECT_EQ(outs.at(1).shape(), (Shape{2, 12, 9, 3}));
  EXPECT_EQ(outs.at(1).to_vector<float>(), pad(x).to_vector<float>());
  EXPECT_EQ(outs.at(0).to_vector<float>(), valid(pad(x)).to_vector<float>());
  EXPECT_EQ(same_padding(x).to_vector<float>(), same(pad(x)).to_vector<float>());
}

TEST(Functional, OutputsMustDependOnDeclaredInputs) {
  auto a = Input({2}), b = Input({2});
  auto out = layers::Add()({a, b});
  try {
    Model model(a, out);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("not among the model's inputs"), std::string::npos);
  }
}

TEST(Sequential, BuildsFromInputShapeAndMatchesFunctional) {
  Sequential seq({layers::Dense(8, {.activation = "relu"}), layers::Dense(3)},
                 {.input_shape = Shape{5}});
  EXPECT_EQ(seq.weights().size(), 4u);
  seq.add(layers::Softmax());
  const Tensor x = random::normal({4, 5}, {.seed = 3});
  const Tensor y = seq(x);
  EXPECT_EQ(y.shape(), (Shape{4, 3}));
  for (float s : sum(y, {.axes = {1}}).to_vector<float>()) EXPECT_NEAR(s, 1.0f, 1e-5f);
}

// A subclassed model: a user class overriding call.
class TwoLayerNet : public LayerImpl {
 public:
  TwoLayerNet() : LayerImpl("TwoLayerNet") {
    hidden_ = track(layers::Dense(16, {.activation = "relu"}));
    out_ = track(layers::Dense(2));
  }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override {
    return {out_(hidden_(inputs[0], ctx), ctx)};
  }

 private:
  layers::Dense hidden_{1}, out_{1};
};

TEST(Subclassed, TracksSublayersAndTrains) {
  Model model = make_model<TwoLayerNet>();
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  const Tensor x = random::normal({256, 2}, {.seed = 4});
  std::vector<std::int64_t> labels;
  for (float v : sum(x, {.axes = {1}}).to_vector<float>()) labels.push_back(v > 0);
  model.fit(x, Tensor::from_vector(labels), {.batch_size = 32, .epochs = 30, .verbose = 0});
  EXPECT_EQ(model.weights().size(), 4u);
  EXPECT_GE(model.evaluate(x, Tensor::from_vector(labels), {.verbose = 0}).at("accuracy"), 0.97);
}

TEST(Trainable, FreezingExcludesWeightsFromTrainingAndUnfreezingRestores) {
  layers::Dense base(4), head(2);
  auto in = Input({3});
  Model model(in, head(base(in)));
  EXPECT_EQ(model.trainable_weights().size(), 4u);
  base.set_trainable(false);
  EXPECT_EQ(model.trainable_weights().size(), 2u);
  EXPECT_EQ(model.non_trainable_weights().size(), 2u);
  model.compile(
      {.optimizer = optimizers::SGD({.learning_rate = 0.1}), .loss = losses::MeanSquaredError()});
  const auto frozen_before = base->kernel().value().to_vector<float>();
  const auto head_before = head->kernel().value().to_vector<float>();
  model.fit(random::normal({16, 3}, {.seed = 5}), random::normal({16, 2}, {.seed = 6}),
            {.epochs = 2, .verbose = 0});
  EXPECT_EQ(base->kernel().value().to_vector<float>(), frozen_before);
  EXPECT_NE(head->kernel().value().to_vector<float>(), head_before);
  base.set_trainable(true);
  EXPECT_EQ(model.trainable_weights().size(), 4u);
}

TEST(Regularizers, PenaltiesAreAddedToTheLoss) {
  layers::Dense dense(2, {.kernel_initializer = initializers::Ones(),
                          .kernel_regularizer = regularizers::L2(0.5f)});
  auto in = Input({3});
  Model model(in, dense(in));
  model.compile({.optimizer = optimizers::SGD(), .loss = losses::MeanSquaredError()});
  const Tensor x = Tensor::zeros({4, 3}), y = Tensor::zeros({4, 2});
  // Prediction error is 0; the L2 penalty is 0.5 · sum(1²) over 6 weights = 3.
  EXPECT_NEAR(model.test_on_batch(x, y).at("loss"), 3.0, 1e-6);
}

TEST(ConvLayers, SmallCnnLearnsAToyImageTask) {
  // Bright square top-left vs bottom-right: a CNN with BN and dropout learns it.
  const std::int64_t n = 128;
  Tensor x = Tensor::zeros({n, 8, 8, 1});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 2;
    const int off = i % 2 ? 4 : 0;
    for (int r = 0; r < 4; ++r)
      for (int c = 0; c < 4; ++c) p[((i * 8) + r + off) * 8 + c + off] = 1.0f;
  }
  auto in = Input({8, 8, 1});
  auto h = layers::Conv2D(4, {3, 3}, {.padding = "same"})(in);
  h = layers::BatchNormalization()(h);
  h = layers::ReLU()(h);
  h = layers::MaxPooling2D()(h);
  h = layers::DepthwiseConv2D({3, 3}, {.padding = "same", .activation = "relu"})(h);
  h = layers::GlobalAveragePooling2D()(h);
  h = layers::Dropout(0.1f, {.seed = 3})(h);
  Model model(in, layers::Dense(2)(h));
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.05}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  model.fit(x, Tensor::from_vector(labels), {.batch_size = 16, .epochs = 15, .verbose = 0});
  EXPECT_GE(model.evaluate(x, Tensor::from_vector(labels), {.verbose = 0}).at("accuracy"), 0.99);
}

}  // namespace
}  // namespace lockstep::testing
