// Keras masks (nn/layer.h, "Keras masks"): Embedding(mask_zero) and Masking
// make them, graphs and Sequential stacks carry them, the layers that take
// them skip, ignore or average over the padding as Keras's do, the merge
// layers combine them, a layer that does not take one says so, and a masked
// output is refused for training rather than counting the padding. Each
// masked result is checked against the same layer run on the sequence
// without its padding.
#include <gtest/gtest.h>

#include <string>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

// Two token sequences of 5 steps: 3 real then padding, and 5 real.
Tensor padded_ids() {
  return Tensor::from_vector(std::vector<std::int32_t>{4, 7, 2, 0, 0, 3, 9, 1, 6, 8}, {2, 5});
}

void expect_near(const Tensor& a, const Tensor& b, float tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol) << what << " at " << i;
}

// Row `row` of a batch, its first `steps` steps.
Tensor prefix(const Tensor& x, std::int64_t row, std::int64_t steps) {
  std::vector<std::int64_t> begin(static_cast<std::size_t>(x.rank()), 0),
      size = x.shape().to_vector();
  begin[0] = row;
  size[0] = 1;
  size[1] = steps;
  return slice(x, begin, size);
}

TEST(Masking, EmbeddingWithMaskZeroMakesTheMaskAndGraphsCarryIt) {
  layers::Embedding embedding(10, 3, {.mask_zero = true});
  auto in = Input({5}, DType::kInt32);
  const KerasTensor e = embedding(in);
  EXPECT_TRUE(e.has_mask());
  EXPECT_TRUE(layers::Dense(2)(e).has_mask());  // Dense passes it on
  EXPECT_FALSE(layers::LSTM(2)(e).has_mask());  // the last output: none
  EXPECT_TRUE(layers::LSTM(2, {.return_sequences = true})(e).has_mask());
  EXPECT_FALSE(layers::Embedding(10, 3)(in).has_mask());  // without mask_zero: none
  const Tensor mask = embedding->compute_mask({padded_ids()}, {}).at(0);
  EXPECT_EQ(mask.dtype(), DType::kBool);
  EXPECT_EQ(mask.to_vector<bool>(),
            (std::vector<bool>{true, true, true, false, false, true, true, true, true, true}));
}

// A recurrent layer over a padded sequence gives what it gives over the
// sequence without the padding: the last output, and every step's output
// (the last one repeated at padded steps, or zeros with zero_output_for_mask).
TEST(Masking, RecurrentLayersSkipThePadding) {
  for (const char* cls : {"SimpleRNN", "LSTM", "GRU"}) {
    for (bool backwards : {false, true}) {
      SCOPED_TRACE(std::string(cls) + (backwards ? " go_backwards" : ""));
      set_random_seed(3);
      layers::Embedding embedding(10, 3, {.mask_zero = true});
      const layers::RecurrentLayerOptions o{.return_sequences = true, .go_backwards = backwards};
      Layer rnn = std::string(cls) == "LSTM"  ? Layer(layers::LSTM(4, o))
                  : std::string(cls) == "GRU" ? Layer(layers::GRU(4, o))
                                              : Layer(layers::SimpleRNN(4, o));
      auto in = Input({5}, DType::kInt32);
      Model model(in, rnn(embedding(in)));
      const Tensor seq = model.predict(padded_ids(), {.verbose = 0});
      // The first example alone, without its padding.
      const Tensor alone = rnn(embedding(slice(padded_ids(), {0, 0}, {1, 3})));  // [1, 3, 4]
      // Going forwards, the padded steps come last and repeat the last
      // output; backwards (the output in the order processed) they come
      // first, and the state stays zero until a real step.
      const std::int64_t first_real = backwards ? 2 : 0, first_padded = backwards ? 0 : 3;
      expect_near(slice(seq, {0, first_real, 0}, {1, 3, 4}), alone, 1e-6f, "the real steps");
      // Repeated exactly: compared with the same run's last real step (the
      // run alone above may sum in another order: oneDNN blocks a batch of
      // one otherwise than a batch of two on some CPUs: a Zen 3 EPYC).
      const Tensor padded_steps = slice(seq, {0, first_padded, 0}, {1, 2, 4});
      const Tensor last = slice(seq, {0, 2, 0}, {1, 1, 4});
      const Tensor expected = backwards ? Tensor::zeros({1, 2, 4}) : concat({last, last}, 1);
      expect_near(padded_steps, expected, 0.0f, "the padded steps");
    }
  }
}

