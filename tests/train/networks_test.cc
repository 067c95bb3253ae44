// Layers and networks (functional, Sequential, subclassed) wrapped in a
// Model and trained: what nn's tests cannot do without the train layer —
// the errors a Keras user meets first, freezing, regularisation, and small
// models that learn.
#include <gtest/gtest.h>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

// The most bytes the allocator held during `call` beyond those in use before
// it. Its cache is emptied first: idle buffers left by earlier tests in this
// process may serve a request with a buffer up to twice its size
// (CachingAllocator), counted whole.
template <typename F>
std::size_t peak_bytes_during(const Tensor& on_device, F&& call) {
  Allocator& allocator = on_device.device().allocator();
  allocator.empty_cache();
  allocator.reset_peak_stats();
  const std::size_t before = allocator.stats().bytes_in_use;
  call();
  return allocator.stats().peak_bytes_in_use - before;
}

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

// A layer with several outputs (an LSTM with return_state): call_all gives
// one symbolic tensor per output, the graph runs the layer once and hands
// each reader its output, an output nothing reads is dropped, and calling
// such a layer for one tensor says to use call_all. Its states are the last
// step's: h is the last output, and the graph trains through all three.
TEST(Functional, ALayerWithSeveralOutputsRunsOnceForAllItsReaders) {
  set_random_seed(2);
  auto in = Input({5, 3});
  layers::LSTM lstm(4, {.return_sequences = true, .return_state = true});
  const std::vector<KerasTensor> outs = lstm.call_all(in);
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].shape_string(), "(None, 5, 4)");
  EXPECT_EQ(outs[2].shape_string(), "(None, 4)");
  try {
    (void)lstm(in);
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("returns 3 outputs; Hint: take them all with call_all"),
              std::string::npos)
        << e.what();
  }
  // The sequence and c are read, h is not.
  layers::Dense head_c(1);
  Model model({in}, {layers::Dense(1)(layers::Flatten()(outs[0])), head_c(outs[2])});
  const Tensor x = random::normal({2, 5, 3}, {.seed = 3});
  const std::vector<Tensor> got = model(std::vector<Tensor>{x});
  const std::vector<Tensor> eager = lstm->apply({x}, {});
  EXPECT_EQ(slice(eager[0], {0, 4, 0}, {2, 1, 4}).to_vector<float>(),
            eager[1].to_vector<float>());  // h is the last output
  EXPECT_EQ(got.at(1).to_vector<float>(), head_c(eager[2]).to_vector<float>());
  model.compile({.optimizer = optimizers::SGD(), .loss = losses::MeanSquaredError()});
  const History h = model.fit({x}, {Tensor::zeros({2, 1}), Tensor::ones({2, 1})},
                              {.batch_size = 2, .epochs = 3, .verbose = 0});
  for (const auto& [name, values] : h.history()) {
    if (name == "loss") {
      EXPECT_LT(values.back(), values.front());
    }
  }
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
  Tensor out;
  const std::size_t peak = peak_bytes_during(x, [&] { out = model(x); });
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
    Tensor out;
    const std::size_t peak = peak_bytes_during(x, [&] { out = model(x); });
    const std::size_t out_bytes = static_cast<std::size_t>(out.numel()) * sizeof(float);
    const std::size_t padded_bytes = (side + 1) * (side + 1) * channels * sizeof(float);
    EXPECT_LT(peak, out_bytes + padded_bytes / 2)
        << "the 4 MiB padded copy was made: " << peak << " bytes at the peak";
  }
  const Variable& kernel = depthwise->depthwise_kernel();
  expect_close(values_and_gradients(x, kernel, [&](const Tensor& t) { return model(t); }),
               values_and_gradients(x, kernel, [&](const Tensor& t) { return depthwise(pad(t)); }));
}

