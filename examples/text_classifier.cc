// Keras's "Bidirectional LSTM on IMDB" example, ported line by line and
// trained under MirroredStrategy() (one replica per core): token ids →
// Embedding → Bidirectional(LSTM, return_sequences) → Bidirectional(LSTM) →
// Dense(1, sigmoid). The reviews are synthetic, so the example runs without
// a download: random filler words with one sentiment word somewhere in each
// (ids 1–10 positive, 11–20 negative), the label its sentiment — a model
// must carry what it read across the sequence to learn it.
//
// It saves the trained model as OUT/text_classifier.keras, the test reviews
// as OUT/x_test.npy and OUT/y_test.npy, and its test accuracy in
// OUT/text_classifier.json: tests/interop/keras_loads_examples.py loads the
// file in Keras and checks Keras evaluates it to the same accuracy.
//
//   text_classifier OUT_DIR [epochs = 4]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

constexpr std::int64_t kMaxFeatures = 2000;  // vocabulary size
constexpr std::int64_t kMaxLen = 40;         // words per review

// n reviews: ids [n, kMaxLen] (int32) and labels [n, 1] (float32, 0 or 1).
std::pair<ls::Tensor, ls::Tensor> reviews(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * kMaxLen));
  std::vector<float> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t t = 0; t < kMaxLen; ++t)
      ids[static_cast<std::size_t>(i * kMaxLen + t)] =
          static_cast<std::int32_t>(21 + rng() % (kMaxFeatures - 21));
    const bool positive = rng() % 2 == 0;
    const auto word = static_cast<std::int32_t>((positive ? 1 : 11) + rng() % 10);
    ids[static_cast<std::size_t>(i * kMaxLen + static_cast<std::int64_t>(rng() % kMaxLen))] = word;
    labels[static_cast<std::size_t>(i)] = positive ? 1.0f : 0.0f;
  }
  return {ls::Tensor::from_vector(ids, ls::Shape{n, kMaxLen}),
          ls::Tensor::from_vector(labels, ls::Shape{n, 1})};
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: text_classifier OUT_DIR [epochs]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 4;
  std::filesystem::create_directories(out);
  ls::set_random_seed(7);

  ls::distribute::MirroredStrategy strategy;
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());
  ls::Model model;
  {
    auto scope = strategy.scope();
    // Input for variable-length sequences of integers (here: padded to kMaxLen)
    auto inputs = ls::Input({kMaxLen}, ls::DType::kInt32);
    // Embed each integer in a 32-dimensional vector
    auto x = ls::layers::Embedding(kMaxFeatures, 32)(inputs);
    // Add 2 bidirectional LSTMs
    x = ls::layers::Bidirectional(ls::layers::LSTM(16, {.return_sequences = true}))(x);
    x = ls::layers::Bidirectional(ls::layers::LSTM(16))(x);
    // Add a classifier
    auto outputs = ls::layers::Dense(1, {.activation = "sigmoid"})(x);
    model = ls::Model(inputs, outputs);
    model.compile({.optimizer = ls::optimizers::Adam({.learning_rate = 0.005}),
                   .loss = "binary_crossentropy",
                   .metrics = {"accuracy"}});
  }
  model.summary();

  const auto [x_train, y_train] = reviews(6000, 1);
  const auto [x_val, y_val] = reviews(400, 2);
  const auto [x_test, y_test] = reviews(400, 3);
  model.fit(
      x_train, y_train,
      {.batch_size = 64, .epochs = epochs, .verbose = 2, .validation_data = {{x_val, y_val}}});
  const ls::Logs results = model.evaluate(x_test, y_test, {.batch_size = 64, .verbose = 0});
  std::printf("test accuracy: %.4f\n", results.at("accuracy"));

  model.save((out / "text_classifier.keras").string());
  ls::data::write_npy((out / "x_test.npy").string(), x_test);
  ls::data::write_npy((out / "y_test.npy").string(), y_test);
  std::ofstream(out / "text_classifier.json") << "{\"accuracy\": " << results.at("accuracy")
                                              << ", \"loss\": " << results.at("loss") << "}\n";
  std::printf("saved %s\n", (out / "text_classifier.keras").c_str());
  return 0;
}
