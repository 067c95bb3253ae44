// Layers against naive references, their input gradients by finite
// differences, names, and bad input (networks trained as Models are in
// tests/train/networks_test.cc).
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

// keras.layers.Normalization(mean=..., variance=...): (x - mean) / sd per
// feature of the last axis, sd at least Keras's epsilon (1e-7); invert
// undoes it; adapt() takes the data's mean and population variance.
TEST(Layers, NormalizationMatchesKerasFormulaAndItsGradient) {
  std::mt19937 rng(3);
  const std::vector<double> mean{0.5, -2.0, 3.0}, variance{4.0, 0.25, 0.0};
  layers::Normalization norm({.mean = mean, .variance = variance});
  auto reference = [&](const std::vector<Ref>& x) {
    Ref y = x[0];
    for (std::int64_t i = 0; i < y.size(); ++i) {
      const auto j = static_cast<std::size_t>(i % 3);
      y[i] = (y[i] - mean[j]) / std::max(std::sqrt(variance[j]), 1e-7);
    }
    return y;
  };
  // The zero variance's feature divides by 1e-7 (its gradient is 1e7):
  // inputs at its mean keep its values in float32's range.
  Ref x = random_ref({4, 3}, rng);
  for (std::int64_t r = 0; r < 4; ++r) x[r * 3 + 2] = 3.0;
  check_gradients(
      "Normalization", [norm](const std::vector<Tensor>& in) { return norm(in[0]); }, reference,
      {x}, 7, 2e-4, 2e-3);
  layers::Normalization inverse({.mean = mean, .variance = variance, .invert = true});
  const Tensor v = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const std::vector<float> back =
      inverse(layers::Normalization({.mean = mean, .variance = {4.0, 0.25, 1.0}})(v))
          .to_vector<float>();
  EXPECT_NEAR(back[0], 1.0f, 1e-6);
  EXPECT_NEAR(back[4], 5.0f, 1e-6);

  layers::Normalization adapted;
  adapted->adapt(Tensor::from_vector<float>({1, 10, 3, 20, 5, 60}, {3, 2}));
  EXPECT_EQ(adapted->mean(), (std::vector<double>{3.0, 30.0}));
  EXPECT_NEAR(adapted->variance()[0], 8.0 / 3.0, 1e-12);
  EXPECT_NEAR(adapted->variance()[1], 1400.0 / 3.0, 1e-9);

  // Data of many blocks (adapt reads it 32k values at a time and merges
  // them), rank 3, far from zero: the naive two-pass statistics.
  const std::int64_t items = 9001, per_item = 3, features = 2;
  std::vector<float> big(static_cast<std::size_t>(items * per_item * features));
  for (std::size_t i = 0; i < big.size(); ++i)
    big[i] = (i % 2 == 0 ? 1e4f : -3.0f) + static_cast<float>((i * 7919) % 1000) / 97.0f;
  layers::Normalization blocks;
  blocks->adapt(Tensor::from_vector(big, {items, per_item, features}));
  for (std::size_t j = 0; j < 2; ++j) {
    double sum = 0, squares = 0;
    const auto n = static_cast<double>(big.size() / 2);
    for (std::size_t i = j; i < big.size(); i += 2) sum += big[i];
    for (std::size_t i = j; i < big.size(); i += 2)
      squares += (big[i] - sum / n) * (big[i] - sum / n);
    EXPECT_NEAR(blocks->mean()[j], sum / n, 1e-9 * std::abs(sum / n)) << j;
    EXPECT_NEAR(blocks->variance()[j], squares / n, 1e-9 * squares / n) << j;
  }

  EXPECT_THROW(layers::Normalization({.mean = {1.0}, .variance = {}}), ValueError);
  EXPECT_THROW(layers::Normalization({.mean = {1.0}, .variance = {-1.0}}), ValueError);
  EXPECT_THROW(norm(Tensor::zeros({2, 4})), ShapeError);

  // Its config rebuilds it.
  const Layer again = layer_from_config("Normalization", norm->get_config());
  EXPECT_EQ(again(v).to_vector<float>(), norm(v).to_vector<float>());
}

// Built without mean and variance, the layer holds them as Keras 3 does:
// the non-trainable weights mean, variance (the identity until adapted)
// and an int64 count; adapt() then fills the weights, and the config says
// nothing of them (Keras's null).
TEST(Layers, NormalizationBuiltWithoutStatisticsKeepsThemAsWeights) {
  layers::Normalization norm;
  const Tensor x = Tensor::from_vector<float>({1, 10, 3, 20, 5, 60}, {3, 2});
  EXPECT_EQ(norm(x).to_vector<float>(), x.to_vector<float>()) << "Keras's: identity until adapted";
  std::vector<std::string> names;
  for (const Variable& w : norm.weights()) {
    names.push_back(w.name());
    EXPECT_FALSE(w.trainable()) << w.name();
  }
  EXPECT_EQ(names, (std::vector<std::string>{norm.name() + "/mean", norm.name() + "/variance",
                                             norm.name() + "/count"}));
  EXPECT_EQ(norm.weights()[2].value().dtype(), DType::kInt64);
  norm->adapt(x);
  EXPECT_EQ(norm->mean(), (std::vector<double>{3.0, 30.0}));
  EXPECT_NEAR(norm->variance()[1], 1400.0 / 3.0, 1e-3);
  EXPECT_EQ(norm.weights()[2].value().to_vector<std::int64_t>(), std::vector<std::int64_t>{3});
  const std::vector<float> y = norm(x).to_vector<float>();
  EXPECT_NEAR(y[0], -2.0f / std::sqrt(8.0f / 3.0f), 1e-6);
  EXPECT_FALSE(norm->get_config().has("mean"));
  EXPECT_THROW(norm->adapt(Tensor::zeros({4, 3})), ShapeError) << "built for 2 features";
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
    EXPECT_NE(std::string(e.what()).find("unknown activation 'relux'; did you mean 'relu'? "
                                         "Lockstep's: celu, elu, exponential, gelu"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(initializers::get("glorot"), ValueError);
  EXPECT_THROW(losses::get("crossentropy"), ValueError);
}

}  // namespace
}  // namespace lockstep::testing
