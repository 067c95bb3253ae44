// Hot elementwise loops compiled once per vector width (a build attribute
// that several layers use: tensor kernels, comm's reductions, optimizers).
//
// The product is built for a portable baseline (x86-64-v2: SSE4.2), so a loop
// the compiler vectorises gets 4 float lanes. A function marked
// LOCKSTEP_VECTOR_CLONES is compiled again for AVX2 and AVX-512, and the
// loader picks the widest one this CPU runs (GCC function multiversioning,
// an ifunc resolved once at start-up). Use it on plain loops over restrict
// pointers: optimizer updates, collective reductions.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define LOCKSTEP_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LOCKSTEP_VECTOR_CLONES
#endif
