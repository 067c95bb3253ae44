// `--data SOURCE` (data_source.h): image folders, CSV files and NumPy
// arrays read, checked and encoded for a model; the encoding kept beside a
// saved model; models built for the data, and files checked against it.
#include "data_source.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "lockstep/core/file.h"
#include "lockstep/core/timer.h"
#include "lockstep/data/dictionary.h"
#include "lockstep/io/zip.h"
#include "lockstep/tensor/parallel.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;
namespace ld = lockstep::data;
using json = nlohmann::json;

// Labels of a numeric column become classes when they are whole numbers
// with at most this many values (else the task is a regression).
constexpr std::size_t kMaxInferredClasses = 20;
// A text column of more different values than this (or than half the rows)
// is not taken as categories unless --features names it.
constexpr std::size_t kMaxCategories = 1000;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string join(const std::vector<std::string>& items, std::size_t at_most = 10) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < at_most; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > at_most) out += ", ... (" + std::to_string(items.size()) + " in all)";
  return out;
}

enum class Kind { kCsv, kNpy, kNpz, kImages };

Kind kind_of(const std::string& source) {
  LOCKSTEP_CHECK(!source.empty(), "--data: no source given");
  const auto parts = split_list(source);
  if (parts.size() == 2 && ends_with(parts[0], ".npy") && ends_with(parts[1], ".npy"))
    return Kind::kNpy;
  LOCKSTEP_CHECK(parts.size() == 1, "--data ", source,
                 ": expected a folder of class subfolders, a .csv file, x.npy,y.npy or a .npz "
                 "file");
  if (ends_with(source, ".csv")) return Kind::kCsv;
  if (ends_with(source, ".npz")) return Kind::kNpz;
  LOCKSTEP_CHECK_AS(IOError, fs::exists(source), "--data ", source, ": no such file or folder");
  LOCKSTEP_CHECK(fs::is_directory(source), "--data ", source,
                 ": expected a folder of class subfolders of images, a .csv file (with a header), "
                 "x.npy,y.npy or a .npz file holding x and y");
  return Kind::kImages;
}

std::array<std::int64_t, 2> parse_image_size(const std::string& text) {
  std::int64_t h = 0, w = 0;
  char x = 0, extra = 0;
  std::stringstream ss(text);
  const bool ok = static_cast<bool>(ss >> h >> x >> w) && (x == 'x' || x == 'X') && !(ss >> extra);
  LOCKSTEP_CHECK(ok && h >= 1 && w >= 1 && h <= 8192 && w <= 8192, "--image-size ", text,
                 ": expected HEIGHTxWIDTH, each from 1 to 8192 (\"96x96\")");
  return {h, w};
}

// ---- CSV ----

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A CSV table's text columns dictionary-encoded once each, when first
// asked: the spec's checks, vocabularies and classes and the encoding read
// the same codes (one hash lookup a row, on all cores).
class TextCodes {
 public:
  const ld::Dictionary& of(const ld::CsvTable::Column& col) {
    auto it = codes_.find(col.name);
    if (it == codes_.end()) it = codes_.emplace(col.name, ld::dictionary_encode(col.text)).first;
    return it->second;
  }

 private:
  std::map<std::string, ld::Dictionary> codes_{};
};

