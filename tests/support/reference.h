// Test oracle: a naive float64 n-d array and reference forward ops written
// independently of the kernels under test, plus the finite-difference
// gradient checker that every differentiable op goes through.
//
// Nothing here calls the library's kernels: conversions read and write the
// tensors' raw buffers.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing {

using Dims = std::vector<std::int64_t>;

struct Ref {
  Dims dims;
  std::vector<double> v;

  Ref() = default;
  explicit Ref(Dims d, double fill = 0.0)
      : dims(std::move(d)), v(static_cast<std::size_t>(count(dims)), fill) {}

  static std::int64_t count(const Dims& d) {
    std::int64_t n = 1;
    for (auto x : d) n *= x;
    return n;
  }
  std::int64_t size() const { return static_cast<std::int64_t>(v.size()); }
  int rank() const { return static_cast<int>(dims.size()); }
  double& operator[](std::int64_t i) { return v[static_cast<std::size_t>(i)]; }
  double operator[](std::int64_t i) const { return v[static_cast<std::size_t>(i)]; }
};

inline Dims strides_of(const Dims& d) {
  Dims s(d.size(), 1);
  for (int i = static_cast<int>(d.size()) - 2; i >= 0; --i)
    s[static_cast<std::size_t>(i)] =
        s[static_cast<std::size_t>(i) + 1] * d[static_cast<std::size_t>(i) + 1];
  return s;
}

// Multi-index of flat position `flat` in `d`.
inline Dims unravel(std::int64_t flat, const Dims& d) {
  Dims idx(d.size(), 0);
  for (int i = static_cast<int>(d.size()) - 1; i >= 0; --i) {
    const auto u = static_cast<std::size_t>(i);
    idx[u] = d[u] ? flat % d[u] : 0;
    flat = d[u] ? flat / d[u] : 0;
  }
  return idx;
}

inline Ref to_ref(const Tensor& t) {
  Ref r(t.shape().to_vector());
  const float* p = static_cast<const float*>(t.raw_data());
  for (std::int64_t i = 0; i < r.size(); ++i) r[i] = static_cast<double>(p[i]);
  return r;
}

inline Tensor to_tensor(const Ref& r) {
  Tensor t = Tensor::empty(Shape(r.dims));
  float* p = static_cast<float*>(t.raw_data());
  for (std::int64_t i = 0; i < r.size(); ++i) p[i] = static_cast<float>(r[i]);
  return t;
}

inline Ref random_ref(const Dims& d, std::mt19937& rng, double lo = -1.0, double hi = 1.0) {
  Ref r(d);
  std::uniform_real_distribution<double> dist(lo, hi);
  // Round through float so the float and double inputs are the same numbers.
  for (auto& x : r.v) x = static_cast<double>(static_cast<float>(dist(rng)));
  return r;
}

// NumPy broadcasting in the reference.
inline Dims broadcast_dims(const Dims& a, const Dims& b) {
  const std::size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Flat index in `src` (dims broadcast into `out`) of the element at `idx`.
inline std::int64_t broadcast_index(const Dims& idx, const Dims& src) {
  const std::size_t off = idx.size() - src.size();
  const Dims s = strides_of(src);
  std::int64_t flat = 0;
  for (std::size_t i = 0; i < src.size(); ++i) flat += (src[i] == 1 ? 0 : idx[i + off]) * s[i];
  return flat;
}

inline Ref ref_binary(const Ref& a, const Ref& b, const std::function<double(double, double)>& f) {
  Ref out(broadcast_dims(a.dims, b.dims));
  for (std::int64_t i = 0; i < out.size(); ++i) {
    const Dims idx = unravel(i, out.dims);
    out[i] = f(a[broadcast_index(idx, a.dims)], b[broadcast_index(idx, b.dims)]);
  }
  return out;
}

inline Ref ref_unary(const Ref& a, const std::function<double(double)>& f) {
  Ref out(a.dims);
  for (std::int64_t i = 0; i < a.size(); ++i) out[i] = f(a[i]);
  return out;
}

// Reduction over sorted axes with keepdims, by a fold starting at `init`.
inline Ref ref_reduce(const Ref& a, std::vector<int> axes, bool keepdims,
                      const std::function<double(double, double)>& f, double init) {
  if (axes.empty())
    for (int i = 0; i < a.rank(); ++i) axes.push_back(i);
  for (auto& ax : axes)
    if (ax < 0) ax += a.rank();
  Dims kd = a.dims;
  for (int ax : axes) kd[static_cast<std::size_t>(ax)] = 1;
  Ref out(kd, init);
  for (std::int64_t i = 0; i < a.size(); ++i) {
    Dims idx = unravel(i, a.dims);
    for (int ax : axes) idx[static_cast<std::size_t>(ax)] = 0;
    std::int64_t o = 0;
    const Dims s = strides_of(kd);
    for (std::size_t d = 0; d < idx.size(); ++d) o += idx[d] * s[d];
    out[o] = f(out[o], a[i]);
  }
  if (!keepdims) {
    Dims dropped;
    for (int d = 0; d < a.rank(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end())
        dropped.push_back(a.dims[static_cast<std::size_t>(d)]);
    }
    out.dims = dropped;
  }
  return out;
}

inline Ref ref_matmul(const Ref& a, const Ref& b, bool ta, bool tb) {
  // rank 2 only (batched cases compose from it in the tests)
  const std::int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  const std::int64_t n = tb ? b.dims[0] : b.dims[1];
  Ref out({m, n});
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += av * bv;
      }
      out[i * n + j] = acc;
    }
  return out;
}

