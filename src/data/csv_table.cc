// read_csv_table: a whole CSV file into typed columns (csv_table.h).
//
// One buffer holding the file; the line starts (memchr, serial: 3 ms for
// 10 MB); each column's kind guessed from the first rows; then the rows
// split over the cores, each field parsed straight into its column (a
// number, or a text for the columns guessed text). A column guessed numeric
// that later holds text has its fields read again. No intermediate per
// field: issue #38's table of 50,000 rows has 1.2 million, and on a 2-core
// machine the first touch of fresh memory costs about 0.6 ms a MB
// (docs/benchmarks.md, "Your own data", has the times).
#include "lockstep/data/csv_table.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <set>
#include <string_view>

#include "lockstep/core/error.h"
#include "lockstep/core/file.h"
#include "lockstep/tensor/parallel.h"

namespace lockstep::data {

namespace {

// A number, as strtod reads one (spaces around it and a leading '+'
// allowed), finite; from_chars does the parsing (no locale, no copies).
bool parse_number(std::string_view field, double& value) {
  while (!field.empty() && (field.front() == ' ' || field.front() == '\t')) field.remove_prefix(1);
  while (!field.empty() && (field.back() == ' ' || field.back() == '\t')) field.remove_suffix(1);
  if (!field.empty() && field.front() == '+') field.remove_prefix(1);
  if (field.empty()) return false;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  return error == std::errc() && end == field.data() + field.size() && std::isfinite(value);
}

// One line of the file, without its "\r\n" or "\n", and its number (1 is
// the header).
struct Line {
  std::string_view text{};
  std::int64_t number = 0;
};

// What went wrong on a line: the first such line of the file is reported.
struct LineError {
  std::int64_t line = 0;  // 0: none
  std::string what{};
};

// Rows that guess each column's kind before the parallel pass.
constexpr std::int64_t kGuessRows = 100;

// Splits `line` into `fields` (cleared first). A quoted field (RFC 4180)
// is its inside as a view, or, when it holds doubled quotes, unescaped into
// `unquoted`, which its view then points into. Returns "" or what is wrong.
std::string split_fields(std::string_view line, char delim, std::vector<std::string_view>& fields,
                         std::deque<std::string>& unquoted) {
  fields.clear();
  std::size_t from = 0;
  while (true) {
    if (from < line.size() && line[from] == '"') {
      std::size_t close = from + 1;
      bool doubled = false;
      while (true) {
        close = line.find('"', close);
        if (close == std::string_view::npos) return "unterminated quote";
        if (close + 1 < line.size() && line[close + 1] == '"') {
          doubled = true;
          close += 2;
          continue;
        }
        break;
      }
      std::string_view inside = line.substr(from + 1, close - from - 1);
      if (doubled) {
        std::string plain;
        for (std::size_t i = 0; i < inside.size(); ++i) {
          plain += inside[i];
          if (inside[i] == '"') ++i;  // the second of a doubled quote
        }
        inside = unquoted.emplace_back(std::move(plain));
      }
      fields.push_back(inside);
      const std::size_t next = close + 1;
      if (next >= line.size()) return "";
      if (line[next] != delim)
        return "a quoted field is followed by '" + std::string(1, line[next]) +
               "', not the delimiter";
      from = next + 1;
      if (from == line.size()) {
        fields.emplace_back();  // a trailing delimiter: one more, empty field
        return "";
      }
      continue;
    }
    const void* hit =
        from < line.size() ? std::memchr(line.data() + from, delim, line.size() - from) : nullptr;
    if (hit == nullptr) {
      fields.push_back(line.substr(std::min(from, line.size())));
      return "";
    }
    const auto delim_at = static_cast<std::size_t>(static_cast<const char*>(hit) - line.data());
    fields.push_back(line.substr(from, delim_at - from));
    from = delim_at + 1;
  }
}

// The lines of `text` that are not blank (a blank line, the last one often,
// is skipped; the header is kept even when blank, to be refused).
std::vector<Line> lines_of(const std::string& text) {
  std::vector<Line> lines;
  lines.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
  const char* at = text.data();
  const char* const end = text.data() + text.size();
  std::int64_t number = 0;
  while (at < end || number == 0) {
    const char* newline = static_cast<const char*>(std::memchr(at, '\n', end - at));
    const char* stop = newline == nullptr ? end : newline;
    std::string_view line(at, static_cast<std::size_t>(stop - at));
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() || number == 1) lines.push_back({line, number});
    if (newline == nullptr) break;
    at = newline + 1;
  }
  return lines;
}

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
  std::string text;
  try {
    text = read_whole_file(path);
  } catch (const IOError& e) {
    detail::throw_error<IOError>(path, ": cannot open the CSV file (", e.what(), ")");
  }
  CsvTable table;
  table.path = path;
  auto bad = [&](std::int64_t line, const std::string& what) {
    detail::throw_error<IOError>(path, ":", line, ": ", what);
  };
  if (text.empty()) bad(1, "the file is empty; expected a header line naming the columns");
  const std::vector<Line> lines = lines_of(text);

  std::vector<std::string_view> fields;
  std::deque<std::string> header_unquoted;
  if (std::string what = split_fields(lines[0].text, options.field_delim, fields, header_unquoted);
      !what.empty())
    bad(1, what);
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
  const auto rows = static_cast<std::int64_t>(lines.size()) - 1;
  LOCKSTEP_CHECK_AS(IOError, rows > 0, path, ": the file has a header and no rows");
  table.rows = rows;

