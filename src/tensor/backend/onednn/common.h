// Internal to the oneDNN adapter: the engine, per-thread streams, cache
// keys, error translation and the per-kernel entry scope.
#pragma once

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

#include "lockstep/core/error.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/denormals.h"

namespace lockstep::backend::onednn::detail_onednn {

using dnnl::memory;
using Dims = memory::dims;

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// One stream per thread: a oneDNN CPU stream runs primitives on its
// thread's OpenMP team, and replica threads run theirs at the same time.
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Hash of a tuple of integral values (the cache keys).
struct TupleHash {
  template <typename Tuple>
  std::size_t operator()(const Tuple& t) const {
    std::size_t h = 0x9e3779b97f4a7c15ULL;
    std::apply(
        [&](const auto&... v) {
          ((h = (h ^ std::hash<std::int64_t>{}(static_cast<std::int64_t>(v))) * 0x100000001b3ULL),
           ...);
        },
        t);
    return h;
  }
};

template <typename F>
void guarded(const char* what, F&& f) {
  try {
    f();
  } catch (const dnnl::error& e) {
    detail::throw_error<InternalError>("oneDNN ", what, " failed: ", e.what(), " (status ",
                                       static_cast<int>(e.status), ")");
  }
}

inline memory::data_type data_type(Precision p) {
  return p == Precision::kBFloat16 ? memory::data_type::bf16 : memory::data_type::f32;
}

inline void* mut(const void* p) { return const_cast<void*>(p); }  // oneDNN takes non-const handles

// oneDNN's kernels run on the calling thread's OpenMP team: make sure every
// thread of a team of this size flushes denormals (once per team size; the
// threads keep the mode, see tensor/denormals.h).
inline void flush_denormals_in_team() {
  thread_local int flushed_team_size = 0;
  const int team = omp_get_max_threads();
  if (team <= flushed_team_size) return;
#pragma omp parallel num_threads(team)
  lockstep::detail::set_flush_denormals();
  flushed_team_size = team;
}

// What every kernel entry does first.
struct KernelScope {
  KernelScope() { flush_denormals_in_team(); }
  lockstep::detail::FlushDenormalsScope flush;
};

}  // namespace lockstep::backend::onednn::detail_onednn
