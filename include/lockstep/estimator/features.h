// What an Estimator's input_fn yields and its model_fn takes: a map of
// named feature tensors, and the labels beside it in one dataset element.
//
//   auto element = ls::estimator::features_and_labels({{"feats", x}}, y);
//   auto ds = ls::data::Dataset::from_tensors(element).repeat(10000).batch(10);
//
// Strings (for the categorical feature columns that take them) travel as
// NumPy's fixed-width bytes do: a uint8 tensor whose last dimension holds
// each string's bytes, padded with NULs (string_feature makes one).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lockstep/data/element.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::estimator {

using Features = std::map<std::string, Tensor>;

// The name the labels carry inside a dataset element (features carry theirs).
inline constexpr const char* kLabels = "__labels__";

// One element of (features, labels), as TensorFlow's input_fn returns
// ({"feats": ...}, labels); an undefined `labels` gives features alone
// (for predict).
data::Element features_and_labels(const Features& features, const Tensor& labels = {});
// The element back as features and labels (undefined when it has none);
// a ValueError says what an input_fn must yield otherwise.
void split_features_and_labels(const data::Element& element, Features& features, Tensor& labels);

// Strings as a uint8 tensor [n, width] (width: the longest, at least 1),
// NUL-padded; with `shape` ([n, k]) as a uint8 tensor [n, k, width].
Tensor string_feature(const std::vector<std::string>& values, std::vector<std::int64_t> shape = {});
// The strings of such a tensor, row-major, trailing NULs dropped.
std::vector<std::string> strings_of(const Tensor& bytes);

}  // namespace lockstep::estimator