// The distinct texts of a column's rows [0, rows), sorted, "" left out.
std::vector<std::string> distinct_texts(const ld::Dictionary& d, std::size_t rows) {
  std::vector<char> seen(d.values.size(), 0);
  for (std::size_t r = 0; r < std::min(rows, d.codes.size()); ++r)
    seen[static_cast<std::size_t>(d.codes[r])] = 1;
  std::vector<std::string> out;
  for (std::size_t v = 0; v < d.values.size(); ++v) {
    if (seen[v] && !d.values[v].empty()) out.emplace_back(d.values[v]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Each of the rows [begin, end)'s index among `names` (-1 where its text
// is not one of them): one lookup per distinct text.
std::vector<std::int32_t> indices_among(const ld::Dictionary& d, std::size_t begin, std::size_t end,
                                        const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, std::int32_t> index;
  for (std::size_t i = 0; i < names.size(); ++i) index[names[i]] = static_cast<std::int32_t>(i);
  std::vector<std::int32_t> to(d.values.size(), -1);
  for (std::size_t v = 0; v < d.values.size(); ++v) {
    if (auto it = index.find(d.values[v]); it != index.end()) to[v] = it->second;
  }
  std::vector<std::int32_t> out(end - begin);
  for (std::size_t r = begin; r < end; ++r)
    out[r - begin] = to[static_cast<std::size_t>(d.codes[r])];
  return out;
}

// The label column's classes (sorted: text by its characters, numbers by
// value), or none when its values are a regression's.
std::optional<std::vector<std::string>> csv_classes(const ld::CsvTable::Column& label,
                                                    const std::string& loss, TextCodes& codes) {
  if (!label.numeric) {
    LOCKSTEP_CHECK(loss == "auto" || loss == "sparse_categorical_crossentropy", "--loss ", loss,
                   ": the label column '", label.name, "' holds text (classes)");
    return distinct_texts(codes.of(label), label.text.size());
  }
  if (loss == "mse" || loss == "mae") return std::nullopt;
  const bool whole = std::all_of(label.numbers.begin(), label.numbers.end(),
                                 [](double v) { return v == std::floor(v); });
  if (loss == "auto" && !whole) return std::nullopt;
  std::set<double> values;
  for (double v : label.numbers) {
    values.insert(v);
    if (loss == "auto" && values.size() > kMaxInferredClasses) return std::nullopt;
  }
  LOCKSTEP_CHECK(whole, "--loss ", loss, ": the label column '", label.name,
                 "' holds fractions; classes need whole numbers or text");
  std::vector<std::string> names;
  for (double v : values) names.push_back(number_text(v));
  return names;
}

// The rows [begin, end) of a column as texts: its own, or its numbers
// written as text (a column of numbers where the training data had text).
std::vector<std::int32_t> indices_of_rows(const ld::CsvTable::Column& col, std::int64_t begin,
                                          std::int64_t end, const std::vector<std::string>& names,
                                          TextCodes& codes) {
  const auto b = static_cast<std::size_t>(begin), e = static_cast<std::size_t>(end);
  if (!col.numeric) return indices_among(codes.of(col), b, e, names);
  std::vector<std::string> texts;
  for (std::size_t r = b; r < e; ++r) texts.push_back(number_text(col.numbers[r]));
  const std::vector<std::string_view> views(texts.begin(), texts.end());
  return indices_among(ld::dictionary_encode(views), 0, e - b, names);
}

// Rows [begin, end) of `table` encoded as `spec` says: x [n, width],
// y (with labels) int32 class ids or float32 [n, 1]. Each text column is
// dictionary-encoded once (one hash lookup a row); the rows are written on
// all cores.
std::pair<Tensor, Tensor> encode_csv(const ld::CsvTable& table, const DataSpec& spec,
                                     std::int64_t begin, std::int64_t end, bool with_labels,
                                     TextCodes& codes) {
  const std::int64_t n = end - begin, width = spec.sample_shape.at(0);
  // Per feature: its numbers, or each row's index in its vocabulary (-1:
  // outside it, all zeros).
  struct Source {
    const double* numbers = nullptr;
    std::vector<std::int32_t> one_hot{};
    std::int64_t offset = 0;
  };
  std::vector<Source> sources;
  std::int64_t offset = 0;
  for (const DataSpec::Feature& f : spec.features) {
    const ld::CsvTable::Column& col = table.column(f.name);
    Source& source = sources.emplace_back(Source{.offset = offset});
    if (f.vocabulary.empty()) {
      LOCKSTEP_CHECK(col.numeric, table.path, ": column '", f.name,
                     "' was numbers in the training data and holds text here");
      LOCKSTEP_CHECK(col.missing == 0, table.path, ":", col.first_missing_line, ": column '",
                     f.name, "' has no value (", col.missing,
                     " rows miss one); fill or drop them: every input needs a number");
      source.numbers = col.numbers.data() + begin;
      ++offset;
    } else {
      source.one_hot = indices_of_rows(col, begin, end, f.vocabulary, codes);
      offset += static_cast<std::int64_t>(f.vocabulary.size());
    }
  }
  Tensor xs = Tensor::empty(Shape{n, width});
  float* const x = xs.data<float>();
  // Row by row (a row is two cache lines; column by column, every source
  // walked all of x again).
  parallel_for(n, width * 2, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t r = b; r < e; ++r) {
      float* const row = x + r * width;
      std::fill(row, row + width, 0.0f);
      for (const Source& source : sources) {
        if (source.numbers != nullptr) {
          row[source.offset] = static_cast<float>(source.numbers[r]);
        } else if (const std::int32_t k = source.one_hot[static_cast<std::size_t>(r)]; k >= 0) {
          row[source.offset + k] = 1.0f;
        }
      }
    }
  });
  if (!with_labels) return {xs, Tensor()};
  const ld::CsvTable::Column& label = table.column(spec.label);
  LOCKSTEP_CHECK(label.missing == 0, table.path, ":", label.first_missing_line,
                 ": the label column '", spec.label, "' has no value (", label.missing,
                 " rows miss one)");
  if (!spec.classification()) {
    LOCKSTEP_CHECK(label.numeric, table.path, ": the label column '", spec.label,
                   "' holds text; the model was trained on numbers (a regression)");
    std::vector<float> y;
    for (std::int64_t r = begin; r < end; ++r)
      y.push_back(static_cast<float>(label.numbers[static_cast<std::size_t>(r)]));
    return {xs, Tensor::from_vector(y, Shape{n, 1})};
  }
  const std::vector<std::int32_t> y = indices_of_rows(label, begin, end, spec.class_names, codes);
  for (std::size_t r = 0; r < y.size(); ++r) {
    if (y[r] >= 0) continue;
    const std::size_t row = static_cast<std::size_t>(begin) + r;
    const std::string value =
        label.numeric ? number_text(label.numbers[row]) : std::string(label.text[row]);
    detail::throw_error<ValueError>(table.path, ":", row + 2, ": the label '", value,
                                    "' is not one of the model's classes (", join(spec.class_names),
                                    ")");
  }
  return {xs, Tensor::from_vector(y, Shape{n})};
}

// The spec of a CSV source: the label column, the features and their
// vocabularies, the classes; `train_rows` rows make the training split.
DataSpec csv_spec(const ld::CsvTable& table, const DataArgs& args, std::int64_t train_rows,
                  TextCodes& codes) {
  DataSpec spec;
  spec.kind = "csv";
  if (!args.label.empty()) {
    spec.label = table.column(args.label).name;
  } else {
    // Keras users name it; the usual names, else the last column, said.
    for (const char* guess : {"label", "target", "class", "y"}) {
      if (table.has_column(guess)) {
        spec.label = guess;
        break;
      }
    }
    if (spec.label.empty()) spec.label = table.columns.back().name;
    std::printf("Using column '%s' of %s as the label (--label names another).\n",
                spec.label.c_str(), table.path.c_str());
  }
  std::vector<std::string> names = split_list(args.features);
  if (names.empty()) {
    // A text column with a value per row or so is an identifier or free
    // text, not categories: left out, and said. A glance at the first rows
    // shows most such columns without encoding all of them; the others
    // are encoded whole (and kept for the vocabularies and the encoding).
    const std::size_t at_most =
        std::min(kMaxCategories, static_cast<std::size_t>(0.5 * static_cast<double>(table.rows)));
    const auto leave_out = [&](const ld::CsvTable::Column& c) {
      std::printf(
          "Leaving out column '%s': more than %zu different texts in %lld rows (an "
          "identifier or free text; --features takes it as categories all the same).\n",
          c.name.c_str(), at_most, static_cast<long long>(table.rows));
    };
    for (const auto& c : table.columns) {
      if (c.name == spec.label) continue;
      if (!c.numeric) {
        const std::size_t glance = std::min(c.text.size(), 4 * at_most + 1);
        if (ld::dictionary_encode(c.text.first(glance)).values.size() > at_most ||
            codes.of(c).values.size() > at_most) {
          leave_out(c);
          continue;
        }
      }
      names.push_back(c.name);
    }
  }
  LOCKSTEP_CHECK(!names.empty(), table.path, ": no input columns beside the label '", spec.label,
                 "'");
  std::int64_t width = 0;
  for (const std::string& name : names) {
    LOCKSTEP_CHECK(name != spec.label, "--features: '", name, "' is the label column");
    const ld::CsvTable::Column& col = table.column(name);
    DataSpec::Feature f{.name = name};
    if (!col.numeric) {
      f.vocabulary = distinct_texts(codes.of(col), static_cast<std::size_t>(train_rows));
      LOCKSTEP_CHECK(!f.vocabulary.empty(), table.path, ": column '", name,
                     "' has no values in the training rows");
    }
    width += f.vocabulary.empty() ? 1 : static_cast<std::int64_t>(f.vocabulary.size());
    spec.features.push_back(std::move(f));
  }
  spec.sample_shape = {width};
  const auto classes = csv_classes(table.column(spec.label), args.loss, codes);
  if (classes) {
    spec.class_names = *classes;
    LOCKSTEP_CHECK(spec.class_names.size() >= 2, table.path, ": the label column '", spec.label,
                   "' holds one class only ('", spec.class_names.at(0), "')");
    std::printf("Found %zu classes in column '%s': %s.\n", spec.class_names.size(),
                spec.label.c_str(), join(spec.class_names).c_str());
  } else {
    spec.targets = 1;
    std::printf("Column '%s' holds numbers: a regression (mean squared error).\n",
                spec.label.c_str());
  }
  return spec;
}

// ---- NPY ----

// Labels as class ids: whole numbers from 0; their classes are "0" .. "K-1".
std::vector<std::string> npy_classes(const Tensor& y, const std::string& where) {
  const std::vector<double> v = y.to_vector<double>();
  double top = -1;
  for (std::size_t i = 0; i < v.size(); ++i) {
    LOCKSTEP_CHECK(v[i] >= 0 && v[i] == std::floor(v[i]), where, ": label ", i, " is ", v[i],
                   "; class labels are whole numbers from 0");
    top = std::max(top, v[i]);
  }
  LOCKSTEP_CHECK(top >= 1, where, ": every label is 0; classes need at least two");
  std::vector<std::string> names;
  for (std::int64_t k = 0; k <= static_cast<std::int64_t>(top); ++k)
    names.push_back(std::to_string(k));
  return names;
}

// numpy.savez's archive: one .npy member per array, named by its key.
std::map<std::string, Tensor> read_npz(const std::string& path) {
  std::map<std::string, Tensor> arrays;
  for (const io::ZipMember& m : io::read_zip(path)) {
    if (!ends_with(m.name, ".npy")) continue;
    arrays[m.name.substr(0, m.name.size() - 4)] = ld::read_npy_bytes(m.data, path + ":" + m.name);
  }
  return arrays;
}

std::pair<Tensor, Tensor> read_npy_pair(const std::string& source, Kind kind) {
  if (kind == Kind::kNpy) {
    const auto parts = split_list(source);
    return {ld::read_npy(parts[0]), ld::read_npy(parts[1])};
  }
  const std::map<std::string, Tensor> arrays = read_npz(source);
  const auto x = arrays.find("x"), y = arrays.find("y");
  std::vector<std::string> names;
  for (const auto& [name, t] : arrays) names.push_back(name);
  LOCKSTEP_CHECK(x != arrays.end(), source, ": no array named 'x' (it holds ", join(names), ")");
  return {x->second, y == arrays.end() ? Tensor() : y->second};
}

// x in the shape and dtype the model takes: [n, features], sequences
// [n, steps, features] when the model's input has rank 2, else images
// [n, h, w, channels] (a channel added to [n, h, w]); float32, or int32 ids
// when the model takes integers (an Embedding's).
Tensor npy_inputs(const Tensor& x, const std::string& where,
                  const std::optional<std::vector<std::int64_t>>& model_input, DType want) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() >= 2 && x.rank() <= 4, where, ": x has shape ", x.shape(),
                    "; expected [examples, features], [examples, steps, features], [examples, "
                    "height, width] or [examples, height, width, channels]");
  if (want == DType::kInt32 || want == DType::kInt64) {
    LOCKSTEP_CHECK(x.dtype() != DType::kFloat32 && x.dtype() != DType::kBFloat16, where,
                   ": the model takes integer inputs (token ids) and x holds ",
                   dtype_name(x.dtype()), "; save x with an integer dtype");
    return cast(x, DType::kInt32);
  }
  const Tensor f = cast(x, DType::kFloat32);
  const bool sequences = model_input && model_input->size() == 2;
  if (x.rank() == 3 && !sequences) return reshape(f, {x.dim(0), x.dim(1), x.dim(2), 1});
  return f;
}