// Softmax (or log-softmax) along `axis`.
inline Ref ref_softmax(const Ref& x, int axis, bool log) {
  if (axis < 0) axis += x.rank();
  std::int64_t outer = 1, n = x.dims[static_cast<std::size_t>(axis)], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.dims[static_cast<std::size_t>(i)];
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x.dims[static_cast<std::size_t>(i)];
  Ref out(x.dims);
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t in = 0; in < inner; ++in) {
      double mx = -INFINITY;
      for (std::int64_t r = 0; r < n; ++r) mx = std::max(mx, x[(o * n + r) * inner + in]);
      double s = 0;
      for (std::int64_t r = 0; r < n; ++r) s += std::exp(x[(o * n + r) * inner + in] - mx);
      for (std::int64_t r = 0; r < n; ++r) {
        const double z = x[(o * n + r) * inner + in] - mx;
        out[(o * n + r) * inner + in] = log ? z - std::log(s) : std::exp(z) / s;
      }
    }
  return out;
}

inline void expect_close(const Ref& expected, const Tensor& actual, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(Shape(expected.dims), actual.shape()) << what;
  const std::vector<double> got = actual.to_vector<double>();
  int reported = 0;
  for (std::int64_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i], g = got[static_cast<std::size_t>(i)];
    if (!(std::fabs(e - g) <= atol + rtol * std::fabs(e)) && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " expected " << e << ", got " << g;
    }
  }
}

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;
using RefFn = std::function<Ref(const std::vector<Ref>&)>;

// Checks forward values against `ref` and the tape's gradients against
// central finite differences of the float64 reference, for the scalar loss
// L = sum(op(x) * w) with random weights w (so no gradient is trivially 1).
inline void check_gradients(const std::string& name, const TensorFn& op, const RefFn& ref,
                            const std::vector<Ref>& inputs, std::uint32_t seed = 7,
                            double atol = 2e-4, double rtol = 2e-3) {
  SCOPED_TRACE(name);
  std::mt19937 rng(seed);
  std::vector<Tensor> xs;
  for (const Ref& r : inputs) xs.push_back(to_tensor(r));
  const Ref expected = ref(inputs);
  const Ref w = random_ref(expected.dims, rng, 0.5, 1.5);
  std::vector<Tensor> analytic;
  {
    GradientTape tape;
    for (const Tensor& x : xs) tape.watch(x);
    const Tensor y = op(xs);
    expect_close(expected, y, 1e-5, 1e-4, name + " forward");
    const Tensor loss = sum(mul(y, to_tensor(w)));
    analytic = tape.gradient(loss, xs, UnconnectedGradients::kZero);
  }
  auto loss_ref = [&](const std::vector<Ref>& in) {
    const Ref y = ref(in);
    double s = 0;
    for (std::int64_t i = 0; i < y.size(); ++i) s += y[i] * w[i];
    return s;
  };
  const double h = 1e-6;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    std::vector<Ref> in = inputs;
    Ref numeric(inputs[k].dims);
    for (std::int64_t i = 0; i < inputs[k].size(); ++i) {
      const double x0 = in[k][i];
      in[k][i] = x0 + h;
      const double up = loss_ref(in);
      in[k][i] = x0 - h;
      const double down = loss_ref(in);
      in[k][i] = x0;
      numeric[i] = (up - down) / (2 * h);
    }
    expect_close(numeric, analytic[k], atol, rtol, name + " d/dinput" + std::to_string(k));
  }
}

}  // namespace lockstep::testing
