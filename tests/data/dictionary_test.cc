// dictionary_encode against a one-pass oracle (a std::map of first-seen
// codes): every code and the values' order, over many parts of rows.
#include "lockstep/data/dictionary.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace lockstep::data {
namespace {

Dictionary oracle(const std::vector<std::string_view>& texts) {
  Dictionary d;
  std::map<std::string_view, std::int32_t> seen;
  for (std::string_view t : texts) {
    auto [it, added] = seen.emplace(t, static_cast<std::int32_t>(d.values.size()));
    if (added) d.values.push_back(t);
    d.codes.push_back(it->second);
  }
  return d;
}

// Values first seen in late parts of the rows, empty texts, texts of 1–40
// bytes that share beginnings and ends (the hash reads the first and last
// words), and a column of one value per row.
TEST(DictionaryEncode, IsTheOnePassEncodingOnAllCores) {
  std::mt19937 rng(5);
  std::vector<std::string> pool = {"",      "a",        "ab",        "abc",      "abcd",
                                   "abcde", "abcdefgh", "abcdefghi", "xbcdefgh", "abcdefgx"};
  for (int i = 0; i < 300; ++i) {
    std::string s(1 + rng() % 40, 'q');
    for (char& c : s) c = static_cast<char>('a' + rng() % 3);
    pool.push_back(s);
  }
  for (std::size_t rows : {std::size_t{1}, std::size_t{100}, std::size_t{70000}}) {
    std::vector<std::string_view> texts;
    for (std::size_t r = 0; r < rows; ++r) {
      // The pool's later values appear only in the later rows.
      const std::size_t reach = 1 + pool.size() * (r + 1) / rows;
      texts.push_back(pool[rng() % reach]);
    }
    const Dictionary want = oracle(texts), got = dictionary_encode(texts);
    EXPECT_EQ(got.values, want.values) << rows << " rows";
    EXPECT_EQ(got.codes, want.codes) << rows << " rows";
  }
  std::vector<std::string> unique(50000);
  for (std::size_t i = 0; i < unique.size(); ++i) unique[i] = "id-" + std::to_string(i);
  const std::vector<std::string_view> views(unique.begin(), unique.end());
  const Dictionary d = dictionary_encode(views);
  ASSERT_EQ(d.values.size(), unique.size());
  for (std::size_t i = 0; i < unique.size(); ++i) {
    ASSERT_EQ(d.codes[i], static_cast<std::int32_t>(i));
    ASSERT_EQ(d.values[i], unique[i]);
  }
  EXPECT_TRUE(dictionary_encode({}).values.empty());
}

}  // namespace
}  // namespace lockstep::data