// Where x comes from, for messages: x.npy of "x.npy,y.npy", or "FILE.npz (x)".
std::string x_file(const std::string& source, Kind kind) {
  return kind == Kind::kNpy ? split_list(source).at(0) : source + " (x)";
}

DType input_dtype_of(const DataSpec& spec) {
  return spec.input_dtype == "int32" ? DType::kInt32 : DType::kFloat32;
}

// The mean and population variance of each column of the first `rows` rows
// of [n, d]: Normalization's adapt, whose statistics the model's layer takes.
void column_statistics(const Tensor& x, std::int64_t rows, DataSpec& spec) {
  layers::Normalization statistics;
  statistics->adapt(x.view_rows(0, rows));
  spec.mean = statistics->mean();
  spec.variance = statistics->variance();
}

// The mean and population variance of each numeric feature over the
// training rows [0, rows), of the float32 values the model sees (two
// passes in double, a column to a core); 0 and 1 for one-hot columns,
// which pass the model's Normalization unchanged.
void csv_statistics(const ld::CsvTable& table, std::int64_t rows, DataSpec& spec) {
  spec.mean.assign(static_cast<std::size_t>(spec.sample_shape.at(0)), 0.0);
  spec.variance.assign(spec.mean.size(), 1.0);
  std::vector<std::pair<const double*, std::size_t>> numeric;  // values, place in x
  std::size_t at = 0;
  for (const DataSpec::Feature& f : spec.features) {
    if (f.vocabulary.empty()) numeric.emplace_back(table.column(f.name).numbers.data(), at);
    at += f.vocabulary.empty() ? 1 : f.vocabulary.size();
  }
  const auto n = static_cast<std::size_t>(rows);
  // A sum of f(row) over the rows in four running sums (one would wait on
  // each add: 0.7 ms for issue #38's table, 0.2 ms in four).
  const auto sum_of = [n](auto f) {
    double s[4] = {0, 0, 0, 0};
    std::size_t r = 0;
    for (; r + 4 <= n; r += 4) {
      for (std::size_t j = 0; j < 4; ++j) s[j] += f(r + j);
    }
    for (; r < n; ++r) s[0] += f(r);
    return (s[0] + s[1]) + (s[2] + s[3]);
  };
  parallel_for(
      static_cast<std::int64_t>(numeric.size()), rows * 4, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i) {
          const auto [values, place] = numeric[static_cast<std::size_t>(i)];
          const double mean =
              sum_of([values](std::size_t r) -> double { return static_cast<float>(values[r]); }) /
              static_cast<double>(n);
          const double squares = sum_of([values, mean](std::size_t r) {
            const double d = static_cast<float>(values[r]) - mean;
            return d * d;
          });
          spec.mean[place] = mean;
          spec.variance[place] = squares / static_cast<double>(n);
        }
      });
}

// ---- splits ----

std::int64_t validation_rows(const DataArgs& args, std::int64_t n, const std::string& where) {
  const double split = args.validation_split >= 0       ? args.validation_split
                       : args.validation_source.empty() ? 0.2
                                                        : 0.0;
  LOCKSTEP_CHECK(split >= 0 && split < 1, "--validation-split ", split, ": expected [0, 1)");
  const auto rows = static_cast<std::int64_t>(std::floor(static_cast<double>(n) * split));
  LOCKSTEP_CHECK(n - rows >= 1, where, ": ", n, " examples leave none to train on");
  return rows;
}

