// Dictionary encoding of a text column, as Arrow's dictionary_encode: each
// row's code into the column's distinct texts, in the order first seen. What
// turns a table's categories into one-hot columns or class ids with one
// hash lookup a row, on all cores.
//
//   ls::data::Dictionary d = ls::data::dictionary_encode(table.column("colour").text);
//   // d.values: {"amber", "red", ...}; d.codes[row]: its index in values
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct Dictionary {
  std::vector<std::int32_t> codes{};       // one per row: an index into values
  std::vector<std::string_view> values{};  // distinct, first-seen order; views of the texts
};

// `texts` encoded (the rows split over the cores, their dictionaries merged
// in row order: the same result as one pass). The values view what `texts`
// views: they live as long as it does.
Dictionary dictionary_encode(std::span<const std::string_view> texts);

}  // namespace lockstep::data
