// Finite-difference gradient checks for every differentiable op: the tape's
// analytic gradient against central differences of a float64 reference of
// the forward op written in tests/support/reference.h. Shapes are random,
// including broadcasting and size-1 dimensions.
#include <gtest/gtest.h>

#include <random>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

// Random dims: rank in [min_rank, max_rank], each dim in [1, max_dim].
Dims random_dims(std::mt19937& rng, int min_rank, int max_rank, int max_dim) {
  std::uniform_int_distribution<int> rank_dist(min_rank, max_rank), dim_dist(1, max_dim);
  Dims d(static_cast<std::size_t>(rank_dist(rng)));
  for (auto& x : d) x = dim_dist(rng);
  return d;
}

// A shape that broadcasts against `a`: some dims set to 1, some leading dims dropped.
Dims broadcast_partner(const Dims& a, std::mt19937& rng) {
  std::bernoulli_distribution coin(0.4);
  Dims b = a;
  for (auto& x : b)
    if (coin(rng)) x = 1;
  std::uniform_int_distribution<std::size_t> drop(0, a.size());
  b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(drop(rng)));
  return b;
}

// Pairs of shapes to test a binary op on: equal, broadcast both ways, scalar.
std::vector<std::pair<Dims, Dims>> binary_cases(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::pair<Dims, Dims>> cases;
  for (int i = 0; i < 3; ++i) {
    const Dims a = random_dims(rng, 1, 4, 4);
    cases.push_back({a, a});
    cases.push_back({a, broadcast_partner(a, rng)});
    cases.push_back({broadcast_partner(a, rng), a});
  }
  cases.push_back({{3, 1}, {1, 4}});  // both operands broadcast
  cases.push_back({{2, 3}, {}});      // scalar operand
  return cases;
}

void check_binary(const std::string& name, Tensor (*op)(const Tensor&, const Tensor&),
                  const std::function<double(double, double)>& f, double lo = -1.0,
                  double hi = 1.0) {
  std::mt19937 rng(11);
  for (const auto& [da, db] : binary_cases(3)) {
    check_gradients(
        name + " " + Shape(da).to_string() + " x " + Shape(db).to_string(),
        [op](const std::vector<Tensor>& x) { return op(x[0], x[1]); },
        [f](const std::vector<Ref>& x) { return ref_binary(x[0], x[1], f); },
        {random_ref(da, rng, lo, hi), random_ref(db, rng, lo, hi)});
  }
}

void check_unary(const std::string& name, Tensor (*op)(const Tensor&),
                 const std::function<double(double)>& f, double lo = -2.0, double hi = 2.0) {
  std::mt19937 rng(13);
  // Small shapes run our loops; the large one (>= 2048 elements) runs oneDNN.
  for (const Dims& d : {Dims{}, Dims{5}, Dims{3, 1, 4}, Dims{2, 1100}}) {
    check_gradients(
        name + " " + Shape(d).to_string(), [op](const std::vector<Tensor>& x) { return op(x[0]); },
        [f](const std::vector<Ref>& x) { return ref_unary(x[0], f); },
        {random_ref(d, rng, lo, hi)});
  }
}

TEST(GradCheck, Add) {
  check_binary("add", add, [](double a, double b) { return a + b; });
}
TEST(GradCheck, Sub) {
  check_binary("sub", sub, [](double a, double b) { return a - b; });
}
TEST(GradCheck, Mul) {
  check_binary("mul", mul, [](double a, double b) { return a * b; });
}
TEST(GradCheck, Div) {
  check_binary(
      "div", div, [](double a, double b) { return a / b; }, 0.5, 2.0);
}
TEST(GradCheck, Pow) {
  check_binary(
      "pow", lockstep::pow, [](double a, double b) { return std::pow(a, b); }, 0.5, 2.0);
}
TEST(GradCheck, Maximum) {
  check_binary("maximum", maximum, [](double a, double b) { return a >= b ? a : b; });
}
TEST(GradCheck, Minimum) {
  check_binary("minimum", minimum, [](double a, double b) { return a <= b ? a : b; });
}

