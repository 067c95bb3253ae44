// Fuzz target: safetensors files and Lockstep checkpoints (io::read_safetensors).
#include "fuzz_file.h"
#include "lockstep/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return lockstep::fuzz::run_on_file("input.safetensors", data, size, [](const std::string& p) {
    (void)lockstep::io::read_safetensors(p);
  });
}
