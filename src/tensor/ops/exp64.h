// exp(x) in float64 for x <= 0, inline and branch-free so that a loop over
// it vectorizes: the softmax's exponentials (softmax_ops.cc).
//
// libm's exp is a call per element that no loop vectorizes; on attention
// scores (batch 64 × 4 heads × 80 × 80 per step) it was a fifth of a
// transformer's training step here (perf, bench/workloads --workload
// transformer). This one reduces x = k·ln2 + r with |r| <= ln2/2 (ln2 in
// two parts, Cody and Waite), takes e^r from its Taylor polynomial to degree
// 13 (the first term left out is below 5e-18 of the result) and scales by
// 2^k through the exponent bits. tests/tensor/softmax_test.cc checks it
// against std::exp to a few float64 ulps over [-708, 0].
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace lockstep::detail {

// x <= 0. Below -708 (where e^x leaves float64's normal range, and a
// float32 softmax output is 0 long before) the result is e^-708.
inline double exp_nonpositive(double x) {
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln2's first 32 bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // the rest
  constexpr double kShifter = 6755399441055744.0;        // 1.5 · 2^52: rounds to an integer
  x = std::max(x, -708.0);
  const double shifted = x * kLog2e + kShifter;
  const double k = shifted - kShifter;  // round(x / ln2), in [-1022, 0]
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // The shifter's low bits hold k; 2^k is k + 1023 in the exponent field.
  const std::int64_t k_bits =
      std::bit_cast<std::int64_t>(shifted) - std::bit_cast<std::int64_t>(kShifter);
  return p * std::bit_cast<double>((k_bits + 1023) << 52);
}

}  // namespace lockstep::detail