// Conv2D(activation="relu") → MaxPooling2D, and Conv2D → ReLU →
// MaxPooling2D: the ReLU that only the pooling reads runs after it, on a
// quarter of the elements, and the model computes what the layers called by
// hand do — the same values and gradients, not merely close (max pooling
// routes the gradient to its window's largest input either way).
TEST(Functional, AReLUOnlyAMaxPoolingReadsRunsAfterIt) {
  clear_session();
  const Tensor x = random::normal({2, 10, 10, 3}, {.seed = 9});
  auto in = Input({10, 10, 3});
  layers::Conv2D conv(8, {3, 3}, {.padding = "same", .activation = "relu"});
  layers::MaxPooling2D pool;
  Model own(in, pool(conv(in)));
  EXPECT_TRUE(graph_of(own).steps().at(0).skip_own_relu);
  ASSERT_TRUE(graph_of(own).steps().at(1).relu.has_value());
  const auto by_hand =
      values_and_gradients(x, conv->kernel(), [&](const Tensor& t) { return pool(conv(t)); });
  int zeros = 0;
  for (float v : by_hand[0]) zeros += v == 0.0f;
  EXPECT_GT(zeros, 5);  // windows whose inputs are all negative
  EXPECT_EQ(values_and_gradients(x, conv->kernel(), [&](const Tensor& t) { return own(t); }),
            by_hand);

  layers::Conv2D linear(8, {3, 3}, {.strides = {2, 2}});
  layers::ReLU relu6({.max_value = 6.0f});
  layers::MaxPooling2D pool2({2, 2}, {.strides = {1, 1}, .padding = "same"});
  Model layer(in, pool2(relu6(linear(in))));
  EXPECT_TRUE(graph_of(layer).steps().at(1).folded);
  ASSERT_TRUE(graph_of(layer).steps().at(2).relu.has_value());
  EXPECT_EQ(graph_of(layer).steps().at(2).relu->max_value, 6.0f);
  EXPECT_EQ(values_and_gradients(x, linear->kernel(), [&](const Tensor& t) { return layer(t); }),
            values_and_gradients(x, linear->kernel(),
                                 [&](const Tensor& t) { return pool2(relu6(linear(t))); }));

  // A Sequential moves it too.
  Sequential seq({conv, pool});
  EXPECT_EQ(values_and_gradients(x, conv->kernel(), [&](const Tensor& t) { return seq(t); }),
            by_hand);

  // Under a tape the full-size ReLU output is never made: the peak holds the
  // convolution's output (800 KiB here) and quarter-size tensors (the pooled
  // output, its ReLU, the pooling's workspace), not a second 800 KiB.
  const Tensor big = random::normal({256, 10, 10, 3}, {.seed = 10});
  auto peak = [&](const std::function<Tensor(const Tensor&)>& call) {
    GradientTape tape;
    tape.watch(big);
    Tensor out;
    return peak_bytes_during(big, [&] { out = call(big); });
  };
  const std::size_t conv_bytes = std::size_t{256} * 10 * 10 * 8 * sizeof(float);
  EXPECT_GE(peak([&](const Tensor& t) { return pool(conv(t)); }), 2 * conv_bytes);  // by hand
  EXPECT_LT(peak([&](const Tensor& t) { return own(t); }), 2 * conv_bytes);
  EXPECT_LT(peak([&](const Tensor& t) { return seq(t); }), 2 * conv_bytes);

  // Not when another layer reads the activation, nor before an average pooling.
  auto act = conv(in);
  Model two_readers(std::vector<KerasTensor>{in}, {pool(act), act});
  EXPECT_FALSE(graph_of(two_readers).steps().at(0).skip_own_relu);
  EXPECT_FALSE(graph_of(two_readers).steps().at(1).relu.has_value());
  Model average(in, layers::AveragePooling2D()(conv(in)));
  EXPECT_FALSE(graph_of(average).steps().at(0).skip_own_relu);
}

