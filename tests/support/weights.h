// Comparing models' weights in tests: bitwise, or within a relative bound.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/train/model.h"

namespace lockstep::testing_support {

// Every weight's values (replica 0's copy), in the model's order.
inline std::vector<std::vector<float>> weights(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.impl()->weights())
    out.push_back(v.replica_value(0).to_vector<float>());
  return out;
}

inline void expect_close(const std::vector<std::vector<float>>& a,
                         const std::vector<std::vector<float>>& b, double rel,
                         const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what;
    for (std::size_t j = 0; j < a[i].size(); ++j)
      ASSERT_NEAR(a[i][j], b[i][j], rel * std::max(1.0f, std::abs(a[i][j])))
          << what << ": weight " << i << " element " << j;
  }
}

inline void expect_bitwise(const std::vector<std::vector<float>>& a,
                           const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what;
    ASSERT_EQ(0, std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)))
        << what << ": weight " << i << " differs";
  }
}

}  // namespace lockstep::testing_support
