// parallel_for: an elementwise loop over the calling thread's intra-op
// threads, as the op kernels run theirs.
//
// For loops outside the op library that must run like a kernel (the
// optimizer's update rules): split across the calling thread's OpenMP team
// (its device's cores) when the work is large enough, serial otherwise, and
// with denormal floats flushed to zero, as every kernel runs (decaying
// moments turn denormal, and denormal arithmetic is ~100 cycles a value).
//
//   ls::parallel_for(n, /*cost_per_item=*/8, [&](std::int64_t b, std::int64_t e) {
//     for (std::int64_t i = b; i < e; ++i) var[i] -= lr * grad[i];
//   });
#pragma once

#include <cstdint>
#include <functional>

namespace lockstep {

// Calls f(begin, end) on disjoint ranges covering [0, n), possibly from
// several threads at once. `cost_per_item`: the work of one item in units of
// a simple float operation (a loop below ~32k units stays on the calling
// thread).
void parallel_for(std::int64_t n, std::int64_t cost_per_item,
                  const std::function<void(std::int64_t begin, std::int64_t end)>& f);

}  // namespace lockstep
