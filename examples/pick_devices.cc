// Picking devices explicitly: split the machine into logical devices (as
// tf.config.set_logical_device_configuration does), then mirror over a chosen
// subset — or run several replicas per device to rehearse a bigger machine.
//
//   pick_devices [steps = 50]
#include <cstdio>
#include <cstdlib>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace dist = lockstep::distribute;

int main(int argc, char** argv) {
  const std::int64_t steps = argc > 1 ? std::atoll(argv[1]) : 50;
  // One logical device per core (LOCKSTEP_CPU_DEVICES="0;1" does the same).
  const std::vector<int> cores = ls::available_physical_cores();
  std::vector<std::vector<int>> sets;
  for (int c : cores) sets.push_back({c});
  ls::set_logical_cpu_devices(sets);
  for (const ls::Device* d : ls::logical_devices()) std::printf("%s\n", d->name().c_str());

  // Mirror over the first device only, with two replicas on it.
  dist::MirroredStrategy strategy(
      {.devices = {ls::logical_devices()[0]}, .replicas_per_device = 2});
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());

  auto [train, test] = ls::datasets::fashion_mnist::load_data();
  auto flat = [](const ls::Tensor& images) {
    return ls::reshape(ls::cast(images, ls::DType::kFloat32) / 255.0f, {images.dim(0), 784});
  };
  ls::Model model;
  {
    auto scope = strategy.scope();
    auto inputs = ls::Input({784});
    auto x = ls::layers::Dense(128, {.activation = "relu"})(inputs);
    model = ls::Model(inputs, ls::layers::Dense(10)(x));
    model.compile({.optimizer = ls::optimizers::Adam(),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {"accuracy"}});
  }
  auto ds = ls::data::Dataset::from_tensor_slices({flat(train.first), train.second})
                .shuffle(60000, {.seed = 3})
                .batch(64)
                .repeat();
  model.fit(ds, {.epochs = 1, .verbose = 2, .steps_per_epoch = steps});
  const ls::Logs r = model.evaluate(
      ls::data::Dataset::from_tensor_slices({flat(test.first), test.second}).batch(256),
      {.verbose = 0});
  std::printf("test accuracy: %.4f\n", r.at("accuracy"));
  return 0;
}
