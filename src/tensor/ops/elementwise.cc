// Elementwise ops: broadcasting binary arithmetic, unary math, comparisons,
// where and clip — each forward beside its gradient rule.
//
// Transcendental unary ops on large tensors run on oneDNN's JIT eltwise
// kernels; small ones (where a oneDNN call's fixed cost dominates) run in our
// own loop. Arithmetic, relu, clip and the backward maps run on bfloat16
// and float16 data directly (mixed precision: widened and rounded block by
// block in L1, tensor/ops/bf16.h), bitwise as the float32 op on the widened
// operands followed by one rounding; transcendental ones on those types are
// emulated through float32 tensors.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "lockstep/core/simd.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/dispatch.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/loops.h"
#include "tensor/ops/relu_grad.h"

namespace lockstep {
namespace detail {

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < r; ++i) {
    const int ia = i - (r - a.rank());
    const int ib = i - (r - b.rank());
    const std::int64_t da = ia >= 0 ? a[ia] : 1;
    const std::int64_t db = ib >= 0 ? b[ib] : 1;
    LOCKSTEP_CHECK_AS(ShapeError, da == db || da == 1 || db == 1, op, ": shapes ", a, " and ", b,
                      " cannot be broadcast together (dimension ", i, ": ", da, " vs ", db, ")");
    out.push_back(da == 1 ? db : da);
  }
  return out;
}

}  // namespace detail

namespace {

using detail::Grads;

// Below this size a oneDNN eltwise call costs more than a scalar libm loop.
constexpr std::int64_t kOneDnnEltwiseMin = 2048;

void check_binary(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(a, op, "first operand");
  check_defined(b, op, "second operand");
  LOCKSTEP_CHECK(a.dtype() == b.dtype(), op, ": operands have different dtypes: ", a.dtype(),
                 " (shape ", a.shape(), ") and ", b.dtype(), " (shape ", b.shape(),
                 "). Hint: cast one of them with lockstep::cast");
}

// out[i] = f(a[ia], b[ib]) over the broadcast of a and b.
template <typename T, typename R, typename F>
void run_binary(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const auto plan = detail::make_broadcast_plan<2>(out.shape(), {a.shape(), b.shape()});
  const T* pa = static_cast<const T*>(a.raw_data());
  const T* pb = static_cast<const T*>(b.raw_data());
  R* po = static_cast<R*>(out.raw_data());
  detail::for_each_run(plan, 1,
                       [&](const auto& off, std::int64_t o, std::int64_t n, const auto& s) {
                         const T* x = pa + off[0];
                         const T* y = pb + off[1];
                         R* z = po + o;
                         if (s[0] == 1 && s[1] == 1) {
                           for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
                         } else if (s[0] == 1) {
                           const T yv = *y;
                           for (std::int64_t i = 0; i < n; ++i) z[i] = f(x[i], yv);
                         } else if (s[1] == 1) {
                           const T xv = *x;
                           for (std::int64_t i = 0; i < n; ++i) z[i] = f(xv, y[i]);
                         } else {
                           const R v = f(*x, *y);
                           for (std::int64_t i = 0; i < n; ++i) z[i] = v;
                         }
                       });
}

// out = f(a, b) over the broadcast of two bfloat16 (or two float16: H)
// tensors, computed in float32 and rounded once per element.
template <typename H, typename F>
void run_binary_half(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const auto plan = detail::make_broadcast_plan<2>(out.shape(), {a.shape(), b.shape()});
  const H* pa = a.data<H>();
  const H* pb = b.data<H>();
  H* po = out.data<H>();
  constexpr std::int64_t kBlock = detail::kBf16Block;
  detail::for_each_run(plan, 1,
                       [&](const auto& off, std::int64_t o, std::int64_t n, const auto& s) {
                         alignas(64) float x[kBlock], y[kBlock], z[kBlock];
                         for (std::int64_t start = 0; start < n; start += kBlock) {
                           const std::int64_t len = std::min(kBlock, n - start);
                           if (s[0] == 1) {
                             detail::widen_from(pa + off[0] + start, x, len);
                           } else {
                             std::fill(x, x + len, static_cast<float>(pa[off[0]]));
                           }
                           if (s[1] == 1) {
                             detail::widen_from(pb + off[1] + start, y, len);
                           } else {
                             std::fill(y, y + len, static_cast<float>(pb[off[1]]));
                           }
                           for (std::int64_t i = 0; i < len; ++i) z[i] = f(x[i], y[i]);
                           detail::round_to(z, po + o + start, len);
                         }
                       });
}

// Arithmetic over float32/bfloat16/int32/int64 (or floating only), result
// of a's dtype.
template <typename F>
Tensor binary_arith(const char* op, detail::BinaryKind kind, const Tensor& a, const Tensor& b,
                    bool float_only, F f) {
  check_binary(op, a, b);
  if (float_only) detail::check_floating(a.dtype(), op, "operands");
  const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), op);
  const detail::OnDevice on;
  if (on.kernels()) return on.kernels()->binary(kind, a, b, shape);
  Tensor out = Tensor::empty(shape, a.dtype());
  if (detail::any_half({&a})) {
    detail::visit_half(a.dtype(), [&]<typename H>() {
      run_binary_half<H>(a, b, out, [&](float x, float y) { return static_cast<float>(f(x, y)); });
    });
    return out;
  }
  detail::visit_numeric(a.dtype(), op, [&]<typename T>() { run_binary<T, T>(a, b, out, f); });
  return out;
}

