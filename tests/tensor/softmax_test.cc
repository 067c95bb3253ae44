// softmax and log_softmax against a float64 oracle: every output within one
// float32 rounding of the true value (oneDNN's primitive, which they
// replaced, missed by up to ~14 ulps on saturated rows), on rows of every
// length, scale and layout; a log-softmax is never positive.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"

namespace lockstep {
namespace {

// The float64 values of log-softmax and softmax of one row.
void oracle(const std::vector<double>& x, std::vector<double>& log_out, std::vector<double>& prob) {
  double m = -std::numeric_limits<double>::infinity();
  std::size_t top = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] > m) m = x[top = i];
  }
  // log(1 + rest), not log(s): on a saturated row rest is ~1e-17, below
  // even long double's resolution next to 1.
  long double rest = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (i != top) rest += std::exp(static_cast<long double>(x[i] - m));
  }
  const long double lse = std::log1p(rest);
  log_out.resize(x.size());
  prob.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    log_out[i] = static_cast<double>(static_cast<long double>(x[i] - m) - lse);
    prob[i] = static_cast<double>(std::exp(static_cast<long double>(x[i] - m) - lse));
  }
}

// Distance in float32 ulps between `got` and the true value `want`. A true
// value below float32's smallest normal may come out as zero: kernels run
// with denormals flushed (tensor/parallel.h), as TensorFlow's do.
double ulps(float got, double want) {
  if (got == 0.0f && std::abs(want) < std::numeric_limits<float>::min()) return 0;
  const float rounded = static_cast<float>(want);
  const double ulp =
      std::nextafter(std::abs(rounded), std::numeric_limits<float>::infinity()) - std::abs(rounded);
  return std::abs(static_cast<double>(got) - want) / (ulp > 0 ? ulp : 1e-45);
}

struct Case {
  std::int64_t n;
  float scale;
  bool saturated;  // one logit far above the rest
};

TEST(Softmax, EveryOutputIsWithinOneRoundingOfFloat64) {
  std::mt19937 rng(7);
  double worst_log = 0, worst_prob = 0;
  for (const Case& c :
       {Case{1, 1, false}, Case{2, 1, false}, Case{3, 5, false}, Case{10, 1, false},
        Case{10, 10, false}, Case{10, 3, true}, Case{257, 1, false}, Case{1000, 30, false},
        Case{1000, 2, true}, Case{100, 300, false}}) {  // differences to −1000: exp's whole range
    const std::int64_t rows = 64;
    std::normal_distribution<float> normal(0.0f, c.scale);
    std::vector<float> x(static_cast<std::size_t>(rows * c.n));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t i = 0; i < c.n; ++i) x[static_cast<std::size_t>(r * c.n + i)] = normal(rng);
      if (c.saturated) x[static_cast<std::size_t>(r * c.n + r % c.n)] += 40.0f;
    }
    const Tensor t = Tensor::from_vector(x, Shape({rows, c.n}));
    const std::vector<float> ls = log_softmax(t, -1).to_vector<float>();
    const std::vector<float> sm = softmax(t, -1).to_vector<float>();
    for (std::int64_t r = 0; r < rows; ++r) {
      std::vector<double> row(x.begin() + r * c.n, x.begin() + (r + 1) * c.n), want_log, want_prob;
      oracle(row, want_log, want_prob);
      for (std::int64_t i = 0; i < c.n; ++i) {
        const auto k = static_cast<std::size_t>(r * c.n + i);
        worst_log = std::max(worst_log, ulps(ls[k], want_log[static_cast<std::size_t>(i)]));
        worst_prob = std::max(worst_prob, ulps(sm[k], want_prob[static_cast<std::size_t>(i)]));
        ASSERT_LE(ls[k], 0.0f) << "a log-softmax is never positive";
      }
    }
  }
  // One rounding is at most half an ulp; allow one.
  EXPECT_LE(worst_log, 1.0) << "log_softmax";
  EXPECT_LE(worst_prob, 1.0) << "softmax";
}

TEST(Softmax, AnyAxisGivesTheSameAsTheLastAxis) {
  const Tensor x = random::normal({3, 7, 5}, {.stddev = 4.0f, .seed = 3});
  for (int axis : {0, 1}) {
    // Moving the axis last, taking the softmax there and moving it back is
    // the same computation row by row: bitwise equal.
    std::vector<int> perm = {0, 1, 2};
    std::swap(perm[static_cast<std::size_t>(axis)], perm[2]);
    const Tensor moved = transpose(x, perm);
    EXPECT_EQ(transpose(log_softmax(moved, -1), perm).to_vector<float>(),
              log_softmax(x, axis).to_vector<float>())
        << "axis " << axis;
    EXPECT_EQ(transpose(softmax(moved, -1), perm).to_vector<float>(),
              softmax(x, axis).to_vector<float>())
        << "axis " << axis;
  }
}

TEST(Softmax, NonFiniteInputsGiveWhatFloat64Gives) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x =
      Tensor::from_vector<float>({0.0f, -inf, 1.0f, std::nanf(""), 2.0f, 3.0f}, Shape({2, 3}));
  const std::vector<float> ls = log_softmax(x, -1).to_vector<float>();
  EXPECT_EQ(ls[1], -inf);  // exp(-inf) = 0: a certain zero probability
  EXPECT_EQ(softmax(x, -1).to_vector<float>()[1], 0.0f);
  EXPECT_TRUE(std::isnan(ls[3]));  // a NaN in a row makes the row NaN
  EXPECT_TRUE(std::isnan(ls[5]));
}

}  // namespace
}  // namespace lockstep
