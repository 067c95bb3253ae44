// Random inputs for the seed MLP in tests: images of 784 pixels in [0, 1)
// and labels cycling through the ten classes.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::testing_support {

// `rows` random images of the seed MLP's input and their labels (uint8).
inline std::pair<Tensor, Tensor> mlp_examples(std::int64_t rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(rows) * 784);
  for (float& v : values) v = pixel(rng);
  std::vector<std::uint8_t> labels(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::uint8_t>(i * 7 % 10);
  return {Tensor::from_vector(values, Shape{rows, 784}), Tensor::from_vector(labels)};
}

}  // namespace lockstep::testing_support
