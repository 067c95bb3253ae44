// Initializers (nn/initializers.h): each draws what its formula says (the
// variance of the VarianceScaling family for each mode and distribution,
// the bounds of the uniform and truncated ones, orthonormal rows or
// columns, the identity), the same values for the same seed, and is made
// back from its name and arguments; what it does not take is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"

namespace lockstep::testing {
namespace {

struct Stats {
  double mean = 0, variance = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  const std::vector<float> v = t.to_vector<float>();
  Stats s{.min = v[0], .max = v[0]};
  for (float x : v) {
    s.mean += x;
    s.min = std::min<double>(s.min, x);
    s.max = std::max<double>(s.max, x);
  }
  s.mean /= static_cast<double>(v.size());
  for (float x : v) s.variance += (x - s.mean) * (x - s.mean);
  s.variance /= static_cast<double>(v.size());
  return s;
}

// A [400, 100] kernel: fan_in 400, fan_out 100, fan_avg 250; 40,000 draws
// put the sample variance within 3% of its value.
TEST(Initializers, VarianceScalingDrawsScaleOverTheFanForEachModeAndDistribution) {
  const Shape shape{400, 100};
  const std::map<std::string, double> fans{{"fan_in", 400}, {"fan_out", 100}, {"fan_avg", 250}};
  for (const auto& [mode, n] : fans) {
    for (const char* distribution : {"truncated_normal", "untruncated_normal", "uniform"}) {
      SCOPED_TRACE(mode + " " + distribution);
      const Initializer init = initializers::VarianceScaling(2.0, mode, distribution, 5);
      const Stats s = stats_of(init(shape));
      const double variance = 2.0 / n;
      EXPECT_NEAR(s.variance, variance, 0.03 * variance);
      EXPECT_NEAR(s.mean, 0.0, 0.03 * std::sqrt(variance));
      if (std::string(distribution) == "uniform") {
        EXPECT_LE(std::max(-s.min, s.max), std::sqrt(3.0 * variance));
      } else if (std::string(distribution) == "truncated_normal") {
        // Truncated at 2 standard deviations of the untruncated normal.
        EXPECT_LE(std::max(-s.min, s.max), 2.0 * std::sqrt(variance) / 0.87962566103423978);
      } else {
        EXPECT_GT(std::max(-s.min, s.max), 2.0 * std::sqrt(variance) / 0.87962566103423978);
      }
    }
  }
  EXPECT_THROW(initializers::VarianceScaling(1.0, "fan_sum"), ValueError);
  EXPECT_THROW(initializers::VarianceScaling(1.0, "fan_in", "cauchy"), ValueError);
  EXPECT_THROW(initializers::VarianceScaling(0.0), ValueError);
}

TEST(Initializers, TheNamedFamilyMembersAreTheirVarianceScaling) {
  const Shape shape{300, 200};  // fan_in 300, fan_avg 250
  const std::vector<std::pair<Initializer, double>> cases{
      {initializers::GlorotUniform(1), 1.0 / 250}, {initializers::GlorotNormal(1), 1.0 / 250},
      {initializers::HeNormal(1), 2.0 / 300},      {initializers::HeUniform(1), 2.0 / 300},
      {initializers::LecunNormal(1), 1.0 / 300},   {initializers::LecunUniform(1), 1.0 / 300}};
  for (const auto& [init, variance] : cases) {
    EXPECT_NEAR(stats_of(init(shape)).variance, variance, 0.03 * variance) << init.name();
  }
  const Stats lecun = stats_of(initializers::LecunUniform(2)(shape));
  EXPECT_LE(std::max(-lecun.min, lecun.max), std::sqrt(3.0 / 300));
}

// Tall: orthonormal columns; wide: orthonormal rows; a convolution kernel
// [3, 3, 4, 8]: the 36 x 8 matrix of its leading axes has orthonormal
// columns; all times the gain.
TEST(Initializers, OrthogonalGivesOrthonormalRowsOrColumnsTimesTheGain) {
  auto gram = [](const std::vector<float>& w, std::int64_t rows, std::int64_t cols, bool by_cols) {
    const std::int64_t n = by_cols ? cols : rows, len = by_cols ? rows : cols;
    std::vector<double> g(static_cast<std::size_t>(n * n));
    for (std::int64_t a = 0; a < n; ++a) {
      for (std::int64_t b = 0; b < n; ++b) {
        double dot = 0;
        for (std::int64_t k = 0; k < len; ++k) {
          const auto ia = static_cast<std::size_t>(by_cols ? k * cols + a : a * cols + k);
          const auto ib = static_cast<std::size_t>(by_cols ? k * cols + b : b * cols + k);
          dot += static_cast<double>(w[ia]) * w[ib];
        }
        g[static_cast<std::size_t>(a * n + b)] = dot;
      }
    }
    return std::make_pair(g, n);
  };
  struct Case {
    Shape shape;
    std::int64_t rows, cols;
  };
  for (const Case& c : {Case{{50, 20}, 50, 20}, Case{{20, 50}, 20, 50}, Case{{3, 3, 4, 8}, 36, 8},
                        Case{{16, 16}, 16, 16}}) {
    SCOPED_TRACE(c.shape.to_string());
    const Tensor w = initializers::Orthogonal(1.5, 3)(c.shape);
    ASSERT_EQ(w.shape(), c.shape);
    const auto [g, n] = gram(w.to_vector<float>(), c.rows, c.cols, c.rows >= c.cols);
    for (std::int64_t a = 0; a < n; ++a) {
      for (std::int64_t b = 0; b < n; ++b)
        EXPECT_NEAR(g[static_cast<std::size_t>(a * n + b)], a == b ? 2.25 : 0.0, 1e-5);
    }
  }
  EXPECT_EQ(initializers::Orthogonal(1.0, 9)({6, 4}).to_vector<float>(),
            initializers::Orthogonal(1.0, 9)({6, 4}).to_vector<float>())
      << "a seed gives the same matrix";
  EXPECT_THROW(initializers::Orthogonal()({5}), ShapeError);
}

TEST(Initializers, IdentityIsTheGainOnTheDiagonalOf2dShapesOnly) {
  EXPECT_EQ(initializers::Identity(0.5)({2, 3}).to_vector<float>(),
            (std::vector<float>{0.5f, 0, 0, 0, 0.5f, 0}));
  EXPECT_THROW(initializers::Identity()({2, 2, 2}), ShapeError);
}

// Each initializer is its name and arguments: from_config(name(), args())
// makes the same one (seeded draws equal), and an argument it does not
// take, or of the wrong type, is refused naming it.
TEST(Initializers, MadeBackFromTheirNameAndArguments) {
  for (const Initializer& init :
       {initializers::VarianceScaling(0.5, "fan_out", "uniform"), initializers::Orthogonal(2.0),
        initializers::Identity(0.25), initializers::RandomNormal(0.1f, 0.3f),
        initializers::RandomUniform(-1.0f, 2.0f), initializers::TruncatedNormal(0.0f, 0.02f),
        initializers::Constant(0.7f), initializers::LecunUniform(), initializers::Zeros()}) {
    const Initializer back = initializers::from_config(init.name(), init.args());
    EXPECT_EQ(back.name(), init.name());
    EXPECT_EQ(back.args(), init.args()) << init.name();
  }
  EXPECT_EQ(initializers::Constant(0.7f).args(),
            (Initializer::Args{{"value", static_cast<double>(0.7f)}}));
  try {
    initializers::from_config("orthogonal", {{"gian", 2.0}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'orthogonal' has no argument 'gian' (it takes gain)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(initializers::from_config("variance_scaling", {{"mode", 2.0}}), ValueError);
  try {
    initializers::get("glorot_unifrom");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'glorot_uniform'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