std::string checksum_of(const std::vector<Tensor>& ts) {
  std::uint32_t crc = 0;
  for (const Tensor& t : ts) {
    if (!t.defined()) continue;
    // Host tensors, contiguous (views are rows): no copy (it cost 2–3 ms
    // of issue #38's table).
    crc = crc32c(t.raw_data(), t.nbytes(), crc);
  }
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

Examples in_memory(Tensor x, Tensor y) {
  Examples e;
  e.count = x.dim(0);
  e.x = std::move(x);
  e.y = std::move(y);
  return e;
}

Examples rows_of(const Examples& all, std::int64_t begin, std::int64_t end) {
  if (!all.arrays.empty()) {
    Examples e;
    e.names = all.names;
    for (const Tensor& a : all.arrays) e.arrays.push_back(a.view_rows(begin, end));
    e.count = end - begin;
    return e;
  }
  return in_memory(all.x.view_rows(begin, end),
                   all.y.defined() ? all.y.view_rows(begin, end) : Tensor());
}

// ---- named arrays: a model with several inputs or outputs ----

std::string tensor_name(const KerasTensor& t) {
  return t.node()->layer ? t.node()->layer->name() : t.node()->input_name;
}

// The model's inputs' then outputs' names, as a .npz names its arrays.
std::vector<std::string> array_names(const DataSpec& spec) {
  std::vector<std::string> names;
  for (const auto& a : spec.inputs) names.push_back(a.name);
  for (const auto& a : spec.outputs) names.push_back(a.name);
  return names;
}

// The names of a .npz's arrays and of what the model wants, for errors.
std::string archive_and_model(const std::map<std::string, Tensor>& arrays, const DataSpec& spec) {
  std::vector<std::string> held;
  for (const auto& [name, t] : arrays) held.push_back(name);
  return "it holds " + join(held) + "; the model's inputs and outputs are " +
         join(array_names(spec));
}

// The arrays of a .npz named as the spec's inputs (and, with labels, its
// outputs), each checked against its example shape and cast as the model
// takes it; every array with as many examples.
Examples named_examples(const std::string& source, Kind kind, const DataSpec& spec,
                        bool with_labels) {
  LOCKSTEP_CHECK(kind == Kind::kNpz, source, ": the model has ", spec.inputs.size(),
                 " input(s) and ", spec.outputs.size(),
                 " output(s); give a .npz whose arrays are named after them (",
                 join(array_names(spec)), "), as numpy.savez(file, name=array, ...) writes");
  const std::map<std::string, Tensor> arrays = read_npz(source);
  Examples e;
  const auto take = [&](const DataSpec::Array& want, bool output) {
    const auto it = arrays.find(want.name);
    LOCKSTEP_CHECK(it != arrays.end(), source, ": no array named '", want.name, "' (the model's ",
                   output ? "output" : "input", "); ", archive_and_model(arrays, spec));
    const Tensor& raw = it->second;
    const std::string where = source + " (" + want.name + ")";
    LOCKSTEP_CHECK_AS(ShapeError, raw.rank() >= 1, where,
                      ": a scalar; expected one row per example");
    Tensor t;
    if (!output) {
      t = npy_inputs(raw.rank() == 1 ? reshape(raw, {raw.dim(0), 1}) : raw, where, want.shape,
                     want.dtype == "int32" ? DType::kInt32 : DType::kFloat32);
      const std::vector<std::int64_t> got(t.shape().dims().begin() + 1, t.shape().dims().end());
      LOCKSTEP_CHECK_AS(ShapeError, got == want.shape, where, ": examples of shape ", Shape(got),
                        "; the model's input '", want.name, "' takes ", Shape(want.shape));
    } else if (!want.class_names.empty()) {
      LOCKSTEP_CHECK_AS(ShapeError, raw.rank() == 1, where,
                        ": class labels are one number per example; got shape ", raw.shape());
      t = cast(raw, DType::kInt32);
      const std::vector<std::int32_t> v = t.to_vector<std::int32_t>();
      const auto classes = static_cast<std::int32_t>(want.class_names.size());
      for (std::size_t r = 0; r < v.size(); ++r)
        LOCKSTEP_CHECK(v[r] >= 0 && v[r] < classes, where, ": label ", r, " is ", v[r],
                       "; the output '", want.name, "' has ", classes, " classes (0 to ",
                       classes - 1, ")");
    } else {
      t = cast(raw, DType::kFloat32);
      const std::int64_t n = t.dim(0);
      LOCKSTEP_CHECK_AS(ShapeError, t.numel() == n * want.targets, where, ": shape ", raw.shape(),
                        "; the output '", want.name, "' has ", want.targets,
                        " value(s) per example");
      t = reshape(t, {n, want.targets});
    }
    if (!e.arrays.empty())
      LOCKSTEP_CHECK_AS(ShapeError, t.dim(0) == e.count, source, ": '", want.name, "' has ",
                        t.dim(0), " examples and '", e.names[0], "' ", e.count,
                        "; every array needs one row per example");
    e.count = t.dim(0);
    e.names.push_back(want.name);
    e.arrays.push_back(t);
  };
  for (const auto& a : spec.inputs) take(a, false);
  if (with_labels) {
    for (const auto& a : spec.outputs) take(a, true);
  }
  return e;
}

// The spec of a .npz for a model with several inputs or outputs: the
// inputs as the model takes them, each output's task from its array
// (whole numbers, one per example: classes 0 to the largest; else a
// regression), or from --loss.
DataSpec named_spec(const std::string& source, Kind kind, const ModelSides& sides,
                    const std::string& loss) {
  DataSpec spec;
  spec.kind = "npy";
  for (std::size_t i = 0; i < sides.input_names.size(); ++i)
    spec.inputs.push_back(
        {.name = sides.input_names[i],
         .shape = sides.input_shapes[i],
         .dtype = sides.input_dtypes[i] == DType::kInt32 || sides.input_dtypes[i] == DType::kInt64
                      ? "int32"
                      : "float32"});
  for (const std::string& name : sides.output_names) spec.outputs.push_back({.name = name});
  if (kind != Kind::kNpz) return spec;  // named_examples says what is wanted
  const std::map<std::string, Tensor> arrays = read_npz(source);
  for (DataSpec::Array& out : spec.outputs) {
    const auto it = arrays.find(out.name);
    LOCKSTEP_CHECK(it != arrays.end(), source, ": no array named '", out.name,
                   "' (the model's output); ", archive_and_model(arrays, spec));
    const Tensor& y = it->second;
    const bool integers = y.dtype() != DType::kFloat32 && y.dtype() != DType::kBFloat16;
    const bool classes =
        loss == "sparse_categorical_crossentropy" || (loss == "auto" && integers && y.rank() == 1);
    if (classes) {
      out.class_names = npy_classes(y, source + " (" + out.name + ")");
      std::printf("Output '%s': %zu classes (labels 0 to %zu).\n", out.name.c_str(),
                  out.class_names.size(), out.class_names.size() - 1);
    } else {
      out.targets = y.rank() <= 1 ? 1 : y.numel() / std::max<std::int64_t>(y.dim(0), 1);
      std::printf("Output '%s': a regression on %lld value(s) per example.\n", out.name.c_str(),
                  static_cast<long long>(out.targets));
    }
  }
  return spec;
}

// Every image file starts as a JPEG or a PNG does, checked before any step
// (their first bytes only: a bad file deep in an epoch would otherwise stop
// the run there). A GIF or BMP, which Keras's loader takes, is named as
// such: Lockstep decodes JPEG and PNG.
void check_image_files(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    unsigned char head[8] = {};
    in.read(reinterpret_cast<char*>(head), sizeof head);
    const auto got = in.gcount();
    const bool jpeg = got >= 3 && head[0] == 0xFF && head[1] == 0xD8 && head[2] == 0xFF;
    const bool png = got == 8 && head[0] == 0x89 && head[1] == 'P' && head[2] == 'N' &&
                     head[3] == 'G' && head[4] == '\r' && head[5] == '\n';
    if (jpeg || png) continue;
    const bool gif = got >= 3 && head[0] == 'G' && head[1] == 'I' && head[2] == 'F';
    const bool bmp = got >= 2 && head[0] == 'B' && head[1] == 'M';
    detail::throw_error<IOError>(
        path, ": ",
        gif   ? "a GIF image; Lockstep decodes JPEG and PNG (convert it, or remove it)"
        : bmp ? "a BMP image; Lockstep decodes JPEG and PNG (convert it, or remove it)"
              : "not a JPEG or PNG image (its first bytes are no image signature): damaged, or "
                "not an image despite its name; remove or replace it",
        " (checked before training)");
  }
}

