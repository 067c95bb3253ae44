// Indexing ops: gather, take_along_axis (the labels op of sparse
// cross-entropy) and one_hot. Every index is range-checked: a bad label is
// an IndexError naming its position and value, never a read out of bounds.
#include <cstring>
#include <memory>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/dispatch.h"

namespace lockstep {
namespace {

using detail::Grads;

// Reads indices as int64, checking each against [0, limit).
std::vector<std::int64_t> checked_indices(const Tensor& indices, std::int64_t limit, const char* op,
                                          const Shape& params_shape, int axis) {
  std::vector<std::int64_t> out(static_cast<std::size_t>(indices.numel()));
  detail::visit_index(indices.dtype(), op, [&]<typename I>() {
    const I* p = static_cast<const I*>(indices.raw_data());
    for (std::size_t j = 0; j < out.size(); ++j) {
      const std::int64_t v = static_cast<std::int64_t>(p[j]);
      LOCKSTEP_CHECK_AS(IndexError, v >= 0 && v < limit, op, ": index ", v, " at position ", j,
                        " is out of range for axis ", axis, " of size ", limit, " (shape ",
                        params_shape, ")");
      out[j] = v;
    }
  });
  return out;
}

void dims_around(const Shape& s, int axis, std::int64_t& outer, std::int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
}

// gather in a step recorded as a graph (fit's, on a GPU): the indices
// cannot be read on the host inside it, so the range check and the
// gradient's grouping run before each replay on the batch's host copy of
// them (an input the step was fed; else the recording is dropped and the
// step runs eagerly), written into device memory the recorded kernels read.
Tensor gather_recorded(detail::DeviceKernels& k, const Tensor& params, const Tensor& indices, int a,
                       const Shape& out_shape) {
  const std::int64_t m = indices.numel();
  auto at = std::make_shared<detail::GatherOnDevice>(
      detail::GatherOnDevice{.indices = detail::staged_tensor({m}, DType::kInt64),
                             .order = detail::staged_tensor({m}, DType::kInt64),
                             .starts = detail::staged_tensor({m + 1}, DType::kInt64),
                             .targets = detail::staged_tensor({m}, DType::kInt64)});
  detail::check_before_each_replay(
      indices, [at, n = params.shape()[a], shape = params.shape(), a](const Tensor& host) {
        const std::vector<std::int64_t> idx = checked_indices(host, n, "gather", shape, a);
        const detail::GatherGrouping grouping = detail::group_by_target(idx, idx.size());
        // Each made in host memory, then one copy up.
        const DeviceScope on_host(host_device(), {.pin_thread = false});
        detail::copy_into(at->indices, Tensor::from_vector(idx));
        detail::copy_into(at->order, Tensor::from_vector(grouping.order));
        detail::copy_into(at->starts, Tensor::from_vector(grouping.starts));
        detail::copy_into(at->targets, Tensor::from_vector(grouping.targets));
      });
  Tensor out = k.gather(params, *at, a, out_shape);
  if (params.dtype() == DType::kFloat32 && detail::should_record({params})) {
    detail::record("gather", {params}, out, [sp = params.shape(), at, a](const Tensor& g) {
      const detail::OnDevice on_g;
      return Grads{on_g.kernels()->gather_grad(g, *at, a, sp)};
    });
  }
  return out;
}

}  // namespace

Tensor gather(const Tensor& params, const Tensor& indices, int axis) {
  check_defined(params, "gather", "params");
  check_defined(indices, "gather", "indices");
  const int a = normalize_axis(axis, params.rank(), "gather");
  const std::int64_t n = params.shape()[a];
  Shape out_shape;
  for (int i = 0; i < a; ++i) out_shape.push_back(params.shape()[i]);
  for (std::int64_t d : indices.shape().dims()) out_shape.push_back(d);
  for (int i = a + 1; i < params.rank(); ++i) out_shape.push_back(params.shape()[i]);
  const detail::OnDevice on;
  if (on.kernels() != nullptr && detail::recording_step()) {
    detail::visit_index(indices.dtype(), "gather", []<typename I>() {});  // an index dtype
    return gather_recorded(*on.kernels(), params, indices, a, out_shape);
  }
  const std::vector<std::int64_t> idx =
      checked_indices(indices.cpu(), n, "gather", params.shape(), a);
  if (detail::DeviceKernels* k = on.kernels()) {
    Tensor out = k->gather(params, idx, a, out_shape);
    if (params.dtype() == DType::kFloat32 && detail::should_record({params})) {
      detail::record("gather", {params}, out, [sp = params.shape(), idx, a](const Tensor& g) {
        const detail::OnDevice on_g;
        return Grads{on_g.kernels()->gather_grad(g, idx, a, sp)};
      });
    }
    return out;
  }
  Tensor out = Tensor::empty(out_shape, params.dtype());
  std::int64_t outer = 0, inner = 0;
  dims_around(params.shape(), a, outer, inner);
  const std::size_t es = dtype_size(params.dtype());
  const std::size_t row = static_cast<std::size_t>(inner) * es;
  const char* pp = static_cast<const char*>(params.raw_data());
  char* po = static_cast<char*>(out.raw_data());
  const auto m = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < m; ++j) {
      std::memcpy(po + static_cast<std::size_t>(o * m + j) * row,
                  pp + static_cast<std::size_t>(o * n + idx[static_cast<std::size_t>(j)]) * row,
                  row);
    }
  }
  if (params.dtype() == DType::kFloat32 && detail::should_record({params})) {
    detail::record("gather", {params}, out,
                   [sp = params.shape(), idx, outer, inner, n, m](const Tensor& g) {
                     const detail::OnDevice on_g;  // the fake accelerator's scope
                     Tensor grad = Tensor::zeros(sp);
                     float* pg = grad.data<float>();
                     const float* src = g.data<float>();
                     for (std::int64_t o = 0; o < outer; ++o) {
                       for (std::int64_t j = 0; j < m; ++j) {
                         float* dst = pg + (o * n + idx[static_cast<std::size_t>(j)]) * inner;
                         const float* s = src + (o * m + j) * inner;
                         for (std::int64_t i = 0; i < inner; ++i) dst[i] += s[i];
                       }
                     }
                     return Grads{grad};
                   });
  }
  return out;
}

