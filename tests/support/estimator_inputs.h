// The Estimator tests' regression examples, shared by the in-process tests
// (estimator_test.cc) and the worker processes (estimator_worker.cc), so
// both train on the same numbers.
#pragma once

#include "lockstep/lockstep.h"

namespace lockstep::testing_support {

// 40 examples, unbatched: x in [-1, 1) (in a scrambled order), a category k
// of 4, and the label y = 3x − 1 + k/2, named for an Estimator's input_fn.
inline data::Dataset regression_examples() {
  std::vector<float> x, y;
  std::vector<std::int64_t> k;
  for (int i = 0; i < 40; ++i) {
    x.push_back(static_cast<float>((i * 7) % 40) / 20.0f - 1.0f);
    k.push_back(i % 4);
    y.push_back(3 * x.back() - 1 + static_cast<float>(k.back()) / 2);
  }
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector<float>(x, {40, 1}), Tensor::from_vector<std::int64_t>(k, {40, 1}),
       Tensor::from_vector<float>(y, {40, 1})},
      {"x", "k", estimator::kLabels});
}

}  // namespace lockstep::testing_support
