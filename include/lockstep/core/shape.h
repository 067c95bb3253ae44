// Shape: the dimensions of a tensor, stored inline (no heap allocation) so
// that creating a tensor in a training step costs no malloc for its shape.
//
// Value type; cheap to copy. Rank is at most Shape::kMaxRank.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>
#include <vector>

namespace lockstep {

class Shape {
 public:
  static constexpr int kMaxRank = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::span<const std::int64_t> dims);
  explicit Shape(const std::vector<std::int64_t>& dims)
      : Shape(std::span<const std::int64_t>(dims)) {}

  int rank() const { return rank_; }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  // Dimension with Python-style negative indexing; throws IndexError.
  std::int64_t dim(int axis) const;

  // Product of all dimensions (1 for a scalar).
  std::int64_t numel() const;

  std::span<const std::int64_t> dims() const {
    return {dims_.data(), static_cast<std::size_t>(rank_)};
  }
  std::vector<std::int64_t> to_vector() const { return {dims().begin(), dims().end()}; }

  // Row-major strides in elements.
  std::array<std::int64_t, kMaxRank> strides() const;

  void push_back(std::int64_t dim);
  // A copy with `axis` replaced by `dim`.
  Shape with_dim(int axis, std::int64_t dim) const;

  // "[64, 784]"
  std::string to_string() const;

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Shape& shape);

// Resolves a possibly negative axis against `rank`; throws IndexError naming
// `op` when it is out of range.
int normalize_axis(int axis, int rank, const char* op);

}  // namespace lockstep