Tensor take_along_axis(const Tensor& x, const Tensor& indices, int axis) {
  check_defined(x, "take_along_axis", "input");
  check_defined(indices, "take_along_axis", "indices");
  const int a = normalize_axis(axis, x.rank(), "take_along_axis");
  LOCKSTEP_CHECK_AS(ShapeError, indices.rank() == x.rank(), "take_along_axis: indices of shape ",
                    indices.shape(), " must have the input's rank ", x.rank(), " (input shape ",
                    x.shape(),
                    "). Hint: labels of shape [batch] need a trailing axis: reshape "
                    "them to [batch, 1]");
  for (int i = 0; i < x.rank(); ++i) {
    LOCKSTEP_CHECK_AS(ShapeError, i == a || indices.shape()[i] == x.shape()[i],
                      "take_along_axis: indices shape ", indices.shape(),
                      " differs from input shape ", x.shape(), " in dimension ", i, " (only axis ",
                      a, " may differ)");
  }
  const std::int64_t n = x.shape()[a];
  // Checked on the host (a copy of the indices when they are on a GPU):
  // an index out of range is an error, never a silent read.
  const std::vector<std::int64_t> idx =
      checked_indices(indices.cpu(), n, "take_along_axis", x.shape(), a);
  const std::int64_t m = indices.shape()[a];
  std::int64_t outer = 0, inner = 0;
  dims_around(x.shape(), a, outer, inner);
  const detail::OnDevice on;
  if (on.kernels()) return detail::take_along_axis_checked_by_caller(x, indices, a);
  Tensor out = Tensor::empty(indices.shape(), x.dtype());
  detail::visit_dtype(x.dtype(), "take_along_axis", [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    T* po = static_cast<T*>(out.raw_data());
    for (std::int64_t o = 0; o < outer; ++o) {
      for (std::int64_t j = 0; j < m; ++j) {
        for (std::int64_t i = 0; i < inner; ++i) {
          const std::int64_t at = (o * m + j) * inner + i;
          po[at] = px[(o * n + idx[static_cast<std::size_t>(at)]) * inner + i];
        }
      }
    }
  });
  if (x.dtype() == DType::kFloat32 && detail::should_record({x})) {
    detail::record("take_along_axis", {x}, out,
                   [sx = x.shape(), idx, outer, inner, n, m](const Tensor& g) {
                     const detail::OnDevice on_g;  // the fake accelerator's scope
                     Tensor grad = Tensor::zeros(sx);
                     float* pg = grad.data<float>();
                     const float* src = g.data<float>();
                     for (std::int64_t o = 0; o < outer; ++o) {
                       for (std::int64_t j = 0; j < m; ++j) {
                         for (std::int64_t i = 0; i < inner; ++i) {
                           const std::int64_t at = (o * m + j) * inner + i;
                           pg[(o * n + idx[static_cast<std::size_t>(at)]) * inner + i] += src[at];
                         }
                       }
                     }
                     return Grads{grad};
                   });
  }
  return out;
}

namespace detail {
Tensor take_along_axis_checked_by_caller(const Tensor& x, const Tensor& indices, int axis) {
  const OnDevice on;
  LOCKSTEP_CHECK_AS(DeviceError, on.kernels() != nullptr,
                    "take_along_axis_checked_by_caller: for a GPU only");
  const int a = normalize_axis(axis, x.rank(), "take_along_axis");
  if (x.dtype() != DType::kFloat32) no_device_kernel("take_along_axis of non-floats");
  const Tensor idx64 = cast(indices, DType::kInt64);
  Tensor out = on.kernels()->take_along_axis(x, idx64, a);
  if (should_record({x})) {
    record("take_along_axis", {x}, out, [sx = x.shape(), idx64, a](const Tensor& g) {
      const OnDevice on_g;
      return Grads{on_g.kernels()->scatter_along_axis(g, idx64, a, sx)};
    });
  }
  return out;
}
}  // namespace detail

Tensor one_hot(const Tensor& indices, std::int64_t depth, const OneHotOptions& options) {
  check_defined(indices, "one_hot", "indices");
  LOCKSTEP_CHECK(depth > 0, "one_hot: depth must be > 0, got ", depth);
  const std::vector<std::int64_t> idx =
      checked_indices(indices.cpu(), depth, "one_hot", Shape{depth}, 0);
  const detail::OnDevice on;
  if (on.kernels())
    return on.kernels()->one_hot(cast(indices, DType::kInt64), depth, options.on_value,
                                 options.off_value);
  Shape out_shape = indices.shape();
  out_shape.push_back(depth);
  Tensor out = Tensor::full(out_shape, options.off_value);
  float* po = out.data<float>();
  for (std::size_t j = 0; j < idx.size(); ++j) {
    po[static_cast<std::int64_t>(j) * depth + idx[j]] = options.on_value;
  }
  return out;
}

}  // namespace lockstep
