// Layers against naive references, their input gradients by finite
// differences, functional / sequential / subclassed networks, and the errors
// a Keras user runs into first.
#include <gtest/gtest.h>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

TEST(Layers, NamesFollowKerasSnakeCaseAndCount) {
  clear_session();
  EXPECT_EQ(layers::Dense(2).name(), "dense");
  EXPECT_EQ(layers::Dense(2).name(), "dense_1");
  EXPECT_EQ(layers::ReLU().name(), "re_lu");
  EXPECT_EQ(layers::Flatten().name(), "flatten");
  EXPECT_EQ(layers::Dense(2, {.name = "head"}).name(), "head");
  EXPECT_EQ(make_layer<layers::FlattenImpl>("")->name(), "flatten_1");
}

// Layer names for classes with awkward capitalisation, as Keras makes them.
class NamedImpl : public SingleInputLayerImpl {
 public:
  explicit NamedImpl(std::string class_name) : SingleInputLayerImpl(std::move(class_name)) {}
  Tensor call(const Tensor& x, const CallContext&) override { return x; }
};

TEST(Layers, SnakeCaseMatchesKerasRegexes) {
  clear_session();
  EXPECT_EQ(make_layer<NamedImpl>("BatchNormalization").name(), "batch_normalization");
  EXPECT_EQ(make_layer<NamedImpl>("GlobalAveragePooling2D").name(), "global_average_pooling2d");
  EXPECT_EQ(make_layer<NamedImpl>("DepthwiseConv2D").name(), "depthwise_conv2d");
  EXPECT_EQ(make_layer<NamedImpl>("Conv2D").name(), "conv2d");
  EXPECT_EQ(make_layer<NamedImpl>("ZeroPadding2D").name(), "zero_padding2d");
  EXPECT_EQ(make_layer<NamedImpl>("ReLU").name(), "re_lu");
  EXPECT_EQ(make_layer<NamedImpl>("ABcDe").name(), "a_bc_de");
}

TEST(Layers, DenseMatchesReferenceAndBuildsFromInputShape) {
  std::mt19937 rng(1);
  layers::Dense dense(3, {.activation = "relu"});
  const Ref x = random_ref({4, 5}, rng);
  const Tensor y = dense(to_tensor(x));
  ASSERT_EQ(dense->kernel().shape(), (Shape{5, 3}));
  ASSERT_EQ(dense->bias().shape(), (Shape{3}));
  EXPECT_EQ(dense.weights().size(), 2u);
  const Ref want =
      ref_unary(ref_binary(ref_matmul(x, to_ref(dense->kernel().value()), false, false),
                           to_ref(dense->bias().value()), [](double a, double b) { return a + b; }),
                [](double v) { return v > 0 ? v : 0.0; });
  expect_close(want, y, 1e-5, 1e-5, "dense");
  // Rank-3 input: Dense acts on the last axis.
  EXPECT_EQ(dense(Tensor::zeros({2, 7, 5})).shape(), (Shape{2, 7, 3}));
}

TEST(Layers, DenseInputGradientByFiniteDifferences) {
  std::mt19937 rng(2);
  layers::Dense dense(4, {.activation = "tanh"});
  (void)dense(Tensor::zeros({1, 3}));  // build
  const Ref w = to_ref(dense->kernel().value()), b = to_ref(dense->bias().value());
  check_gradients(
      "Dense", [dense](const std::vector<Tensor>& x) { return dense(x[0]); },
      [w, b](const std::vector<Ref>& x) {
        return ref_unary(ref_binary(ref_matmul(x[0], w, false, false), b,
                                    [](double p, double q) { return p + q; }),
                         [](double v) { return std::tanh(v); });
      },
      {random_ref({5, 3}, rng)});
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

TEST(Layers, ShapeLayersAndMerges) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  EXPECT_EQ(layers::Flatten()(x).shape(), (Shape{2, 4}));
  EXPECT_EQ(layers::Reshape({4, 1})(x).shape(), (Shape{2, 4, 1}));
  EXPECT_EQ(layers::Add()({x, x})[0].to_vector<float>(), (x * 2.0f).to_vector<float>());
  EXPECT_EQ(layers::Concatenate()({x, x})[0].shape(), (Shape{2, 2, 4}));
  EXPECT_THROW(layers::Add()({x, Tensor::zeros({2, 2})}), ShapeError);
  EXPECT_EQ(layers::Softmax()(x).shape(), x.shape());
  EXPECT_EQ(
      layers::ReLU({.max_value = 6.0f})(Tensor::from_vector<float>({-1, 3, 9})).to_vector<float>(),
      (std::vector<float>{0, 3, 6}));
  EXPECT_EQ(layers::ReLU({.negative_slope = 0.5f})(Tensor::from_vector<float>({-2, 3}))
                .to_vector<float>(),
            (std::vector<float>{-1, 3}));
  EXPECT_EQ(layers::Activation("sigmoid")(Tensor::zeros({1})).item<float>(), 0.5f);
}

TEST(Layers, DropoutScalesInTrainingAndIsIdentityInInference) {
  layers::Dropout dropout(0.25f, {.seed = 7});
  const Tensor x = Tensor::ones({100000});
  EXPECT_EQ(dropout(x).to_vector<float>(), x.to_vector<float>());  // inference
  const std::vector<float> y = dropout(x, {.training = true}).to_vector<float>();
  double kept = 0, total = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6f);
    kept += v != 0.0f;
    total += v;
  }
  EXPECT_NEAR(kept / 100000.0, 0.75, 0.01);
  EXPECT_NEAR(total / 100000.0, 1.0, 0.015);  // the expectation is preserved
  // A new mask every call.
  EXPECT_NE(dropout(x, {.training = true}).to_vector<float>(), y);
}

TEST(Layers, EmbeddingLooksUpRowsAndNamesBadIds) {
  layers::Embedding emb(5, 3);
  const Tensor ids = Tensor::from_vector<std::int64_t>({4, 0, 4}, {3});
  const Tensor out = emb(ids);
  ASSERT_EQ(out.shape(), (Shape{3, 3}));
  const auto table = emb->embeddings().value().to_vector<float>();
  const auto got = out.to_vector<float>();
  for (int j = 0; j < 3; ++j)
    EXPECT_EQ(got[static_cast<std::size_t>(j)], table[static_cast<std::size_t>(12 + j)]);
  try {
    emb(Tensor::from_vector<std::int32_t>({1, 5}));
    FAIL();
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("input_dim 5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("index 5 at position 1"), std::string::npos) << e.what();
  }
}

TEST(Layers, UnknownNamesListValidOnes) {
  try {
    layers::Dense(3, {.activation = "relux"});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown activation 'relux'; valid names: linear, relu"),
              std::string::npos);
  }
  EXPECT_THROW(initializers::get("glorot"), ValueError);
  EXPECT_THROW(losses::get("crossentropy"), ValueError);
  EXPECT_THROW(optimizers::get("adamm"), ValueError);
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

}  // namespace
}  // namespace lockstep::testing
