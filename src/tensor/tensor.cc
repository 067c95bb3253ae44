// Tensor handles, storage, conversion helpers and printing.
#include "lockstep/tensor/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <sstream>

#include "lockstep/core/checked.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "tensor/dispatch.h"

namespace lockstep {
namespace detail {

Storage::Storage(Device& device, std::size_t bytes)
    : device_(&device), data_(device.allocator().allocate(bytes)), bytes_(bytes) {}

Storage::~Storage() { device_->allocator().deallocate(data_, bytes_); }

std::uint64_t next_tensor_id() {
  // Each thread takes ids in blocks so that op-heavy replica threads do not
  // contend on one atomic counter.
  static std::atomic<std::uint64_t> next_block{1};
  constexpr std::uint64_t kBlock = 1 << 16;
  thread_local std::uint64_t next = 0;
  thread_local std::uint64_t limit = 0;
  if (next == limit) {
    next = next_block.fetch_add(1, std::memory_order_relaxed) * kBlock;
    limit = next + kBlock;
  }
  return next++;
}

}  // namespace detail

Tensor::Tensor(std::shared_ptr<detail::Storage> storage, std::size_t offset, const Shape& shape,
               DType dtype)
    : storage_(std::move(storage)),
      offset_(offset),
      shape_(shape),
      dtype_(dtype),
      id_(detail::next_tensor_id()) {}

Tensor Tensor::empty_on(Device& device, const Shape& shape, DType dtype) {
  const auto bytes =
      checked_mul<std::size_t>(static_cast<std::size_t>(shape.numel()), dtype_size(dtype));
  LOCKSTEP_CHECK_AS(ShapeError, bytes.has_value(), "Tensor: a ", dtype, " tensor of shape ", shape,
                    " needs more than 2^64 bytes");
  return Tensor(std::make_shared<detail::Storage>(device, *bytes), 0, shape, dtype);
}

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  return empty_on(current_device(), shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }

Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  detail::OnDevice on;
  if (on.kernels()) return on.kernels()->fill(shape, dtype, value);
  Tensor t = empty(shape, dtype);
  detail::visit_dtype(dtype, "Tensor::full", [&]<typename T>() {
    T* p = t.data<T>();
    std::fill(p, p + t.numel(), static_cast<T>(value));
  });
  return t;
}

Tensor Tensor::scalar(float value) { return full(Shape{}, value); }

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  LOCKSTEP_CHECK_AS(ShapeError, static_cast<std::int64_t>(values.size()) == shape.numel(),
                    "Tensor::from_vector: shape ", shape, " holds ", shape.numel(),
                    " elements, got ", values.size(), " values");
  // On a GPU: written on the host, then copied.
  const detail::OnDevice on;
  Tensor t = empty_on(on.kernels() ? host_device() : current_device(), shape, kDTypeOf<T>);
  T* p = t.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return on.kernels() ? t.copy_to(current_device()) : t;
}

Device& Tensor::device() const {
  check_defined(*this, "Tensor::device", "tensor");
  return storage_->device();
}