// As Keras: a recurrent layer called with initial states gets no mask
// (Keras fills a call's mask argument only when it passes one tensor), and
// its output carries the sequences' mask on.
TEST(Masking, ARecurrentLayerGivenInitialStatesRunsOverEveryStepAsKeras) {
  set_random_seed(6);
  layers::Embedding embedding(10, 3, {.mask_zero = true});
  layers::GRU gru(2, {.return_sequences = true});
  auto in = Input({5}, DType::kInt32);
  auto state = Input({2});
  const KerasTensor e = embedding(in);
  const KerasTensor out = gru({e, state});
  EXPECT_TRUE(out.has_mask());
  Model model({in, state}, {out});
  const Tensor h0 = Tensor::full({2, 2}, 0.25);
  const Tensor got = model.predict({padded_ids(), h0}, {.verbose = 0}).at(0);
  const Tensor unmasked = gru({embedding(padded_ids()), h0}).at(0);
  expect_near(got, unmasked, 0.0f, "every step");
}

TEST(Masking, BidirectionalReturnsZerosAtPaddedSteps) {
  set_random_seed(4);
  layers::Embedding embedding(10, 3, {.mask_zero = true});
  layers::Bidirectional bi(layers::LSTM(2, {.return_sequences = true}));
  auto in = Input({5}, DType::kInt32);
  Model model(in, bi(embedding(in)));
  const Tensor seq = model.predict(padded_ids(), {.verbose = 0});
  const Tensor alone = bi(embedding(slice(padded_ids(), {0, 0}, {1, 3})));
  expect_near(prefix(seq, 0, 3), alone, 1e-6f, "the real steps");
  expect_near(slice(seq, {0, 3, 0}, {1, 2, 4}), Tensor::zeros({1, 2, 4}), 0.0f, "padding");
}

TEST(Masking, GlobalAveragePooling1DAveragesTheRealSteps) {
  layers::GlobalAveragePooling1D pool;
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 100, 100}, {1, 3, 2});
  const Tensor mask = Tensor::from_vector(std::vector<bool>{true, true, false}, {1, 3});
  expect_near(pool->apply({x}, {mask}, {}).at(0),
              Tensor::from_vector(std::vector<float>{2, 3}, {1, 2}), 0.0f, "masked mean");
  EXPECT_FALSE(pool->compute_mask({x}, {mask}).at(0).defined());  // it ends the mask
}

TEST(Masking, TheMaskingLayerZeroesAndMasksStepsOfTheMaskValue) {
  layers::Masking masking(-1.0);
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, -1, -1, -1, 5, -1, -1}, {1, 4, 2});
  expect_near(masking(x),
              Tensor::from_vector(std::vector<float>{1, 2, 0, 0, -1, 5, 0, 0}, {1, 4, 2}), 0.0f,
              "output");
  EXPECT_EQ(masking->compute_mask({x}, {}).at(0).to_vector<bool>(),
            (std::vector<bool>{true, false, true, false}));
}

TEST(Masking, SequentialStacksAndNestedModelsCarryMasks) {
  set_random_seed(5);
  layers::Embedding embedding(10, 3, {.mask_zero = true});
  layers::LSTM lstm(4);
  Sequential seq;
  seq.add(Input({5}, DType::kInt32));
  seq.add(embedding);
  seq.add(lstm);
  const Tensor via_sequential = seq.predict(padded_ids(), {.verbose = 0});
  auto in = Input({5}, DType::kInt32);
  auto inner_in = Input({5}, DType::kInt32);
  Model inner(inner_in, embedding(inner_in));  // a nested model whose output carries the mask
  Model outer(in, lstm(inner(in)));
  const Tensor via_nested = outer.predict(padded_ids(), {.verbose = 0});
  const Tensor alone = lstm(embedding(slice(padded_ids(), {0, 0}, {1, 3})));
  expect_near(slice(via_sequential, {0, 0}, {1, 4}), alone, 1e-6f, "Sequential");
  expect_near(slice(via_nested, {0, 0}, {1, 4}), alone, 1e-6f, "nested model");
}

TEST(Masking, MergeLayersCombineMasksAsKeras) {
  const Tensor x = Tensor::ones({1, 3, 2});
  const Tensor a = Tensor::from_vector(std::vector<bool>{true, false, false}, {1, 3});
  const Tensor b = Tensor::from_vector(std::vector<bool>{false, true, false}, {1, 3});
  layers::Add add;
  EXPECT_EQ(add->compute_mask({x, x}, {a, b}).at(0).to_vector<bool>(),
            (std::vector<bool>{true, true, false}));  // either real
  EXPECT_FALSE(add->compute_mask({x, x}, {a, Tensor()}).at(0).defined());
  // Concatenate along the features: an input without a mask counts as real.
  layers::Concatenate cat;
  EXPECT_EQ(cat->compute_mask({x, x}, {a, Tensor()}).at(0).to_vector<bool>(),
            (std::vector<bool>{true, true, true}));
  EXPECT_EQ(cat->compute_mask({x, x}, {a, b}).at(0).to_vector<bool>(),
            (std::vector<bool>{true, true, false}));
  // Maximum leaves a masked input out of the comparison.
  layers::Maximum maximum;
  const Tensor lo = Tensor::full({1, 3, 2}, -5.0), hi = Tensor::full({1, 3, 2}, 7.0);
  const Tensor m = maximum->apply({lo, hi}, {Tensor::ones({1, 3}, DType::kBool), b}, {}).at(0);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{-5, -5, 7, 7, -5, -5}));
}

