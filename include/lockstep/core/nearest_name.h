// The known name nearest a misspelt one, for "did you mean" in errors: an
// unknown command, activation, layer class or optimizer names the closest
// choice (Levenshtein distance, the first of equals in the given order).
//
//   nearest_name("relux", {"relu", "elu"}) == "relu"
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace lockstep {

// Single-character insertions, deletions and substitutions from a to b.
std::size_t edit_distance(const std::string& a, const std::string& b);

// The name of `names` nearest `word`; "" when `names` is empty.
std::string nearest_name(const std::string& word, const std::vector<std::string>& names);

}  // namespace lockstep