void* Tensor::raw_data() const {
  if (!storage_) return nullptr;
  check_host_access("Tensor::raw_data");
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_access(DType requested) const {
  check_defined(*this, "Tensor::data", "tensor");
  LOCKSTEP_CHECK(requested == dtype_, "Tensor::data: tensor has dtype ", dtype_, ", requested ",
                 requested, " (shape ", shape_, ")");
  check_host_access("Tensor::data");
}

void Tensor::check_host_access(const char* op) const {
  const Device& d = storage_->device();
  if (d.host_accessible() || detail::in_device_code()) return;
  detail::throw_error<DeviceError>(
      op, ": host code reached for a ", dtype_, " tensor of shape ", shape_, " on ", d.name(),
      ", whose memory only device kernels may touch; copy it to the host with .cpu() first, or "
      "run the op under a DeviceScope on that device");
}

namespace detail {
// Whichever backend owns the memory copies (memmove between host buffers).
void copy_into(const Tensor& dst, const Tensor& src) {
  LOCKSTEP_CHECK(dst.nbytes() == src.nbytes(), "copy_into: ", dst.nbytes(), " bytes from ",
                 src.nbytes());
  Device& to = dst.device();
  Device& from = src.device();
  void* d = device_pointer(dst);
  const void* s = device_pointer(src);
  if (d == s || src.nbytes() == 0) return;
  if (from.host_accessible() && to.host_accessible()) {
    std::memmove(d, s, src.nbytes());
  } else if (from.host_accessible()) {
    to.kernels()->copy_from_host(to, d, s, src.nbytes());
  } else if (to.host_accessible()) {
    from.kernels()->copy_to_host(from, d, s, src.nbytes());
  } else {
    // Two accelerator devices that share memory (two logical GPUs of one
    // GPU, each with its own kernels and stream): the source's queued work
    // finished first, then the copy on the destination's stream.
    LOCKSTEP_CHECK_AS(DeviceError, from.kernels()->shares_memory_with(*to.kernels()),
                      "cannot copy from ", from.name(), " to ", to.name(),
                      " directly; copy through the host with .cpu()");
    if (from.kernels() != to.kernels()) from.kernels()->synchronize(from);
    to.kernels()->copy_on_device(to, d, s, src.nbytes());
  }
}
}  // namespace detail

Tensor Tensor::copy_to(Device& device) const {
  check_defined(*this, "Tensor::copy_to", "tensor");
  Tensor out = empty_on(device, shape_, dtype_);
  detail::copy_into(out, *this);
  return out;
}

Tensor Tensor::cpu() const {
  check_defined(*this, "Tensor::cpu", "tensor");
  return storage_->device().host_accessible() ? *this : copy_to(host_device());
}

Tensor Tensor::view_rows(std::int64_t begin, std::int64_t end) const {
  check_defined(*this, "Tensor::view_rows", "tensor");
  LOCKSTEP_CHECK_AS(ShapeError, rank() >= 1, "Tensor::view_rows: expected rank >= 1, got a scalar");
  LOCKSTEP_CHECK_AS(IndexError, 0 <= begin && begin <= end && end <= shape_[0],
                    "Tensor::view_rows: rows [", begin, ", ", end,
                    ") are outside dimension 0 of size ", shape_[0], " (shape ", shape_, ")");
  const std::size_t row_bytes =
      static_cast<std::size_t>(shape_[0] == 0 ? 0 : numel() / shape_[0]) * dtype_size(dtype_);
  return Tensor(storage_, offset_ + static_cast<std::size_t>(begin) * row_bytes,
                shape_.with_dim(0, end - begin), dtype_);
}

Tensor Tensor::view_as(const Shape& shape) const {
  check_defined(*this, "Tensor::view_as", "tensor");
  LOCKSTEP_CHECK_AS(ShapeError, shape.numel() == numel(), "Tensor::view_as: cannot view ", shape_,
                    " (", numel(), " elements) as ", shape, " (", shape.numel(), " elements)");
  return Tensor(storage_, offset_, shape, dtype_);
}

Tensor Tensor::copy() const { return cast(*this, dtype_); }
Tensor Tensor::to(DType dtype) const { return cast(*this, dtype); }

template <typename T>
T Tensor::item() const {
  check_defined(*this, "Tensor::item", "tensor");
  LOCKSTEP_CHECK(numel() == 1, "Tensor::item: expected a tensor with one element, got shape ",
                 shape_);
  T out{};
  const Tensor host = cpu();
  detail::visit_dtype(dtype_, "Tensor::item", [&]<typename S>() {
    out = static_cast<T>(*static_cast<const S*>(host.raw_data()));
  });
  return out;
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  check_defined(*this, "Tensor::to_vector", "tensor");
  std::vector<T> out(static_cast<std::size_t>(numel()));
  const Tensor host = cpu();
  detail::visit_dtype(dtype_, "Tensor::to_vector", [&]<typename S>() {
    const S* p = static_cast<const S*>(host.raw_data());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<T>(p[i]);
  });
  return out;
}

std::string Tensor::to_string(std::int64_t max_values) const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape_ << ", dtype=" << dtype_ << ", values=[";
  const std::vector<double> values = to_vector<double>();
  const std::int64_t n = std::min<std::int64_t>(numel(), max_values);
  for (std::int64_t i = 0; i < n; ++i) os << (i ? ", " : "") << values[static_cast<std::size_t>(i)];
  if (numel() > n) os << ", ...";
  os << "])";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

void check_defined(const Tensor& t, const char* op, const char* what) {
  LOCKSTEP_CHECK(t.defined(), op, ": ", what, " is an undefined tensor");
}

#define LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(T)                               \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&); \
  template T Tensor::item<T>() const;                                          \
  template std::vector<T> Tensor::to_vector<T>() const;
LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(float)
LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(std::int32_t)
LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(std::int64_t)
LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(std::uint8_t)
LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES(bool)
#undef LOCKSTEP_INSTANTIATE_TENSOR_TEMPLATES
template double Tensor::item<double>() const;
template std::vector<double> Tensor::to_vector<double>() const;

}  // namespace lockstep
