// CSV and .npy readers.
#include "lockstep/data/readers.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "internal.h"
#include "lockstep/core/checked.h"
#include "lockstep/core/file.h"

namespace lockstep::data {

// Splits one line into fields; quotes follow RFC 4180 within a line.
// Returns false on an unterminated quote.
bool split_csv_fields(const std::string& line, char delim, std::vector<std::string>& fields) {
  fields.clear();
  std::string field;
  bool quoted = false, was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += ch;
      }
    } else if (ch == '"' && field.empty() && !was_quoted) {
      quoted = was_quoted = true;
    } else if (ch == delim) {
      fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else {
      field += ch;
    }
  }
  if (quoted) return false;
  fields.push_back(std::move(field));
  return true;
}

namespace {

// ---- CSV ----

class CsvDataset final : public DatasetImpl {
 public:
  CsvDataset(std::vector<std::string> files, CsvOptions o)
      : files_(std::move(files)), options_(std::move(o)) {}
  std::int64_t cardinality() const override { return kUnknownCardinality; }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t) const override;
  const std::vector<std::string>& files() const { return files_; }
  const CsvOptions& options() const { return options_; }

 private:
  std::vector<std::string> files_;
  CsvOptions options_;
};

class CsvIterator final : public IteratorImpl {
 public:
  explicit CsvIterator(const CsvDataset& ds) : IteratorImpl("csv"), ds_(ds) {}

  std::optional<Element> next() override {
    const CsvOptions& o = ds_.options();
    while (file_ < ds_.files().size()) {
      if (!in_.is_open()) open_current(0, 0);
      const auto offset = static_cast<std::uint64_t>(in_.tellg());
      if (!std::getline(in_, line_)) {
        in_.close();
        ++file_;
        continue;
      }
      ++line_number_;
      if (!line_.empty() && line_.back() == '\r') line_.pop_back();
      if (o.header && line_number_ == 1) continue;
      if (line_.empty()) continue;  // blank lines, as tf.data
      offset_ = offset;
      return parse(line_);
    }
    return std::nullopt;
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["file"] = file_;
    w.json()["line"] = line_number_;
    w.json()["offset"] = in_.is_open() ? static_cast<std::uint64_t>(in_.tellg()) : 0;
  }
  void restore_fields(const StateReader& r) override {
    in_.close();
    file_ = r.at("file").get<std::size_t>();
    const auto line = r.at("line").get<std::uint64_t>();
    const auto offset = r.at("offset").get<std::uint64_t>();
    if (file_ < ds_.files().size() && (line > 0 || offset > 0)) open_current(offset, line);
  }

 private:
  const std::string& path() const { return ds_.files()[file_]; }

  void open_current(std::uint64_t offset, std::uint64_t line) {
    in_.clear();
    (void)regular_file_size(path());  // a FIFO or directory is named, never opened
    in_.open(path(), std::ios::binary);
    if (!in_) detail::throw_error<IOError>(path(), ": cannot open: ", std::strerror(errno));
    in_.seekg(static_cast<std::streamoff>(offset));
    LOCKSTEP_CHECK_AS(IOError, static_cast<bool>(in_), path(), ": cannot seek to byte ", offset,
                      " (the file is shorter than when the iterator state was saved)");
    line_number_ = line;
  }

  [[noreturn]] void bad(std::size_t column, const std::string& what) const {
    detail::throw_error<IOError>(path(), ":", line_number_, ":", column + 1, ": ", what);
  }

  Element parse(const std::string& line) {
    const CsvOptions& o = ds_.options();
    if (!split_csv_fields(line, o.field_delim, fields_)) bad(line.size(), "unterminated quote");
    const std::size_t expected_fields = o.select_cols.empty() ? o.columns.size() : 0;
    if (expected_fields != 0 && fields_.size() != expected_fields)
      bad(0, "expected " + std::to_string(expected_fields) + " fields, got " +
                 std::to_string(fields_.size()));
    std::vector<Tensor> parts;
    parts.reserve(o.columns.size());
    for (std::size_t k = 0; k < o.columns.size(); ++k) {
      const std::size_t col =
          o.select_cols.empty() ? k : static_cast<std::size_t>(o.select_cols[k]);
      if (col >= fields_.size())
        bad(fields_.size(), "expected at least " + std::to_string(col + 1) + " fields, got " +
                                std::to_string(fields_.size()));
      parts.push_back(parse_field(fields_[col], o.columns[k], col));
    }
    return Element(std::move(parts));
  }

