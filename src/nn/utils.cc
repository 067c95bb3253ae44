// keras.utils helpers: to_categorical.
#include "lockstep/nn/utils.h"

#include <algorithm>
#include <cmath>

#include "lockstep/core/error.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::utils {

Tensor to_categorical(const Tensor& labels, std::int64_t num_classes) {
  check_defined(labels, "to_categorical", "labels");
  Tensor ids = labels;
  if (labels.dtype() == DType::kFloat32) {
    const float* p = labels.data<float>();
    for (std::int64_t i = 0; i < labels.numel(); ++i) {
      LOCKSTEP_CHECK(p[i] >= 0.0f && std::floor(p[i]) == p[i], "to_categorical: label ", p[i],
                     " at position ", i, " is not a class id (a non-negative integer)");
    }
    ids = cast(labels, DType::kInt64);
  }
  LOCKSTEP_CHECK(is_integral(ids.dtype()), "to_categorical: expected integer labels, got dtype ",
                 labels.dtype());
  if (ids.rank() > 1 && ids.shape()[ids.rank() - 1] == 1) {
    std::vector<std::int64_t> dims(ids.shape().dims().begin(), ids.shape().dims().end());
    dims.pop_back();
    ids = reshape(ids, dims);
  }
  if (num_classes == 0) {
    const std::vector<std::int64_t> v = ids.to_vector<std::int64_t>();
    num_classes = v.empty() ? 0 : *std::max_element(v.begin(), v.end()) + 1;
    LOCKSTEP_CHECK(num_classes > 0, "to_categorical: cannot infer num_classes from ",
                   v.empty() ? "no labels" : "negative labels", "; pass num_classes");
  }
  LOCKSTEP_CHECK(num_classes > 0, "to_categorical: num_classes must be > 0, got ", num_classes);
  return one_hot(ids, num_classes);
}

}  // namespace lockstep::utils
