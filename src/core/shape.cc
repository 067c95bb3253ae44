// Shape: inline dimensions, numel, strides, printing.
#include "lockstep/core/shape.h"

#include <sstream>

#include "lockstep/core/error.h"

namespace lockstep {

Shape::Shape(std::initializer_list<std::int64_t> dims)
    : Shape(std::span<const std::int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const std::int64_t> dims) {
  LOCKSTEP_CHECK_AS(ShapeError, dims.size() <= static_cast<std::size_t>(kMaxRank), "Shape: rank ",
                    dims.size(), " exceeds the maximum rank ", kMaxRank);
  for (std::int64_t d : dims) push_back(d);
}

void Shape::push_back(std::int64_t dim) {
  LOCKSTEP_CHECK_AS(ShapeError, rank_ < kMaxRank, "Shape: rank would exceed the maximum rank ",
                    kMaxRank);
  LOCKSTEP_CHECK_AS(ShapeError, dim >= 0, "Shape: dimensions must be >= 0, got ", dim);
  dims_[static_cast<std::size_t>(rank_++)] = dim;
}

std::int64_t Shape::dim(int axis) const {
  return (*this)[normalize_axis(axis, rank_, "Shape.dim")];
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) {
    // Dimensions come from files and flags: a product past 2^63 - 1 would
    // wrap and reach malloc as a small or negative size (issue #41).
    if (__builtin_mul_overflow(n, dims_[static_cast<std::size_t>(i)], &n))
      detail::throw_error<ShapeError>("Shape ", to_string(), ": holds more than 2^63 - 1 elements");
  }
  return n;
}

std::array<std::int64_t, Shape::kMaxRank> Shape::strides() const {
  std::array<std::int64_t, kMaxRank> s{};
  std::int64_t stride = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s[static_cast<std::size_t>(i)] = stride;
    if (__builtin_mul_overflow(stride, dims_[static_cast<std::size_t>(i)], &stride))
      detail::throw_error<ShapeError>("Shape ", to_string(), ": holds more than 2^63 - 1 elements");
  }
  return s;
}

Shape Shape::with_dim(int axis, std::int64_t dim) const {
  Shape copy = *this;
  copy[normalize_axis(axis, rank_, "Shape.with_dim")] = dim;
  return copy;
}

std::string Shape::to_string() const {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank_; ++i) {
    if (i) os << ", ";
    os << dims_[static_cast<std::size_t>(i)];
  }
  os << ']';
  return os.str();
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << shape.to_string(); }

int normalize_axis(int axis, int rank, const char* op) {
  // A scalar still accepts axis 0/-1 in no op; rank 0 has no valid axis.
  LOCKSTEP_CHECK_AS(IndexError, axis >= -rank && axis < rank, op, ": axis ", axis,
                    " is out of range for a tensor of rank ", rank, " (valid: ", -rank, " to ",
                    rank - 1, ")");
  return axis < 0 ? axis + rank : axis;
}

}  // namespace lockstep
