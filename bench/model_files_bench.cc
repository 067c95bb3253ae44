// Model files, timed (issue #18): for the seed MLP and the small CNN, each
// compiled with Adam and trained 2 steps (so the optimizer's slots exist),
// the median time of 10 saves and 10 loads of
//   keras        Model::save / load_model with a .keras file (architecture,
//                weights, compile config, optimizer variables; fsync'd);
//   checkpoint   Checkpoint::save / restore with a .safetensors file (weights,
//                optimizer slots, training position; checksummed, fsync'd).
// Prints one `RESULT {json}` line per model and format, which
// bench/model_files.sh puts beside Keras's own save and load of the same
// models (bench/peers/keras_model_files.py).
//
// usage: model_files_bench [DIR]   (default: the system temp dir)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <vector>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

namespace {

double median_ms(const std::function<void()>& f, int reps = 10) {
  f();  // warm: the page cache, the allocator
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

ls::Model trained(const std::string& which) {
  ls::set_random_seed(1);
  ls::Model m = which == "mlp" ? ls::zoo::seed_mlp() : ls::zoo::small_cnn();
  m.compile({.optimizer = ls::optimizers::Adam(),
             .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  const ls::Shape sample = m.inputs()[0].sample_shape();
  std::vector<std::int64_t> dims = {32};
  for (std::int64_t d : sample.dims()) dims.push_back(d);
  std::vector<std::int64_t> y(32);
  for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<std::int64_t>(i % 10);
  m.fit(ls::random::uniform(ls::Shape(dims), {.seed = 2}), ls::Tensor::from_vector(y),
        {.batch_size = 16, .epochs = 1, .verbose = 0});
  return m;
}

void report(const char* model, const char* format, double save, double load, std::uintmax_t bytes) {
  std::printf(
      "RESULT {\"system\": \"lockstep\", \"model\": \"%s\", \"format\": \"%s\", \"save_ms\": %.3f, "
      "\"load_ms\": %.3f, \"bytes\": %ju}\n",
      model, format, save, load, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "lockstep_files";
  fs::create_directories(dir);
  for (const char* which : {"mlp", "cnn"}) {
    ls::Model m = trained(which);
    const std::string keras = (dir / (std::string(which) + ".keras")).string();
    const double keras_save = median_ms([&] { m.save(keras); });
    const double keras_load = median_ms([&] { (void)ls::load_model(keras); });
    report(which, "keras", keras_save, keras_load, fs::file_size(keras));

    const std::string ckpt = (dir / (std::string(which) + ".safetensors")).string();
    ls::Checkpoint c(m);
    const double ckpt_save = median_ms([&] { c.save(ckpt); });
    const double ckpt_load = median_ms([&] { (void)c.restore(ckpt); });
    report(which, "checkpoint", ckpt_save, ckpt_load, fs::file_size(ckpt));
  }
  return 0;
}
