// Shape and layout ops: reshape, transpose, concat, slice, broadcast_to,
// cast, stop_gradient — with their gradient rules.
#include <cstring>
#include <numeric>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/loops.h"

namespace lockstep {
namespace {

using detail::Grads;

// Calls f(out_row_index, in_offset) for every row of the output, where a
// row is the output's last dimension and in_offset is the element offset
// of its first value in the input (strides given per output dimension).
template <typename F>
void for_each_row(const Shape& out, const std::array<std::int64_t, Shape::kMaxRank>& in_strides,
                  F&& f) {
  const int r = out.rank();
  std::int64_t rows = 1;
  for (int i = 0; i < r - 1; ++i) rows *= out[i];
  std::array<std::int64_t, Shape::kMaxRank> idx{};
  std::int64_t offset = 0;
  for (std::int64_t row = 0; row < rows; ++row) {
    f(row, offset);
    for (int d = r - 2; d >= 0; --d) {  // odometer increment
      const auto du = static_cast<std::size_t>(d);
      ++idx[du];
      offset += in_strides[du];
      if (idx[du] < out[d]) break;
      offset -= in_strides[du] * out[d];
      idx[du] = 0;
    }
  }
}

// ---- on an accelerator --------------------------------------------------------------
// concat, slice and the zeros around a slice's gradient have no kernels of
// their own on a device: they are built from its transposes and whole-row
// copies (copy_into of a row range, a view), moving the axis in question to
// the front and back. Nothing of it records on a tape: the op records itself.

bool on_accelerator(const Tensor& t) { return !t.device().host_accessible(); }

// The permutation that swaps axes 0 and a (its own inverse).
std::vector<int> swap_front(int rank, int a) {
  std::vector<int> perm(static_cast<std::size_t>(rank));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[0], perm[static_cast<std::size_t>(a)]);
  return perm;
}

Tensor concat_on_device(const std::vector<Tensor>& tensors, int a, const Shape& out_shape) {
  const detail::RecordingPause pause;
  if (a != 0) {
    const std::vector<int> perm = swap_front(out_shape.rank(), a);
    std::vector<Tensor> moved;
    for (const Tensor& t : tensors) moved.push_back(transpose(t, perm));
    return transpose(concat_on_device(moved, 0, moved[0].shape().with_dim(0, out_shape[a])), perm);
  }
  Tensor out = Tensor::empty_on(tensors[0].device(), out_shape, tensors[0].dtype());
  std::int64_t at = 0;
  for (const Tensor& t : tensors) {
    if (t.shape()[0] > 0) detail::copy_into(out.view_rows(at, at + t.shape()[0]), t);
    at += t.shape()[0];
  }
  return out;
}

Tensor slice_on_device(Tensor x, const std::vector<std::int64_t>& begin, const Shape& out_shape) {
  const detail::RecordingPause pause;
  for (int i = 1; i < x.rank(); ++i) {
    const auto b = begin[static_cast<std::size_t>(i)];
    if (b == 0 && out_shape[i] == x.shape()[i]) continue;
    const std::vector<int> perm = swap_front(x.rank(), i);
    x = transpose(transpose(x, perm).view_rows(b, b + out_shape[i]), perm);
  }
  return x.rank() > 0 ? x.view_rows(begin[0], begin[0] + out_shape[0]) : x;
}

// g inside zeros of `shape` at `begin`, axis by axis as a concatenation.
Tensor pad_into_on_device(Tensor g, const Shape& shape, const std::vector<std::int64_t>& begin) {
  const detail::RecordingPause pause;
  for (int i = 0; i < g.rank(); ++i) {
    const std::int64_t before = begin[static_cast<std::size_t>(i)];
    const std::int64_t after = shape[i] - before - g.shape()[i];
    if (before == 0 && after == 0) continue;
    std::vector<Tensor> parts;
    auto zeros = [&](std::int64_t n) {
      Tensor z = Tensor::empty_on(g.device(), g.shape().with_dim(i, n), g.dtype());
      detail::copy_into(z, Tensor::zeros(z.shape(), g.dtype()));
      return z;
    };
    if (before > 0) parts.push_back(zeros(before));
    parts.push_back(g);
    if (after > 0) parts.push_back(zeros(after));
    g = concat_on_device(parts, i, g.shape().with_dim(i, shape[i]));
  }
  return g;
}

// Writes g into a zero tensor of `shape` at `begin` (the gradient of slice).
Tensor pad_into(const Tensor& g, const Shape& shape, const std::vector<std::int64_t>& begin) {
  if (on_accelerator(g)) return pad_into_on_device(g, shape, begin);
  Tensor out = Tensor::zeros(shape, g.dtype());
  if (g.numel() == 0) return out;
  const auto strides = shape.strides();
  std::int64_t base = 0;
  for (int i = 0; i < shape.rank(); ++i)
    base += begin[static_cast<std::size_t>(i)] * strides[static_cast<std::size_t>(i)];
  const std::size_t es = dtype_size(g.dtype());
  const std::int64_t row_len = g.shape().rank() ? g.shape()[g.rank() - 1] : 1;
  char* po = static_cast<char*>(out.raw_data());
  const char* pg = static_cast<const char*>(g.raw_data());
  if (g.rank() == 0) {
    std::memcpy(po, pg, es);
    return out;
  }
  for_each_row(g.shape(), strides, [&](std::int64_t row, std::int64_t off) {
    std::memcpy(po + static_cast<std::size_t>(base + off) * es,
                pg + static_cast<std::size_t>(row * row_len) * es,
                static_cast<std::size_t>(row_len) * es);
  });
  return out;
}

}  // namespace

Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape) {
  check_defined(x, "reshape", "input");
  Shape target;
  int infer = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      LOCKSTEP_CHECK_AS(ShapeError, infer < 0,
                        "reshape: only one dimension may be -1; the requested shape has several");
      infer = static_cast<int>(i);
      target.push_back(1);
    } else {
      LOCKSTEP_CHECK_AS(ShapeError, shape[i] >= 0, "reshape: dimension ", i,
                        " must be >= 0 or -1, got ", shape[i]);
      target.push_back(shape[i]);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    LOCKSTEP_CHECK_AS(ShapeError, known > 0 && x.numel() % known == 0, "reshape: cannot reshape ",
                      x.shape(), " (", x.numel(), " elements) into a shape with -1 and ", known,
                      " known elements");
    target[infer] = x.numel() / known;
  }
  LOCKSTEP_CHECK_AS(ShapeError, target.numel() == x.numel(), "reshape: cannot reshape ", x.shape(),
                    " (", x.numel(), " elements) into ", target, " (", target.numel(),
                    " elements)");
  Tensor out = x.view_as(target);
  if (detail::should_record({x})) {
    detail::record("reshape", {x}, out,
                   [sx = x.shape()](const Tensor& g) { return Grads{reshape(g, sx.to_vector())}; });
  }
  return out;
}

