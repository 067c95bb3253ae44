// read_csv_table: a whole CSV file into typed columns (csv_table.h).
//
// The file cut at line ends into chunks, never held whole: each core reads
// its chunks, one at a time, into one buffer of its own (core/file.h's
// FileParts; on the project's VM a fresh buffer the size of the file cost
// more than its bytes' copy, and now and then tens of milliseconds). The
// chunks' rows counted on all cores (so each knows its first row); each
// column's kind guessed from the first rows; then the chunks read again
// and parsed on all cores, each field straight into its column in one pass
// over its bytes: a number into the table's block of numbers (on huge
// pages, core/huge_pages.h), or, for the columns guessed text, the field's
// bytes (doubled quotes unescaped) into its chunk's arena and a view of
// them into the column. A column guessed numeric that later holds text has
// its fields read again.
//
// Numbers take a fast path. The common field, [-]digits[.digits] of up to
// 15 digits, and its delimiter within 16 bytes, is read from one SSE2 load
// and its byte masks; any other is parsed as it is scanned (digits, a
// point, an exponent). Either way a value of at most 15 significant
// digits whose power of ten is within 22 is one exact integer times or
// over one exact power of ten, so one correctly rounded operation gives
// std::from_chars's double (Clinger's fast path); any other field goes to
// std::from_chars itself.
// Issue #38's table (50,000 rows, 24 columns, 10 MB) has 1.2 million
// fields; docs/benchmarks.md, "Your own data", has the times.
#include "lockstep/data/csv_table.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <optional>
#include <set>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/core/file.h"
#include "lockstep/core/huge_pages.h"
#include "lockstep/tensor/parallel.h"

