// Philox against its published known answers; distributions' moments;
// regeneration of any element from (seed, stream, index).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "lockstep/lockstep.h"

namespace lockstep::random {
namespace {

std::uint64_t pack(std::uint32_t lo, std::uint32_t hi) {
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32(0, 0, 0),
            (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  const std::uint64_t ones = ~std::uint64_t{0};
  EXPECT_EQ(philox4x32(ones, ones, ones),
            (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  // counter {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, key {0xa4093822, 0x299f31d0}
  EXPECT_EQ(philox4x32(pack(0xa4093822, 0x299f31d0), pack(0x13198a2e, 0x03707344),
                       pack(0x243f6a88, 0x85a308d3)),
            (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, SameKeySameValuesAnyElementRegenerable) {
  const Tensor a = uniform({1000}, {.seed = 3, .stream = 9});
  EXPECT_EQ(a.to_vector<float>(), uniform({1000}, {.seed = 3, .stream = 9}).to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), uniform({1000}, {.seed = 3, .stream = 10}).to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), uniform({1000}, {.seed = 4, .stream = 9}).to_vector<float>());
  // Elements 517.. drawn on their own equal the same elements of the whole draw:
  // a replica can draw the values of its own examples by global index.
  for (auto dist : {0, 1}) {
    const Tensor whole = dist ? normal({1000}, {.seed = 3, .stream = 9}) : a;
    const Tensor part = dist ? normal({100}, {.seed = 3, .stream = 9, .first_index = 517})
                             : uniform({100}, {.seed = 3, .stream = 9, .first_index = 517});
    const auto w = whole.to_vector<float>(), p = part.to_vector<float>();
    for (int i = 0; i < 100; ++i)
      ASSERT_EQ(p[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(517 + i)]);
  }
}

void expect_moments(const Tensor& t, double mean, double var, double tol) {
  const auto v = t.to_vector<double>();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  s /= static_cast<double>(v.size());
  EXPECT_NEAR(m, mean, tol);
  EXPECT_NEAR(s, var, tol * 2);
}

TEST(Random, DistributionsHaveTheirMoments) {
  const Tensor u = uniform({200000}, {.minval = -1.0f, .maxval = 3.0f, .seed = 1});
  for (float x : u.to_vector<float>()) ASSERT_TRUE(x >= -1.0f && x < 3.0f);
  expect_moments(u, 1.0, 16.0 / 12.0, 0.02);
  expect_moments(normal({200000}, {.mean = 2.0f, .stddev = 0.5f, .seed = 2}), 2.0, 0.25, 0.01);
  const Tensor tn = truncated_normal({200000}, {.seed = 5});
  for (float x : tn.to_vector<float>()) ASSERT_LE(std::fabs(x), 2.0f);
  // Variance of a standard normal truncated to [-2, 2]: 0.7737.
  expect_moments(tn, 0.0, 0.7737, 0.01);
}

TEST(Random, GeneratorStateIsSeedAndStream) {
  Generator g(42);
  const Tensor first = g.normal({10});
  const Tensor second = g.normal({10});
  EXPECT_NE(first.to_vector<float>(), second.to_vector<float>());
  EXPECT_EQ(g.next_stream(), 2u);
  Generator resumed(g.seed(), 1);  // restored from a checkpoint after one draw
  EXPECT_EQ(resumed.normal({10}).to_vector<float>(), second.to_vector<float>());
}

// The guide's random validation hold-out: a permutation that a seed fixes.
TEST(Random, PermutationIsEveryIndexOnceAndTheSeedFixesIt) {
  const std::vector<std::int64_t> p = permutation(1000, 7).to_vector<std::int64_t>();
  std::vector<std::int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(permutation(1000, 7).to_vector<std::int64_t>(), p);
  EXPECT_NE(permutation(1000, 8).to_vector<std::int64_t>(), p);
  EXPECT_NE(permutation(1000, 7, 1).to_vector<std::int64_t>(), p);
  std::int64_t fixed_points = 0;
  for (std::int64_t i = 0; i < 1000; ++i) fixed_points += p[static_cast<std::size_t>(i)] == i;
  EXPECT_LT(fixed_points, 10);  // a shuffled order (expected 1), not the identity
  EXPECT_EQ(permutation(0, 1).numel(), 0);
  // shuffle gathers the rows in the same order.
  const Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {4, 2});
  const std::vector<std::int64_t> order = permutation(4, 3).to_vector<std::int64_t>();
  const std::vector<float> rows = shuffle(x, 3).to_vector<float>();
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(rows[2 * i], static_cast<float>(2 * order[i]));
    EXPECT_EQ(rows[2 * i + 1], static_cast<float>(2 * order[i] + 1));
  }
  EXPECT_THROW(shuffle(Tensor::scalar(1.0f), 1), ShapeError);
}

}  // namespace
}  // namespace lockstep::random