Tensor transpose(const Tensor& x, const std::vector<int>& perm_in) {
  check_defined(x, "transpose", "input");
  const int r = x.rank();
  std::vector<int> perm = perm_in;
  if (perm.empty()) {
    perm.resize(static_cast<std::size_t>(r));
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  LOCKSTEP_CHECK_AS(ShapeError, static_cast<int>(perm.size()) == r, "transpose: permutation has ",
                    perm.size(), " entries for a tensor of rank ", r, " (shape ", x.shape(), ")");
  std::vector<int> inverse(static_cast<std::size_t>(r), -1);
  for (int i = 0; i < r; ++i) {
    const int p = normalize_axis(perm[static_cast<std::size_t>(i)], r, "transpose");
    LOCKSTEP_CHECK_AS(IndexError, inverse[static_cast<std::size_t>(p)] < 0, "transpose: axis ", p,
                      " appears twice in the permutation");
    inverse[static_cast<std::size_t>(p)] = i;
    perm[static_cast<std::size_t>(i)] = p;
  }
  Shape out_shape;
  const auto in_strides = x.shape().strides();
  std::array<std::int64_t, Shape::kMaxRank> strides{};
  for (int i = 0; i < r; ++i) {
    out_shape.push_back(x.shape()[perm[static_cast<std::size_t>(i)]]);
    strides[static_cast<std::size_t>(i)] =
        in_strides[static_cast<std::size_t>(perm[static_cast<std::size_t>(i)])];
  }
  const detail::OnDevice on;
  Tensor out =
      on.kernels() ? on.kernels()->transpose(x, perm) : Tensor::empty(out_shape, x.dtype());
  if (x.numel() > 0 && !on.kernels()) {
    if (r == 0) {
      std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
    } else {
      const std::int64_t len = out_shape[r - 1];
      const std::int64_t step = strides[static_cast<std::size_t>(r - 1)];
      detail::visit_dtype(x.dtype(), "transpose", [&]<typename T>() {
        const T* px = static_cast<const T*>(x.raw_data());
        T* po = static_cast<T*>(out.raw_data());
        for_each_row(out_shape, strides, [&](std::int64_t row, std::int64_t off) {
          T* dst = po + row * len;
          const T* src = px + off;
          for (std::int64_t i = 0; i < len; ++i) dst[i] = src[i * step];
        });
      });
    }
  }
  if (detail::should_record({x})) {
    detail::record("transpose", {x}, out,
                   [inverse](const Tensor& g) { return Grads{transpose(g, inverse)}; });
  }
  return out;
}

Tensor concat(const std::vector<Tensor>& tensors, int axis) {
  LOCKSTEP_CHECK(!tensors.empty(), "concat: expected at least one tensor");
  for (const Tensor& t : tensors) check_defined(t, "concat", "an input");
  const Tensor& first = tensors[0];
  LOCKSTEP_CHECK_AS(ShapeError, first.rank() > 0, "concat: cannot concatenate scalars");
  const int a = normalize_axis(axis, first.rank(), "concat");
  std::int64_t total = 0;
  for (std::size_t k = 0; k < tensors.size(); ++k) {
    const Tensor& t = tensors[k];
    LOCKSTEP_CHECK(t.dtype() == first.dtype(), "concat: input ", k, " has dtype ", t.dtype(),
                   ", input 0 has ", first.dtype());
    bool same = t.rank() == first.rank();
    for (int i = 0; same && i < t.rank(); ++i) same = i == a || t.shape()[i] == first.shape()[i];
    LOCKSTEP_CHECK_AS(ShapeError, same, "concat: input ", k, " has shape ", t.shape(),
                      ", incompatible with input 0's shape ", first.shape(), " along axis ", a);
    total += t.shape()[a];
  }
  const Shape out_shape = first.shape().with_dim(a, total);
  bool device = false;
  for (const Tensor& t : tensors) device = device || on_accelerator(t);
  Tensor out =
      device ? concat_on_device(tensors, a, out_shape) : Tensor::empty(out_shape, first.dtype());
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < a; ++i) outer *= out_shape[i];
  for (int i = a + 1; i < out_shape.rank(); ++i) inner *= out_shape[i];
  const std::size_t es = dtype_size(first.dtype());
  char* po = device ? nullptr : static_cast<char*>(out.raw_data());
  std::int64_t at = 0;
  for (const Tensor& t : tensors) {
    if (device) break;
    const std::size_t chunk = static_cast<std::size_t>(t.shape()[a] * inner) * es;
    const char* pt = static_cast<const char*>(t.raw_data());
    for (std::int64_t o = 0; o < outer; ++o) {
      std::memcpy(
          po + static_cast<std::size_t>(o * total + at) * static_cast<std::size_t>(inner) * es,
          pt + static_cast<std::size_t>(o) * chunk, chunk);
    }
    at += t.shape()[a];
  }
  if (detail::should_record(std::span<const Tensor>(tensors))) {
    std::vector<std::int64_t> sizes;
    for (const Tensor& t : tensors) sizes.push_back(t.shape()[a]);
    detail::record("concat", std::span<const Tensor>(tensors), out, [sizes, a](const Tensor& g) {
      Grads grads;
      std::vector<std::int64_t> begin(static_cast<std::size_t>(g.rank()), 0);
      std::vector<std::int64_t> size(static_cast<std::size_t>(g.rank()), -1);
      for (std::int64_t s : sizes) {
        size[static_cast<std::size_t>(a)] = s;
        grads.push_back(slice(g, begin, size));
        begin[static_cast<std::size_t>(a)] += s;
      }
      return grads;
    });
  }
  return out;
}

Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin,
             const std::vector<std::int64_t>& size) {
  check_defined(x, "slice", "input");
  const int r = x.rank();
  LOCKSTEP_CHECK_AS(ShapeError,
                    static_cast<int>(begin.size()) == r && static_cast<int>(size.size()) == r,
                    "slice: expected begin and size with ", r, " entries for shape ", x.shape(),
                    ", got ", begin.size(), " and ", size.size());
  Shape out_shape;
  bool rows_only = true;  // slicing dim 0 alone: a zero-copy view
  for (int i = 0; i < r; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const std::int64_t dim = x.shape()[i];
    const std::int64_t b = begin[iu];
    const std::int64_t n = size[iu] == -1 ? dim - b : size[iu];
    LOCKSTEP_CHECK_AS(IndexError, b >= 0 && n >= 0 && b + n <= dim, "slice: [", b, ", ", b + n,
                      ") is out of range for axis ", i, " of size ", dim, " (shape ", x.shape(),
                      ")");
    out_shape.push_back(n);
    if (i > 0 && (b != 0 || n != dim)) rows_only = false;
  }
  std::vector<std::int64_t> resolved_begin = begin;
  Tensor out;
  if (r > 0 && rows_only) {
    out = x.view_rows(begin[0], begin[0] + out_shape[0]);
  } else if (on_accelerator(x)) {
    out = slice_on_device(x, begin, out_shape);
  } else {
    out = Tensor::empty(out_shape, x.dtype());
    if (out.numel() > 0) {
      const auto strides = x.shape().strides();
      std::int64_t base = 0;
      for (int i = 0; i < r; ++i)
        base += begin[static_cast<std::size_t>(i)] * strides[static_cast<std::size_t>(i)];
      const std::size_t es = dtype_size(x.dtype());
      const std::int64_t len = r ? out_shape[r - 1] : 1;
      const char* px = static_cast<const char*>(x.raw_data());
      char* po = static_cast<char*>(out.raw_data());
      if (r == 0) {
        std::memcpy(po, px, es);
      } else {
        for_each_row(out_shape, strides, [&](std::int64_t row, std::int64_t off) {
          std::memcpy(po + static_cast<std::size_t>(row * len) * es,
                      px + static_cast<std::size_t>(base + off) * es,
                      static_cast<std::size_t>(len) * es);
        });
      }
    }
  }
  if (detail::should_record({x})) {
    detail::record("slice", {x}, out, [sx = x.shape(), resolved_begin](const Tensor& g) {
      return Grads{pad_into(g, sx, resolved_begin)};
    });
  }
  return out;
}

Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings,
           float value) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32 && value != 0.0f)
    return detail::narrow(pad(detail::widen(x), paddings, value), h);
  check_defined(x, "pad", "input");
  LOCKSTEP_CHECK_AS(ShapeError, static_cast<int>(paddings.size()) == x.rank(), "pad: expected ",
                    x.rank(), " (before, after) pairs for shape ", x.shape(), ", got ",
                    paddings.size());
  Shape out_shape;
  std::vector<std::int64_t> begin;
  for (int i = 0; i < x.rank(); ++i) {
    const auto [before, after] = paddings[static_cast<std::size_t>(i)];
    LOCKSTEP_CHECK(before >= 0 && after >= 0, "pad: paddings must be >= 0, got (", before, ", ",
                   after, ") for axis ", i);
    out_shape.push_back(x.shape()[i] + before + after);
    begin.push_back(before);
  }
  Tensor out;
  if (value == 0.0f) {
    out = pad_into(x, out_shape, begin);
  } else {
    detail::check_float32(x.dtype(), "pad", "input with a non-zero value");
    out = Tensor::full(out_shape, value);
    const Tensor placed = pad_into(x, out_shape, begin);  // x inside zeros
    const Tensor mask = pad_into(Tensor::ones(x.shape()), out_shape, begin);
    float* po = out.data<float>();
    const float* pp = placed.data<float>();
    const float* pm = mask.data<float>();
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      if (pm[i] != 0.0f) po[i] = pp[i];
    }
  }
  if (detail::should_record({x})) {
    detail::record("pad", {x}, out, [begin, sx = x.shape()](const Tensor& g) {
      std::vector<std::int64_t> size = sx.to_vector();
      return Grads{slice(g, begin, size)};
    });
  }
  return out;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  check_defined(x, "broadcast_to", "input");
  const Shape joint = detail::broadcast_shapes(x.shape(), shape, "broadcast_to");
  LOCKSTEP_CHECK_AS(ShapeError, joint == shape, "broadcast_to: cannot broadcast ", x.shape(),
                    " to ", shape);
  if (x.shape() == shape) return x;
  const detail::OnDevice on;
  // On a GPU: x · 1 over the broadcast (exact, -0 and NaN kept).
  Tensor out = on.kernels() ? on.kernels()->binary(detail::BinaryKind::kMul, x,
                                                   Tensor::ones({}, x.dtype()), shape)
                            : Tensor::empty(shape, x.dtype());
  const auto plan = detail::make_broadcast_plan<1>(shape, {x.shape()});
  if (!on.kernels())
    detail::visit_dtype(x.dtype(), "broadcast_to", [&]<typename T>() {
      const T* px = static_cast<const T*>(x.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      detail::for_each_run(
          plan, 1, [&](const auto& off, std::int64_t o, std::int64_t n, const auto& s) {
            if (s[0] == 1) {
              std::memcpy(po + o, px + off[0], static_cast<std::size_t>(n) * sizeof(T));
            } else {
              std::fill(po + o, po + o + n, px[off[0]]);
            }
          });
    });
  if (detail::should_record({x})) {
    detail::record("broadcast_to", {x}, out,
                   [sx = x.shape()](const Tensor& g) { return Grads{sum_to(g, sx)}; });
  }
  return out;
}