ld::ImageDatasetOptions image_options(const DataSpec& spec, bool with_labels) {
  ld::ImageDatasetOptions o;
  if (!with_labels) o.labels = std::nullopt;
  o.label_mode = with_labels ? std::optional<std::string>("int") : std::nullopt;
  o.color_mode = spec.color_mode;
  o.batch_size = std::nullopt;
  o.image_size = spec.image_size;
  o.shuffle = false;
  return o;
}

}  // namespace

// ---- flags ----

void add_data_options(CLI::App& command, DataArgs& a, bool training) {
  command.add_option("--data", a.source,
                     "your examples: a folder of class subfolders of images (JPEG, PNG), a CSV "
                     "file with a header, x.npy,y.npy, or a .npz holding x and y" +
                         std::string(training ? " (default: Fashion-MNIST's IDX files)" : ""));
  command.add_option("--label", a.label,
                     "CSV: the column to predict (default: one named label, target, class or y, "
                     "else the last)");
  command.add_option("--features", a.features,
                     "CSV: the input columns, comma-separated (default: all but the label; text "
                     "columns are one-hot encoded)");
  command.add_option("--image-size", a.image_size,
                     "images: HEIGHTxWIDTH they are resized to (default: a model file's input, "
                     "else 96x96)");
  command.add_option("--color-mode", a.color_mode, "images: rgb or grayscale")
      ->check(CLI::IsMember({"rgb", "grayscale"}))
      ->capture_default_str();
  if (!training) return;
  command.add_option("--validation-data", a.validation_source,
                     "examples to validate on after each epoch, read as --data is");
  command
      .add_option("--validation-split", a.validation_split,
                  "the fraction of --data held out for validation (the last rows of a table, "
                  "Keras's validation_split; a seeded split of an image folder; default 0.2, 0 "
                  "with --validation-data)")
      ->check(CLI::Range(0.0, 0.95));
  command
      .add_option("--loss", a.loss,
                  "auto (classes for text or few whole-number labels, else mean squared error), "
                  "sparse_categorical_crossentropy, mse or mae")
      ->check(CLI::IsMember({"auto", "sparse_categorical_crossentropy", "mse", "mae"}))
      ->capture_default_str();
}

// ---- DataSpec ----

std::string DataSpec::to_json() const {
  json features_json = json::array();
  for (const Feature& f : features)
    features_json.push_back({{"name", f.name}, {"vocabulary", f.vocabulary}});
  const json j = {{"format", "lockstep-data-spec"},
                  {"version", 1},
                  {"kind", kind},
                  {"sample_shape", sample_shape},
                  {"class_names", class_names},
                  {"targets", targets},
                  {"label", label},
                  {"features", features_json},
                  {"mean", mean},
                  {"variance", variance},
                  {"image_size", image_size},
                  {"color_mode", color_mode},
                  {"input_dtype", input_dtype}};
  json named = j;
  for (const auto* side : {&inputs, &outputs}) {
    json list = json::array();
    for (const Array& a : *side)
      list.push_back({{"name", a.name},
                      {"shape", a.shape},
                      {"dtype", a.dtype},
                      {"class_names", a.class_names},
                      {"targets", a.targets}});
    named[side == &inputs ? "inputs" : "outputs"] = list;
  }
  return named.dump(2) + "\n";
}

DataSpec DataSpec::from_json(const std::string& text, const std::string& where) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  LOCKSTEP_CHECK(j.is_object() && j.value("format", "") == "lockstep-data-spec", where,
                 ": not a data description written by lockstep train (", text.substr(0, 60), ")");
  DataSpec s;
  try {
    s.kind = j.at("kind").get<std::string>();
    s.sample_shape = j.at("sample_shape").get<std::vector<std::int64_t>>();
    s.class_names = j.at("class_names").get<std::vector<std::string>>();
    s.targets = j.at("targets").get<std::int64_t>();
    s.label = j.at("label").get<std::string>();
    for (const json& f : j.at("features"))
      s.features.push_back({.name = f.at("name").get<std::string>(),
                            .vocabulary = f.at("vocabulary").get<std::vector<std::string>>()});
    s.mean = j.at("mean").get<std::vector<double>>();
    s.variance = j.at("variance").get<std::vector<double>>();
    s.image_size = j.at("image_size").get<std::array<std::int64_t, 2>>();
    s.input_dtype = j.value("input_dtype", std::string("float32"));  // absent before int ids
    s.color_mode = j.at("color_mode").get<std::string>();
    for (auto* side : {&s.inputs, &s.outputs}) {
      for (const json& a : j.value(side == &s.inputs ? "inputs" : "outputs", json::array()))
        side->push_back({.name = a.at("name").get<std::string>(),
                         .shape = a.at("shape").get<std::vector<std::int64_t>>(),
                         .dtype = a.at("dtype").get<std::string>(),
                         .class_names = a.at("class_names").get<std::vector<std::string>>(),
                         .targets = a.at("targets").get<std::int64_t>()});
    }
  } catch (const json::exception& e) {
    detail::throw_error<ValueError>(where, ": a damaged data description (", e.what(), ")");
  }
  return s;
}

std::optional<DataSpec> spec_beside(const std::string& model_path) {
  const std::string path = model_path + ".data.json";
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return DataSpec::from_json(text.str(), path);
}

void save_spec_beside(const std::string& model_path, const DataSpec& spec) {
  AtomicFileWriter out(model_path + ".data.json");
  const std::string text = spec.to_json();
  out.write(text.data(), text.size());
  out.commit();
}

// ---- Examples ----

ld::Dataset Examples::batches(std::int64_t batch_size,
                              std::optional<std::uint64_t> shuffle_seed) const {
  if (files.defined()) {
    ld::Dataset ds = files;
    if (shuffle_seed) ds = ds.shuffle(std::min<std::int64_t>(count, 1024), {.seed = *shuffle_seed});
    return ds.batch(batch_size).prefetch(ld::kAutotune);
  }
  ld::Dataset ds = !arrays.empty() ? ld::Dataset::from_tensor_slices(arrays, names)
                   : y.defined()   ? ld::Dataset::from_tensor_slices({x, y})
                                   : ld::Dataset::from_tensor_slices(std::vector<Tensor>{x});
  if (shuffle_seed) ds = ds.shuffle(count, {.seed = *shuffle_seed});
  return ds.batch(batch_size).prefetch(ld::kAutotune);
}

// ---- reading ----

