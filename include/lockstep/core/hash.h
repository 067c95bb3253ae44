// Hashes that are the same on every host and build (std::hash is not): for
// comparing what workers were given without sending it.
#pragma once

#include <cstdint>
#include <string_view>

namespace lockstep {

// 64-bit FNV-1a (Fowler–Noll–Vo; the offset basis and prime are the
// algorithm's published 64-bit constants). Not for security: a worker that
// wants to lie can.
inline std::uint64_t fnv1a64(std::string_view text) {
  std::uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace lockstep
