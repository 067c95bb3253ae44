// How long a thread waiting for another polls before it sleeps on a
// condition variable: a replica thread for its next task, the caller for its
// replicas, a rank in an in-process collective, an input pipeline's consumer
// for its next element.
//
// Waking a sleeping thread costs tens of microseconds on this machine, and
// what these threads wait for usually comes sooner than that: replicas run
// the same step and finish it close together, and a prefetched element is
// usually that close. Measured on the input pipeline's overlap benchmark
// (docs/benchmarks.md, "Overlap of input and compute"): a consumer polling
// for up to 50 µs before sleeping took an epoch from 1.07–1.21 to 1.02 of
// max(input, compute). Longer polls take time from the other threads on the
// same core (docs/benchmarks.md, issue #8's "Tried and dropped").
#pragma once

#include <chrono>

namespace lockstep {

inline constexpr std::chrono::microseconds kSpinBeforeSleep{50};

}  // namespace lockstep
