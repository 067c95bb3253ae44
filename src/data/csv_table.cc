// read_csv_table: a whole CSV file into typed columns (csv_table.h).
#include "lockstep/data/csv_table.h"

#include <charconv>
#include <cmath>
#include <deque>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string_view>

#include "lockstep/core/error.h"

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
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK_AS(IOError, static_cast<bool>(in), path, ": cannot open the CSV file");
  // The whole file, then views of its fields: no string per field (a
  // 50,000-row table of 27 columns was 1.35 million of them). A quoted
  // field with doubled quotes is unescaped into `unquoted`, which its view
  // then points into.
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LOCKSTEP_CHECK_AS(IOError, !in.bad(), path, ": read failed");
  CsvTable table;
  table.path = path;
  std::deque<std::string> unquoted;
  std::vector<std::string_view> fields;
  std::int64_t line_number = 0;
  std::size_t at = 0;
  auto bad = [&](const std::string& what) {
    detail::throw_error<IOError>(path, ":", line_number, ": ", what);
  };
  // The next line's fields; false at the end of the text.
  auto next_fields = [&]() -> bool {
    while (at < text.size() || (at == text.size() && line_number == 0)) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      std::string_view line(text.data() + at, end - at);
      at = end + 1;
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty() && line_number > 1) continue;  // a blank line (the last one, often)
      fields.clear();
      std::size_t from = 0;
      while (true) {
        if (from < line.size() && line[from] == '"') {
          // A quoted field (RFC 4180): its inside as a view, or unescaped
          // into `unquoted` when it holds doubled quotes.
          std::size_t close = from + 1;
          bool doubled = false;
          while (true) {
            close = line.find('"', close);
            if (close == std::string_view::npos) bad("unterminated quote");
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
          if (next >= line.size()) break;
          if (line[next] != options.field_delim)
            bad("a quoted field is followed by '" + std::string(1, line[next]) +
                "', not the delimiter");
          from = next + 1;
          if (from == line.size()) {
            fields.emplace_back();  // a trailing delimiter: one more, empty field
            break;
          }
          continue;
        }
        const std::size_t delim = line.find(options.field_delim, from);
        fields.push_back(line.substr(from, delim == std::string_view::npos ? delim : delim - from));
        if (delim == std::string_view::npos) break;
        from = delim + 1;
      }
      return true;
    }
    return false;
  };
  if (text.empty() || !next_fields())
    bad("the file is empty; expected a header line naming the columns");
  std::set<std::string> seen;
  for (std::string_view name : fields) {
    if (name.empty())
      bad("the header has an empty column name (column " +
          std::to_string(table.columns.size() + 1) + ")");
    if (!seen.insert(std::string(name)).second)
      bad("the header names column '" + std::string(name) + "' twice");
    table.columns.push_back({.name = std::string(name)});
  }
  // Every field as a view first; a column is numeric when all of its
  // present fields parse.
  std::vector<std::vector<std::string_view>> cells(table.columns.size());
  while (next_fields()) {
    if (fields.size() != table.columns.size())
      bad("expected " + std::to_string(table.columns.size()) + " fields (as the header), got " +
          std::to_string(fields.size()));
    for (std::size_t c = 0; c < fields.size(); ++c) {
      CsvTable::Column& col = table.columns[c];
      std::string_view field = fields[c];
      if (field.empty() || (!options.na_value.empty() && field == options.na_value)) {
        if (col.missing++ == 0) col.first_missing_line = line_number;
        field = {};
      }
      cells[c].push_back(field);
    }
    ++table.rows;
  }
  LOCKSTEP_CHECK_AS(IOError, table.rows > 0, path, ": the file has a header and no rows");
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    CsvTable::Column& col = table.columns[c];
    std::vector<double> numbers;
    numbers.reserve(cells[c].size());
    bool numeric = col.missing < table.rows;
    for (std::string_view field : cells[c]) {
      double value = std::numeric_limits<double>::quiet_NaN();
      if (!field.empty() && !parse_number(field, value)) {
        numeric = false;
        break;
      }
      numbers.push_back(value);
    }
    col.numeric = numeric;
    if (numeric) {
      col.numbers = std::move(numbers);
    } else {
      col.text.reserve(cells[c].size());
      for (std::string_view field : cells[c]) col.text.emplace_back(field);
    }
  }
  return table;
}

}  // namespace lockstep::data
