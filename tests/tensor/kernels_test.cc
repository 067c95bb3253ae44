// Every optimised kernel against the naive float64 reference on random
// inputs, including odd sizes, sizes that take the parallel paths and
// sizes that take the oneDNN paths.
#include <gtest/gtest.h>
#include <omp.h>

#include <random>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

TEST(Kernels, MatmulOddAndLargeShapesAllTransposes) {
  std::mt19937 rng(1);
  for (auto [m, k, n] :
       {std::tuple<int, int, int>{1, 1, 1}, {3, 5, 7}, {67, 129, 33}, {64, 784, 256}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Ref a = random_ref(ta ? Dims{k, m} : Dims{m, k}, rng);
        const Ref b = random_ref(tb ? Dims{n, k} : Dims{k, n}, rng);
        const Ref bias = random_ref({n}, rng);
        const Tensor got = matmul(to_tensor(a), to_tensor(b), to_tensor(bias),
                                  {.transpose_a = ta, .transpose_b = tb});
        const Ref want =
            ref_binary(ref_matmul(a, b, ta, tb), bias, [](double x, double y) { return x + y; });
        expect_close(
            want, got, 1e-4, 1e-4,
            "matmul " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n));
      }
    }
  }
}

TEST(Kernels, MatmulEmptyDimensions) {
  const Tensor a = Tensor::zeros({0, 3});
  EXPECT_EQ(matmul(a, Tensor::ones({3, 2})).shape(), (Shape{0, 2}));
  // K = 0: an empty sum, so the result is the bias alone.
  const Tensor c = matmul(Tensor::zeros({2, 0}), Tensor::zeros({0, 3}), Tensor::full({3}, 1.5));
  EXPECT_EQ(c.to_vector<float>(), std::vector<float>(6, 1.5f));
}

TEST(Kernels, SoftmaxLargeRowsMatchReference) {
  std::mt19937 rng(2);
  const Ref x = random_ref({33, 1001}, rng, -20, 20);
  expect_close(ref_softmax(x, -1, false), softmax(to_tensor(x)), 1e-6, 1e-4, "softmax");
  expect_close(ref_softmax(x, -1, true), log_softmax(to_tensor(x)), 1e-4, 1e-5, "log_softmax");
  // Extreme logits stay finite (log-sum-exp inside).
  const Tensor big = Tensor::from_vector<float>({1000.0f, -1000.0f, 0.0f}, {1, 3});
  for (float v : log_softmax(big).to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
}

TEST(Kernels, BinaryBroadcastLargeTakesParallelPathCorrectly) {
  std::mt19937 rng(3);
  // > kParallelThreshold elements, in shapes that split by rows and by one long row.
  for (auto [da, db] : {std::pair<Dims, Dims>{{300, 257}, {257}},
                        {{1, 100003}, {1, 100003}},
                        {{129, 1, 300}, {1, 77, 1}}}) {
    const Ref a = random_ref(da, rng), b = random_ref(db, rng);
    expect_close(ref_binary(a, b, [](double x, double y) { return x * y; }),
                 mul(to_tensor(a), to_tensor(b)), 1e-6, 1e-6, "mul");
    expect_close(ref_binary(a, b, [](double x, double y) { return x - y; }),
                 sub(to_tensor(a), to_tensor(b)), 1e-6, 1e-6, "sub");
  }
}

// `cast(images, f32) / 255.0f`: the temporary's buffer takes the result
// (one allocation instead of two), with the same values as the
// out-of-place op; tensors someone else holds are never written.
TEST(Kernels, ScalarArithmeticOnATemporaryReusesItsBufferAndOnlyThen) {
  random::Generator gen(5);
  const Tensor x = gen.uniform({100003});  // odd, above the parallel threshold
  Allocator& alloc = current_device().allocator();
  const std::vector<std::pair<Tensor (*)(Tensor&&, float), Tensor (*)(const Tensor&, float)>> ops =
      {{operator+, operator+ },
        {operator-, operator- }, {operator*, operator* }, {operator/, operator/ } };
  for (const auto& [in_place, out_of_place] : ops) {
    const Tensor expected = out_of_place(x, 3.0f);
    Tensor temporary = x.copy();
    const void* buffer = temporary.raw_data();
    const auto before = alloc.stats().allocations;
    const Tensor got = in_place(std::move(temporary), 3.0f);
    EXPECT_EQ(alloc.stats().allocations, before);  // no new buffer
    EXPECT_EQ(got.raw_data(), buffer);
    EXPECT_EQ(got.to_vector<float>(), expected.to_vector<float>());  // bitwise
  }
  // A temporary that shares its buffer (a view is alive) is not written.
  Tensor shared = x.copy();
  const Tensor view = shared.view_rows(0, 10);
  const std::vector<float> view_before = view.to_vector<float>();
  const Tensor r = std::move(shared) / 2.0f;
  EXPECT_EQ(view.to_vector<float>(), view_before);
  EXPECT_NE(r.raw_data(), view.raw_data());
  // (A temporary a tape records is not written either: tests/autodiff.)
}

TEST(Kernels, UnaryOneDnnPathMatchesLoopPath) {
  std::mt19937 rng(4);
  const Ref x = random_ref({5000}, rng, 0.1, 4.0);  // >= 2048: oneDNN eltwise
  struct Case {
    const char* name;
    Tensor (*op)(const Tensor&);
    double (*f)(double);
  };
  const Case cases[] = {
      {"exp", lockstep::exp, [](double v) { return std::exp(v); }},
      {"log", lockstep::log, [](double v) { return std::log(v); }},
      {"sqrt", lockstep::sqrt, [](double v) { return std::sqrt(v); }},
      {"tanh", lockstep::tanh, [](double v) { return std::tanh(v); }},
      {"sigmoid", sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }},
  };
  for (const Case& c : cases) {
    const Ref want = ref_unary(x, c.f);
    // oneDNN's JIT polynomial approximations are accurate to ~1e-5 relative
    // (its log is the loosest); libm in our loop to ~1 ulp.
    expect_close(want, c.op(to_tensor(x)), 5e-6, 2e-5, std::string(c.name) + " oneDNN");
    // The same values through the small-tensor loop, one slice at a time.
    const Tensor small = c.op(to_tensor(x).view_rows(0, 100));
    Ref want_small({100});
    for (int i = 0; i < 100; ++i) want_small[i] = want[i];
    expect_close(want_small, small, 1e-6, 2e-6, std::string(c.name) + " loop");
  }
}

