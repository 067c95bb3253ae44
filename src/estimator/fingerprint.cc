// Fingerprint64 from libfarmhash, and TensorFlow's FingerprintCat64.
#include "estimator/fingerprint.h"

#include <farmhash.h>

namespace lockstep::estimator::detail {

std::uint64_t fingerprint64(std::string_view s) { return util::Fingerprint64(s.data(), s.size()); }

namespace {
std::uint64_t shift_mix(std::uint64_t v) { return v ^ (v >> 47); }
}  // namespace

// TensorFlow's definition (fingerprint.h): a multiply-and-shift mix of the
// two, so that crosses hash every combination, in order.
std::uint64_t fingerprint_cat64(std::uint64_t fp1, std::uint64_t fp2) {
  constexpr std::uint64_t kMul = 0xc6a4a7935bd1e995ULL;
  std::uint64_t result = fp1 ^ kMul;
  result ^= shift_mix(fp2 * kMul) * kMul;
  result *= kMul;
  result = shift_mix(result) * kMul;
  return shift_mix(result);
}

}  // namespace lockstep::estimator::detail
