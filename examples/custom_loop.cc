// The custom training loop with tf.distribute, ported: GradientTape inside a
// step function, strategy.run on every replica, losses scaled by the global
// batch with compute_average_loss, strategy.reduce(SUM) of the per-replica
// losses, a distributed dataset.
//
//   custom_loop [epochs = 2] [batches per epoch = all]
#include <cstdio>
#include <cstdlib>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace ld = lockstep::data;
namespace dist = lockstep::distribute;

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::int64_t max_batches = argc > 2 ? std::atoll(argv[2]) : -1;

  dist::MirroredStrategy strategy;
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

  const std::int64_t batch_size_per_replica = 64;
  const std::int64_t global_batch_size = batch_size_per_replica * strategy.num_replicas_in_sync();

  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  auto scale = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 28, 28, 1});
  };
  const ld::Dataset train_dataset =
      ld::Dataset::from_tensor_slices({scale(train.first), train.second})
          .shuffle(60000, {.seed = 1})
          .batch(global_batch_size)
          .take(max_batches);
  const auto train_dist_dataset = dist::experimental_distribute_dataset(strategy, train_dataset);

  ls::Model model;
  ls::Optimizer optimizer;
  ls::metrics::SparseCategoricalAccuracy train_accuracy;
  ls::Loss loss_object = ls::losses::SparseCategoricalCrossentropy(
      {.from_logits = true, .reduction = ls::Reduction::kNone});
  {
    auto scope = strategy.scope();
    auto inputs = ls::Input({28, 28, 1});
    auto x = ls::layers::Conv2D(32, {3, 3}, {.activation = "relu"})(inputs);
    x = ls::layers::MaxPooling2D()(x);
    x = ls::layers::Conv2D(64, {3, 3}, {.activation = "relu"})(x);
    x = ls::layers::MaxPooling2D()(x);
    x = ls::layers::Flatten()(x);
    x = ls::layers::Dense(64, {.activation = "relu"})(x);
    model = ls::Model(inputs, ls::layers::Dense(10)(x));
    optimizer = ls::optimizers::Adam();
  }
  // One accuracy per replica, merged after each epoch (sync on read).
  std::vector<ls::Metric> accuracies;
  for (int r = 0; r < strategy.num_replicas_in_sync(); ++r)
    accuracies.emplace_back(train_accuracy.impl()->clone());

  auto compute_loss = [&](const ls::Tensor& labels, const ls::Tensor& predictions) {
    const ls::Tensor per_example_loss = loss_object(labels, predictions);
    return dist::compute_average_loss(per_example_loss, global_batch_size);
  };

  auto train_step = [&](const ld::Element& inputs) {
    const ls::Tensor& images = inputs[0];
    const ls::Tensor& labels = inputs[1];
    const auto vars = model.trainable_variables();
    ls::Tensor loss, predictions;
    std::vector<ls::Tensor> gradients;
    {
      ls::GradientTape tape;
      predictions = model(images, {.training = true});
      loss = compute_loss(labels, predictions);
      gradients = tape.gradient(loss, vars);
    }
    optimizer.apply_gradients(gradients, vars);
    const int r = dist::get_replica_context().replica_id_in_sync_group();
    accuracies[static_cast<std::size_t>(r)].update_state(labels, predictions);
    return loss;
  };

  for (int epoch = 0; epoch < epochs; ++epoch) {
    double total_loss = 0.0;
    int num_batches = 0;
    for (const auto& x : train_dist_dataset) {
      const auto per_replica_losses = strategy.run(train_step, x);
      total_loss += strategy.reduce(dist::ReduceOp::kSum, per_replica_losses).item<float>();
      ++num_batches;
    }
    train_accuracy.reset_state();
    for (auto& a : accuracies) {
      train_accuracy.merge(a);
      a.reset_state();
    }
    std::printf("Epoch %d, Loss: %.4f, Accuracy: %.2f%%\n", epoch + 1, total_loss / num_batches,
                train_accuracy.result() * 100);
  }
  return 0;
}
