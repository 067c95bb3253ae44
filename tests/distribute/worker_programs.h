// What the test programs that run as workers share (multi_worker_train.cc,
// ps_train.cc): their synthetic examples and how they write the weights they
// trained for the test to compare (multi_worker_support.h reads them).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/lockstep.h"

namespace lockstep::testing_support {

// `n` examples of 20 uniform features and a learnable rule: the class is
// which of four sums of five features is largest.
inline std::pair<Tensor, Tensor> four_sums(std::int64_t n) {
  Tensor x = random::uniform({n, 20}, {.seed = 11});
  const std::vector<float> xs = x.to_vector<float>();
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float best = -1;
    for (int c = 0; c < 4; ++c) {
      float s = 0;
      for (int j = 0; j < 5; ++j) s += xs[static_cast<std::size_t>(i * 20 + c * 5 + j)];
      if (s > best) {
        best = s;
        labels[static_cast<std::size_t>(i)] = c;
      }
    }
  }
  return {x, Tensor::from_vector(labels)};
}

// Each variable's values (replica 0's) as a count and floats, a zero count,
// then `logs` as key=value lines.
inline void write_weights(const std::vector<Variable>& vars, const std::string& path,
                          const std::vector<std::pair<std::string, double>>& logs = {}) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const Variable& v : vars) {
    const std::vector<float> values = v.replica_value(0).to_vector<float>();
    const std::uint64_t n = values.size();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(values.data()),
              static_cast<std::streamsize>(n * sizeof(float)));
  }
  const std::uint64_t end = 0;
  out.write(reinterpret_cast<const char*>(&end), sizeof end);
  for (const auto& [k, v] : logs) out << k << "=" << v << "\n";
}

}  // namespace lockstep::testing_support
