// Element: one item of a Dataset — a tuple of tensors, optionally named.
//
// tf.data's elements are nested structures; Lockstep's are flat: a tuple
// (x, y) or (x, y, sample_weight), or a named map {"image": ..., "label": ...}.
// Strings have no tensor dtype: a file name travels as a uint8 tensor of its
// bytes (Element::string reads it back).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

class Element {
 public:
  Element() = default;
  Element(std::initializer_list<Tensor> components) : components_(components) {}
  // `names` is empty (a tuple) or has one distinct name per component.
  explicit Element(std::vector<Tensor> components, std::vector<std::string> names = {});

  std::size_t size() const { return components_.size(); }
  bool empty() const { return components_.empty(); }
  const Tensor& operator[](std::size_t i) const;
  Tensor& operator[](std::size_t i);
  // The component called `name`; IndexError listing the names otherwise.
  const Tensor& operator[](std::string_view name) const;
  const std::vector<Tensor>& components() const { return components_; }
  std::vector<Tensor>& components() { return components_; }
  const std::vector<std::string>& names() const { return names_; }

  // Component i, a uint8 tensor of bytes, as a string (file names).
  std::string string(std::size_t i) const;
  static Tensor string_tensor(std::string_view s);

  // Total bytes of the components' values.
  std::size_t nbytes() const;

 private:
  std::vector<Tensor> components_;
  std::vector<std::string> names_;
};

}  // namespace lockstep::data
