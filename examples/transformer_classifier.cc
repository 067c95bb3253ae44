// Keras's "Text classification with Transformer" example, ported and trained
// under MirroredStrategy() (one replica per core): token and position
// embeddings added, one transformer block (MultiHeadAttention, Dropout, Add,
// LayerNormalization, a gelu feed-forward network, Add,
// LayerNormalization), GlobalAveragePooling1D, Dropout, Dense, Dense(2).
// Keras's TokenAndPositionEmbedding layer embeds range(maxlen) inside
// itself; here the positions are the model's second input, so the model is
// made of built-in layers only and Keras loads the file as it is.
//
// The reviews are synthetic (see text_classifier.cc): filler words with one
// sentiment word somewhere in each. It saves OUT/transformer_classifier.keras,
// the test set (OUT/t_tokens.npy, OUT/t_positions.npy, OUT/t_labels.npy)
// and its test accuracy in OUT/transformer_classifier.json, which
// tests/interop/keras_loads_examples.py checks Keras reproduces.
//
//   transformer_classifier OUT_DIR [epochs = 3]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

constexpr std::int64_t kVocabSize = 2000;
constexpr std::int64_t kMaxLen = 40;
constexpr std::int64_t kEmbedDim = 32;  // embedding size for each token
constexpr std::int64_t kNumHeads = 2;   // attention heads
constexpr std::int64_t kFfDim = 32;     // hidden layer size in the feed-forward network

// The example's TransformerBlock, as a function of built-in layers.
ls::KerasTensor transformer_block(const ls::KerasTensor& inputs, float rate,
                                  bool training_dropout) {
  auto attn = ls::layers::MultiHeadAttention(kNumHeads, kEmbedDim)({inputs, inputs});
  if (training_dropout) attn = ls::layers::Dropout(rate)(attn);
  auto out1 = ls::layers::LayerNormalization({.epsilon = 1e-6f})(ls::layers::Add()({inputs, attn}));
  auto ffn = ls::layers::Dense(kFfDim, {.activation = "gelu"})(out1);
  ffn = ls::layers::Dense(kEmbedDim)(ffn);
  if (training_dropout) ffn = ls::layers::Dropout(rate)(ffn);
  return ls::layers::LayerNormalization({.epsilon = 1e-6f})(ls::layers::Add()({out1, ffn}));
}

struct Split {
  ls::Tensor tokens, positions, labels;
};

Split reviews(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * kMaxLen)), pos(ids.size());
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t t = 0; t < kMaxLen; ++t) {
      ids[static_cast<std::size_t>(i * kMaxLen + t)] =
          static_cast<std::int32_t>(21 + rng() % (kVocabSize - 21));
      pos[static_cast<std::size_t>(i * kMaxLen + t)] = static_cast<std::int32_t>(t);
    }
    const bool positive = rng() % 2 == 0;
    ids[static_cast<std::size_t>(i * kMaxLen + static_cast<std::int64_t>(rng() % kMaxLen))] =
        static_cast<std::int32_t>((positive ? 1 : 11) + rng() % 10);
    labels[static_cast<std::size_t>(i)] = positive ? 1 : 0;
  }
  return {ls::Tensor::from_vector(ids, ls::Shape{n, kMaxLen}),
          ls::Tensor::from_vector(pos, ls::Shape{n, kMaxLen}), ls::Tensor::from_vector(labels)};
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: transformer_classifier OUT_DIR [epochs]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const int epochs = argc > 2 ? std::atoi(argv[2]) : 3;
  std::filesystem::create_directories(out);
  ls::set_random_seed(11);

  ls::distribute::MirroredStrategy strategy;
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());
  ls::Model model;
  {
    auto scope = strategy.scope();
    auto tokens = ls::Input({kMaxLen}, ls::DType::kInt32, "tokens");
    auto positions = ls::Input({kMaxLen}, ls::DType::kInt32, "positions");
    auto x = ls::layers::Add()({ls::layers::Embedding(kVocabSize, kEmbedDim)(tokens),
                                ls::layers::Embedding(kMaxLen, kEmbedDim)(positions)});
    x = transformer_block(x, 0.1f, true);
    x = ls::layers::GlobalAveragePooling1D()(x);
    x = ls::layers::Dropout(0.1f)(x);
    x = ls::layers::Dense(20, {.activation = "relu"})(x);
    x = ls::layers::Dropout(0.1f)(x);
    auto outputs = ls::layers::Dense(2, {.activation = "softmax"})(x);
    model = ls::Model({tokens, positions}, {outputs});
    model.compile({.optimizer = ls::optimizers::Adam({.learning_rate = 0.002}),
                   .loss = "sparse_categorical_crossentropy",
                   .metrics = {"accuracy"}});
  }
  model.summary();

  const Split train = reviews(6000, 1), val = reviews(400, 2), test = reviews(400, 3);
  model.fit(std::vector<ls::Tensor>{train.tokens, train.positions},
            std::vector<ls::Tensor>{train.labels},
            {.batch_size = 64,
             .epochs = epochs,
             .verbose = 2,
             .validation_data = ls::ValidationData({val.tokens, val.positions}, {val.labels})});
  const ls::Logs results =
      model.evaluate(std::vector<ls::Tensor>{test.tokens, test.positions},
                     std::vector<ls::Tensor>{test.labels}, {.batch_size = 64, .verbose = 0});
  std::printf("test accuracy: %.4f\n", results.at("accuracy"));

  model.save((out / "transformer_classifier.keras").string());
  ls::data::write_npy((out / "t_tokens.npy").string(), test.tokens);
  ls::data::write_npy((out / "t_positions.npy").string(), test.positions);
  ls::data::write_npy((out / "t_labels.npy").string(), test.labels);
  std::ofstream(out / "transformer_classifier.json")
      << "{\"accuracy\": " << results.at("accuracy") << ", \"loss\": " << results.at("loss")
      << "}\n";
  std::printf("saved %s\n", (out / "transformer_classifier.keras").c_str());
  return 0;
}
