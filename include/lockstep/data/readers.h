// File readers for the input pipeline: CSV and NumPy .npy (IDX is in idx.h).
//
//   auto ds = ls::data::csv_dataset({"train.csv"},
//       {.columns = {{ls::DType::kFloat32, 0.0}, {ls::DType::kInt32}},
//        .header = true});
//   auto x = ls::data::read_npy("features.npy");
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"

namespace lockstep::data {

// One CSV column (tf.data's record_defaults): its dtype (float32, int32 or
// int64) and the value used when a field is missing; without a default the
// column is required and a missing field is an error.
struct CsvColumn {
  DType dtype = DType::kFloat32;
  std::optional<double> default_value{};
};

struct CsvOptions {
  std::vector<CsvColumn> columns{};  // one per selected column, in order
  bool header = false;               // skip each file's first line
  char field_delim = ',';
  std::vector<int> select_cols{};  // empty: all columns (then columns.size() of them)
  std::string na_value{};          // a field equal to this is missing (as is an empty one)
};

// Elements: one scalar tensor per selected column. Fields may be quoted
// ("a, b"; "" for a quote). A row with the wrong number of fields or a value
// that does not parse is an IOError naming the file, line and column.
// Iterator state records the file and byte offset.
Dataset csv_dataset(std::vector<std::string> filenames, CsvOptions options);

// A NumPy .npy file (format 1.0–3.0, C order; dtypes <f4 <f8 <i4 <i8 |u1
// |i1 |b1; float64 becomes float32, int8 int32). A truncated or corrupt
// file is an IOError naming the file, the byte offset and what the header
// promised.
Tensor read_npy(const std::string& path);
// The same from an array's bytes held in memory (a member of a .npz
// archive); errors name `name`.
Tensor read_npy_bytes(const std::string& bytes, const std::string& name);
// Writes `t` as .npy format 1.0, atomically; npy_bytes gives those bytes.
void write_npy(const std::string& path, const Tensor& t);
std::string npy_bytes(const Tensor& t);

}  // namespace lockstep::data
