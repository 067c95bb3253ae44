// Philox-4x32-10 (the reference algorithm of Salmon et al., SC'11) and the
// uniform value random::uniform takes from it, plain C++ compiled for the
// host (tensor/random.cc) and by nvcc into the CUDA adapter's kernel
// (kernels.cu; the tests' emulated adapter compiles it too): one
// expression, so that a GPU draws the host's bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/backend/image_sampling.h"  // LOCKSTEP_HOST_DEVICE

namespace lockstep::backend {

// One block: four 32-bit words for a 64-bit key and a 128-bit counter.
struct PhiloxBlock {
  std::uint32_t w[4];
};

LOCKSTEP_HOST_DEVICE inline PhiloxBlock philox4x32_10(std::uint64_t key, std::uint64_t counter_hi,
                                                      std::uint64_t counter_lo) {
  constexpr std::uint32_t kM0 = 0xD2511F53;
  constexpr std::uint32_t kM1 = 0xCD9E8D57;
  constexpr std::uint32_t kW0 = 0x9E3779B9;
  constexpr std::uint32_t kW1 = 0xBB67AE85;
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo);
  std::uint32_t c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi);
  std::uint32_t c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key);
  std::uint32_t k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<std::uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<std::uint32_t>(p0);
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// 24 random bits -> [0, 1).
LOCKSTEP_HOST_DEVICE inline float unit_from_bits(std::uint32_t w) {
  return static_cast<float>(w >> 8) * 0x1.0p-24f;
}

// random::uniform's value for global element `index` of `stream`: in
// [minval, maxval) (rounding that reaches maxval steps back below it).
LOCKSTEP_HOST_DEVICE inline float uniform_element(std::uint64_t seed, std::uint64_t stream,
                                                  std::uint64_t index, float minval, float maxval) {
  const PhiloxBlock b = philox4x32_10(seed, stream, index / 4);
  const float v = minval + (maxval - minval) * unit_from_bits(b.w[index % 4]);
  return v < maxval ? v : nextafterf(maxval, minval);
}

}  // namespace lockstep::backend