  Tensor parse_field(const std::string& field, const CsvColumn& c, std::size_t col) const {
    const CsvOptions& o = ds_.options();
    double value = 0;
    if (field.empty() || (!o.na_value.empty() && field == o.na_value)) {
      if (!c.default_value) bad(col, "missing value in a required column (no default given)");
      value = *c.default_value;
    } else {
      const char* begin = field.c_str();
      char* end = nullptr;
      errno = 0;
      if (c.dtype == DType::kFloat32) {
        value = std::strtod(begin, &end);
      } else {
        value = static_cast<double>(std::strtoll(begin, &end, 10));
      }
      while (end && (*end == ' ' || *end == '\t')) ++end;
      if (end == begin || *end != '\0' || errno == ERANGE)
        bad(col, "cannot parse '" + field + "' as " + std::string(dtype_name(c.dtype)));
      if (c.dtype == DType::kInt32 && (value < -2147483648.0 || value > 2147483647.0))
        bad(col, "'" + field + "' does not fit in int32");
    }
    switch (c.dtype) {
      case DType::kFloat32:
        return Tensor::from_vector<float>({static_cast<float>(value)}, Shape{});
      case DType::kInt32:
        return Tensor::from_vector<std::int32_t>({static_cast<std::int32_t>(value)}, Shape{});
      default:
        return Tensor::from_vector<std::int64_t>({static_cast<std::int64_t>(value)}, Shape{});
    }
  }

  const CsvDataset& ds_;
  std::size_t file_ = 0;
  std::ifstream in_;
  std::string line_;
  std::uint64_t line_number_ = 0, offset_ = 0;
  std::vector<std::string> fields_;
};

std::unique_ptr<IteratorImpl> CsvDataset::make_iterator(std::uint64_t) const {
  return std::make_unique<CsvIterator>(*this);
}

// ---- NPY ----

[[noreturn]] void npy_error(const std::string& path, std::uint64_t offset,
                            const std::string& what) {
  detail::throw_error<IOError>(path, ": at byte offset ", offset, ": ", what);
}

// The value of 'key' in the header dict, as written by NumPy.
std::string header_value(const std::string& path, const std::string& header, const char* key,
                         std::uint64_t at) {
  const std::string quoted = std::string("'") + key + "'";
  const auto k = header.find(quoted);
  if (k == std::string::npos)
    npy_error(path, at, std::string("the header has no ") + quoted + ": " + header);
  auto p = header.find(':', k);
  if (p == std::string::npos) npy_error(path, at, "malformed header: " + header);
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') {
    const auto e = header.find(')', p);
    if (e == std::string::npos) npy_error(path, at, "malformed shape in header: " + header);
    return header.substr(p, e - p + 1);
  }
  if (p < header.size() && header[p] == '\'') {
    const auto e = header.find('\'', p + 1);
    if (e == std::string::npos) npy_error(path, at, "malformed header: " + header);
    return header.substr(p + 1, e - p - 1);
  }
  auto e = header.find_first_of(",}", p);
  return header.substr(p, e - p);
}

}  // namespace

