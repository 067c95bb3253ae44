// Fuzz target: IDX files, plain or gzip'd (data::read_idx).
#include "fuzz_file.h"
#include "lockstep/data/idx.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file(
      "input.idx", data, size, [](const std::string& p) { (void)lockstep::data::read_idx(p); });
}
