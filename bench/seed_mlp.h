// The workload several benchmarks share: the seed MLP (784-256-256-10, Adam)
// on synthetic batches from a cached, repeated dataset (the input costs
// nothing, so the figures are the training step's).
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::bench {

// The seed MLP (train/zoo.h), compiled as the guide compiles it.
inline Model seed_mlp() {
  set_random_seed(1);
  Model m = zoo::seed_mlp();
  m.compile({.optimizer = optimizers::Adam(),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {metrics::SparseCategoricalAccuracy()}});
  return m;
}

// 16 distinct batches of `batch` examples, cached and repeated forever.
inline data::Dataset synthetic_batches(std::int64_t batch) {
  const Tensor x = random::uniform({batch * 16, 784}, {.seed = 1});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch * 16));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 10);
  return data::Dataset::from_tensor_slices({x, Tensor::from_vector(labels)})
      .batch(batch)
      .cache()
      .repeat();
}

}  // namespace lockstep::bench