TEST(GradCheck, Neg) {
  check_unary("neg", neg, [](double x) { return -x; });
}
TEST(GradCheck, Exp) {
  check_unary("exp", lockstep::exp, [](double x) { return std::exp(x); });
}
TEST(GradCheck, Log) {
  check_unary(
      "log", lockstep::log, [](double x) { return std::log(x); }, 0.2, 3.0);
}
TEST(GradCheck, Log1p) {
  check_unary(
      "log1p", lockstep::log1p, [](double x) { return std::log1p(x); }, -0.5, 3.0);
}
TEST(GradCheck, Erf) {
  check_unary("erf", lockstep::erf, [](double x) { return std::erf(x); });
}
TEST(GradCheck, Sqrt) {
  check_unary(
      "sqrt", lockstep::sqrt, [](double x) { return std::sqrt(x); }, 0.2, 3.0);
}
TEST(GradCheck, Square) {
  check_unary("square", square, [](double x) { return x * x; });
}
TEST(GradCheck, Abs) {
  check_unary("abs", lockstep::abs, [](double x) { return std::fabs(x); });
}
TEST(GradCheck, Relu) {
  check_unary("relu", relu, [](double x) { return x > 0 ? x : 0.0; });
}
TEST(GradCheck, Sigmoid) {
  check_unary("sigmoid", sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
}
TEST(GradCheck, Tanh) {
  check_unary("tanh", lockstep::tanh, [](double x) { return std::tanh(x); });
}

TEST(GradCheck, Clip) {
  std::mt19937 rng(5);
  check_gradients(
      "clip", [](const std::vector<Tensor>& x) { return clip(x[0], -0.5f, 0.7f); },
      [](const std::vector<Ref>& x) {
        return ref_unary(x[0], [](double v) { return std::min(0.7, std::max(-0.5, v)); });
      },
      {random_ref({4, 6}, rng)});
}

// Keras's relu arguments: the cap, the leaky slope and the threshold, alone
// and together (inputs in [-1, 1], away from the kinks by more than the step).
TEST(GradCheck, ReluWithKerasArguments) {
  std::mt19937 rng(15);
  struct Case {
    const char* name;
    ReluOptions options;
  };
  for (const Case& c :
       {Case{"relu6-like cap", {.max_value = 0.6f}}, Case{"leaky", {.negative_slope = 0.2f}},
        Case{"threshold", {.threshold = 0.3f}},
        Case{"all three", {.negative_slope = 0.1f, .max_value = 0.7f, .threshold = 0.2f}}}) {
    const double slope = c.options.negative_slope, threshold = c.options.threshold;
    const double cap = c.options.max_value ? *c.options.max_value : 1e300;
    check_gradients(
        c.name, [o = c.options](const std::vector<Tensor>& x) { return relu(x[0], o); },
        [=](const std::vector<Ref>& x) {
          return ref_unary(x[0], [=](double v) {
            return v > threshold ? std::min(v, cap) : slope * (v - threshold);
          });
        },
        {random_ref({5, 7}, rng)});
  }
  EXPECT_THROW(relu(Tensor::ones({2}), {.negative_slope = -1.0f}), ValueError);
  EXPECT_THROW(relu(Tensor::ones({2}), {.max_value = -1.0f}), ValueError);
}

// Resizing's gradient: image_gradcheck_test.cc (image::resize).

TEST(GradCheck, Where) {
  std::mt19937 rng(6);
  const Ref c = random_ref({3, 4}, rng);
  Tensor cond = greater(to_tensor(c), Tensor::scalar(0.0f));
  check_gradients(
      "where", [cond](const std::vector<Tensor>& x) { return where(cond, x[0], x[1]); },
      [c](const std::vector<Ref>& x) {
        Ref out({3, 4});
        for (std::int64_t i = 0; i < 12; ++i) {
          out[i] = c[i] > 0 ? x[0][i] : x[1][i % 4];
        }
        return out;
      },
      {random_ref({3, 4}, rng), random_ref({4}, rng)});
}

void check_reduction(const std::string& name, Tensor (*op)(const Tensor&, const ReduceOptions&),
                     const std::function<double(double, double)>& f, double init, bool is_mean) {
  std::mt19937 rng(17);
  const Dims d{3, 4, 5};
  const std::vector<std::vector<int>> axes_cases{{}, {0}, {1}, {-1}, {0, 2}, {1, 2}, {0, 1, 2}};
  for (const auto& axes : axes_cases) {
    for (bool keepdims : {false, true}) {
      std::string label = name + " axes=[";
      for (int a : axes) label += std::to_string(a) + ",";
      label += "] keepdims=" + std::to_string(keepdims);
      check_gradients(
          label,
          [op, axes, keepdims](const std::vector<Tensor>& x) {
            return op(x[0], {.axes = axes, .keepdims = keepdims});
          },
          [&, axes, keepdims](const std::vector<Ref>& x) {
            Ref r = ref_reduce(x[0], axes, keepdims, f, init);
            if (is_mean) {
              const double n = static_cast<double>(x[0].size()) /
                               static_cast<double>(std::max<std::int64_t>(r.size(), 1));
              for (auto& v : r.v) v /= n;
            }
            return r;
          },
          {random_ref(d, rng)});
    }
  }
}

TEST(GradCheck, Sum) {
  check_reduction(
      "sum", sum, [](double a, double b) { return a + b; }, 0, false);
}
TEST(GradCheck, Mean) {
  check_reduction(
      "mean", mean, [](double a, double b) { return a + b; }, 0, true);
}
TEST(GradCheck, Max) {
  check_reduction(
      "max", lockstep::max, [](double a, double b) { return std::max(a, b); }, -INFINITY, false);
}
TEST(GradCheck, Min) {
  check_reduction(
      "min", lockstep::min, [](double a, double b) { return std::min(a, b); }, INFINITY, false);
}

TEST(GradCheck, Softmax) {
  std::mt19937 rng(19);
  for (int axis : {-1, 0, 1}) {
    for (bool log : {false, true}) {
      check_gradients(
          std::string(log ? "log_softmax" : "softmax") + " axis=" + std::to_string(axis),
          [axis, log](const std::vector<Tensor>& x) {
            return log ? log_softmax(x[0], axis) : softmax(x[0], axis);
          },
          [axis, log](const std::vector<Ref>& x) { return ref_softmax(x[0], axis, log); },
          {random_ref({3, 5, 2}, rng, -3, 3)});
    }
  }
}

TEST(GradCheck, Matmul) {
  std::mt19937 rng(23);
  const std::int64_t m = 5, k = 7, n = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const Dims da = ta ? Dims{k, m} : Dims{m, k};
      const Dims db = tb ? Dims{n, k} : Dims{k, n};
      check_gradients(
          "matmul ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
          [ta, tb](const std::vector<Tensor>& x) {
            return matmul(x[0], x[1], {.transpose_a = ta, .transpose_b = tb});
          },
          [ta, tb](const std::vector<Ref>& x) { return ref_matmul(x[0], x[1], ta, tb); },
          {random_ref(da, rng), random_ref(db, rng)});
      check_gradients(
          "matmul+bias ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
          [ta, tb](const std::vector<Tensor>& x) {
            return matmul(x[0], x[1], x[2], {.transpose_a = ta, .transpose_b = tb});
          },
          [ta, tb](const std::vector<Ref>& x) {
            return ref_binary(ref_matmul(x[0], x[1], ta, tb), x[2],
                              [](double a, double b) { return a + b; });
          },
          {random_ref(da, rng), random_ref(db, rng), random_ref({n}, rng)});
      check_gradients(
          "matmul+bias+relu ta=" + std::to_string(ta) + " tb=" + std::to_string(tb),
          [ta, tb](const std::vector<Tensor>& x) {
            return matmul(x[0], x[1], x[2], {.transpose_a = ta, .transpose_b = tb, .relu = true});
          },
          [ta, tb](const std::vector<Ref>& x) {
            Ref y = ref_binary(ref_matmul(x[0], x[1], ta, tb), x[2],
                               [](double a, double b) { return a + b; });
            for (std::int64_t i = 0; i < y.size(); ++i) y[i] = std::max(y[i], 0.0);
            return y;
          },
          {random_ref(da, rng), random_ref(db, rng), random_ref({n}, rng)});
    }
  }
}

