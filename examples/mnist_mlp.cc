// The guide's first example, ported line by line: the seed MLP
// (784-256-256-10) on Fashion-MNIST with compile / fit / evaluate under
// MirroredStrategy() (one replica per core).
//
//   mnist_mlp [epochs = 2] [steps_per_epoch = 0 (all)]
#include <cstdio>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

ls::Model get_compiled_model() {
  auto inputs = ls::Input({784});
  auto x = ls::layers::Dense(256, {.activation = "relu"})(inputs);
  x = ls::layers::Dense(256, {.activation = "relu"})(x);
  auto outputs = ls::layers::Dense(10)(x);
  ls::Model model(inputs, outputs);
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {ls::metrics::SparseCategoricalAccuracy()}});
  return model;
}

// The guide's get_dataset: scaled, flattened images in batched datasets, with
// the last 10,000 training examples held out for validation. The training
// set is also shuffled (a new order each epoch, reproducible from the seed).
struct Datasets {
  ls::data::Dataset train, val, test;
};

Datasets get_dataset(std::int64_t batch_size) {
  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  auto prepare = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 784});
  };
  const ls::Tensor x_train = prepare(train.first), x_test = prepare(test.first);
  const ls::Tensor& y_train = train.second;
  using ls::data::Dataset;
  return {Dataset::from_tensor_slices({x_train.view_rows(0, 50000), y_train.view_rows(0, 50000)})
              .shuffle(50000, {.seed = 42})
              .batch(batch_size)
              .prefetch(ls::data::kAutotune),
          Dataset::from_tensor_slices(
              {x_train.view_rows(50000, 60000), y_train.view_rows(50000, 60000)})
              .batch(batch_size),
          Dataset::from_tensor_slices({x_test, test.second}).batch(batch_size)};
}

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::int64_t steps = argc > 2 ? std::atoll(argv[2]) : 0;

  // Create a MirroredStrategy.
  ls::distribute::MirroredStrategy strategy;
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

  // Open a strategy scope: everything that creates variables goes inside.
  ls::Model model;
  {
    auto scope = strategy.scope();
    model = get_compiled_model();
  }

  // Train the model on all available devices.
  auto [train, val, test] = get_dataset(/*global batch*/ 64);
  model.fit(train,
            {.epochs = epochs, .verbose = 2, .validation_data = val, .steps_per_epoch = steps});

  // Test the model on all available devices.
  const ls::Logs results = model.evaluate(test, {.verbose = 2});
  std::printf("test accuracy: %.4f\n", results.at("sparse_categorical_accuracy"));
  return 0;
}
