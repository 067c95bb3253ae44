// dictionary_encode: a text column's codes and distinct values
// (dictionary.h).
//
// Each part of the rows builds its own open-addressing table (a power-of-two
// size kept at most half full, each value's hash kept beside it), writing
// its local codes; the parts' values are then merged in row order into one
// table and the codes renumbered. `bench/data_bench
// --benchmark_filter=DictionaryEncode` has the time a row.
#include "lockstep/data/dictionary.h"

#include <algorithm>
#include <cstring>

#include "lockstep/tensor/parallel.h"

namespace lockstep::data {

namespace {

// A hash of a text read a word at a time: the first and last 8 (or 4)
// bytes, which overlap in a short text, mixed by multiplication (the
// wyhash family's way with short keys; FNV-1a's multiply per byte made the
// hash most of a lookup). Only within this process: no file holds it.
inline std::uint64_t text_hash(std::string_view text) {
  const char* p = text.data();
  const std::size_t n = text.size();
  std::uint64_t a = 0, b = 0;
  if (n >= 8) {
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + n - 8, 8);
    for (std::size_t i = 8; i + 8 < n; i += 8) {  // the middle of a long text
      std::uint64_t w = 0;
      std::memcpy(&w, p + i, 8);
      a = (a ^ w) * 0x9E3779B97F4A7C15;
    }
  } else if (n >= 4) {
    std::uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    a = lo;
    b = hi;
  } else if (n > 0) {
    a = static_cast<unsigned char>(p[0]) |
        (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8) |
        (static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16);
  }
  std::uint64_t h = (a ^ 0xA0761D6478BD642F) * (b ^ 0xE7037ED1A0B428DB ^ n);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9;
  return h ^ (h >> 32);
}

class TextTable {
 public:
  // The code of `text`, added with the next code when new.
  std::int32_t code_of(std::string_view text) {
    const std::uint64_t hash = text_hash(text);
    const std::uint64_t mask = slots_.size() - 1;
    std::uint64_t at = hash & mask;
    for (;; at = (at + 1) & mask) {
      const std::int32_t code = slots_[at];
      if (code < 0) break;
      const auto c = static_cast<std::size_t>(code);
      if (hashes_[c] == hash && values_[c] == text) return code;
    }
    const auto code = static_cast<std::int32_t>(values_.size());
    slots_[at] = code;
    values_.push_back(text);
    hashes_.push_back(hash);
    if (2 * values_.size() > slots_.size()) grow();
    return code;
  }
  std::vector<std::string_view>& values() { return values_; }

 private:
  void grow() {
    std::vector<std::int32_t> slots(2 * slots_.size(), -1);
    const std::uint64_t mask = slots.size() - 1;
    for (std::size_t code = 0; code < values_.size(); ++code) {
      std::uint64_t at = hashes_[code] & mask;
      while (slots[at] >= 0) at = (at + 1) & mask;
      slots[at] = static_cast<std::int32_t>(code);
    }
    slots_ = std::move(slots);
  }

  std::vector<std::int32_t> slots_ = std::vector<std::int32_t>(64, -1);
  std::vector<std::string_view> values_{};
  std::vector<std::uint64_t> hashes_{};
};

}  // namespace

Dictionary dictionary_encode(std::span<const std::string_view> texts) {
  Dictionary out;
  const auto rows = static_cast<std::int64_t>(texts.size());
  out.codes.resize(texts.size());
  // Parts of at least 8,192 rows, at most 16.
  const std::int64_t parts = std::clamp<std::int64_t>(rows / 8192, 1, 16);
  std::vector<TextTable> tables(static_cast<std::size_t>(parts));
  const auto part_begin = [&](std::int64_t p) { return rows * p / parts; };
  parallel_for(parts, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) {
      TextTable& table = tables[static_cast<std::size_t>(p)];
      for (std::int64_t r = part_begin(p); r < part_begin(p + 1); ++r)
        out.codes[static_cast<std::size_t>(r)] = table.code_of(texts[static_cast<std::size_t>(r)]);
    }
  });
  if (parts == 1) {
    out.values = std::move(tables[0].values());
    return out;
  }
  TextTable all;
  std::vector<std::vector<std::int32_t>> renumber(static_cast<std::size_t>(parts));
  for (std::size_t p = 0; p < tables.size(); ++p) {
    for (std::string_view value : tables[p].values()) renumber[p].push_back(all.code_of(value));
  }
  parallel_for(parts, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) {
      const std::vector<std::int32_t>& to = renumber[static_cast<std::size_t>(p)];
      for (std::int64_t r = part_begin(p); r < part_begin(p + 1); ++r) {
        std::int32_t& code = out.codes[static_cast<std::size_t>(r)];
        code = to[static_cast<std::size_t>(code)];
      }
    }
  });
  out.values = std::move(all.values());
  return out;
}

}  // namespace lockstep::data