// Batched matmul, with a per-batch b and with one b shared by the batch.
TEST(GradCheck, BatchedMatmul) {
  std::mt19937 rng(29);
  const std::int64_t batch = 3, m = 2, k = 4, n = 5;
  auto batched_ref = [=](const Ref& a, const Ref& b, bool shared) {
    Ref out({batch, m, n});
    for (std::int64_t t = 0; t < batch; ++t) {
      Ref at({m, k}), bt({k, n});
      for (std::int64_t i = 0; i < m * k; ++i) at[i] = a[t * m * k + i];
      for (std::int64_t i = 0; i < k * n; ++i) bt[i] = b[(shared ? 0 : t) * k * n + i];
      const Ref c = ref_matmul(at, bt, false, false);
      for (std::int64_t i = 0; i < m * n; ++i) out[t * m * n + i] = c[i];
    }
    return out;
  };
  for (bool shared : {false, true}) {
    check_gradients(
        shared ? "batched matmul, shared b" : "batched matmul",
        [](const std::vector<Tensor>& x) { return matmul(x[0], x[1]); },
        [=](const std::vector<Ref>& x) { return batched_ref(x[0], x[1], shared); },
        {random_ref({batch, m, k}, rng), random_ref(shared ? Dims{k, n} : Dims{batch, k, n}, rng)});
  }
}

