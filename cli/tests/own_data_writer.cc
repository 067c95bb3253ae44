// Writes the examples own_data_test.sh trains on, as a user would have them:
//   DIR/images/{footwear,other}/*.jpg   2,000 Fashion-MNIST images, 32x32 RGB
//   DIR/table.csv                       a table: 20 numeric and 3 text columns,
//                                       a text label of 3 classes (ROWS rows)
//   DIR/x.npy, DIR/y.npy, DIR/xy.npz     4,000 Fashion-MNIST images (uint8
//                                       [n, 28, 28]) and their int64 labels
// and the bad inputs the test expects clear errors for:
//   DIR/bad_images/{a,b}/ with b empty, DIR/broken/{a,b}/ with a file that
//   is no image, DIR/short_y.npy (one label fewer);
//   DIR/tokens.npy, DIR/tokens_y.npy, DIR/tokens_model.keras   token ids and
//                                       an Embedding + Bidirectional LSTM model;
//                                       DIR/tokens_float.npy the ids as float32
//   DIR/seq_x.npy, DIR/seq_y.npy, DIR/seq_model.keras   float sequences
//                                       [600, 6, 3] and a GRU model
//   DIR/multi.npz, DIR/multi_model.keras  two inputs ('features' [4] float,
//                                       'tokens' [5] int ids) and two outputs
//                                       ('kind': 3 classes, 'size': a value),
//                                       800 examples; DIR/multi_no_size.npz
//                                       without 'size', DIR/multi_short.npz
//                                       with one 'kind' label fewer
//   DIR/base.weights.h5                 a MobileNetV2 base (alpha 0.35, 32x32, no
//                                       top), for the fine-tuning flags
//
//   own_data_writer DIR [ROWS]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "lockstep/lockstep.h"

namespace fs = std::filesystem;
namespace ls = lockstep;

namespace {

// The table's rows: y = argmax of three linear scores of the numeric
// columns and the text columns' effects, so that a model can learn it.
void write_table(const fs::path& path, int rows) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0.0, 1.0);
  const char* colours[] = {"red", "green", "blue", "amber"};
  const char* sizes[] = {"S", "M", "L"};
  const char* labels[] = {"low", "mid", "high"};
  std::ofstream out(path);
  for (int c = 0; c < 20; ++c) out << "n" << c << ",";
  out << "colour,size,label,note\n";
  for (int r = 0; r < rows; ++r) {
    double score[3] = {0, 0, 0};
    for (int c = 0; c < 20; ++c) {
      // Columns on different scales: the model must normalise them.
      const double v = normal(rng);
      const double scale = std::pow(10.0, c % 4);
      out << v * scale + 100.0 * (c % 3) << ",";
      score[c % 3] += v * (c < 9 ? 1.0 : 0.2);
    }
    const int colour = static_cast<int>(rng() % 4), size = static_cast<int>(rng() % 3);
    score[colour % 3] += 1.5;
    score[size] += 1.0;
    int best = 0;
    for (int k = 1; k < 3; ++k) best = score[k] > score[best] ? k : best;
    out << colours[colour] << "," << sizes[size] << "," << labels[best] << ",\"row " << r
        << ", free text\"\n";
  }
}

// Sequences, with models for them: token ids [600, 7] (int32, ids < 50;
// the label says whether the first id is below 25) for an Embedding, a
// Bidirectional LSTM and a Dense, and float sequences [600, 6, 3] (the label:
// whether the first feature sums above 0) for a GRU and a Dense.
void write_sequences(const fs::path& dir) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int n = 600;
  std::vector<std::int32_t> ids(n * 7);
  std::vector<float> seq(n * 6 * 3);
  std::vector<std::int64_t> token_labels(n), seq_labels(n);
  for (int i = 0; i < n; ++i) {
    for (int t = 0; t < 7; ++t) ids[i * 7 + t] = static_cast<std::int32_t>(rng() % 50);
    token_labels[i] = ids[i * 7] < 25 ? 1 : 0;
    float total = 0;
    for (int k = 0; k < 18; ++k) {
      seq[i * 18 + k] = normal(rng);
      if (k % 3 == 0) total += seq[i * 18 + k];
    }
    seq_labels[i] = total > 0 ? 1 : 0;
  }
  const ls::Tensor tokens = ls::Tensor::from_vector(ids, ls::Shape{n, 7});
  ls::data::write_npy((dir / "tokens.npy").string(), tokens);
  ls::data::write_npy((dir / "tokens_float.npy").string(), ls::cast(tokens, ls::DType::kFloat32));
  ls::data::write_npy((dir / "tokens_y.npy").string(),
                      ls::Tensor::from_vector(token_labels, ls::Shape{n}));
  ls::data::write_npy((dir / "seq_x.npy").string(),
                      ls::Tensor::from_vector(seq, ls::Shape{n, 6, 3}));
  ls::data::write_npy((dir / "seq_y.npy").string(),
                      ls::Tensor::from_vector(seq_labels, ls::Shape{n}));
  ls::set_random_seed(3);
  const ls::KerasTensor in = ls::Input({7}, ls::DType::kInt32);
  ls::KerasTensor x = ls::layers::Embedding(50, 8)(in);
  x = ls::layers::Bidirectional(ls::layers::LSTM(8))(x);
  ls::Model(in, ls::layers::Dense(2)(x)).save((dir / "tokens_model.keras").string());
  const ls::KerasTensor steps = ls::Input({6, 3});
  ls::Model(steps, ls::layers::Dense(2)(ls::layers::GRU(8)(steps)))
      .save((dir / "seq_model.keras").string());
}