TrainingData read_training_data(const DataArgs& args,
                                const std::optional<std::vector<std::int64_t>>& model_input,
                                DType model_input_dtype, const ModelSides* sides) {
  TrainingData out;
  DataSpec& spec = out.spec;
  const Kind kind = kind_of(args.source);
  const Timer reading;
  if (kind == Kind::kCsv) {
    const ld::CsvTable table = ld::read_csv_table(args.source);
    const std::int64_t val = validation_rows(args, table.rows, args.source);
    TextCodes codes;
    spec = csv_spec(table, args, table.rows - val, codes);
    auto [x, y] = encode_csv(table, spec, 0, table.rows, true, codes);
    // Numeric columns standardised by the training rows' statistics (the
    // model's Normalization layer); one-hot columns pass unchanged.
    csv_statistics(table, table.rows - val, spec);
    const Examples all = in_memory(x, y);
    out.train = rows_of(all, 0, table.rows - val);
    if (val > 0) out.validation = rows_of(all, table.rows - val, table.rows);
    out.fingerprint = "csv " + std::to_string(table.rows) + " rows, crc32c " + checksum_of({x, y});
    std::printf("Read %lld rows of %s in %.3f s.\n", static_cast<long long>(table.rows),
                args.source.c_str(), reading.seconds());
  } else if (sides != nullptr && sides->several()) {
    spec = named_spec(args.source, kind, *sides, args.loss);
    const Examples all = named_examples(args.source, kind, spec, true);
    const std::int64_t val = validation_rows(args, all.count, args.source);
    out.train = rows_of(all, 0, all.count - val);
    if (val > 0) out.validation = rows_of(all, all.count - val, all.count);
    out.fingerprint =
        "npz " + std::to_string(all.count) + " examples, crc32c " + checksum_of(all.arrays);
  } else if (kind == Kind::kNpy || kind == Kind::kNpz) {
    auto [x_raw, y_raw] = read_npy_pair(args.source, kind);
    LOCKSTEP_CHECK(y_raw.defined(), args.source, ": no array named 'y' (the labels)");
    LOCKSTEP_CHECK_AS(ShapeError,
                      x_raw.rank() >= 1 && y_raw.rank() >= 1 && x_raw.dim(0) == y_raw.dim(0),
                      args.source, ": x has ", x_raw.rank() ? x_raw.dim(0) : 0, " examples (shape ",
                      x_raw.shape(), ") and y ", y_raw.rank() ? y_raw.dim(0) : 0, " (shape ",
                      y_raw.shape(), "); they must have as many");
    spec.kind = "npy";
    const Tensor x = npy_inputs(x_raw, x_file(args.source, kind), model_input, model_input_dtype);
    spec.input_dtype = x.dtype() == DType::kInt32 ? "int32" : "float32";
    spec.sample_shape.assign(x.shape().dims().begin() + 1, x.shape().dims().end());
    const std::int64_t n = x.dim(0), val = validation_rows(args, n, args.source);
    const bool integer_labels = y_raw.dtype() != DType::kFloat32;
    const bool classes = args.loss == "sparse_categorical_crossentropy" ||
                         (args.loss == "auto" && integer_labels && y_raw.rank() == 1);
    Tensor y;
    if (classes) {
      LOCKSTEP_CHECK_AS(ShapeError, y_raw.rank() == 1, args.source,
                        ": class labels are one "
                        "number per example; y has shape ",
                        y_raw.shape());
      spec.class_names = npy_classes(y_raw, args.source);
      y = cast(y_raw, DType::kInt32);
      std::printf("Found %zu classes (labels 0 to %zu).\n", spec.class_names.size(),
                  spec.class_names.size() - 1);
    } else {
      y = cast(y_raw, DType::kFloat32);
      if (y.rank() == 1) y = reshape(y, {n, 1});
      spec.targets = y.numel() / n;
      y = reshape(y, {n, spec.targets});
      std::printf("y holds numbers: a regression on %lld value(s) per example.\n",
                  static_cast<long long>(spec.targets));
    }
    if (x.rank() == 2 && x.dtype() == DType::kFloat32) column_statistics(x, n - val, spec);
    if (x_raw.dtype() == DType::kUInt8) spec.color_mode = "pixels";  // [0, 255]: rescaled
    const Examples all = in_memory(x, y);
    out.train = rows_of(all, 0, n - val);
    if (val > 0) out.validation = rows_of(all, n - val, n);
    out.fingerprint = "npy " + std::to_string(n) + " examples, crc32c " + checksum_of({x, y});
  } else {
    spec.kind = "images";
    spec.color_mode = args.color_mode;
    if (!args.image_size.empty()) {
      spec.image_size = parse_image_size(args.image_size);
    } else if (model_input && model_input->size() == 3) {
      spec.image_size = {(*model_input)[0], (*model_input)[1]};
    } else {
      spec.image_size = {96, 96};
    }
    const std::int64_t channels = args.color_mode == "grayscale" ? 1 : 3;
    spec.sample_shape = {spec.image_size[0], spec.image_size[1], channels};
    ld::ImageDatasetOptions o = image_options(spec, true);
    o.shuffle = true;
    o.seed = args.seed;
    const double split = args.validation_split >= 0       ? args.validation_split
                         : args.validation_source.empty() ? 0.2
                                                          : 0.0;
    ld::ImageDataset train, val;
    if (split > 0) {
      o.validation_split = split;
      std::tie(train, val) = ld::image_dataset_from_directory_split(args.source, o);
    } else {
      train = ld::image_dataset_from_directory(args.source, o);
    }
    check_image_files(train.file_paths());
    if (val.defined()) check_image_files(val.file_paths());
    spec.class_names = train.class_names();
    out.train.files = train;
    out.train.count = static_cast<std::int64_t>(train.file_paths().size());
    if (val.defined()) {
      out.validation.files = val;
      out.validation.count = static_cast<std::int64_t>(val.file_paths().size());
    }
    std::string files;
    for (const auto& p : train.file_paths()) files += p + "\n";
    out.fingerprint =
        "images " + std::to_string(out.train.count) + " files, crc32c " +
        checksum_of({Tensor::from_vector(std::vector<std::uint8_t>(files.begin(), files.end()))});
  }
  if (!args.validation_source.empty()) {
    LOCKSTEP_CHECK(args.validation_split <= 0, "--validation-data and --validation-split ",
                   args.validation_split, ": give one of them");
    out.validation = read_examples(args.validation_source, spec, true);
  }
  return out;
}

Examples training_rows(const DataArgs& args, const Examples& all) {
  return rows_of(all, 0, all.count - validation_rows(args, all.count, args.source));
}