template <typename F>
Tensor comparison(const char* op, detail::BinaryKind kind, const Tensor& a, const Tensor& b, F f) {
  if (detail::any_half({&a, &b}) && a.dtype() != b.dtype())
    return comparison(op, kind, detail::widen(a), detail::widen(b), f);
  check_binary(op, a, b);
  const Shape shape = detail::broadcast_shapes(a.shape(), b.shape(), op);
  const detail::OnDevice on;
  if (on.kernels()) return on.kernels()->binary(kind, a, b, shape);
  Tensor out = Tensor::empty(shape, DType::kBool);
  detail::visit_dtype(a.dtype(), op, [&]<typename T>() { run_binary<T, bool>(a, b, out, f); });
  return out;
}

// Same-shape map over two float32 (or two bfloat16, or float16) tensors: out[i] =
// f(x[i], y[i]). The fused backward kernels of unary ops use it (one pass
// instead of several ops).
// `kind`: the GPU's kernel for it, where there is one.
template <typename F>
Tensor map2(const Tensor& x, const Tensor& y, F f,
            std::optional<detail::Map2Kind> kind = std::nullopt) {
  const detail::OnDevice on;
  if (on.kernels()) {
    if (kind && is_floating(x.dtype()) && is_floating(y.dtype()))
      return on.kernels()->map2(*kind, x, y);
    detail::no_device_kernel("this op's gradient (a fused map)");
  }
  if (detail::any_half({&x}) && x.dtype() == y.dtype()) {
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    detail::visit_half(x.dtype(), [&]<typename H>() {
      const H* px = x.data<H>();
      const H* py = y.data<H>();
      H* po = out.data<H>();
      detail::parallel_for(x.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
        detail::run_half_blocks<2>(end - begin, std::array<const H*, 2>{px + begin, py + begin},
                                   po + begin, [&](const auto& in, float* o, std::int64_t n) {
                                     for (std::int64_t i = 0; i < n; ++i)
                                       o[i] = f(in[0][i], in[1][i]);
                                   });
      });
    });
    return out;
  }
  if (x.dtype() != y.dtype()) return map2(detail::widen(x), detail::widen(y), f, kind);
  Tensor out = Tensor::empty(x.shape());
  const float* px = x.data<float>();
  const float* py = y.data<float>();
  float* po = out.data<float>();
  detail::parallel_for(x.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) po[i] = f(px[i], py[i]);
  });
  return out;
}

template <typename T, typename F>
void map_into(const Tensor& x, Tensor& out, F f) {
  const T* px = static_cast<const T*>(x.raw_data());
  T* po = static_cast<T*>(out.raw_data());
  detail::parallel_for(x.numel(), 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) po[i] = f(px[i]);
  });
}

