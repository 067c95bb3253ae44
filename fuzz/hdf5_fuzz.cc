// Fuzz target: HDF5 files (Keras's .weights.h5 and legacy .h5) through the
// reader's guard (libhdf5 in a child process, core/isolated.h). A crash or a
// loop inside libhdf5 must come back as an IOError naming the file; a
// finding here is one that reaches this process: the records the child
// sends back, their decoding, the budget. The child's coverage does not
// reach libFuzzer (it ends with the child), so this fuzzes our side of the
// guard; the committed corpus (fuzz/corpus/hdf5) holds the probe's crashes
// and loops of libhdf5 itself, replayed in CI.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_file.h"
#include "lockstep/core/error.h"
#include "lockstep/io/hdf5.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A second of CPU, not ten: a loop in libhdf5 is found as surely, and the
  // fuzzer (and CI's replay) moves on sooner.
  lockstep::IsolationLimits limits = lockstep::io::h5_read_limits(size);
  limits.cpu_seconds = 1;
  limits.wall_seconds = 20;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)lockstep::io::read_h5_image(bytes, "input.weights.h5", limits);
  } catch (const lockstep::Error& e) {
    lockstep::fuzz::names_source(e, "input.weights.h5");  // a clear error: what bad input must get
  }
  return 0;
}
