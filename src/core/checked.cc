// FileBudget: what one file may make us allocate while it is read.
#include "lockstep/core/checked.h"

#include "lockstep/core/error.h"

namespace lockstep {

FileBudget::FileBudget(std::string source, std::uint64_t file_bytes)
    : source_(std::move(source)),
      limit_(checked_add(kFileBudgetFloor, checked_mul(kFileBudgetFactor, file_bytes)
                                               .value_or(std::numeric_limits<std::uint64_t>::max()))
                 .value_or(std::numeric_limits<std::uint64_t>::max())) {}

void FileBudget::take(std::uint64_t bytes, const std::string& what) {
  const auto total = checked_add(taken_, bytes);
  LOCKSTEP_CHECK_AS(
      IOError, total && *total <= limit_, source_, ": ", what, " needs ", bytes,
      " bytes, which would bring what this file makes us allocate past its budget of ", limit_,
      " bytes (256 MiB + 64 times the file's size; ", taken_,
      " taken so far): a damaged or hostile file");
  taken_ = *total;
}

void check_json_nesting(std::string_view text, const std::string& source,
                        std::uint64_t first_byte) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      LOCKSTEP_CHECK_AS(IOError, ++depth <= kMaxJsonDepth, source, ": byte ", first_byte + i,
                        ": JSON nested more than ", kMaxJsonDepth,
                        " levels deep; no file Lockstep reads nests so far (damaged or hostile)");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

}  // namespace lockstep
