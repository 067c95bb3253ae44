// Tensor: an n-dimensional array of one dtype on one device.
//
// A Tensor is a handle: copying it is cheap and shares the buffer (reference
// counted). Storage is contiguous and row-major. `view_rows` makes zero-copy
// views along dimension 0, which is how a replica gets its slice of a global
// batch. Explicit `copy()` and `to(dtype)` make new buffers. Every handle
// made by an operation has its own id, which the gradient tape uses to
// connect operations.
//
// Thread-safety: handles may be copied and read from several threads; writing
// to a buffer while another thread reads it is a data race, as with any array.
//
//   auto x = lockstep::Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
//   auto y = lockstep::matmul(x, x);   // see ops.h
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"
#include "lockstep/core/shape.h"

namespace lockstep {

class Device;

namespace detail {

// A buffer from a device's caching allocator; returned to it on destruction.
class Storage {
 public:
  Storage(Device& device, std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device& device() const { return *device_; }

 private:
  Device* device_;
  void* data_;
  std::size_t bytes_;
};

// A process-unique id for a new tensor handle (cheap: thread-local ranges).
std::uint64_t next_tensor_id();

}  // namespace detail

class Tensor {
 public:
  // An undefined tensor (what gradient() returns for an unconnected source).
  Tensor() = default;

  // Uninitialised buffer on the current device.
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32);
  // Uninitialised buffer on `device`.
  static Tensor empty_on(Device& device, const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor ones(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32);
  // A rank-0 float32 tensor.
  static Tensor scalar(float value);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<std::int64_t>(values.size())});
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  std::int64_t dim(int axis) const { return shape_.dim(axis); }
  std::int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  std::uint64_t id() const { return id_; }
  Device& device() const;

  // Typed pointer to the first element; throws ValueError on a dtype
  // mismatch, and DeviceError when the tensor is on a device host code may
  // not touch (a GPU, the fake accelerator): copy it with cpu() first.
  template <typename T>
  T* data() {
    check_access(kDTypeOf<T>);
    return static_cast<T*>(raw_data());
  }
  template <typename T>
  const T* data() const {
    check_access(kDTypeOf<T>);
    return static_cast<const T*>(raw_data());
  }
  // The same pointer, untyped (and refused the same way).
  void* raw_data() const;
  // True when no other tensor, view or variable refers to this tensor's
  // buffer: an op given it as a temporary may write its result there.
  bool sole_owner() const { return storage_ != nullptr && storage_.use_count() == 1; }

  // Rows [begin, end) along dimension 0, sharing this tensor's buffer. Not
  // recorded on gradient tapes: use lockstep::slice for a differentiable slice.
  Tensor view_rows(std::int64_t begin, std::int64_t end) const;
  // Same buffer, another shape with the same number of elements (not recorded;
  // lockstep::reshape is the differentiable form).
  Tensor view_as(const Shape& shape) const;

  // A new buffer with the same values (differentiable).
  Tensor copy() const;
  // The values converted to `dtype` (differentiable between float types).
  Tensor to(DType dtype) const;
  // A copy on `device` (not recorded on gradient tapes).
  Tensor copy_to(Device& device) const;
  // This tensor when host code may read it, else a copy on the host device
  // (PyTorch's .cpu(); TensorFlow's .numpy() copies the same way).
  Tensor cpu() const;

  // The single value of a one-element tensor, converted to T (copied from
  // the device first when it is on one, as item() and to_vector() are).
  template <typename T>
  T item() const;
  // All values, converted to T.
  template <typename T>
  std::vector<T> to_vector() const;

  // "Tensor(shape=[2, 2], dtype=float32, values=[1, 2, 3, 4])"
  std::string to_string(std::int64_t max_values = 16) const;

 private:
  Tensor(std::shared_ptr<detail::Storage> storage, std::size_t offset, const Shape& shape,
         DType dtype);
  void check_access(DType requested) const;
  void check_host_access(const char* op) const;

  std::shared_ptr<detail::Storage> storage_;
  std::size_t offset_ = 0;  // bytes from the start of storage_
  Shape shape_;
  DType dtype_ = DType::kFloat32;
  std::uint64_t id_ = 0;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Throws ValueError unless `t` is defined, naming `op` and `what`.
void check_defined(const Tensor& t, const char* op, const char* what);

}  // namespace lockstep