Examples read_examples(const std::string& source, const DataSpec& spec, bool with_labels) {
  const Kind kind = kind_of(source);
  if (spec.kind == "csv") {
    LOCKSTEP_CHECK(kind == Kind::kCsv, source, ": the model was trained on a CSV file; give one");
    const ld::CsvTable table = ld::read_csv_table(source);
    TextCodes codes;
    auto [x, y] = encode_csv(table, spec, 0, table.rows, with_labels, codes);
    return in_memory(x, y);
  }
  if (spec.named()) return named_examples(source, kind, spec, with_labels);
  if (spec.kind == "npy") {
    LOCKSTEP_CHECK(kind == Kind::kNpy || kind == Kind::kNpz || ends_with(source, ".npy"), source,
                   ": the model was trained on NumPy arrays; give x.npy,y.npy, x.npy or a .npz");
    Tensor x_raw, y_raw;
    if (split_list(source).size() == 1 && ends_with(source, ".npy")) {
      LOCKSTEP_CHECK(!with_labels, source, ": evaluating needs the labels too: x.npy,y.npy");
      x_raw = ld::read_npy(source);
    } else {
      std::tie(x_raw, y_raw) = read_npy_pair(source, kind);
    }
    const Tensor x =
        npy_inputs(x_raw, x_file(source, kind), spec.sample_shape, input_dtype_of(spec));
    Tensor y;
    if (with_labels) {
      LOCKSTEP_CHECK(y_raw.defined(), source, ": no labels (y)");
      LOCKSTEP_CHECK_AS(ShapeError, y_raw.rank() >= 1 && y_raw.dim(0) == x.dim(0), source,
                        ": x has ", x.dim(0), " examples and y ", y_raw.rank() ? y_raw.dim(0) : 0);
      y = spec.classification() ? cast(y_raw, DType::kInt32)
                                : reshape(cast(y_raw, DType::kFloat32), {x.dim(0), spec.targets});
    }
    return in_memory(x, y);
  }
  LOCKSTEP_CHECK(kind == Kind::kImages, source,
                 ": the model was trained on an image folder; give a folder");
  const ld::ImageDataset ds =
      ld::image_dataset_from_directory(source, image_options(spec, with_labels));
  if (with_labels)
    LOCKSTEP_CHECK(ds.class_names() == spec.class_names, source, ": its classes (",
                   join(ds.class_names()), ") are not the model's (", join(spec.class_names), ")");
  check_image_files(ds.file_paths());
  Examples e;
  e.files = ds;
  e.paths = ds.file_paths();
  e.count = static_cast<std::int64_t>(ds.file_paths().size());
  return e;
}

// ---- models ----

ModelSides ModelSides::of(const Model& model) {
  ModelSides sides;
  for (const KerasTensor& in : model.inputs()) {
    sides.input_names.push_back(tensor_name(in));
    sides.input_shapes.push_back(in.sample_shape().to_vector());
    sides.input_dtypes.push_back(in.dtype());
  }
  for (const KerasTensor& out : model.outputs()) sides.output_names.push_back(tensor_name(out));
  return sides;
}

bool ends_in_softmax(const Model& model) {
  const std::vector<Layer> layers = model.layers();
  if (layers.empty()) return false;
  const Layer& last = layers.back();
  if (last.impl()->class_name() == "Softmax") return true;
  const LayerConfig c = last.impl()->get_config();
  return c.has("activation") && c.get<std::string>("activation") == "softmax";
}

bool ends_in_softmax(const KerasTensor& output) {
  const auto& layer = output.node()->layer;
  if (!layer) return false;
  if (layer->class_name() == "Softmax") return true;
  const LayerConfig c = layer->get_config();
  return c.has("activation") && c.get<std::string>("activation") == "softmax";
}

void write_npz(const std::string& path, const std::vector<std::string>& names,
               const std::vector<Tensor>& arrays) {
  std::vector<io::ZipMember> members;
  for (std::size_t i = 0; i < arrays.size(); ++i)
    members.push_back({.name = names.at(i) + ".npy", .data = ld::npy_bytes(arrays[i])});
  atomic_write(path, io::zip_archive_image(members, 0));
}

namespace {

std::int64_t outputs_wanted(const DataSpec& spec) {
  return spec.classification() ? static_cast<std::int64_t>(spec.class_names.size()) : spec.targets;
}

}  // namespace

void check_model_fits_data(const Model& model, const DataSpec& spec, const std::string& name) {
  const std::vector<KerasTensor> inputs = model.inputs(), outputs = model.outputs();
  if (spec.named()) {
    LOCKSTEP_CHECK(inputs.size() == spec.inputs.size() && outputs.size() == spec.outputs.size(),
                   "--model ", name, ": the model has ", inputs.size(), " input(s) and ",
                   outputs.size(), " output(s); the data was read for ", spec.inputs.size(),
                   " and ", spec.outputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const DataSpec::Array& a = spec.inputs[i];
      LOCKSTEP_CHECK(tensor_name(inputs[i]) == a.name, "--model ", name, ": input ", i, " is '",
                     tensor_name(inputs[i]), "'; the data's is '", a.name, "'");
      LOCKSTEP_CHECK_AS(ShapeError, inputs[i].sample_shape() == Shape(a.shape), "--model ", name,
                        ": the input '", a.name, "' takes examples of shape ",
                        inputs[i].sample_shape(), " and the data's are ", Shape(a.shape));
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const DataSpec::Array& a = spec.outputs[i];
      LOCKSTEP_CHECK(tensor_name(outputs[i]) == a.name, "--model ", name, ": output ", i, " is '",
                     tensor_name(outputs[i]), "'; the data's is '", a.name, "'");
      const Shape& out = outputs[i].sample_shape();
      const std::int64_t units = out.rank() == 0 ? 1 : out.dims().back();
      const std::int64_t wanted =
          a.class_names.empty() ? a.targets : static_cast<std::int64_t>(a.class_names.size());
      LOCKSTEP_CHECK_AS(ShapeError, units == wanted, "--model ", name, ": the output '", a.name,
                        "' has ", units, " value(s) per example (shape ", out, ") and the data ",
                        a.class_names.empty() ? std::to_string(a.targets) + " target value(s)"
                                              : std::to_string(a.class_names.size()) + " classes");
    }
    return;
  }
  LOCKSTEP_CHECK(inputs.size() == 1 && outputs.size() == 1, "--model ", name, ": the model has ",
                 inputs.size(), " input(s) and ", outputs.size(),
                 " output(s); --data trains models with one of each");
  const Shape want(spec.sample_shape);
  LOCKSTEP_CHECK_AS(
      ShapeError, inputs[0].sample_shape() == want, "--model ", name,
      ": the model takes examples of shape ", inputs[0].sample_shape(), " and the data's are ",
      want, spec.kind == "images" ? " (--image-size and --color-mode set the images')" : "");
  const Shape& out = outputs[0].sample_shape();
  const std::int64_t units = out.rank() == 0 ? 1 : out.dims().back();
  LOCKSTEP_CHECK_AS(ShapeError, units == outputs_wanted(spec), "--model ", name, ": the model has ",
                    units, " output(s) per example (shape ", out, ") and the data ",
                    spec.classification() ? std::to_string(spec.class_names.size()) + " classes (" +
                                                join(spec.class_names) + ")"
                                          : std::to_string(spec.targets) + " target value(s)");
}