TEST(GradCheck, ReshapeAndTranspose) {
  std::mt19937 rng(31);
  check_gradients(
      "reshape",
      [](const std::vector<Tensor>& x) {
        return reshape(x[0], {4, -1});
      },
      [](const std::vector<Ref>& x) {
        Ref r = x[0];
        r.dims = {4, 6};
        return r;
      },
      {random_ref({2, 3, 4}, rng)});
  const std::vector<int> perm{2, 0, 1};
  check_gradients(
      "transpose", [perm](const std::vector<Tensor>& x) { return transpose(x[0], perm); },
      [perm](const std::vector<Ref>& x) {
        const Ref& a = x[0];
        Ref out({a.dims[2], a.dims[0], a.dims[1]});
        for (std::int64_t i = 0; i < out.size(); ++i) {
          const Dims o = unravel(i, out.dims);
          out[i] = a[(o[1] * a.dims[1] + o[2]) * a.dims[2] + o[0]];
        }
        return out;
      },
      {random_ref({2, 3, 4}, rng)});
}

TEST(GradCheck, ConcatAndSlice) {
  std::mt19937 rng(37);
  check_gradients(
      "concat axis=1",
      [](const std::vector<Tensor>& x) {
        return concat({x[0], x[1]}, 1);
      },
      [](const std::vector<Ref>& x) {
        Ref out({2, 5, 2});
        for (std::int64_t i = 0; i < out.size(); ++i) {
          const Dims o = unravel(i, out.dims);
          out[i] = o[1] < 2 ? x[0][(o[0] * 2 + o[1]) * 2 + o[2]]
                            : x[1][(o[0] * 3 + o[1] - 2) * 2 + o[2]];
        }
        return out;
      },
      {random_ref({2, 2, 2}, rng), random_ref({2, 3, 2}, rng)});
  check_gradients(
      "slice",
      [](const std::vector<Tensor>& x) {
        return slice(x[0], {1, 0, 2}, {2, -1, 2});
      },
      [](const std::vector<Ref>& x) {
        Ref out({2, 3, 2});
        for (std::int64_t i = 0; i < out.size(); ++i) {
          const Dims o = unravel(i, out.dims);
          out[i] = x[0][((o[0] + 1) * 3 + o[1]) * 5 + o[2] + 2];
        }
        return out;
      },
      {random_ref({4, 3, 5}, rng)});
  check_gradients(
      "slice rows (view)",
      [](const std::vector<Tensor>& x) {
        return slice(x[0], {1, 0}, {2, -1});
      },
      [](const std::vector<Ref>& x) {
        Ref out({2, 3});
        for (std::int64_t i = 0; i < 6; ++i) out[i] = x[0][3 + i];
        return out;
      },
      {random_ref({4, 3}, rng)});
}