TEST(Kernels, ReductionsLargeAndStrided) {
  std::mt19937 rng(5);
  const Ref x = random_ref({7, 40001}, rng);
  auto plus = [](double a, double b) { return a + b; };
  expect_close(ref_reduce(x, {}, false, plus, 0), sum(to_tensor(x)), 1e-2, 1e-5, "sum all");
  expect_close(ref_reduce(x, {1}, false, plus, 0), sum(to_tensor(x), {.axes = {1}}), 1e-3, 1e-5,
               "sum rows");
  expect_close(ref_reduce(x, {0}, true, plus, 0),
               sum(to_tensor(x), {.axes = {0}, .keepdims = true}), 1e-5, 1e-5, "sum cols");
  auto mx = [](double a, double b) { return std::max(a, b); };
  expect_close(ref_reduce(x, {0}, false, mx, -INFINITY), lockstep::max(to_tensor(x), {.axes = {0}}),
               0, 0, "max cols");
  const Ref y = random_ref({4, 5, 6, 3}, rng);
  expect_close(ref_reduce(y, {0, 2}, false, plus, 0), sum(to_tensor(y), {.axes = {2, 0}}), 1e-5,
               1e-5, "sum axes 0,2");
  auto mn = [](double a, double b) { return std::min(a, b); };
  expect_close(ref_reduce(y, {1, 3}, true, mn, INFINITY),
               lockstep::min(to_tensor(y), {.axes = {1, -1}, .keepdims = true}), 0, 0,
               "min axes 1,3");
}

TEST(Kernels, ReductionsIgnoreThreadCount) {
  std::mt19937 rng(6);
  const Tensor x = to_tensor(random_ref({1 << 20}, rng));
  const float all_threads = sum(x).item<float>();
  omp_set_num_threads(1);
  const float one_thread = sum(x).item<float>();
  omp_set_num_threads(omp_get_num_procs());
  EXPECT_EQ(all_threads, one_thread);  // bitwise: the order depends on the shape only
}