// A model with two inputs and two outputs and its arrays, named after them
// in a .npz as numpy.savez writes one: 'kind' is which of the first three
// features is largest, 'size' the features' sum plus a tenth of the first
// token id.
void write_two_headed(const fs::path& dir) {
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int n = 800;
  std::vector<float> features(n * 4), size(n);
  std::vector<std::int32_t> tokens(n * 5);
  std::vector<std::int64_t> kind(n);
  for (int i = 0; i < n; ++i) {
    float total = 0;
    for (int k = 0; k < 4; ++k) total += features[i * 4 + k] = normal(rng);
    for (int t = 0; t < 5; ++t) tokens[i * 5 + t] = static_cast<std::int32_t>(rng() % 20);
    const float* f = &features[i * 4];
    kind[i] = f[0] >= f[1] && f[0] >= f[2] ? 0 : f[1] >= f[2] ? 1 : 2;
    size[i] = total + 0.1f * static_cast<float>(tokens[i * 5]);
  }
  const auto npy = [](const ls::Tensor& t) { return ls::data::npy_bytes(t); };
  const ls::Tensor f = ls::Tensor::from_vector(features, ls::Shape{n, 4});
  const ls::Tensor t = ls::Tensor::from_vector(tokens, ls::Shape{n, 5});
  const ls::Tensor k = ls::Tensor::from_vector(kind, ls::Shape{n});
  const ls::Tensor s = ls::Tensor::from_vector(size, ls::Shape{n});
  const auto archive = [&](const fs::path& path, std::vector<ls::io::ZipMember> members) {
    std::ofstream(path, std::ios::binary) << ls::io::zip_archive_image(members, 0);
  };
  archive(dir / "multi.npz", {{.name = "features.npy", .data = npy(f)},
                              {.name = "tokens.npy", .data = npy(t)},
                              {.name = "kind.npy", .data = npy(k)},
                              {.name = "size.npy", .data = npy(s)}});
  archive(dir / "multi_no_size.npz", {{.name = "features.npy", .data = npy(f)},
                                      {.name = "tokens.npy", .data = npy(t)},
                                      {.name = "kind.npy", .data = npy(k)}});
  archive(dir / "multi_short.npz", {{.name = "features.npy", .data = npy(f)},
                                    {.name = "tokens.npy", .data = npy(t)},
                                    {.name = "kind.npy", .data = npy(k.view_rows(0, n - 1).copy())},
                                    {.name = "size.npy", .data = npy(s)}});
  ls::set_random_seed(7);
  const ls::KerasTensor in_f = ls::Input({4}, ls::DType::kFloat32, "features");
  const ls::KerasTensor in_t = ls::Input({5}, ls::DType::kInt32, "tokens");
  const ls::KerasTensor emb = ls::layers::Flatten()(ls::layers::Embedding(20, 2)(in_t));
  const ls::KerasTensor h =
      ls::layers::Dense(32, {.activation = "relu"})(ls::layers::Concatenate()({in_f, emb}));
  ls::Model({in_f, in_t}, {ls::layers::Dense(3, {.activation = "softmax", .name = "kind"})(h),
                           ls::layers::Dense(1, {.name = "size"})(h)})
      .save((dir / "multi_model.keras").string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: own_data_writer DIR [ROWS]\n");
    return 2;
  }
  const fs::path dir = argv[1];
  const int rows = argc > 2 ? std::stoi(argv[2]) : 5000;
  fs::create_directories(dir);
  ls::datasets::fashion_mnist::write_image_folder((dir / "images").string(),
                                                  {.image_size = 32, .count = 2000});
  write_table(dir / "table.csv", rows);
  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  const ls::Tensor x = train.first.view_rows(0, 4000).copy();
  const ls::Tensor y = ls::cast(train.second.view_rows(0, 4000), ls::DType::kInt64);
  ls::data::write_npy((dir / "x.npy").string(), x);
  ls::data::write_npy((dir / "y.npy").string(), y);
  ls::data::write_npy((dir / "short_y.npy").string(), y.view_rows(0, 3999).copy());
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string npz =
      ls::io::zip_archive_image({{.name = "x.npy", .data = bytes(dir / "x.npy")},
                                 {.name = "y.npy", .data = bytes(dir / "y.npy")}},
                                0);
  std::ofstream(dir / "xy.npz", std::ios::binary) << npz;
  write_sequences(dir);
  write_two_headed(dir);
  // A class folder without images; a file that does not decode.
  fs::create_directories(dir / "bad_images" / "a");
  fs::create_directories(dir / "bad_images" / "b");
  fs::copy_file(dir / "images" / "footwear" /
                    fs::directory_iterator(dir / "images" / "footwear")->path().filename(),
                dir / "bad_images" / "a" / "one.jpg", fs::copy_options::overwrite_existing);
  fs::create_directories(dir / "broken" / "a");
  fs::create_directories(dir / "broken" / "b");
  for (const char* c : {"a", "b"}) {
    for (int i = 0; i < 5; ++i)
      fs::copy_file(dir / "bad_images" / "a" / "one.jpg",
                    dir / "broken" / c / ("good" + std::to_string(i) + ".jpg"),
                    fs::copy_options::overwrite_existing);
  }
  std::ofstream(dir / "broken" / "b" / "two.jpg") << "this is no JPEG";
  // A MobileNetV2 base (alpha 0.35, 32x32, no top) as Keras weights: the
  // fine-tuning's starting point (fresh weights: the test checks the
  // mechanics, not ImageNet's features).
  ls::set_random_seed(5);
  ls::applications::MobileNetV2(
      {.input_shape = ls::Shape{32, 32, 3}, .alpha = 0.35, .include_top = false, .pooling = "avg"})
      .save_weights((dir / "base.weights.h5").string());
  std::printf("wrote %s\n", dir.c_str());
  return 0;
}
