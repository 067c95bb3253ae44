// Checked arithmetic for sizes that come from outside the program — a file,
// a flag, a peer — and the budget that bounds what one file may make us
// allocate. The one place for both (issue #41): a shape of [2^62, 4] in a
// model file, a dataset that claims more elements than its file holds, a
// zip member that inflates a thousandfold all end here as an error naming
// the file, never as a wrapped product handed to malloc.
//
//   auto n = lockstep::checked_mul<std::int64_t>(rows, cols);  // nullopt: overflow
//   lockstep::FileBudget budget(path, file_bytes);
//   budget.take(member_bytes, "member 'model.weights.h5'");   // IOError past it
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace lockstep {

// a * b and a + b, or nullopt where the result does not fit in T.
template <class T>
requires std::is_integral_v<T>
constexpr std::optional<T> checked_mul(T a, T b) {
  T out{};
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

template <class T>
requires std::is_integral_v<T>
constexpr std::optional<T> checked_add(T a, T b) {
  T out{};
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// What one file may make Lockstep allocate while it is read, in all: every
// dataset of an HDF5 file, every member of a zip archive added up. Keras's
// files store weights uncompressed or deflated (random floats shrink by a
// few percent), so a real file expands by a little; a file that claims
// more is a bomb (a 10 MB `.keras` whose members each stay under deflate's
// 1032:1 reached 6.3 GB before this budget). The budget is
//   kFileBudgetFloor + kFileBudgetFactor * the file's size,
// 256 MiB + 64 times the file: a 2 MB MobileNetV2 weights file may make
// 384 MiB, a 14 MB one 1.1 GiB (docs/reliability.md).
inline constexpr std::uint64_t kFileBudgetFloor = std::uint64_t{256} << 20;
inline constexpr std::uint64_t kFileBudgetFactor = 64;

class FileBudget {
 public:
  // `source` names the file in errors; `file_bytes` is its size.
  FileBudget(std::string source, std::uint64_t file_bytes);

  // Counts `bytes` against the budget; an IOError naming the source and
  // `what` when the total would pass it.
  void take(std::uint64_t bytes, const std::string& what);

  std::uint64_t limit() const { return limit_; }
  std::uint64_t taken() const { return taken_; }

 private:
  std::string source_;
  std::uint64_t limit_;
  std::uint64_t taken_ = 0;
};

// JSON read from a file, an environment variable or a peer nests at most
// this deep. nlohmann's parser is iterative, but the code that walks a
// Keras configuration, a checkpoint's header or a dump of either recurses
// once a level: 100,000 '[' overflowed the stack (issue #41). Keras's own
// files nest far less (MobileNetV2's configuration: 9 levels; a model
// nested in a model adds 4).
inline constexpr int kMaxJsonDepth = 128;

// An IOError naming `source` and the byte offset when `text` opens more than
// kMaxJsonDepth arrays and objects at once. Call it before parsing text
// that came from outside; it reads strings and escapes as JSON does, and
// leaves every other check to the parser. `first_byte`: where `text`
// starts in its file (8 for a safetensors header), so the offset named is
// the file's.
void check_json_nesting(std::string_view text, const std::string& source,
                        std::uint64_t first_byte = 0);

}  // namespace lockstep