namespace lockstep::data {

namespace {

// A number, as strtod reads one (spaces around it and a leading '+'
// allowed), finite; from_chars does the parsing (no locale, no copies).
bool parse_number(std::string_view field, double& value) {
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
  if (!field.empty() && field.front() == '+') {
    field.remove_prefix(1);
    if (!field.empty() && field.front() == '-') return false;  // "+-1": no number to strtod
  }
  if (field.empty()) return false;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  return error == std::errc() && end == field.data() + field.size() && std::isfinite(value);
}

// Exact powers of ten as doubles (10^22 is the last one a double holds).
constexpr double kPowersOfTen[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

constexpr std::uint64_t kIntegerPowersOfTen[] = {1,      10,      100,      1000,     10000,
                                                 100000, 1000000, 10000000, 100000000};

// How many of the 8 bytes of `w`, from its first (the lowest: x86 and ARM
// are little-endian), are ASCII digits: a byte is one when its high nibble
// is 3 and adding 6 keeps it so. A carry out of a byte of 0xFA or more only
// reaches the bytes after it, after the first non-digit.
inline int leading_digits(std::uint64_t w) {
  const std::uint64_t x = ((w & 0xF0F0F0F0F0F0F0F0) ^ 0x3030303030303030) |
                          (((w + 0x0606060606060606) & 0xF0F0F0F0F0F0F0F0) ^ 0x3030303030303030);
  return x == 0 ? 8 : std::countr_zero(x) / 8;
}

// The value of the first `d` (1–8) bytes of `w`, all digits: shifted so
// that they are the last of eight digits behind leading zeros, then
// combined in pairs, and the four pairs by two multiplications.
inline std::uint64_t digits_value(std::uint64_t w, int d) {
  w -= 0x3030303030303030;  // a borrow from a later non-digit byte goes later still
  w <<= 8 * (8 - d);
  w = w * 10 + (w >> 8);  // byte 2k: the pair of digits 2k and 2k+1
  return (((w & 0x000000FF000000FF) * (100 + (std::uint64_t{1000000} << 32))) +
          (((w >> 16) & 0x000000FF000000FF) * (1 + (std::uint64_t{10000} << 32)))) >>
         32;
}

// The run of digits at `q` (before `end`) added to `value` (value * 10^n +
// run), eight bytes at a time while eight are left: no branch per digit (a
// loop over ~6 digits mispredicted its end once a number, which cost more
// than the digits). Returns the run's length; `value` wraps past 19 digits,
// which the caller refuses.
inline int digit_run(const char*& q, const char* end, std::uint64_t& value) {
  int count = 0;
  while (end - q >= 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, q, 8);
    const int d = leading_digits(w);
    if (d == 0) return count;
    value = value * kIntegerPowersOfTen[d] + digits_value(w, d);
    q += d;
    count += d;
    if (d < 8 || count > 16) return count;
  }
  while (q < end && static_cast<unsigned>(*q - '0') < 10) {
    value = value * 10 + static_cast<unsigned>(*q - '0');
    ++q;
    ++count;
  }
  return count;
}

#if defined(__SSE2__)
// The common field in one load: [-]digits[.digits] of at most 15 digits,
// at most 8 on each side of the point, and the delimiter, all within the
// 16 bytes at `p` (which may run past the line, up to `limit`: a line's end
// is '\n' or '\r', neither a digit, a point nor a delimiter). Where each
// part ends comes from four byte masks of that one load, so the next
// field's address waits on one load and a few bit operations, not on each
// digit (the path below waits on a load per run of digits and per
// separator: ~14 ns a field here, docs/benchmarks.md). The digits' value
// is computed beside, off that chain. False, `p` unchanged, for anything
// else. Without SSE2 (not x86-64) every field takes the path below.
inline bool window_number(const char*& p, const char* limit, char delim, double& value) {
  if (limit - p < 24) return false;  // 16 bytes of masks, 8 for the last digits' word
  const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i x = _mm_sub_epi8(w, _mm_set1_epi8('0'));
  const auto mask = [](__m128i m) { return static_cast<unsigned>(_mm_movemask_epi8(m)); };
  // Bit i: byte i is not a digit (bit 16: past the window).
  const unsigned other = ~mask(_mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(9)), x)) | 0x10000u;
  const unsigned point = mask(_mm_cmpeq_epi8(w, _mm_set1_epi8('.')));
  const unsigned stop = mask(_mm_cmpeq_epi8(w, _mm_set1_epi8(delim)));
  const unsigned minus = mask(_mm_cmpeq_epi8(w, _mm_set1_epi8('-'))) & 1u;
  const unsigned whole_end = static_cast<unsigned>(std::countr_zero(other >> minus)) + minus;
  const unsigned fraction_begin = whole_end + ((point >> whole_end) & 1u);
  const unsigned fraction_end =
      static_cast<unsigned>(std::countr_zero(other >> fraction_begin)) + fraction_begin;
  const unsigned whole_digits = whole_end - minus, fraction_digits = fraction_end - fraction_begin;
  if (fraction_end >= 16 || ((stop >> fraction_end) & 1u) == 0 || whole_digits > 8 ||
      fraction_digits > 8 || whole_digits + fraction_digits - 1 >= 15)
    return false;  // (no digits wraps the last test round)
  std::uint64_t whole = 0, fraction = 0;
  if (whole_digits > 0) {
    std::memcpy(&whole, p + minus, 8);
    whole = digits_value(whole, static_cast<int>(whole_digits));
  }
  if (fraction_digits > 0) {
    std::memcpy(&fraction, p + fraction_begin, 8);
    fraction = digits_value(fraction, static_cast<int>(fraction_digits));
  }
  // At most 15 digits: below 2^53, exact; the sign exact; one rounding
  // (round-to-nearest is symmetric, so a negative divides as its magnitude).
  const auto m = static_cast<double>(whole * kIntegerPowersOfTen[fraction_digits] + fraction);
  value = (minus != 0 ? -m : m) / kPowersOfTen[fraction_digits];
  p += fraction_end;
  return true;
}
#else
inline bool window_number(const char*&, const char*, char, double&) { return false; }
#endif

