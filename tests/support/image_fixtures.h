// The image fixtures TensorFlow and Keras wrote
// (tests/interop/make_image_fixtures.py): the manifest, and each expected
// array of arrays.bin as a tensor. A test binary that includes this defines
// LOCKSTEP_SOURCE_DIR and links nlohmann_json.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/tensor/tensor.h"

namespace lockstep::testing_support {

// The largest |a - b| over two tensors of one shape and dtype (infinity,
// and a failure, when they differ in either).
inline double max_abs_difference(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  EXPECT_EQ(a.dtype(), b.dtype());
  if (a.shape() != b.shape()) return INFINITY;
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

class ImageFixtures {
 public:
  static const ImageFixtures& get() {
    static const ImageFixtures f;
    return f;
  }
  const nlohmann::json& manifest() const { return manifest_; }
  std::string path(const std::string& relative) const { return (dir_ / relative).string(); }
  bool has(const std::string& name) const { return manifest_["arrays"].contains(name); }
  // The array `name` as uint8 or float32, with its shape.
  Tensor array(const std::string& name) const {
    const nlohmann::json& a = manifest_["arrays"].at(name);
    std::vector<std::int64_t> dims = a["shape"].get<std::vector<std::int64_t>>();
    const bool u8 = a["dtype"] == "uint8";
    Tensor t = Tensor::empty(Shape(dims), u8 ? DType::kUInt8 : DType::kFloat32);
    const auto offset = a["offset"].get<std::size_t>();
    EXPECT_LE(offset + t.nbytes(), blob_.size()) << name;
    if (offset + t.nbytes() <= blob_.size())
      std::memcpy(t.raw_data(), blob_.data() + offset, t.nbytes());
    return t;
  }
  // The names of the arrays that start with `prefix`.
  std::vector<std::string> names(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& [k, v] : manifest_["arrays"].items()) {
      if (k.rfind(prefix, 0) == 0) out.push_back(k);
    }
    return out;
  }

 private:
  ImageFixtures()
      : dir_(std::filesystem::path(LOCKSTEP_SOURCE_DIR) / "tests/interop/image_fixtures") {
    std::ifstream m(dir_ / "manifest.json");
    manifest_ = nlohmann::json::parse(m);
    std::ifstream b(dir_ / "arrays.bin", std::ios::binary);
    blob_.assign(std::istreambuf_iterator<char>(b), {});
  }
  std::filesystem::path dir_;
  nlohmann::json manifest_;
  std::string blob_;
};

}  // namespace lockstep::testing_support