Dataset csv_dataset(std::vector<std::string> filenames, CsvOptions options) {
  LOCKSTEP_CHECK(!filenames.empty(), "csv_dataset: no files");
  LOCKSTEP_CHECK(!options.columns.empty(),
                 "csv_dataset: no columns (give one CsvColumn per "
                 "column read)");
  LOCKSTEP_CHECK(
      options.select_cols.empty() || options.select_cols.size() == options.columns.size(),
      "csv_dataset: ", options.select_cols.size(), " select_cols but ", options.columns.size(),
      " columns");
  for (std::size_t i = 0; i < options.columns.size(); ++i) {
    const DType d = options.columns[i].dtype;
    LOCKSTEP_CHECK(d == DType::kFloat32 || d == DType::kInt32 || d == DType::kInt64,
                   "csv_dataset: column ", i, " has dtype ", d,
                   "; CSV columns are float32, int32 or int64");
  }
  for (std::size_t i = 0; i < options.select_cols.size(); ++i)
    LOCKSTEP_CHECK(options.select_cols[i] >= 0 &&
                       (i == 0 || options.select_cols[i] > options.select_cols[i - 1]),
                   "csv_dataset: select_cols must be increasing and >= 0");
  return Dataset(std::make_shared<CsvDataset>(std::move(filenames), std::move(options)));
}

namespace {

// The array in `in` (`size` bytes); errors name `path`.
Tensor parse_npy(std::istream& in, std::uint64_t size, const std::string& path) {
  unsigned char pre[10] = {};
  if (size < 10 || !in.read(reinterpret_cast<char*>(pre), 10) ||
      std::memcmp(pre, "\x93NUMPY", 6) != 0)
    npy_error(path, 0, "not a .npy file (no \\x93NUMPY magic)");
  const int major = pre[6];
  std::uint64_t header_len = 0, data_start = 0;
  if (major == 1) {
    header_len = pre[8] | (pre[9] << 8);
    data_start = 10 + header_len;
  } else if (major == 2 || major == 3) {
    unsigned char b[2] = {};
    if (size < 12 || !in.read(reinterpret_cast<char*>(b), 2))
      npy_error(path, 10, "truncated header");
    header_len = pre[8] | (pre[9] << 8) | (static_cast<std::uint64_t>(b[0]) << 16) |
                 (static_cast<std::uint64_t>(b[1]) << 24);
    data_start = 12 + header_len;
  } else {
    npy_error(path, 6, "unsupported .npy format version " + std::to_string(major));
  }
  if (data_start > size)
    npy_error(path, data_start - header_len,
              "the header promises " + std::to_string(header_len) + " bytes but the file has " +
                  std::to_string(size));
  std::string header(header_len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_len));
  const std::uint64_t hdr_at = data_start - header_len;
  const std::string descr = header_value(path, header, "descr", hdr_at);
  const std::string fortran = header_value(path, header, "fortran_order", hdr_at);
  const std::string shape_text = header_value(path, header, "shape", hdr_at);
  if (fortran.find("False") == std::string::npos)
    npy_error(path, hdr_at, "Fortran-order arrays are not supported (save with order='C')");
  std::vector<std::int64_t> dims;
  for (std::size_t i = 1; i + 1 < shape_text.size();) {
    while (i + 1 < shape_text.size() && (shape_text[i] == ' ' || shape_text[i] == ',')) ++i;
    if (i + 1 >= shape_text.size()) break;
    char* end = nullptr;
    const long long d = std::strtoll(shape_text.c_str() + i, &end, 10);
    if (end == shape_text.c_str() + i || d < 0)
      npy_error(path, hdr_at, "malformed shape " + shape_text);
    dims.push_back(d);
    i = static_cast<std::size_t>(end - shape_text.c_str());
  }
  if (dims.size() > static_cast<std::size_t>(Shape::kMaxRank))
    npy_error(
        path, hdr_at,
        "rank " + std::to_string(dims.size()) + " exceeds " + std::to_string(Shape::kMaxRank));
  struct Kind {
    const char* descr;
    std::size_t item;
    DType dtype;
  };
  static const Kind kinds[] = {
      {"<f4", 4, DType::kFloat32}, {"<f8", 8, DType::kFloat32}, {"<f2", 2, DType::kFloat32},
      {"<i4", 4, DType::kInt32},   {"<i8", 8, DType::kInt64},   {"|u1", 1, DType::kUInt8},
      {"<u1", 1, DType::kUInt8},   {"|i1", 1, DType::kInt32},   {"|b1", 1, DType::kBool}};
  const Kind* kind = nullptr;
  for (const auto& k : kinds) {
    if (descr == k.descr) kind = &k;
  }
  if (!kind)
    npy_error(path, hdr_at,
              "unsupported dtype '" + descr +
                  "' (supported: <f4 <f8 <f2 <i4 <i8 |u1 |i1 |b1, little-endian)");
  // Multiplied out without overflow (a shape like (2^40, 2^40) would wrap);
  // the claim is then held against the file's size below.
  std::optional<std::uint64_t> bytes = kind->item;
  for (std::int64_t d : dims) {
    if (bytes) bytes = checked_mul<std::uint64_t>(*bytes, static_cast<std::uint64_t>(d));
  }
  if (!bytes || *bytes > (std::uint64_t{1} << 62))
    npy_error(path, data_start, "the header's shape " + shape_text + " claims over 2^62 bytes");
  const std::uint64_t values = *bytes / kind->item;
  const Shape shape(dims);
  const std::uint64_t promised = values * kind->item;
  if (size - data_start != promised)
    npy_error(path, data_start,
              "the header promises " + descr + " " + shape.to_string() + " = " +
                  std::to_string(promised) + " bytes of data but the file has " +
                  std::to_string(size - data_start));
  std::vector<char> raw(promised);
  in.read(raw.data(), static_cast<std::streamsize>(promised));
  if (!in) npy_error(path, data_start, "read failed");
  Tensor t = Tensor::empty(shape, kind->dtype);
  const std::int64_t n = shape.numel();
  if (descr == "<f8") {
    auto* d = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, raw.data() + i * 8, 8);
      d[i] = static_cast<float>(v);
    }
  } else if (descr == "<f2") {  // float16, widened exactly (as <f8 is narrowed)
    auto* d = t.data<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, raw.data() + i * 2, 2);
      d[i] = float16::widen(h);
    }
  } else if (descr == "|i1") {
    auto* d = t.data<std::int32_t>();
    for (std::int64_t i = 0; i < n; ++i)
      d[i] = static_cast<std::int8_t>(raw[static_cast<std::size_t>(i)]);
  } else if (promised) {
    std::memcpy(t.raw_data(), raw.data(), promised);
  }
  return t;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  const std::uint64_t size = regular_file_size(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::throw_error<IOError>(path, ": cannot open: ", std::strerror(errno));
  return parse_npy(in, size, path);
}

