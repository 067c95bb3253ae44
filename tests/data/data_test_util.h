// Helpers shared by the data tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data::testing {

// Component 0 of every element, which must be an int64 scalar.
inline std::vector<std::int64_t> scalars(Iterator& it, std::int64_t limit = -1) {
  std::vector<std::int64_t> out;
  while (limit < 0 || static_cast<std::int64_t>(out.size()) < limit) {
    auto e = it.next();
    if (!e) break;
    out.push_back((*e)[0].item<std::int64_t>());
  }
  return out;
}

inline std::vector<std::int64_t> scalars(const Dataset& ds, std::uint64_t epoch = 0) {
  Iterator it = ds.make_iterator({.epoch = epoch});
  return scalars(it);
}

inline std::vector<std::int64_t> iota(std::int64_t n, std::int64_t start = 0) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(start + i);
  return v;
}

// Runs `fn` and expects an exception of type E whose message contains every
// string in `parts`.
template <typename E, typename F>
void expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nmissing: " << p;
  }
}

}  // namespace lockstep::data::testing