TEST(Kernels, IntegerArithmeticAndReductions) {
  const Tensor a = Tensor::from_vector<std::int64_t>({1, -2, 3, 4, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector<std::int64_t>({10, 20, 30});
  EXPECT_EQ(add(a, b).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{11, 18, 33, 14, 25, 36}));
  EXPECT_EQ(sum(a, {.axes = {0}}).to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 3, 9}));
  EXPECT_EQ(lockstep::abs(a).to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(argmax(a, 1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(argmax(a, 0).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 1, 1}));
}

TEST(Kernels, ArgmaxTakesFirstOfTies) {
  const Tensor x = Tensor::from_vector<float>({1, 3, 3, 0, 0, 0}, {2, 3});
  EXPECT_EQ(argmax(x).to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 0}));
}

TEST(Kernels, ComparisonsWhereAndClip) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const Tensor b = Tensor::from_vector<float>({2, 2});
  EXPECT_EQ(less(a, b).to_vector<int>(), (std::vector<int>{1, 0, 0, 0}));
  EXPECT_EQ(equal(a, b).to_vector<int>(), (std::vector<int>{0, 1, 0, 0}));
  EXPECT_EQ(greater_equal(a, b).to_vector<int>(), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(not_equal(a, b).to_vector<int>(), (std::vector<int>{1, 0, 1, 1}));
  EXPECT_EQ(where(greater(a, b), a, Tensor::scalar(-1.0f)).to_vector<float>(),
            (std::vector<float>{-1, -1, 3, 4}));
  EXPECT_EQ(clip(a, 1.5f, 3.5f).to_vector<float>(), (std::vector<float>{1.5f, 2, 3, 3.5f}));
}

TEST(Kernels, TransposeConcatSliceLarge) {
  std::mt19937 rng(7);
  const Ref x = random_ref({37, 3, 129}, rng);
  const Tensor t = transpose(to_tensor(x), {2, 0, 1});
  ASSERT_EQ(t.shape(), (Shape{129, 37, 3}));
  const std::vector<float> got = t.to_vector<float>();
  for (std::int64_t i = 0; i < x.size(); ++i) {
    const Dims o = unravel(i, {129, 37, 3});
    ASSERT_EQ(static_cast<double>(got[static_cast<std::size_t>(i)]),
              x[(o[1] * 3 + o[2]) * 129 + o[0]]);
  }
  const Tensor c = concat({to_tensor(x), to_tensor(x)}, -1);
  EXPECT_EQ(c.shape(), (Shape{37, 3, 258}));
  const Tensor back = slice(c, {0, 0, 129}, {-1, -1, -1});
  EXPECT_EQ(back.to_vector<float>(), to_tensor(x).to_vector<float>());
  EXPECT_EQ(transpose(Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})).to_vector<float>(),
            (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

TEST(Kernels, GatherTakeAlongAxisOneHot) {
  const Tensor params = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {3, 2});
  const Tensor idx = Tensor::from_vector<std::int32_t>({2, 0, 2});
  EXPECT_EQ(gather(params, idx).to_vector<float>(), (std::vector<float>{4, 5, 0, 1, 4, 5}));
  EXPECT_EQ(gather(params, idx).shape(), (Shape{3, 2}));
  const Tensor labels = Tensor::from_vector<std::int64_t>({1, 0, 1}, {3, 1});
  EXPECT_EQ(take_along_axis(params, labels, 1).to_vector<float>(), (std::vector<float>{1, 2, 5}));
  const Tensor oh =
      one_hot(Tensor::from_vector<std::int64_t>({2, 0}), 3, {.on_value = 0.9f, .off_value = 0.05f});
  EXPECT_EQ(oh.shape(), (Shape{2, 3}));
  EXPECT_EQ(oh.to_vector<float>(), (std::vector<float>{0.05f, 0.05f, 0.9f, 0.9f, 0.05f, 0.05f}));
}

TEST(Kernels, ReshapeIsAZeroCopyView) {
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor r = reshape(x, {3, -1});
  EXPECT_EQ(r.shape(), (Shape{3, 2}));
  EXPECT_EQ(r.raw_data(), x.raw_data());
  EXPECT_EQ(slice(x, {1, 0}, {1, 3}).raw_data(), x.data<float>() + 3);  // row slice: a view
}

}  // namespace
}  // namespace lockstep::testing