bool native_bfloat16() { return backend::onednn::native_bfloat16(); }

std::string bfloat16_kernels() {
  if (backend::onednn::native_bfloat16())
    return std::string("native bfloat16: oneDNN ") +
           backend::onednn::bfloat16_matmul_implementation();
  if (backend::onednn::cpu_has_bfloat16())
    return "emulated: ONEDNN_MAX_CPU_ISA keeps oneDNN from this CPU's bfloat16 instructions; "
           "float32 is faster here";
  return "emulated: this CPU has no bfloat16 instructions; float32 is faster here";
}

Tensor cast(const Tensor& x, DType dtype) {
  check_defined(x, "cast", "input");
  const detail::OnDevice on;
  Tensor out = on.kernels() ? on.kernels()->cast(x, dtype) : Tensor::empty(x.shape(), dtype);
  if (on.kernels()) {
  } else if (dtype == x.dtype()) {
    std::memcpy(out.raw_data(), x.raw_data(), x.nbytes());
  } else if (x.dtype() == DType::kFloat32 && detail::any_half({&out})) {
    detail::visit_half(dtype, [&]<typename H>() {  // rounded, by the vectorised loops
      const float* px = x.data<float>();
      H* po = out.data<H>();
      detail::parallel_for(x.numel(), 1, [&](std::int64_t begin, std::int64_t end) {
        detail::round_to(px + begin, po + begin, end - begin);
      });
    });
  } else if (detail::any_half({&x}) && dtype == DType::kFloat32) {
    detail::visit_half(x.dtype(), [&]<typename H>() {  // widened, exactly
      const H* px = x.data<H>();
      float* po = out.data<float>();
      detail::parallel_for(x.numel(), 1, [&](std::int64_t begin, std::int64_t end) {
        detail::widen_from(px + begin, po + begin, end - begin);
      });
    });
  } else {
    detail::visit_dtype(x.dtype(), "cast", [&]<typename S>() {
      detail::visit_dtype(dtype, "cast", [&]<typename D>() {
        const S* px = static_cast<const S*>(x.raw_data());
        D* po = static_cast<D*>(out.raw_data());
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          if constexpr (std::is_same_v<D, bool>) {
            po[i] = px[i] != S{};
          } else {
            po[i] = static_cast<D>(px[i]);
          }
        }
      });
    });
  }
  // Between floating dtypes the gradient is cast back to the input's dtype
  // (the float32 master weights of mixed precision get float32 gradients).
  if (is_floating(x.dtype()) && is_floating(dtype) && detail::should_record({x})) {
    detail::record("cast", {x}, out,
                   [from = x.dtype()](const Tensor& g) { return Grads{cast(g, from)}; });
  }
  return out;
}

Tensor zeros_like(const Tensor& x) {
  check_defined(x, "zeros_like", "input");
  return Tensor::zeros(x.shape(), x.dtype());
}

Tensor ones_like(const Tensor& x) {
  check_defined(x, "ones_like", "input");
  return Tensor::ones(x.shape(), x.dtype());
}

Tensor stop_gradient(const Tensor& x) {
  check_defined(x, "stop_gradient", "input");
  return x.view_as(x.shape());  // a new id that no recorded op produced
}

}  // namespace lockstep
