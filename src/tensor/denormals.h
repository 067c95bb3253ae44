// Denormal floats: Lockstep's kernels run with them flushed to zero.
//
// Arithmetic on denormal (subnormal) floats takes a microcode assist of
// ~100 cycles on x86. Training produces them routinely — Adam's second
// moments decay towards zero — and a step then slows down several times
// (measured here: 2.6 ms -> 5 ms per seed-MLP step by the second epoch). As
// TensorFlow does, Lockstep sets flush-to-zero and denormals-are-zero while
// its kernels run: the calling thread's mode is restored afterwards; the
// OpenMP worker threads, which only ever run kernels, keep it.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace lockstep::detail {

#if defined(__x86_64__) || defined(__i386__)
inline constexpr unsigned kFlushDenormalBits = 0x8040;  // MXCSR FTZ (bit 15) | DAZ (bit 6)

inline void set_flush_denormals() { _mm_setcsr(_mm_getcsr() | kFlushDenormalBits); }

// RAII: FTZ/DAZ on this thread for the scope's lifetime.
class FlushDenormalsScope {
 public:
  FlushDenormalsScope() : saved_(_mm_getcsr()) {
    if ((saved_ & kFlushDenormalBits) != kFlushDenormalBits)
      _mm_setcsr(saved_ | kFlushDenormalBits);
  }
  ~FlushDenormalsScope() {
    if ((saved_ & kFlushDenormalBits) != kFlushDenormalBits) _mm_setcsr(saved_);
  }
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;

 private:
  unsigned saved_;
};
#else
inline void set_flush_denormals() {}
class FlushDenormalsScope {};
#endif

}  // namespace lockstep::detail
