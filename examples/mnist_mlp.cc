// The guide's first example, ported: the seed MLP (784-256-256-10) on
// Fashion-MNIST with compile / fit / evaluate. (Under MirroredStrategy once
// issue #5 lands: only the strategy scope changes.)
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

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  // Scale to [0, 1] and flatten, as the guide's get_dataset does.
  auto prepare = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 784});
  };
  const ls::Tensor x_train_all = prepare(train.first), x_test = prepare(test.first);
  const ls::Tensor& y_train_all = train.second;
  const ls::Tensor& y_test = test.second;
  // The guide holds out 10,000 training examples for validation.
  const ls::Tensor x_val = x_train_all.view_rows(50000, 60000),
                   y_val = y_train_all.view_rows(50000, 60000);
  const ls::Tensor x_train = x_train_all.view_rows(0, 50000),
                   y_train = y_train_all.view_rows(0, 50000);

  auto model = get_compiled_model();
  model.fit(x_train, y_train,
            {.batch_size = 64,
             .epochs = epochs,
             .verbose = 2,
             .validation_data = ls::ValidationData{x_val, y_val}});
  const ls::Logs results = model.evaluate(x_test, y_test, {.batch_size = 64, .verbose = 2});
  std::printf("test accuracy: %.4f\n", results.at("sparse_categorical_accuracy"));
  return 0;
}
