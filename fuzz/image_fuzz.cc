// Fuzz target: JPEG and PNG bytes (data::decode_image through libjpeg-turbo
// and libpng), in the file's own channels and as RGB. A lockstep::Error is
// the expected answer to bad input; a crash, a leak, undefined behaviour, an
// allocation past -malloc_limit_mb (a decoder that believes a header) or any
// other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (int channels : {0, 3}) {
    try {
      (void)lockstep::data::decode_image(bytes, {.channels = channels});
    } catch (const lockstep::Error&) {
    }
  }
  return 0;
}
