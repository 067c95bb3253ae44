// Fuzz target: NumPy .npy files (data::read_npy).
#include "fuzz_file.h"
#include "lockstep/data/readers.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file(
      "input.npy", data, size, [](const std::string& p) { (void)lockstep::data::read_npy(p); });
}