// Unary float32 op with a oneDNN path for large tensors.
template <typename F>
Tensor unary_float(const char* op, detail::UnaryKind device_kind, const Tensor& x,
                   backend::onednn::Eltwise kind, F f) {
  check_defined(x, op, "input");
  detail::check_float32(x.dtype(), op, "input");
  const detail::OnDevice on;
  if (on.kernels()) return on.kernels()->unary(device_kind, x);
  Tensor out = Tensor::empty(x.shape());
  if (x.numel() >= kOneDnnEltwiseMin) {
    backend::onednn::eltwise(kind, x.data<float>(), out.data<float>(), x.numel());
  } else {
    map_into<float>(x, out, f);
  }
  return out;
}

// out[i] = f(x[i]) over bfloat16 or float16, computed in float32, rounded
// once.
template <typename F>
void map_half_into(const Tensor& x, Tensor& out, F f) {
  detail::visit_half(x.dtype(), [&]<typename H>() {
    const H* px = x.data<H>();
    H* po = out.data<H>();
    detail::parallel_for(x.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
      detail::run_half_blocks<1>(end - begin, std::array<const H*, 1>{px + begin}, po + begin,
                                 [&](const auto& in, float* o, std::int64_t n) {
                                   for (std::int64_t i = 0; i < n; ++i) o[i] = f(in[0][i]);
                                 });
    });
  });
}

// Unary op over float32/bfloat16/float16/int32/int64.
template <typename F>
Tensor unary_numeric(const char* op, detail::UnaryKind kind, const Tensor& x, F f) {
  check_defined(x, op, "input");
  const detail::OnDevice on;
  if (on.kernels()) return on.kernels()->unary(kind, x);
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (detail::any_half({&x})) {
    map_half_into(x, out, [&](float v) { return static_cast<float>(f(v)); });
    return out;
  }
  detail::visit_numeric(x.dtype(), op, [&]<typename T>() { map_into<T>(x, out, f); });
  return out;
}

bool is_floating(const Tensor& t) { return lockstep::is_floating(t.dtype()); }

// Binary ops on a float32 and a bfloat16 (or float16) operand: both widened, the result
// rounded to `half`, the operands' reduced type (Keras casts such operands; an op given both
// computes in float32).
bool mixed_floats(DType half, const Tensor& a, const Tensor& b) {
  return half != DType::kFloat32 && a.dtype() != b.dtype();
}

}  // namespace