Tensor read_npy_bytes(const std::string& bytes, const std::string& name) {
  std::istringstream in(bytes);
  return parse_npy(in, bytes.size(), name);
}

std::string npy_bytes(const Tensor& t) {
  check_defined(t, "write_npy", "tensor");
  const char* descr = nullptr;
  switch (t.dtype()) {
    case DType::kFloat32:
      descr = "<f4";
      break;
    case DType::kInt32:
      descr = "<i4";
      break;
    case DType::kInt64:
      descr = "<i8";
      break;
    case DType::kUInt8:
      descr = "|u1";
      break;
    case DType::kBool:
      descr = "|b1";
      break;
    case DType::kFloat16:
      descr = "<f2";
      break;
    default:
      detail::throw_error<ValueError>("write_npy: dtype ", t.dtype(), " has no .npy equivalent");
  }
  std::string shape = "(";
  for (int d = 0; d < t.rank(); ++d)
    shape += std::to_string(t.dim(d)) + (t.rank() == 1 ? "," : d + 1 < t.rank() ? ", " : "");
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so the data starts at a multiple of 64, newline-terminated.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>((header.size() >> 8) & 0xFF);
  out += header;
  const Tensor c = t.copy();  // contiguous
  out.append(static_cast<const char*>(c.raw_data()), c.nbytes());
  return out;
}

void write_npy(const std::string& path, const Tensor& t) { atomic_write(path, npy_bytes(t)); }

}  // namespace lockstep::data
