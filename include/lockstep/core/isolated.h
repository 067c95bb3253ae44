// Work on untrusted bytes in a child process, under limits of memory, CPU
// time, wall time and descriptors, whose crash is an error naming the file
// and never ours.
//
// Why (issue #41): libhdf5 1.10 trusts the structures of the file it reads.
// One changed byte of a global heap object's size in any Keras weights file
// gave SIGSEGV inside H5HG_read, or a loop that never ended; the library
// keeps no checksums and is not built for hostile input. Checking every
// structure it trusts would mean writing an HDF5 parser of our own; instead
// the reading runs in a forked child, which sends back the bytes it made
// through an anonymous memory file (memfd). Forking copies the page tables,
// not the data (copy on write); with the extra passes over what comes back,
// reading MobileNetV2's 14.6 MB of weights takes 50-60 ms more than in
// process (checkpoint_bench BM_ReadH5 and BM_Isolated_EmptyWork,
// docs/benchmarks.md).
//
// The child is a fork of a possibly multi-threaded process: only the calling
// thread lives on in it, so `work` must not take a lock another thread may
// have held at the fork (the tensor allocator's, a logging sink's). Plain
// malloc is safe (glibc resets its locks in the child); exceptions are safe.
//
//   std::string out = lockstep::run_isolated("m.weights.h5", {}, [&] { return parse(bytes); });
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace lockstep {

struct IsolationLimits {
  // Address space the child may add to what the parent had mapped at the
  // fork. Not enforced under AddressSanitizer, whose shadow reservations
  // make an address-space limit meaningless; the callers' own budgets
  // (FileBudget) hold there too.
  std::uint64_t memory_bytes = std::uint64_t{2} << 30;
  // CPU seconds (RLIMIT_CPU: an endless loop is killed by SIGXCPU).
  unsigned cpu_seconds = 10;
  // Wall seconds before the parent kills the child (a child that sleeps or
  // is stopped uses no CPU).
  unsigned wall_seconds = 60;
};

// Runs `work` in a forked child and returns the bytes it returned. An
// exception thrown by `work` comes back as an IOError carrying its message
// (so readers throw IOError only); a signal, an exit without a result, or a
// limit reached is an IOError naming `source`, what ended the child, and
// that nothing was loaded.
std::string run_isolated(const std::string& source, const IsolationLimits& limits,
                         const std::function<std::string()>& work);

}  // namespace lockstep