// The fast path: at `p`, [-]digits[.digits][(e|E)[+|-]digits] ending at
// `end` or at `delim`, of at most 15 digits and a power of ten within 22.
// Sets `value` (bitwise what parse_number gives) and `p` to the field's
// end; false, with `p` unchanged, for anything else. `limit` (at or after
// `end`): how far the buffer may be read.
inline bool fast_number(const char*& p, const char* end, const char* limit, char delim,
                        double& value) {
  if (window_number(p, limit, delim, value)) return true;
  const char* q = p;
  const bool negative = q < end && *q == '-';
  if (negative) ++q;
  std::uint64_t mantissa = 0;
  int digits = digit_run(q, end, mantissa);  // leading zeros counted: a cautious bound
  int scale = 0;                             // digits after the point
  if (q < end && *q == '.') {
    ++q;
    scale = digit_run(q, end, mantissa);
    digits += scale;
  }
  if (digits == 0 || digits > 15) return false;
  int exponent = 0;
  if (q < end && (*q == 'e' || *q == 'E')) {
    ++q;
    const bool minus = q < end && *q == '-';
    if (q < end && (*q == '-' || *q == '+')) ++q;
    int exponent_digits = 0;
    while (q < end && static_cast<unsigned>(*q - '0') < 10 && exponent_digits < 4) {
      exponent = exponent * 10 + (*q - '0');
      ++exponent_digits;
      ++q;
    }
    if (exponent_digits == 0 || exponent_digits == 4) return false;
    if (minus) exponent = -exponent;
  }
  if (q != end && *q != delim) return false;
  const int power = exponent - scale;
  if (power < -22 || power > 22) return false;
  // mantissa < 10^15 < 2^53: exact, as is the power; one rounding. The
  // sign goes on the integer (no branch on it: signs are random in data).
  const auto whole = static_cast<std::int64_t>(mantissa);
  const auto m = static_cast<double>(negative ? -whole : whole);
  const double ten = kPowersOfTen[power < 0 ? -power : power];
  value = mantissa == 0 ? (negative ? -0.0 : 0.0) : power < 0 ? m / ten : m * ten;
  p = q;
  return true;
}

// What went wrong on a line: the first such line of the file is reported.
struct LineError {
  std::int64_t line = 0;  // 0: none
  std::string what{};
};

// Rows that guess each column's kind before the parallel pass.
constexpr std::int64_t kGuessRows = 100;

// The field at `p` on a line ending at `end` (RFC 4180 quotes: the inside,
// doubled quotes unescaped into `unquoted`, which the view then points
// into, and `in_unquoted` set); `p` moves to the delimiter after it or to
// `end`. Returns "" or what is wrong.
std::string next_field(const char*& p, const char* end, char delim, std::string_view& field,
                       std::string& unquoted, bool& in_unquoted) {
  in_unquoted = false;
  if (p < end && *p == '"') {
    const char* close = p + 1;
    bool doubled = false;
    while (true) {
      close =
          static_cast<const char*>(std::memchr(close, '"', static_cast<std::size_t>(end - close)));
      if (close == nullptr) return "unterminated quote";
      if (close + 1 < end && close[1] == '"') {
        doubled = true;
        close += 2;
        continue;
      }
      break;
    }
    field = std::string_view(p + 1, static_cast<std::size_t>(close - p - 1));
    if (doubled) {
      unquoted.clear();
      for (std::size_t i = 0; i < field.size(); ++i) {
        unquoted += field[i];
        if (field[i] == '"') ++i;  // the second of a doubled quote
      }
      field = unquoted;
      in_unquoted = true;
    }
    p = close + 1;
    if (p < end && *p != delim)
      return "a quoted field is followed by '" + std::string(1, *p) + "', not the delimiter";
    return "";
  }
  const void* hit = p < end ? std::memchr(p, delim, static_cast<std::size_t>(end - p)) : nullptr;
  const char* stop = hit == nullptr ? end : static_cast<const char*>(hit);
  field = std::string_view(p, static_cast<std::size_t>(stop - p));
  p = stop;
  return "";
}