TEST(Masking, ALayerThatTakesNoMaskSaysItEndsThere) {
  std::string logged;
  const LogSink previous =
      set_log_sink([&](LogLevel, std::string_view text) { logged += std::string(text); });
  auto in = Input({5}, DType::kInt32);
  const KerasTensor flat = layers::Flatten()(layers::Embedding(10, 3, {.mask_zero = true})(in));
  set_log_sink(previous);
  EXPECT_FALSE(flat.has_mask());
  EXPECT_NE(logged.find("(of type Flatten) was passed an input with a mask attached to it"),
            std::string::npos)
      << logged;
}

// Keras weights a masked output's loss by its mask: Σ loss·mask / Σ mask,
// the mean over the real steps (losses.loss.apply_mask). Padded steps get
// no gradient and no weight: changing their targets changes nothing.
TEST(Masking, AMaskedOutputsLossIsTheMeanOverItsRealSteps) {
  auto make = [] {
    set_random_seed(3);
    auto in = Input({5}, DType::kInt32);
    auto h = layers::Embedding(10, 3, {.mask_zero = true})(in);
    Model model(in, layers::Dense(2)(layers::LSTM(4, {.return_sequences = true})(h)));
    model.compile({.optimizer = optimizers::SGD(), .loss = losses::MeanSquaredError()});
    return model;
  };
  const Tensor ids = padded_ids();
  const std::vector<std::int32_t> id_values = ids.to_vector<std::int32_t>();
  std::vector<float> targets(id_values.size() * 2), other(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    targets[i] = 0.1f * static_cast<float>(i % 7);
    // Different targets at the padded steps only.
    other[i] = id_values[i / 2] == 0 ? 9.0f : targets[i];
  }
  const Tensor y = Tensor::from_vector(targets, {2, 5, 2}),
               y_other = Tensor::from_vector(other, {2, 5, 2});
  Model model = make();
  const Tensor pred = model.predict(ids, {.verbose = 0});
  double weighted = 0, real = 0;
  const std::vector<float> p = pred.to_vector<float>();
  for (std::size_t step = 0; step < id_values.size(); ++step) {
    if (id_values[step] == 0) continue;
    real += 1;
    for (std::size_t k = 0; k < 2; ++k) {
      const double d = p[step * 2 + k] - targets[step * 2 + k];
      weighted += d * d / 2;
    }
  }
  EXPECT_NEAR(model.evaluate(ids, y, {.verbose = 0}).at("loss"), weighted / real, 1e-6);
  model.fit(ids, y, {.epochs = 1, .verbose = 0});
  Model again = make();
  again.fit(ids, y_other, {.epochs = 1, .verbose = 0});
  const std::vector<Variable> got = again.weights(), want = model.weights();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(got[i].value().to_vector<float>(), want[i].value().to_vector<float>())
        << "weight " << i;
}

// A custom loss with one value per example (LossImpl's default unreduced).
class PerExampleSum : public LossImpl {
 public:
  PerExampleSum() : LossImpl("per_example_sum", Reduction::kSumOverBatchSize) {}
  Tensor per_example(const Tensor&, const Tensor& y_pred) const override {
    return sum(reshape(y_pred, {y_pred.shape()[0], -1}), {.axes = {1}});
  }
  std::string class_name() const override { return "PerExampleSum"; }
};

// A masked output whose loss gives one value per example (not per step)
// cannot be weighted by a [batch, steps] mask: an error naming both shapes.
TEST(Masking, AMaskedOutputNeedsALossPerStep) {
  auto in = Input({5}, DType::kInt32);
  auto h = layers::Embedding(10, 3, {.mask_zero = true})(in);
  Model model(in, layers::Dense(2)(layers::LSTM(4, {.return_sequences = true})(h)));
  model.compile({.optimizer = optimizers::SGD(), .loss = Loss(std::make_shared<PerExampleSum>())});
  try {
    model.fit(padded_ids(), Tensor::zeros({2, 5, 2}), {.epochs = 1, .verbose = 0});
    FAIL() << "expected an error";
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("output 0 carries a Keras mask of shape [2, 5]"), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace lockstep