// MobileNetV2's Conv → BatchNormalization → ReLU6: in training mode the
// graph runs the ReLU inside the batch norm's call (one op, our own loops),
// never storing the normalised tensor between, and computes what the three
// layers called by hand do (oneDNN's batch norm, then the ReLU), forward and
// backward.
TEST(Functional, AReLUAfterABatchNormalizationIsFoldedIntoIt) {
  clear_session();
  constexpr std::int64_t side = 64, channels = 32;
  auto in = Input({side, side, 8});
  layers::Conv2D conv(channels, {1, 1}, {.use_bias = false});
  // γ = 4 puts a tenth of the outputs above the cap.
  layers::BatchNormalization bn({.epsilon = 1e-3f, .gamma_initializer = initializers::Constant(4)});
  layers::ReLU relu6({.max_value = 6.0f});
  Model model(in, relu6(bn(conv(in))));
  ASSERT_TRUE(graph_of(model).steps().at(2).folded);
  ASSERT_TRUE(graph_of(model).steps().at(1).relu.has_value());
  EXPECT_EQ(graph_of(model).steps().at(1).relu->max_value, 6.0f);

  const Tensor x = mul(random::normal({2, side, side, 8}, {.seed = 6}), Tensor::scalar(3.0f));
  const CallContext training{.training = true};
  {
    GradientTape tape;
    tape.watch(x);
    Tensor out;
    const std::size_t peak = peak_bytes_during(x, [&] { out = model(x, training); });
    const std::size_t tensor_bytes = static_cast<std::size_t>(out.numel()) * sizeof(float);
    // The convolution's output (kept for the batch norm's gradient) and the
    // ReLU's; a third tensor is the normalised one the fold does not store.
    EXPECT_LT(peak, tensor_bytes * 5 / 2)
        << "the 1 MiB normalised tensor was stored: " << peak << " bytes at the peak";
  }
  const Variable& kernel = conv->kernel();
  const auto folded =
      values_and_gradients(x, kernel, [&](const Tensor& t) { return model(t, training); });
  const auto by_hand = values_and_gradients(
      x, kernel, [&](const Tensor& t) { return relu6(bn(conv(t), training)); });
  int clipped_low = 0, clipped_high = 0;
  for (float v : by_hand[0]) clipped_low += v == 0.0f, clipped_high += v == 6.0f;
  EXPECT_GT(clipped_low, 1000);  // both of the ReLU6's bounds are reached
  EXPECT_GT(clipped_high, 1000);
  // Each part as close as float32 rounding lets two implementations be,
  // measured against its largest element: the gradients are sums (over the
  // batch for the batch norm's dx, over 8,192 positions for the kernel's),
  // and the two batch norms round theirs differently — oneDNN's float32
  // sums the farther from a float64 oracle.
  const char* parts[] = {"output", "input gradient", "kernel gradient"};
  const float tolerance[] = {2e-6f, 5e-6f, 1e-4f};
  for (std::size_t k = 0; k < 3; ++k) {
    ASSERT_EQ(folded[k].size(), by_hand[k].size());
    float largest = 0, worst = 0;
    for (std::size_t i = 0; i < by_hand[k].size(); ++i) {
      largest = std::max(largest, std::abs(by_hand[k][i]));
      worst = std::max(worst, std::abs(folded[k][i] - by_hand[k][i]));
    }
    EXPECT_LE(worst, tolerance[k] * largest) << parts[k] << ": largest element " << largest;
  }
}

// Not folded where the normalised tensor is needed as it is (another
// reader, a model output), where the ReLU is leaky or thresholded, or where
// the two layers compute in different dtypes; a Sequential folds as a
// graph does.
TEST(Functional, AReLUAnotherReaderNeedsOrThatIsNotPlainIsNotFolded) {
  clear_session();
  auto in = Input({4, 4, 3});
  layers::BatchNormalization bn1, bn2, bn3, bn4;
  layers::ReLU relu1, leaky({.negative_slope = 0.1f}), thresholded({.threshold = 0.5f});
  layers::ReLU bf16_relu({.name = "bf16_relu"});
  bf16_relu.impl()->set_dtype_policy("mixed_bfloat16");
  const auto normalised = bn1(in);
  const Model two_outputs(std::vector<KerasTensor>{in}, {relu1(normalised), normalised});
  const Model others(in, layers::Add()({leaky(bn2(in)), thresholded(bn3(in)), bf16_relu(bn4(in))}));
  for (const Model* model : {&two_outputs, &others}) {
    for (const auto& step : graph_of(*model).steps()) {
      EXPECT_FALSE(step.folded) << step.node->layer->name();
      EXPECT_FALSE(step.relu.has_value()) << step.node->layer->name();
    }
  }
  const Tensor x = random::normal({2, 4, 4, 3}, {.seed = 7});
  const CallContext training{.training = true};
  const auto outs = two_outputs(std::vector<Tensor>{x}, training);
  EXPECT_EQ(outs.at(1).to_vector<float>(), bn1(x, training).to_vector<float>());
  EXPECT_EQ(outs.at(0).to_vector<float>(), relu1(bn1(x, training)).to_vector<float>());

  // Activation("relu6") folds too, in a Sequential: under a tape the step
  // stores its output alone, not the normalised tensor before it.
  layers::BatchNormalization seq_bn;
  Sequential seq({seq_bn, layers::Activation("relu6")}, {.input_shape = Shape{64, 64, 32}});
  const Tensor big = random::normal({2, 64, 64, 32}, {.seed = 8});
  Tensor y;
  {
    GradientTape tape;
    tape.watch(big);
    const std::size_t peak = peak_bytes_during(big, [&] { y = seq(big, training); });
    EXPECT_LT(peak, static_cast<std::size_t>(y.numel()) * sizeof(float) * 3 / 2)
        << "the normalised tensor was stored: " << peak << " bytes at the peak";
  }
  const Tensor z = relu(seq_bn(big, training), {.max_value = 6.0f});
  const auto a = y.to_vector<float>(), b = z.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 2e-6f) << i;
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
