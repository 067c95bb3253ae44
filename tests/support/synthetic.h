// Synthetic training data shared by the model and strategy tests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lockstep/tensor/random.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::testing_support {

// Two well-separated Gaussian blobs in 8 dimensions, labels alternating 0/1.
inline std::pair<Tensor, Tensor> blobs(std::int64_t n, std::uint64_t seed) {
  Tensor x = random::normal({n, 8}, {.seed = seed});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  float* p = x.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    labels[static_cast<std::size_t>(i)] = i % 2;
    for (int j = 0; j < 8; ++j) p[i * 8 + j] += (i % 2 ? 1.5f : -1.5f);
  }
  return {x, Tensor::from_vector(labels)};
}

}  // namespace lockstep::testing_support