// Every field of `line` into `fields`; doubled-quote fields kept in
// `unquoted`. Returns "" or what is wrong.
std::string split_fields(std::string_view line, char delim, std::vector<std::string_view>& fields,
                         std::deque<std::string>& unquoted) {
  fields.clear();
  const char* p = line.data();
  const char* const end = line.data() + line.size();
  std::string scratch;
  while (true) {
    std::string_view field;
    bool in_scratch = false;
    if (std::string what = next_field(p, end, delim, field, scratch, in_scratch); !what.empty())
      return what;
    if (in_scratch) field = unquoted.emplace_back(std::move(scratch));
    fields.push_back(field);
    if (p == end) return "";
    ++p;  // the delimiter; after a trailing one, one more, empty field
  }
}

// The line at `at` (before `end`): its text without "\r\n" or "\n", and
// where the next one starts.
std::string_view line_at(const char* at, const char* end, const char*& next) {
  const char* newline =
      static_cast<const char*>(std::memchr(at, '\n', static_cast<std::size_t>(end - at)));
  const char* stop = newline == nullptr ? end : newline;
  next = newline == nullptr ? end : newline + 1;
  std::string_view line(at, static_cast<std::size_t>(stop - at));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// A part of the file's rows: bytes [begin, end) cut at line ends, its
// first row and first line (counted before the parse).
struct Chunk {
  std::uint64_t begin = 0;  // its bytes in the file: [begin, end)
  std::uint64_t end = 0;
  std::int64_t rows = 0;        // lines that are not blank
  std::int64_t lines = 0;       // every line
  std::int64_t first_row = 0;   // of the table (0 is the first row after the header)
  std::int64_t first_line = 0;  // of the file (1 is the header)
};

// Line ends after a chunk's bytes in its buffer: the one-load number path
// reads up to 24 bytes past a field, and a line end is no digit, point or
// delimiter.
constexpr std::size_t kPadding = 32;

// A chunk's bytes read into `buffer` (grown, never shrunk: one buffer per
// thread is reused for its chunks), padded; returns where they start.
const char* load(const FileParts& file, const Chunk& chunk, std::vector<char>& buffer) {
  const auto n = static_cast<std::size_t>(chunk.end - chunk.begin);
  if (buffer.size() < n + kPadding) buffer.resize(n + kPadding);
  file.read(chunk.begin, n, buffer.data());
  std::memset(buffer.data() + n, '\n', kPadding);
  return buffer.data();
}

// The offset just after the first '\n' at or after `from`; the file's size
// when there is none.
std::uint64_t next_line_start(const FileParts& file, std::uint64_t from,
                              std::vector<char>& buffer) {
  if (buffer.size() < 4096) buffer.resize(4096);
  while (from < file.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(file.size() - from, 4096));
    file.read(from, n, buffer.data());
    if (const void* hit = std::memchr(buffer.data(), '\n', n); hit != nullptr)
      return from + static_cast<std::uint64_t>(static_cast<const char*>(hit) - buffer.data()) + 1;
    from += n;
  }
  return file.size();
}

// Per chunk and column: whether a field of a column guessed numeric was
// not a number, and the missing fields.
struct ChunkColumn {
  bool not_numbers = false;
  std::int64_t missing = 0;
  std::int64_t first_missing_line = 0;
};

// What a table's columns point into.
struct Storage {
  HugePageVector<double> numbers{};               // the numeric columns, one after another
  HugePageVector<std::string_view> texts{};       // the text columns, one after another
  HugePageVector<std::string_view> late_texts{};  // columns that held text after the guessed rows
  HugePageVector<std::string_view> no_texts{};    // one empty view per row: columns without values
  // Per chunk: its texts' bytes (doubled quotes unescaped), reserved to the
  // chunk's size, which they never exceed, so that views stay valid.
  std::vector<std::string> arenas{};
};

}  // namespace

