// crc32c: RFC 3720's check values, chaining, and the three-stream path
// against a bit-at-a-time oracle on every length around its blocks.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lockstep/core/file.h"

namespace lockstep {
namespace {

// CRC32C one bit at a time (the reflected Castagnoli polynomial), as
// RFC 3720 defines it: the oracle, written from the definition.
std::uint32_t crc32c_bitwise(const unsigned char* p, std::size_t size) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

TEST(Crc32cTest, MatchesRfc3720sCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
  // RFC 3720 B.4: 32 zero bytes, 32 0xFF bytes, 0..31 (whole 8-byte words
  // and tails, through the SSE4.2 path where the CPU has it).
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(inc.data() + 13, 19, crc32c(inc.data(), 13)), 0x46DD794Eu);  // chained
}

TEST(Crc32cTest, EveryLengthAroundTheBlocksMatchesTheBitwiseOracle) {
  // The fast path takes blocks of 3 × 4096 bytes: lengths below, at and
  // past one and two blocks, with every tail of 0–8 bytes, from an
  // address that is not 8-byte aligned.
  std::mt19937 rng(7);
  std::vector<unsigned char> bytes(2 * 3 * 4096 + 64 + 3);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
  const unsigned char* p = bytes.data() + 3;
  for (std::size_t base : {std::size_t{0}, std::size_t{3 * 4096}, std::size_t{2 * 3 * 4096}}) {
    for (std::size_t extra = 0; extra <= 40; ++extra) {
      if (base == 0 && extra == 0) continue;
      const std::size_t n = base == 0 ? extra : base - 20 + extra;
      EXPECT_EQ(crc32c(p, n), crc32c_bitwise(p, n)) << n << " bytes";
    }
  }
}

TEST(Crc32cTest, ChainsAcrossAnyCut) {
  std::mt19937 rng(11);
  std::vector<unsigned char> bytes(40000);
  for (unsigned char& b : bytes) b = static_cast<unsigned char>(rng());
  const std::uint32_t whole = crc32c_bitwise(bytes.data(), bytes.size());
  for (std::size_t cut : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{12288},
                          std::size_t{12289}, std::size_t{39999}, bytes.size()}) {
    EXPECT_EQ(crc32c(bytes.data() + cut, bytes.size() - cut, crc32c(bytes.data(), cut)), whole)
        << "cut at " << cut;
  }
}

}  // namespace
}  // namespace lockstep