// ---- binary arithmetic --------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(add(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("add", detail::BinaryKind::kAdd, a, b, false,
                            [](auto x, auto y) { return x + y; });
  if (detail::should_record({a, b})) {
    detail::record("add", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return Grads{sum_to(g, sa), sum_to(g, sb)};
    });
  }
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(sub(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("sub", detail::BinaryKind::kSub, a, b, false,
                            [](auto x, auto y) { return x - y; });
  if (detail::should_record({a, b})) {
    detail::record("sub", {a, b}, out, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
      return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
    });
  }
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(mul(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("mul", detail::BinaryKind::kMul, a, b, false,
                            [](auto x, auto y) { return x * y; });
  if (detail::should_record({a, b})) {
    detail::record("mul", {a, b}, out, [a, b](const Tensor& g) {
      return Grads{sum_to(mul(g, b), a.shape()), sum_to(mul(g, a), b.shape())};
    });
  }
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(div(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("div", detail::BinaryKind::kDiv, a, b, true,
                            [](auto x, auto y) { return x / y; });
  if (detail::should_record({a, b})) {
    detail::record("div", {a, b}, out, [a, b](const Tensor& g) {
      const Tensor ga = div(g, b);
      return Grads{sum_to(ga, a.shape()), sum_to(neg(mul(ga, div(a, b))), b.shape())};
    });
  }
  return out;
}

Tensor pow(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); h != DType::kFloat32)
    return detail::narrow(pow(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("pow", detail::BinaryKind::kPow, a, b, true,
                            [](float x, float y) { return std::pow(x, y); });
  if (detail::should_record({a, b})) {
    detail::record("pow", {a, b}, out, [a, b, out](const Tensor& g) {
      // d/da a^b = b·a^(b-1); d/db a^b = a^b·log(a), taken as 0 where a <= 0.
      const Tensor da = mul(g, mul(b, pow(a, sub(b, Tensor::scalar(1.0f)))));
      const Tensor safe_log = where(greater(a, Tensor::scalar(0.0f)),
                                    log(maximum(a, Tensor::scalar(1e-30f))), Tensor::scalar(0.0f));
      const Tensor db = mul(g, mul(out, safe_log));
      return Grads{sum_to(da, a.shape()), sum_to(db, b.shape())};
    });
  }
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(maximum(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("maximum", detail::BinaryKind::kMaximum, a, b, false,
                            [](auto x, auto y) { return x >= y ? x : y; });
  if (detail::should_record({a, b})) {
    detail::record("maximum", {a, b}, out, [a, b](const Tensor& g) {
      const Tensor to_a = greater_equal(a, b);  // ties go to a, as TensorFlow
      const Tensor zero = zeros_like(g);
      return Grads{sum_to(where(to_a, g, zero), a.shape()),
                   sum_to(where(to_a, zero, g), b.shape())};
    });
  }
  return out;
}

Tensor minimum(const Tensor& a, const Tensor& b) {
  if (const DType h = detail::half_dtype({&a, &b}); mixed_floats(h, a, b))
    return detail::narrow(minimum(detail::widen(a), detail::widen(b)), h);
  Tensor out = binary_arith("minimum", detail::BinaryKind::kMinimum, a, b, false,
                            [](auto x, auto y) { return x <= y ? x : y; });
  if (detail::should_record({a, b})) {
    detail::record("minimum", {a, b}, out, [a, b](const Tensor& g) {
      const Tensor to_a = less_equal(a, b);
      const Tensor zero = zeros_like(g);
      return Grads{sum_to(where(to_a, g, zero), a.shape()),
                   sum_to(where(to_a, zero, g), b.shape())};
    });
  }
  return out;
}

// ---- unary --------------------------------------------------------------------

Tensor neg(const Tensor& x) {
  Tensor out = unary_numeric("neg", detail::UnaryKind::kNeg, x, [](auto v) { return -v; });
  if (detail::should_record({x})) {
    detail::record("neg", {x}, out, [](const Tensor& g) { return Grads{neg(g)}; });
  }
  return out;
}

Tensor exp(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(exp(detail::widen(x)), h);
  Tensor out = unary_float("exp", detail::UnaryKind::kExp, x, backend::onednn::Eltwise::kExp,
                           [](float v) { return std::exp(v); });
  if (detail::should_record({x})) {
    detail::record("exp", {x}, out, [out](const Tensor& g) { return Grads{mul(g, out)}; });
  }
  return out;
}

Tensor log(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(log(detail::widen(x)), h);
  // libm's logf at every size, never oneDNN's eltwise log: on AVX2 (oneDNN
  // 2.6) that one is off by up to 917 float32 ulps, and by 15% relative
  // near x = 1, where log(1 − p) of a cross-entropy lives (issue #21;
  // measured over 2^20 inputs against float64). glibc's logf is within one
  // ulp.
  check_defined(x, "log", "input");
  detail::check_float32(x.dtype(), "log", "input");
  const detail::OnDevice on;
  Tensor out =
      on.kernels() ? on.kernels()->unary(detail::UnaryKind::kLog, x) : Tensor::empty(x.shape());
  if (!on.kernels()) map_into<float>(x, out, [](float v) { return std::log(v); });
  if (detail::should_record({x})) {
    detail::record("log", {x}, out, [x](const Tensor& g) { return Grads{div(g, x)}; });
  }
  return out;
}

Tensor erf(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(erf(detail::widen(x)), h);
  check_defined(x, "erf", "input");
  detail::check_float32(x.dtype(), "erf", "input");
  // Our loop at every size: oneDNN has an erf-based GELU but no erf.
  const detail::OnDevice on;
  Tensor out =
      on.kernels() ? on.kernels()->unary(detail::UnaryKind::kErf, x) : Tensor::empty(x.shape());
  if (!on.kernels()) map_into<float>(x, out, [](float v) { return std::erf(v); });
  if (detail::should_record({x})) {
    detail::record("erf", {x}, out, [x](const Tensor& g) {
      // d/dx erf(x) = 2/√π · exp(−x²).
      return Grads{map2(
          g, x, [](float gv, float v) { return gv * 1.12837916709551257390f * std::exp(-v * v); },
          detail::Map2Kind::kErfGrad)};
    });
  }
  return out;
}

Tensor log1p(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(log1p(detail::widen(x)), h);
  check_defined(x, "log1p", "input");
  detail::check_float32(x.dtype(), "log1p", "input");
  // Our loop at every size: oneDNN has no log1p, and its log of 1 + x
  // would lose what this op is for.
  const detail::OnDevice on;
  Tensor out =
      on.kernels() ? on.kernels()->unary(detail::UnaryKind::kLog1p, x) : Tensor::empty(x.shape());
  if (!on.kernels()) map_into<float>(x, out, [](float v) { return std::log1p(v); });
  if (detail::should_record({x})) {
    detail::record("log1p", {x}, out, [x](const Tensor& g) {
      return Grads{map2(
          g, x, [](float gv, float v) { return gv / (1.0f + v); }, detail::Map2Kind::kLog1pGrad)};
    });
  }
  return out;
}

Tensor sqrt(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(sqrt(detail::widen(x)), h);
  Tensor out = unary_float("sqrt", detail::UnaryKind::kSqrt, x, backend::onednn::Eltwise::kSqrt,
                           [](float v) { return std::sqrt(v); });
  if (detail::should_record({x})) {
    detail::record("sqrt", {x}, out, [out](const Tensor& g) {
      return Grads{map2(
          g, out, [](float gv, float y) { return 0.5f * gv / y; }, detail::Map2Kind::kSqrtGrad)};
    });
  }
  return out;
}

Tensor square(const Tensor& x) {
  Tensor out = unary_numeric("square", detail::UnaryKind::kSquare, x, [](auto v) { return v * v; });
  if (detail::should_record({x})) {
    detail::record("square", {x}, out, [x](const Tensor& g) {
      return Grads{map2(
          g, x, [](float gv, float v) { return 2.0f * v * gv; }, detail::Map2Kind::kSquareGrad)};
    });
  }
  return out;
}

Tensor abs(const Tensor& x) {
  Tensor out =
      unary_numeric("abs", detail::UnaryKind::kAbs, x, [](auto v) { return v < 0 ? -v : v; });
  if (detail::should_record({x})) {
    detail::record("abs", {x}, out, [x](const Tensor& g) {
      return Grads{map2(
          g, x, [](float gv, float v) { return v > 0 ? gv : (v < 0 ? -gv : 0.0f); },
          detail::Map2Kind::kAbsGrad)};
    });
  }
  return out;
}

Tensor detail::relu_grad_from_output(const Tensor& g, const Tensor& y) {
  return map2(
      g.dtype() == y.dtype() ? g : cast(g, y.dtype()), y,
      [](float gv, float v) { return v > 0 ? gv : 0.0f; }, detail::Map2Kind::kReluGradFromOutput);
}

Tensor relu(const Tensor& x) {
  Tensor out = unary_numeric("relu", detail::UnaryKind::kRelu, x,
                             [](auto v) { return v > 0 ? v : decltype(v){0}; });
  if (detail::should_record({x})) {
    detail::record("relu", {x}, out,
                   [out](const Tensor& g) { return Grads{detail::relu_grad_from_output(g, out)}; });
  }
  return out;
}

namespace {

// c ? a : b as a bitwise blend: GCC keeps `c ? a : b` of floats as a branch
// around the computation of one side (it may not speculate a multiply
// under -ftrapping-math, omp simd notwithstanding), which runs scalar and
// mispredicts on signed data — the branchy relu kernels were 40% of a
// MobileNetV2 step on one core. Masks vectorise.
inline float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & m) |
                              (std::bit_cast<std::uint32_t>(b) & ~m));
}

// Keras's relu and its gradient over [begin, end).
LOCKSTEP_VECTOR_CLONES void relu_kernel(const float* __restrict x, float* __restrict y,
                                        std::int64_t begin, std::int64_t end, float slope,
                                        float top, float threshold) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float v = x[i];
    y[i] = select(v > threshold, std::min(v, top), slope * (v - threshold));
  }
}

// From the output alone: y > 0 exactly where x > threshold (there y =
// min(x, max_value) > 0), and y < max_value where x is below the cap.
LOCKSTEP_VECTOR_CLONES void relu_grad_kernel(const float* __restrict g, const float* __restrict y,
                                             float* __restrict dx, std::int64_t begin,
                                             std::int64_t end, float slope, float top) {
  for (std::int64_t i = begin; i < end; ++i) {
    const float v = y[i], gi = g[i];
    dx[i] = select(v > 0.0f, select(v < top, gi, 0.0f), slope * gi);
  }
}

}  // namespace

Tensor relu(const Tensor& x, const ReluOptions& o) {
  check_defined(x, "relu", "input");
  detail::check_floating(x.dtype(), "relu", "input");
  LOCKSTEP_CHECK(
      o.negative_slope >= 0.0f && o.threshold >= 0.0f && (!o.max_value || *o.max_value >= 0.0f),
      "relu: negative_slope, threshold and max_value must be >= 0, got ", o.negative_slope, ", ",
      o.threshold, " and ", o.max_value ? std::to_string(*o.max_value) : std::string("none"));
  if (o.negative_slope == 0.0f && o.threshold == 0.0f && !o.max_value) return relu(x);
  const float slope = o.negative_slope, threshold = o.threshold;
  const float top = o.max_value ? *o.max_value : std::numeric_limits<float>::infinity();
  const detail::OnDevice on;
  if (detail::DeviceKernels* k = on.kernels()) {
    Tensor out = k->relu_general(x, slope, top, threshold);
    if (detail::should_record({x})) {
      detail::record("relu", {x}, out, [out, slope, top](const Tensor& g) {
        const detail::OnDevice on_g;
        return Grads{on_g.kernels()->relu_general_grad(g, out, slope, top)};
      });
    }
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  if (detail::any_half({&x})) {
    detail::visit_half(x.dtype(), [&]<typename H>() {
      const H* px = x.data<H>();
      H* py = out.data<H>();
      detail::parallel_for(x.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
        detail::run_half_blocks<1>(end - begin, std::array<const H*, 1>{px + begin}, py + begin,
                                   [&](const auto& in, float* o, std::int64_t n) {
                                     relu_kernel(in[0], o, 0, n, slope, top, threshold);
                                   });
      });
    });
  } else {
    const float* px = x.data<float>();
    float* py = out.data<float>();
    detail::parallel_for(x.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
      relu_kernel(px, py, begin, end, slope, top, threshold);
    });
  }
  if (detail::should_record({x})) {
    detail::record("relu", {x}, out, [out, slope, top](const Tensor& upstream) {
      const Tensor g = upstream.dtype() == out.dtype() ? upstream : cast(upstream, out.dtype());
      const detail::OnDevice on;  // the fake accelerator's (a GPU recorded its own, above)
      Tensor dx = Tensor::empty(out.shape(), out.dtype());
      if (detail::any_half({&out})) {
        detail::visit_half(out.dtype(), [&]<typename H>() {
          const H* pg = g.data<H>();
          const H* po = out.data<H>();
          H* pd = dx.data<H>();
          detail::parallel_for(out.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
            detail::run_half_blocks<2>(end - begin, std::array<const H*, 2>{pg + begin, po + begin},
                                       pd + begin, [&](const auto& in, float* o, std::int64_t n) {
                                         relu_grad_kernel(in[0], in[1], o, 0, n, slope, top);
                                       });
          });
        });
        return Grads{dx};
      }
      const float* pg = g.data<float>();
      const float* po = out.data<float>();
      float* pd = dx.data<float>();
      detail::parallel_for(out.numel(), 2, [&](std::int64_t begin, std::int64_t end) {
        relu_grad_kernel(pg, po, pd, begin, end, slope, top);
      });
      return Grads{dx};
    });
  }
  return out;
}

