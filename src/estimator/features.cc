// The element an input_fn yields (features and labels side by side, by
// name) and strings as NUL-padded uint8 tensors.
#include "lockstep/estimator/features.h"

#include <algorithm>
#include <cstring>

#include "lockstep/core/error.h"

namespace lockstep::estimator {

data::Element features_and_labels(const Features& features, const Tensor& labels) {
  LOCKSTEP_CHECK(!features.empty(), "features_and_labels: the features are empty");
  std::vector<Tensor> components;
  std::vector<std::string> names;
  for (const auto& [name, t] : features) {
    LOCKSTEP_CHECK(name != kLabels, "features_and_labels: '", kLabels,
                   "' is the labels' name; rename that feature");
    LOCKSTEP_CHECK(t.defined(), "features_and_labels: feature '", name, "' is undefined");
    components.push_back(t);
    names.push_back(name);
  }
  if (labels.defined()) {
    components.push_back(labels);
    names.emplace_back(kLabels);
  }
  return data::Element(std::move(components), std::move(names));
}

void split_features_and_labels(const data::Element& element, Features& features, Tensor& labels) {
  features.clear();
  labels = Tensor();
  LOCKSTEP_CHECK(
      !element.empty() && element.names().size() == element.size(), "input_fn: its dataset yields ",
      element.size(),
      " unnamed components; an Estimator's input is a map of named features and "
      "the labels. Hint: make elements with estimator::features_and_labels({{\"x\", "
      "x}}, y), or name them with from_tensor_slices({x, y}, {\"x\", estimator::kLabels})");
  for (std::size_t i = 0; i < element.size(); ++i) {
    if (element.names()[i] == kLabels) {
      labels = element[i];
    } else {
      features.emplace(element.names()[i], element[i]);
    }
  }
  LOCKSTEP_CHECK(!features.empty(), "input_fn: its dataset yields labels but no features");
}

Tensor string_feature(const std::vector<std::string>& values, std::vector<std::int64_t> shape) {
  std::int64_t count = static_cast<std::int64_t>(values.size());
  if (shape.empty()) shape = {count};
  std::int64_t expected = 1;
  for (std::int64_t d : shape) expected *= d;
  LOCKSTEP_CHECK(expected == count, "string_feature: ", count, " strings do not fill shape ",
                 Shape(shape));
  std::size_t width = 1;
  for (const std::string& s : values) width = std::max(width, s.size());
  shape.push_back(static_cast<std::int64_t>(width));
  Tensor out = Tensor::zeros(Shape(shape), DType::kUInt8);
  auto* p = out.data<std::uint8_t>();
  for (std::size_t i = 0; i < values.size(); ++i)
    std::memcpy(p + i * width, values[i].data(), values[i].size());
  return out;
}

std::vector<std::string> strings_of(const Tensor& bytes) {
  LOCKSTEP_CHECK(bytes.dtype() == DType::kUInt8 && bytes.rank() >= 1,
                 "strings_of: expected a uint8 tensor of NUL-padded strings, got ", bytes.dtype(),
                 " ", bytes.shape());
  const std::int64_t width = bytes.dim(bytes.rank() - 1);
  const std::int64_t count = width == 0 ? 0 : bytes.numel() / width;
  const auto* p = bytes.data<std::uint8_t>();
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    const char* row = reinterpret_cast<const char*>(p + i * width);
    std::size_t n = static_cast<std::size_t>(width);
    while (n > 0 && row[n - 1] == '\0') --n;
    out.emplace_back(row, n);
  }
  return out;
}

}  // namespace lockstep::estimator