Model model_for_data(const std::string& which, const DataSpec& spec, const FineTuning& tuning) {
  const std::int64_t out = outputs_wanted(spec);
  const Shape shape(spec.sample_shape);
  const bool images = shape.rank() == 3;
  const bool pixels = spec.kind == "images" || spec.color_mode == "pixels";
  auto inputs = Input(shape);
  KerasTensor x = inputs;
  if (which == "mlp") {
    if (images) {
      if (pixels) x = layers::Rescaling(1.0f / 255.0f)(x);
      x = layers::Flatten()(x);
    } else if (!spec.mean.empty()) {
      x = layers::Normalization({.mean = spec.mean, .variance = spec.variance})(x);
    }
    x = layers::Dense(256, {.activation = "relu"})(x);
    x = layers::Dense(256, {.activation = "relu"})(x);
    return Model(inputs, layers::Dense(out)(x));
  }
  LOCKSTEP_CHECK_AS(ShapeError, images, "--model ", which,
                    " takes images [height, width, "
                    "channels]; this data's examples have shape ",
                    shape, " (try --model mlp)");
  if (which == "cnn") {
    if (pixels) x = layers::Rescaling(1.0f / 255.0f)(x);
    x = layers::Conv2D(32, {3, 3}, {.activation = "relu"})(x);
    x = layers::MaxPooling2D()(x);
    x = layers::Conv2D(64, {3, 3}, {.activation = "relu"})(x);
    x = layers::MaxPooling2D()(x);
    x = layers::Flatten()(x);
    x = layers::Dense(128, {.activation = "relu"})(x);
    return Model(inputs, layers::Dense(out)(x));
  }
  LOCKSTEP_CHECK(which == "mobilenet_v2", "--model ", which,
                 ": expected mlp, cnn, mobilenet_v2 or a model file");
  LOCKSTEP_CHECK_AS(ShapeError,
                    shape.dims()[0] >= 32 && shape.dims()[1] >= 32 && shape.dims()[2] == 3,
                    "--model mobilenet_v2 takes RGB images of at least 32x32; the data's are ",
                    shape, " (--image-size, --color-mode rgb)");
  // preprocess_input: pixels [0, 255] to [-1, 1]; or [0, 1] to [-1, 1].
  x = pixels ? layers::Rescaling(1.0f / 127.5f, {.offset = -1.0f})(x)
             : layers::Rescaling(2.0f, {.offset = -1.0f})(x);
  if (!tuning.weights.empty()) {
    // The report's model: a pretrained base without its top, then a head.
    const Model base = applications::MobileNetV2({.input_shape = shape,
                                                  .alpha = tuning.alpha,
                                                  .include_top = false,
                                                  .weights = tuning.weights,
                                                  .pooling = "avg"});
    x = base(x);
    x = layers::Dense(512, {.activation = "relu"})(x);
    x = layers::Dropout(0.5f)(x);
    return Model(inputs, layers::Dense(out)(x));
  }
  const Model base = applications::MobileNetV2({.input_shape = shape,
                                                .alpha = tuning.alpha,
                                                .include_top = true,
                                                .classes = out,
                                                .classifier_activation = "linear"});
  for (const Layer& layer : base.layers()) {
    if (auto* bn = dynamic_cast<layers::BatchNormalizationImpl*>(layer.impl().get()))
      bn->set_momentum(0.9f);  // as train.cc's mobilenet_v2, for short runs
  }
  return Model(inputs, base(x));
}

void load_weights_and_freeze(Model& model, const std::string& model_name, const FineTuning& tuning,
                             bool weights_loaded) {
  if (!tuning.weights.empty() && !weights_loaded) model.load_weights(tuning.weights);
  if (!tuning.changes_trainable()) return;
  LOCKSTEP_CHECK(
      !(tuning.freeze_base && !tuning.fine_tune_from.empty()),
      "--freeze-base and --fine-tune-from ", tuning.fine_tune_from,
      ": give one (the first stage freezes the base, the second trains it from a layer on)");
  std::optional<Layer> base;
  for (const Layer& layer : model.layers()) {
    if (dynamic_cast<const FunctionalImpl*>(layer.impl().get()) ||
        dynamic_cast<const SequentialImpl*>(layer.impl().get())) {
      base = layer;
      break;
    }
  }
  LOCKSTEP_CHECK(base.has_value(), "--model ", model_name,
                 ": no base to freeze or fine-tune (a nested model, as mobilenet_v2's); "
                 "--freeze-base and --fine-tune-from work on models built on one");
  if (tuning.freeze_base) {
    base->set_trainable(false);
    std::printf("Base '%s' frozen: %zu of the model's weights train.\n", base->name().c_str(),
                model.trainable_weights().size());
    return;
  }
  // Keras's recipe: base.trainable = True, then every layer before the
  // named one frozen again.
  base->set_trainable(true);
  std::vector<std::string> names;
  bool found = false;
  for (const auto& sub : base->impl()->sublayers()) {
    const Layer layer(sub);
    if (layer.name() == tuning.fine_tune_from) {
      found = true;
      break;
    }
    names.push_back(layer.name());
    layer.set_trainable(false);
  }
  LOCKSTEP_CHECK(found, "--fine-tune-from ", tuning.fine_tune_from, ": the base '", base->name(),
                 "' has no such layer (its layers: ", join(names, 12), ")");
  std::printf("Base '%s' trains from layer '%s' on (%zu layers before it frozen).\n",
              base->name().c_str(), tuning.fine_tune_from.c_str(), names.size());
}

double scheduled_learning_rate(const FineTuning& tuning, double learning_rate, int epoch,
                               int epochs) {
  if (tuning.schedule == "rampup") {
    // The report's (start_lr = min_lr = 1e-5, max_lr = 5e-5 a replica):
    // from lr/5 up to lr over 5 epochs, then x0.8 per epoch towards lr/5.
    return schedules::RampUp(
        {.start = learning_rate / 5, .max = learning_rate, .min = learning_rate / 5})(epoch);
  }
  if (tuning.schedule == "cosine")
    return schedules::CosineDecay(learning_rate, std::max(1, epochs))(epoch);
  if (tuning.schedule == "exponential")
    return schedules::ExponentialDecay(learning_rate, 1, 0.9)(epoch);
  return learning_rate;
}

CompileOptions compile_options_for(const DataSpec& spec, const Model& model,
                                   const std::string& loss, double learning_rate) {
  CompileOptions o;
  o.optimizer = optimizers::Adam({.learning_rate = learning_rate});
  if (spec.named()) {
    // Each output its own loss and metric, as Keras's compile with lists.
    const std::vector<KerasTensor> outputs = model.outputs();
    for (std::size_t i = 0; i < spec.outputs.size(); ++i) {
      const DataSpec::Array& a = spec.outputs[i];
      if (!a.class_names.empty()) {
        o.losses.push_back(losses::SparseCategoricalCrossentropy(
            {.from_logits = !ends_in_softmax(outputs.at(i))}));
        o.output_metrics.push_back({"accuracy"});
      } else {
        o.losses.push_back(loss == "mae" ? Loss(losses::MeanAbsoluteError())
                                         : Loss(losses::MeanSquaredError()));
        o.output_metrics.push_back({"mae"});
      }
    }
    return o;
  }
  if (spec.classification()) {
    o.loss = losses::SparseCategoricalCrossentropy({.from_logits = !ends_in_softmax(model)});
    o.metrics = {"accuracy"};
  } else {
    o.loss = loss == "mae" ? Loss(losses::MeanAbsoluteError()) : Loss(losses::MeanSquaredError());
    o.metrics = {"mae"};
  }
  return o;
}

}  // namespace lockstep::cli