Tensor sigmoid(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(sigmoid(detail::widen(x)), h);
  Tensor out =
      unary_float("sigmoid", detail::UnaryKind::kSigmoid, x, backend::onednn::Eltwise::kSigmoid,
                  [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
  if (detail::should_record({x})) {
    detail::record("sigmoid", {x}, out, [out](const Tensor& g) {
      return Grads{map2(
          g, out, [](float gv, float y) { return gv * y * (1.0f - y); },
          detail::Map2Kind::kSigmoidGrad)};
    });
  }
  return out;
}

Tensor tanh(const Tensor& x) {
  if (const DType h = detail::half_dtype({&x}); h != DType::kFloat32)
    return detail::narrow(tanh(detail::widen(x)), h);
  Tensor out = unary_float("tanh", detail::UnaryKind::kTanh, x, backend::onednn::Eltwise::kTanh,
                           [](float v) { return std::tanh(v); });
  if (detail::should_record({x})) {
    detail::record("tanh", {x}, out, [out](const Tensor& g) {
      return Grads{map2(
          g, out, [](float gv, float y) { return gv * (1.0f - y * y); },
          detail::Map2Kind::kTanhGrad)};
    });
  }
  return out;
}

Tensor clip(const Tensor& x, float min_value, float max_value) {
  check_defined(x, "clip", "input");
  detail::check_floating(x.dtype(), "clip", "input");
  LOCKSTEP_CHECK(min_value <= max_value, "clip: min_value ", min_value,
                 " must not exceed max_value ", max_value);
  const detail::OnDevice on;
  if (on.kernels()) {
    Tensor out = on.kernels()->clip(x, min_value, max_value);
    if (detail::should_record({x})) {
      detail::record("clip", {x}, out, [x, min_value, max_value](const Tensor& g) {
        const Tensor zero = zeros_like(g);
        return Grads{where(greater_equal(x, Tensor::scalar(min_value)),
                           where(less_equal(x, Tensor::scalar(max_value)), g, zero), zero)};
      });
    }
    return out;
  }
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  const auto f = [=](float v) {
    return v < min_value ? min_value : (v > max_value ? max_value : v);
  };
  if (detail::any_half({&x})) {
    map_half_into(x, out, f);
  } else {
    map_into<float>(x, out, f);
  }
  if (detail::should_record({x})) {
    detail::record("clip", {x}, out, [x, min_value, max_value](const Tensor& g) {
      return Grads{map2(
          g, x, [=](float gv, float v) { return (v >= min_value && v <= max_value) ? gv : 0.0f; })};
    });
  }
  return out;
}

// ---- comparisons and where ----------------------------------------------------

Tensor equal(const Tensor& a, const Tensor& b) {
  return comparison("equal", detail::BinaryKind::kEqual, a, b,
                    [](auto x, auto y) { return x == y; });
}
Tensor not_equal(const Tensor& a, const Tensor& b) {
  return comparison("not_equal", detail::BinaryKind::kNotEqual, a, b,
                    [](auto x, auto y) { return x != y; });
}
Tensor less(const Tensor& a, const Tensor& b) {
  return comparison("less", detail::BinaryKind::kLess, a, b, [](auto x, auto y) { return x < y; });
}
Tensor less_equal(const Tensor& a, const Tensor& b) {
  return comparison("less_equal", detail::BinaryKind::kLessEqual, a, b,
                    [](auto x, auto y) { return x <= y; });
}
Tensor greater(const Tensor& a, const Tensor& b) {
  return comparison("greater", detail::BinaryKind::kGreater, a, b,
                    [](auto x, auto y) { return x > y; });
}
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  return comparison("greater_equal", detail::BinaryKind::kGreaterEqual, a, b,
                    [](auto x, auto y) { return x >= y; });
}

Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y) {
  if (const DType h = detail::half_dtype({&x, &y}); h != DType::kFloat32 && x.dtype() != y.dtype())
    return detail::narrow(where(cond, detail::widen(x), detail::widen(y)), h);
  check_defined(cond, "where", "condition");
  check_binary("where", x, y);
  LOCKSTEP_CHECK(cond.dtype() == DType::kBool, "where: expected a bool condition, got dtype ",
                 cond.dtype(), ". Hint: build it with a comparison such as lockstep::greater");
  const Shape shape = detail::broadcast_shapes(
      cond.shape(), detail::broadcast_shapes(x.shape(), y.shape(), "where"), "where");
  const detail::OnDevice on;
  if (on.kernels() && !is_floating(x))
    detail::no_device_kernel("where on values other than float32, bfloat16 or float16");
  Tensor out =
      on.kernels() ? on.kernels()->where(cond, x, y, shape) : Tensor::empty(shape, x.dtype());
  const auto plan = detail::make_broadcast_plan<3>(shape, {cond.shape(), x.shape(), y.shape()});
  if (!on.kernels()) {
    detail::visit_dtype(x.dtype(), "where", [&]<typename T>() {
      const bool* pc = cond.data<bool>();
      const T* px = static_cast<const T*>(x.raw_data());
      const T* py = static_cast<const T*>(y.raw_data());
      T* po = static_cast<T*>(out.raw_data());
      detail::for_each_run(
          plan, 1, [&](const auto& off, std::int64_t o, std::int64_t n, const auto& s) {
            for (std::int64_t i = 0; i < n; ++i) {
              po[o + i] = pc[off[0] + i * s[0]] ? px[off[1] + i * s[1]] : py[off[2] + i * s[2]];
            }
          });
    });
  }
  if (is_floating(x) && detail::should_record({x, y})) {
    detail::record("where", {x, y}, out, [cond, sx = x.shape(), sy = y.shape()](const Tensor& g) {
      const Tensor zero = zeros_like(g);
      return Grads{sum_to(where(cond, g, zero), sx), sum_to(where(cond, zero, g), sy)};
    });
  }
  return out;
}

