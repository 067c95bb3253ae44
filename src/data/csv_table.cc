// read_csv_table: a whole CSV file into typed columns (csv_table.h).
#include "lockstep/data/csv_table.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>

#include "internal.h"
#include "lockstep/core/error.h"

namespace lockstep::data {

namespace {

bool parse_number(const std::string& field, double& value) {
  const char* begin = field.c_str();
  while (*begin == ' ' || *begin == '\t') ++begin;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(begin, &end);
  while (end && (*end == ' ' || *end == '\t')) ++end;
  return end != begin && *end == '\0' && errno != ERANGE && std::isfinite(value);
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
  CsvTable table;
  table.path = path;
  std::string line;
  std::vector<std::string> fields;
  std::int64_t line_number = 0;
  auto bad = [&](const std::string& what) {
    detail::throw_error<IOError>(path, ":", line_number, ": ", what);
  };
  auto next_line = [&]() -> bool {
    if (!std::getline(in, line)) return false;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  };
  if (!next_line()) bad("the file is empty; expected a header line naming the columns");
  if (!split_csv_fields(line, options.field_delim, fields)) bad("unterminated quote in the header");
  std::set<std::string> seen;
  for (const std::string& name : fields) {
    if (name.empty())
      bad("the header has an empty column name (column " +
          std::to_string(table.columns.size() + 1) + ")");
    if (!seen.insert(name).second) bad("the header names column '" + name + "' twice");
    table.columns.push_back({.name = name});
  }
  // Every field as text first; a column is numeric when all of its present
  // fields parse.
  std::vector<std::vector<std::string>> text(table.columns.size());
  while (next_line()) {
    if (line.empty()) continue;  // a blank line (the last one, often)
    if (!split_csv_fields(line, options.field_delim, fields)) bad("unterminated quote");
    if (fields.size() != table.columns.size())
      bad("expected " + std::to_string(table.columns.size()) + " fields (as the header), got " +
          std::to_string(fields.size()));
    for (std::size_t c = 0; c < fields.size(); ++c) {
      CsvTable::Column& col = table.columns[c];
      const bool missing =
          fields[c].empty() || (!options.na_value.empty() && fields[c] == options.na_value);
      if (missing) {
        if (col.missing++ == 0) col.first_missing_line = line_number;
        fields[c].clear();
      }
      text[c].push_back(std::move(fields[c]));
    }
    ++table.rows;
  }
  LOCKSTEP_CHECK_AS(IOError, table.rows > 0, path, ": the file has a header and no rows");
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    CsvTable::Column& col = table.columns[c];
    std::vector<double> numbers;
    numbers.reserve(text[c].size());
    bool numeric = col.missing < table.rows;
    for (const std::string& field : text[c]) {
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
      col.text = std::move(text[c]);
    }
  }
  return table;
}

}  // namespace lockstep::data
