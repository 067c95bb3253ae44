// The guide's "Using callbacks to ensure fault tolerance", ported: a
// ModelCheckpoint saves the model every epoch as a Keras file
// (ckpt-{epoch}.keras: architecture, weights, compile settings and the
// optimizer's state); make_or_restore_model loads the newest one, or builds
// a new model when there is none. Run training twice: the second run starts
// from the first one's model. Keras opens these files too.
//
//   fault_tolerance [checkpoint_dir = ./ckpt] [steps_per_epoch = 0 (all)]
//
// For exact resume mid-epoch (weights, optimizer, input position, ...),
// use BackupAndRestore instead (docs/checkpoints.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace fs = std::filesystem;

ls::Model get_compiled_model() {
  auto inputs = ls::Input({784});
  auto x = ls::layers::Dense(256, {.activation = "relu"})(inputs);
  x = ls::layers::Dense(256, {.activation = "relu"})(x);
  ls::Model model(inputs, ls::layers::Dense(10)(x));
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {ls::metrics::SparseCategoricalAccuracy()}});
  return model;
}

// The epoch in a checkpoint's name "ckpt-<epoch>.<suffix>" (-1: not one).
long epoch_of(const fs::path& path) {
  const std::string name = path.filename().string();
  if (name.rfind("ckpt-", 0) != 0) return -1;
  char* end = nullptr;
  const long epoch = std::strtol(name.c_str() + 5, &end, 10);
  return end != name.c_str() + 5 && *end == '.' ? epoch : -1;
}

// Either restore the latest model, or create a fresh one if there is no
// checkpoint available. The guide picks the newest file by its time; two
// saves within the file system's time resolution would tie, so the latest is
// the one with the highest epoch in its name.
ls::Model make_or_restore_model(const fs::path& checkpoint_dir) {
  std::vector<fs::path> checkpoints;
  for (const auto& entry : fs::directory_iterator(checkpoint_dir)) {
    if (epoch_of(entry.path()) >= 0) checkpoints.push_back(entry.path());
  }
  if (!checkpoints.empty()) {
    const fs::path latest = *std::max_element(
        checkpoints.begin(), checkpoints.end(),
        [](const fs::path& a, const fs::path& b) { return epoch_of(a) < epoch_of(b); });
    std::printf("Restoring from %s\n", latest.c_str());
    return ls::load_model(latest.string());
  }
  std::printf("Creating a new model\n");
  return get_compiled_model();
}

void run_training(const fs::path& checkpoint_dir, std::int64_t steps, int epochs = 1) {
  // Create a MirroredStrategy.
  ls::distribute::MirroredStrategy strategy;
  // Open a strategy scope and create/restore the model.
  ls::Model model;
  {
    auto scope = strategy.scope();
    model = make_or_restore_model(checkpoint_dir);
  }
  // This callback saves the model every epoch, with the epoch in its name.
  std::vector<std::shared_ptr<ls::Callback>> callbacks{
      std::make_shared<ls::ModelCheckpoint>(ls::ModelCheckpoint::Options{
          .filepath = (checkpoint_dir / "ckpt-{epoch}.keras").string(), .save_freq = "epoch"})};

  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  auto prepare = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 784});
  };
  const ls::Tensor x = prepare(train.first);
  using ls::data::Dataset;
  const auto train_dataset =
      Dataset::from_tensor_slices({x.view_rows(0, 50000), train.second.view_rows(0, 50000)})
          .shuffle(50000, {.seed = 42})
          .batch(64);
  const auto val_dataset =
      Dataset::from_tensor_slices({x.view_rows(50000, 60000), train.second.view_rows(50000, 60000)})
          .batch(64);
  model.fit(train_dataset, {.epochs = epochs,
                            .verbose = 2,
                            .callbacks = callbacks,
                            .validation_data = val_dataset,
                            .steps_per_epoch = steps});
}

int main(int argc, char** argv) {
  // Prepare a directory to store all the checkpoints.
  const fs::path checkpoint_dir = argc > 1 ? argv[1] : "./ckpt";
  const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 0;
  fs::create_directories(checkpoint_dir);

  // Running the first time creates the model.
  run_training(checkpoint_dir, steps);
  // Calling the same function again resumes from where we left off: two
  // epochs this time, saved as ckpt-1 and ckpt-2.
  run_training(checkpoint_dir, steps, 2);
  // A third run restores ckpt-2, the highest epoch, whatever the file times.
  run_training(checkpoint_dir, steps);
  return 0;
}
