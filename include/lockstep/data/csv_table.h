// A whole CSV file with a header, read into typed columns: what
// `lockstep train --data FILE.csv` trains on (a table that fits in memory,
// as pandas.read_csv gives Keras users). Each column is numeric when every
// field that is not missing parses as a number, else text. A table holds
// its columns as Arrow does, immutable: spans into one block of numbers and
// views into the file's bytes, which the table keeps (copies share them).
//
//   ls::data::CsvTable t = ls::data::read_csv_table("penguins.csv");
//   const auto& species = t.column("species");   // text: species.text[row]
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

struct CsvTableOptions {
  char field_delim = ',';
  std::string na_value{};  // a field equal to this is missing (as is an empty one)
};

struct CsvTable {
  struct Column {
    std::string name{};
    bool numeric = true;
    std::span<const double> numbers{};         // numeric: one per row (NaN where missing)
    std::span<const std::string_view> text{};  // text: one per row ("" where missing)
    std::int64_t missing = 0;                  // rows without a value
    std::int64_t first_missing_line = 0;       // the file's line of the first (1 is the header)
  };
  std::string path{};
  std::int64_t rows = 0;
  std::vector<Column> columns{};
  std::shared_ptr<const void> storage{};  // what the columns point into

  // The column named `name`; a ValueError naming the file and its columns
  // when there is none.
  const Column& column(const std::string& name) const;
  bool has_column(const std::string& name) const;
  std::vector<std::string> names() const;
};

// Reads `path`: the first line names the columns (each name once); every
// row has as many fields. A row with another count, an unterminated quote,
// a file without rows or a duplicate name is an IOError naming the file and
// the line. Lines ending in "\r\n" are read as "\n".
CsvTable read_csv_table(const std::string& path, const CsvTableOptions& options = {});

}  // namespace lockstep::data