const CsvTable::Column& CsvTable::column(const std::string& name) const {
  for (const Column& c : columns) {
    if (c.name == name) return c;
  }
  std::string known;
  for (const Column& c : columns) known += (known.empty() ? "'" : ", '") + c.name + "'";
  detail::throw_error<ValueError>(path, ": no column named '", name, "'; its columns are ", known);
}

bool CsvTable::has_column(const std::string& name) const {
  for (const Column& c : columns) {
    if (c.name == name) return true;
  }
  return false;
}

std::vector<std::string> CsvTable::names() const {
  std::vector<std::string> out;
  for (const Column& c : columns) out.push_back(c.name);
  return out;
}

CsvTable read_csv_table(const std::string& path, const CsvTableOptions& options) {
  std::optional<FileParts> opened;
  try {
    opened.emplace(path);
  } catch (const IOError& e) {
    detail::throw_error<IOError>(path, ": cannot open the CSV file (", e.what(), ")");
  }
  const FileParts& file = *opened;
  auto storage = std::make_shared<Storage>();
  CsvTable table;
  table.path = path;
  auto bad = [&](std::int64_t line, const std::string& what) {
    detail::throw_error<IOError>(path, ":", line, ": ", what);
  };
  if (file.size() == 0) bad(1, "the file is empty; expected a header line naming the columns");
  const char delim = options.field_delim;

  // The header: the first line, read until its end.
  std::string head;
  std::uint64_t body = file.size();
  for (std::uint64_t want = 64 << 10;; want *= 4) {
    head.resize(static_cast<std::size_t>(std::min(file.size(), want)));
    file.read(0, head.size(), head.data());
    if (const auto newline = head.find('\n'); newline != std::string::npos) {
      head.resize(newline);
      body = newline + 1;
      break;
    }
    if (head.size() == file.size()) break;
  }
  if (!head.empty() && head.back() == '\r') head.pop_back();

  std::vector<std::string_view> fields;
  std::deque<std::string> kept;
  if (std::string what = split_fields(head, delim, fields, kept); !what.empty()) bad(1, what);
  std::set<std::string, std::less<>> seen;
  for (std::string_view name : fields) {
    if (name.empty())
      bad(1, "the header has an empty column name (column " +
                 std::to_string(table.columns.size() + 1) + ")");
    if (!seen.insert(std::string(name)).second)
      bad(1, "the header names column '" + std::string(name) + "' twice");
    table.columns.push_back({.name = std::string(name)});
  }
  const std::size_t width = table.columns.size();

  // The body cut at line ends into chunks, their rows counted on all cores,
  // each core reading its chunks into one buffer of its own. An error in a
  // chunk (the file shrank) is kept and thrown after the loop: nothing may
  // leave a parallel loop.
  const std::uint64_t body_bytes = file.size() - body;
  const std::size_t chunk_count = std::clamp<std::size_t>(
      static_cast<std::size_t>(body_bytes / (64 << 10)), 1, 64);  // ≥ 64 KB each
  std::vector<Chunk> chunks;
  {
    std::vector<char> window;
    for (std::uint64_t at = body; at < file.size() && chunks.size() < chunk_count;) {
      const std::uint64_t cut =
          chunks.size() + 1 == chunk_count
              ? file.size()
              : std::max(at, body + body_bytes * (chunks.size() + 1) / chunk_count);
      const std::uint64_t stop = next_line_start(file, cut, window);
      chunks.push_back({.begin = at, .end = stop});
      at = stop;
    }
  }
  const auto count = static_cast<std::int64_t>(chunks.size());
  std::vector<std::exception_ptr> failures(chunks.size());
  const auto rethrow = [&] {
    for (const std::exception_ptr& e : failures) {
      if (e) std::rethrow_exception(e);
    }
  };
  parallel_for(count, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    std::vector<char> buffer;
    for (std::int64_t k = b; k < e; ++k) {
      Chunk& chunk = chunks[static_cast<std::size_t>(k)];
      try {
        const char* const data = load(file, chunk, buffer);
        const char* const end = data + (chunk.end - chunk.begin);
        for (const char* p = data; p < end;) {
          const std::string_view line = line_at(p, end, p);
          ++chunk.lines;
          chunk.rows += !line.empty();
        }
      } catch (...) {
        failures[static_cast<std::size_t>(k)] = std::current_exception();
      }
    }
  });
  rethrow();
  std::int64_t rows = 0, lines = 1;
  for (Chunk& chunk : chunks) {
    chunk.first_row = rows;
    chunk.first_line = lines + 1;
    rows += chunk.rows;
    lines += chunk.lines;
  }
  LOCKSTEP_CHECK_AS(IOError, rows > 0, path, ": the file has a header and no rows");
  table.rows = rows;
  const auto n = static_cast<std::size_t>(rows);

  // Each column's kind guessed from the first rows: text when one of
  // their fields is not a number (final), else numbers (until a field
  // says otherwise).
  std::vector<char> as_text(width, 0);
  const auto is_missing = [&](std::string_view field) {
    return field.empty() || (!options.na_value.empty() && field == options.na_value);
  };
  {
    std::int64_t guessed = 0;
    std::vector<char> buffer;
    for (std::size_t k = 0; k < chunks.size() && guessed < kGuessRows; ++k) {
      const char* const data = load(file, chunks[k], buffer);
      const char* const end = data + (chunks[k].end - chunks[k].begin);
      for (const char* p = data; p < end && guessed < kGuessRows;) {
        const std::string_view line = line_at(p, end, p);
        if (line.empty()) continue;
        ++guessed;
        std::deque<std::string> scratch;
        if (split_fields(line, delim, fields, scratch).empty() && fields.size() == width) {
          double value = 0;
          for (std::size_t c = 0; c < width; ++c)
            as_text[c] = as_text[c] || (!is_missing(fields[c]) && !parse_number(fields[c], value));
        }
      }
    }
  }
  // The fast path would read a missing-value marker that is a number as
  // that number.
  double marker = 0;
  const bool fast = options.na_value.empty() || !parse_number(options.na_value, marker);

  // Where each column goes: its place in the block of numbers or of texts.
  std::vector<double*> numbers(width, nullptr);
  std::vector<std::string_view*> texts(width, nullptr);
  {
    const auto text_columns =
        static_cast<std::size_t>(std::count(as_text.begin(), as_text.end(), 1));
    storage->numbers.resize((width - text_columns) * n);
    storage->texts.resize(text_columns * n);
    std::size_t next_number = 0, next_text = 0;
    for (std::size_t c = 0; c < width; ++c) {
      if (as_text[c]) {
        texts[c] = storage->texts.data() + n * next_text++;
      } else {
        numbers[c] = storage->numbers.data() + n * next_number++;
      }
    }
  }
  storage->arenas.resize(chunks.size());
  for (std::size_t k = 0; k < chunks.size(); ++k)
    storage->arenas[k].reserve(static_cast<std::size_t>(chunks[k].end - chunks[k].begin));

  // The chunks on all cores, straight into the columns: a number (NaN where
  // missing) or a text ("" where missing). `again` set: only its columns,
  // as texts (the second pass). Each chunk keeps its first error.
  std::vector<LineError> errors(chunks.size());
  std::vector<std::vector<ChunkColumn>> chunk_columns(chunks.size(),
                                                      std::vector<ChunkColumn>(width));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto parse = [&](const std::vector<char>* again) {
    parallel_for(count, 1 << 16, [&](std::int64_t b, std::int64_t e) {
      std::string unquoted;
      std::vector<char> buffer;
      for (std::int64_t k = b; k < e; ++k) try {
          const Chunk& chunk = chunks[static_cast<std::size_t>(k)];
          std::vector<ChunkColumn>& mine = chunk_columns[static_cast<std::size_t>(k)];
          // A text's bytes copied into the chunk's arena (reserved: no move).
          std::string& arena = storage->arenas[static_cast<std::size_t>(k)];
          const auto keep = [&](std::string_view field) {
            const std::size_t at = arena.size();
            LOCKSTEP_CHECK(at + field.size() <= arena.capacity(), path,
                           ": internal: a chunk's texts outgrew its bytes");
            arena.append(field);
            return std::string_view(arena.data() + at, field.size());
          };
          const char* const data = load(file, chunk, buffer);
          const char* const data_end = data + (chunk.end - chunk.begin);
          const char* const limit = data_end + kPadding;
          auto r = static_cast<std::size_t>(chunk.first_row);
          std::int64_t number = chunk.first_line - 1;
          for (const char* next = data; next < data_end;) {
            const std::string_view line = line_at(next, data_end, next);
            ++number;
            if (line.empty()) continue;
            const char* p = line.data();
            const char* const end = p + line.size();
            std::size_t c = 0;
            std::string what;
            while (true) {
              if (c < width && again == nullptr && fast && numbers[c] != nullptr &&
                  !mine[c].not_numbers && fast_number(p, end, limit, delim, numbers[c][r])) {
                // parsed
              } else {
                std::string_view field;
                bool in_unquoted = false;
                what = next_field(p, end, delim, field, unquoted, in_unquoted);
                if (!what.empty()) break;
                if (c < width) {
                  const bool missing = is_missing(field);
                  if (again != nullptr) {
                    if ((*again)[c] && !missing) texts[c][r] = keep(field);
                  } else {
                    ChunkColumn& column = mine[c];
                    if (missing && column.missing++ == 0) column.first_missing_line = number;
                    if (texts[c] != nullptr) {
                      if (!missing) texts[c][r] = keep(field);
                    } else {
                      double& value = numbers[c][r];
                      value = nan;
                      if (!missing && !column.not_numbers && !parse_number(field, value))
                        column.not_numbers = true;
                    }
                  }
                }
              }
              ++c;
              if (p == end) break;
              ++p;  // the delimiter; after a trailing one, one more, empty field
            }
            if (what.empty() && c != width)
              what = "expected " + std::to_string(width) + " fields (as the header), got " +
                     std::to_string(c);
            if (!what.empty()) {
              errors[static_cast<std::size_t>(k)] = {number, std::move(what)};
              break;
            }
            ++r;
          }
        } catch (...) {
          failures[static_cast<std::size_t>(k)] = std::current_exception();
        }
    });
    rethrow();
  };
  parse(nullptr);
  for (const LineError& e : errors) {
    if (e.line != 0) bad(e.line, e.what);
  }
  // A column guessed numeric that held text after the first rows: its
  // fields read again, as texts, into a block of their own.
  std::vector<char> again(width, 0);
  std::size_t again_count = 0;
  for (std::size_t c = 0; c < width; ++c) {
    for (const std::vector<ChunkColumn>& chunk : chunk_columns)
      again[c] = again[c] || chunk[c].not_numbers;
    again_count += again[c] != 0;
  }
  if (again_count > 0) {
    storage->late_texts.resize(again_count * n);
    std::size_t next_text = 0;
    for (std::size_t c = 0; c < width; ++c) {
      if (again[c]) texts[c] = storage->late_texts.data() + n * next_text++;
    }
    parse(&again);
  }
  // A column with no value at all is text (no field is a number).
  for (std::size_t c = 0; c < width; ++c) {
    CsvTable::Column& col = table.columns[c];
    for (const std::vector<ChunkColumn>& chunk : chunk_columns) {
      if (chunk[c].missing > 0 && col.missing == 0)
        col.first_missing_line = chunk[c].first_missing_line;
      col.missing += chunk[c].missing;
    }
    col.numeric = !as_text[c] && !again[c] && col.missing < rows;
    if (col.numeric) {
      col.numbers = {numbers[c], n};
    } else if (texts[c] != nullptr) {
      col.text = {texts[c], n};
    } else {
      if (storage->no_texts.empty()) storage->no_texts.resize(n);
      col.text = {storage->no_texts.data(), n};
    }
  }
  table.storage = std::move(storage);
  return table;
}

}  // namespace lockstep::data