  // Each column's kind guessed from the first rows: text when one of
  // their fields is not a number (final), else numbers (until a field
  // says otherwise).
  std::vector<char> as_text(width, 0);
  const auto is_missing = [&](std::string_view field) {
    return field.empty() || (!options.na_value.empty() && field == options.na_value);
  };
  for (std::int64_t r = 1; r <= std::min<std::int64_t>(rows, kGuessRows); ++r) {
    std::deque<std::string> scratch;
    if (split_fields(lines[static_cast<std::size_t>(r)].text, options.field_delim, fields, scratch)
            .empty() &&
        fields.size() == width) {
      double value = 0;
      for (std::size_t c = 0; c < width; ++c)
        as_text[c] = as_text[c] || (!is_missing(fields[c]) && !parse_number(fields[c], value));
    }
  }
  std::vector<std::vector<double>> numbers(width);
  std::vector<std::vector<std::string>> texts(width);
  for (std::size_t c = 0; c < width; ++c) {
    if (as_text[c]) {
      texts[c].resize(static_cast<std::size_t>(rows));
    } else {
      numbers[c].resize(static_cast<std::size_t>(rows));
    }
  }
  // Pass 2, the rows split over the cores, straight into the columns: a
  // number (NaN where missing) or a text ("" where missing). Each part keeps
  // its first error and, per column, its missing fields and whether a field
  // of a column guessed numeric was not a number.
  struct PartColumn {
    bool not_numbers = false;
    std::int64_t missing = 0;
    std::int64_t first_missing_line = 0;
  };
  constexpr std::int64_t kParts = 64;  // ranges to hand out; enough for any core count here
  std::vector<LineError> errors(kParts);
  std::vector<std::vector<PartColumn>> parts(kParts, std::vector<PartColumn>(width));
  const std::int64_t per_part = (rows + kParts - 1) / kParts;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Calls row(r, fields, part) for each row, its fields split; an error
  // ends the part's rows.
  const auto each_row = [&](const auto& row) {
    parallel_for(kParts, per_part * static_cast<std::int64_t>(width) * 30,
                 [&](std::int64_t begin, std::int64_t end) {
                   std::vector<std::string_view> fields_of_row;
                   std::deque<std::string> unquoted;
                   for (std::int64_t part = begin; part < end; ++part) {
                     const auto p = static_cast<std::size_t>(part);
                     const std::int64_t last = std::min(rows, (part + 1) * per_part);
                     for (std::int64_t r = part * per_part; r < last; ++r) {
                       const Line& line = lines[static_cast<std::size_t>(r + 1)];
                       unquoted.clear();
                       std::string what =
                           split_fields(line.text, options.field_delim, fields_of_row, unquoted);
                       if (what.empty() && fields_of_row.size() != width)
                         what = "expected " + std::to_string(width) +
                                " fields (as the header), got " +
                                std::to_string(fields_of_row.size());
                       if (!what.empty()) {
                         errors[p] = {line.number, std::move(what)};
                         break;
                       }
                       row(static_cast<std::size_t>(r), line.number, fields_of_row, parts[p]);
                     }
                   }
                 });
  };
  each_row([&](std::size_t r, std::int64_t line, const std::vector<std::string_view>& row,
               std::vector<PartColumn>& part) {
    for (std::size_t c = 0; c < width; ++c) {
      PartColumn& mine = part[c];
      const std::string_view field = row[c];
      const bool missing = is_missing(field);
      if (missing && mine.missing++ == 0) mine.first_missing_line = line;
      if (as_text[c]) {
        if (!missing) texts[c][r] = field;
        continue;
      }
      double& value = numbers[c][r];
      value = nan;
      if (!missing && !mine.not_numbers && !parse_number(field, value)) mine.not_numbers = true;
    }
  });
  for (const LineError& e : errors) {
    if (e.line != 0) bad(e.line, e.what);
  }
  // A column guessed numeric that held text after the first rows: its
  // fields read again, as texts.
  std::vector<char> again(width, 0);
  bool any_again = false;
  for (std::size_t c = 0; c < width; ++c) {
    for (const std::vector<PartColumn>& part : parts) again[c] = again[c] || part[c].not_numbers;
    if (again[c]) {
      any_again = true;
      numbers[c] = {};
      texts[c].resize(static_cast<std::size_t>(rows));
    }
  }
  if (any_again) {
    each_row([&](std::size_t r, std::int64_t, const std::vector<std::string_view>& row,
                 std::vector<PartColumn>&) {
      for (std::size_t c = 0; c < width; ++c) {
        if (again[c] && !is_missing(row[c])) texts[c][r] = row[c];
      }
    });
  }
  for (std::size_t c = 0; c < width; ++c) {
    CsvTable::Column& col = table.columns[c];
    for (const std::vector<PartColumn>& part : parts) {
      if (part[c].missing > 0 && col.missing == 0)
        col.first_missing_line = part[c].first_missing_line;
      col.missing += part[c].missing;
    }
    // A column with no value at all is text (no field is a number).
    col.numeric = !as_text[c] && !again[c] && col.missing < rows;
    if (col.numeric) {
      col.numbers = std::move(numbers[c]);
    } else if (!texts[c].empty()) {
      col.text = std::move(texts[c]);
    } else {
      col.text.resize(static_cast<std::size_t>(rows));
    }
  }
  return table;
}

}  // namespace lockstep::data