// ---- operators ------------------------------------------------------------------

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, float b) { return add(a, Tensor::scalar(b)); }
Tensor operator-(const Tensor& a, float b) { return sub(a, Tensor::scalar(b)); }
Tensor operator*(const Tensor& a, float b) { return mul(a, Tensor::scalar(b)); }
Tensor operator/(const Tensor& a, float b) { return div(a, Tensor::scalar(b)); }
Tensor operator*(float a, const Tensor& b) { return mul(Tensor::scalar(a), b); }

namespace {
// `a` op= b when `a` is a float32 temporary no one else holds and no tape
// records (a rule might keep it); else the out-of-place op. The loop is the
// out-of-place one's (x op scalar), so the values are bitwise the same.
template <typename F>
Tensor scalar_op_in_place(Tensor&& a, float b, Tensor (*out_of_place)(const Tensor&, float), F f) {
  if (!a.defined() || a.dtype() != DType::kFloat32 || !a.sole_owner() ||
      !a.device().host_accessible() || detail::should_record({a})) {
    return out_of_place(a, b);
  }
  float* p = a.data<float>();
  detail::parallel_for(a.numel(), 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) p[i] = f(p[i], b);
  });
  return std::move(a);
}
}  // namespace

Tensor operator+(Tensor&& a, float b) {
  return scalar_op_in_place(std::move(a), b, operator+, [](float x, float y) { return x + y; });
}
Tensor operator-(Tensor&& a, float b) {
  return scalar_op_in_place(std::move(a), b, operator-, [](float x, float y) { return x - y; });
}
Tensor operator*(Tensor&& a, float b) {
  return scalar_op_in_place(std::move(a), b, operator*, [](float x, float y) { return x * y; });
}
Tensor operator/(Tensor&& a, float b) {
  return scalar_op_in_place(std::move(a), b, operator/, [](float x, float y) { return x / y; });
}

}  // namespace lockstep
