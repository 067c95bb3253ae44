// A small CNN on Fashion-MNIST with compile / fit / evaluate:
// Conv32 - MaxPool - Conv64 - MaxPool - Dense128 - Dense10.
#include <cstdio>
#include <cstdlib>

#include "lockstep/lockstep.h"

namespace ls = lockstep;

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::int64_t batch_size = argc > 2 ? std::atoll(argv[2]) : 32;  // Keras's default
  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  auto prepare = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 28, 28, 1});
  };
  auto inputs = ls::Input({28, 28, 1});
  auto x = ls::layers::Conv2D(32, {3, 3}, {.activation = "relu"})(inputs);
  x = ls::layers::MaxPooling2D()(x);
  x = ls::layers::Conv2D(64, {3, 3}, {.activation = "relu"})(x);
  x = ls::layers::MaxPooling2D()(x);
  x = ls::layers::Flatten()(x);
  x = ls::layers::Dense(128, {.activation = "relu"})(x);
  ls::Model model(inputs, ls::layers::Dense(10)(x));
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  model.summary();
  model.fit(prepare(train.first), train.second,
            {.batch_size = batch_size, .epochs = epochs, .verbose = 2});
  const ls::Logs results =
      model.evaluate(prepare(test.first), test.second, {.batch_size = 64, .verbose = 2});
  std::printf("test accuracy: %.4f\n", results.at("accuracy"));
  return 0;
}