TEST(GradCheck, BroadcastToAndSumTo) {
  std::mt19937 rng(41);
  check_gradients(
      "broadcast_to",
      [](const std::vector<Tensor>& x) {
        return broadcast_to(x[0], {2, 3, 4});
      },
      [](const std::vector<Ref>& x) {
        return ref_binary(x[0], Ref({2, 3, 4}), [](double a, double) { return a; });
      },
      {random_ref({3, 1}, rng)});
  check_gradients(
      "sum_to",
      [](const std::vector<Tensor>& x) {
        return sum_to(x[0], {3, 1});
      },
      [](const std::vector<Ref>& x) {
        Ref r = ref_reduce(
            x[0], {0, 2}, true, [](double a, double b) { return a + b; }, 0);
        r.dims = {3, 1};
        return r;
      },
      {random_ref({2, 3, 4}, rng)});
  check_gradients(
      "cast", [](const std::vector<Tensor>& x) { return cast(x[0], DType::kFloat32); },
      [](const std::vector<Ref>& x) { return x[0]; }, {random_ref({5}, rng)});
}

TEST(GradCheck, GatherAndTakeAlongAxis) {
  std::mt19937 rng(43);
  const Tensor idx = Tensor::from_vector<std::int64_t>({2, 0, 2, 1}, {2, 2});
  check_gradients(
      "gather axis=1", [idx](const std::vector<Tensor>& x) { return gather(x[0], idx, 1); },
      [](const std::vector<Ref>& x) {
        const std::int64_t ids[4] = {2, 0, 2, 1};
        Ref out({2, 2, 2, 3});  // [2] + [2,2] + [3]
        for (std::int64_t i = 0; i < out.size(); ++i) {
          const Dims o = unravel(i, out.dims);
          out[i] = x[0][(o[0] * 4 + ids[o[1] * 2 + o[2]]) * 3 + o[3]];
        }
        return out;
      },
      {random_ref({2, 4, 3}, rng)});
  const Tensor labels = Tensor::from_vector<std::int32_t>({3, 0, 3}, {3, 1});
  check_gradients(
      "take_along_axis",
      [labels](const std::vector<Tensor>& x) { return take_along_axis(x[0], labels, 1); },
      [](const std::vector<Ref>& x) {
        Ref out({3, 1});
        out[0] = x[0][3];
        out[1] = x[0][4];
        out[2] = x[0][11];
        return out;
      },
      {random_ref({3, 4}, rng)});
}

// The loss of a small classifier, composed of many ops at once.
TEST(GradCheck, ComposedCrossEntropy) {
  std::mt19937 rng(47);
  const Tensor labels = Tensor::from_vector<std::int64_t>({1, 0, 2, 1}, {4, 1});
  check_gradients(
      "cross-entropy",
      [labels](const std::vector<Tensor>& x) {
        const Tensor logits = matmul(tanh(matmul(x[0], x[1], x[2])), x[3]);
        return mean(neg(take_along_axis(log_softmax(logits), labels, 1)));
      },
      [](const std::vector<Ref>& x) {
        Ref h = ref_binary(ref_matmul(x[0], x[1], false, false), x[2],
                           [](double a, double b) { return a + b; });
        h = ref_unary(h, [](double v) { return std::tanh(v); });
        const Ref lp = ref_softmax(ref_matmul(h, x[3], false, false), -1, true);
        const int lab[4] = {1, 0, 2, 1};
        Ref out(Dims{});
        for (int i = 0; i < 4; ++i) out[0] -= lp[i * 3 + lab[i]] / 4.0;
        return out;
      },
      {random_ref({4, 5}, rng), random_ref({5, 6}, rng), random_ref({6}, rng),
       random_ref({6, 3}, rng)});
}

}  // namespace
}  // namespace lockstep::testing
