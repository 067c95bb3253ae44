// Fuzz target: HDF5 files (Keras's .weights.h5 and legacy .h5) through the
// reader's guard (io::read_h5: libhdf5 in a child process, core/isolated.h).
// A crash or a loop inside libhdf5 must come back as an IOError naming the
// file; a finding here is one that reaches this process: the records the
// child sends back, their decoding, the budget. The child's coverage does
// not reach libFuzzer (it ends with the child), so this fuzzes our side of
// the guard; the committed corpus (fuzz/corpus/hdf5) holds the probe's
// crashes and loops of libhdf5 itself, replayed in CI.
#include "fuzz_file.h"
#include "lockstep/io/hdf5.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file("input.weights.h5", data, size,
                                     [](const std::string& p) { (void)lockstep::io::read_h5(p); });
}
