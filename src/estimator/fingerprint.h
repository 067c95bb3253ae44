// TensorFlow's string hash, for hash buckets and crosses: Fingerprint64
// (FarmHash's Fingerprint64, from Debian's libfarmhash: the one place that
// includes it) and FingerprintCat64, TensorFlow's way of chaining two
// fingerprints (tensorflow/core/platform/fingerprint.h).
#pragma once

#include <cstdint>
#include <string_view>

namespace lockstep::estimator::detail {

std::uint64_t fingerprint64(std::string_view s);
std::uint64_t fingerprint_cat64(std::uint64_t fp1, std::uint64_t fp2);

}  // namespace lockstep::estimator::detail
