// File readers (CSV, NPY, IDX) and the cache file, including bad input.
#include "lockstep/data/readers.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "data_test_util.h"
#include "lockstep/core/file.h"
#include "lockstep/data/csv_table.h"
#include "lockstep/data/dataset.h"
#include "lockstep/data/datasets.h"
#include "lockstep/data/idx.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;

std::string slurp_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
using testing::expect_error;
using testing::iota;
using testing::scalars;

class ReadersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lockstep_readers_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& contents) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << contents;
    return p;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(ReadersTest, CsvTypedColumnsHeaderDefaultsAndQuotes) {
  const auto p = write("a.csv",
                       "x;label;weight\n"
                       "1.5;3;0.25\n"
                       "\"-2\";4;\n"
                       "\n"
                       "7;NA;1\r\n");
  Dataset ds = csv_dataset(
      {p}, {.columns = {{DType::kFloat32}, {DType::kInt32, -1.0}, {DType::kFloat32, 9.0}},
            .header = true,
            .field_delim = ';',
            .na_value = "NA"});
  std::vector<std::tuple<float, std::int32_t, float>> rows;
  for (const Element& e : ds)
    rows.emplace_back(e[0].item<float>(), e[1].item<std::int32_t>(), e[2].item<float>());
  EXPECT_EQ(rows, (std::vector<std::tuple<float, std::int32_t, float>>{
                      {1.5f, 3, 0.25f}, {-2.0f, 4, 9.0f}, {7.0f, -1, 1.0f}}));
  // select_cols picks columns by index.
  Dataset sel = csv_dataset({p}, {.columns = {{DType::kInt64, 0.0}},
                                  .header = true,
                                  .field_delim = ';',
                                  .select_cols = {1},
                                  .na_value = "NA"});
  EXPECT_EQ(scalars(sel), (std::vector<std::int64_t>{3, 4, 0}));
}

TEST_F(ReadersTest, CsvErrorsNameFileLineAndColumn) {
  const auto p = write("bad.csv", "1,2\n3,x\n4\n,5\n");
  CsvOptions o{.columns = {{DType::kFloat32}, {DType::kInt32}}};
  Iterator it = csv_dataset({p}, o).make_iterator();
  it.get_next();
  expect_error<IOError>([&] { it.get_next(); }, {p + ":2:2", "cannot parse 'x' as int32"});
  expect_error<IOError>([&] { it.get_next(); }, {p + ":3:1", "expected 2 fields, got 1"});
  expect_error<IOError>([&] { it.get_next(); }, {p + ":4:1", "missing value in a required column"});
  expect_error<IOError>([&] { csv_dataset({path("none.csv")}, o).make_iterator().next(); },
                        {"none.csv", "cannot open"});
  expect_error<ValueError>([&] { csv_dataset({p}, {.columns = {{DType::kUInt8}}}); },
                           {"float32, int32 or int64"});
}

// read_csv_table: named columns, numeric where every present field parses
// (missing ones NaN and counted), text otherwise; quotes and CRLF.
TEST_F(ReadersTest, CsvTableTypesColumnsByTheirFields) {
  const auto p = write("t.csv",
                       "height,species,\"note, quoted\",code\r\n"
                       "1.5,Adelie,\"a, b\",7\r\n"
                       ",Gentoo,c,x\n"
                       "\n"
                       "-2e1,Adelie,NA,8\n"
                       "+3, Adelie,\"say \"\"hi\"\"\",\n");
  const CsvTable t = read_csv_table(p, {.na_value = "NA"});
  EXPECT_EQ(t.rows, 4);
  EXPECT_EQ(t.names(), (std::vector<std::string>{"height", "species", "note, quoted", "code"}));
  const CsvTable::Column& height = t.column("height");
  ASSERT_TRUE(height.numeric);
  EXPECT_EQ(height.numbers[0], 1.5);
  EXPECT_TRUE(std::isnan(height.numbers[1]));
  EXPECT_EQ(height.numbers[2], -20.0);
  EXPECT_EQ(height.numbers[3], 3.0) << "a leading '+', as strtod reads it";
  EXPECT_EQ(height.missing, 1);
  EXPECT_EQ(height.first_missing_line, 3);
  EXPECT_FALSE(t.column("species").numeric);
  EXPECT_EQ(
      std::vector<std::string>(t.column("species").text.begin(), t.column("species").text.end()),
      (std::vector<std::string>{"Adelie", "Gentoo", "Adelie", " Adelie"}));
  EXPECT_EQ(t.column("note, quoted").text[0], "a, b");
  EXPECT_EQ(t.column("note, quoted").missing, 1);
  EXPECT_EQ(t.column("note, quoted").text[3], "say \"hi\"") << "doubled quotes unescaped";
  EXPECT_EQ(t.column("code").missing, 1) << "the empty field after a quoted one";
  EXPECT_FALSE(t.column("code").numeric) << "'x' is no number";
  expect_error<ValueError>([&] { (void)t.column("weight"); },
                           {p, "no column named 'weight'", "'height', 'species'"});
}

// The reader guesses each column's kind from the first rows and parses the
// rows on all cores: a column that turns to text after them is read again
// as text (its numbers kept as they were written), one missing in the first
// rows is still numeric, one with no value at all is text; every row in
// order.
TEST_F(ReadersTest, CsvTableColumnsThatChangeKindLateAreRightOnAllCores) {
  std::string csv = "id,code,late,empty\n";
  const int rows = 3000;
  for (int r = 0; r < rows; ++r) {
    csv += std::to_string(r) + "," + (r == 2500 ? std::string("x") : std::to_string(r % 7) + ".5") +
           "," + (r < 200 ? std::string("") : std::to_string(r)) + ",\n";
  }
  const CsvTable t = read_csv_table(write("late.csv", csv));
  ASSERT_EQ(t.rows, rows);
  const CsvTable::Column& id = t.column("id");
  ASSERT_TRUE(id.numeric);
  for (int r = 0; r < rows; ++r) ASSERT_EQ(id.numbers[static_cast<std::size_t>(r)], r) << r;
  const CsvTable::Column& code = t.column("code");
  ASSERT_FALSE(code.numeric) << "'x' on line 2502 is no number";
  ASSERT_EQ(code.text.size(), static_cast<std::size_t>(rows));
  EXPECT_EQ(code.text[0], "0.5");
  EXPECT_EQ(code.text[2498], "6.5");
  EXPECT_EQ(code.text[2500], "x");
  EXPECT_EQ(code.text[2999], "3.5");
  const CsvTable::Column& late = t.column("late");
  ASSERT_TRUE(late.numeric) << "missing in the first rows is no text";
  EXPECT_EQ(late.missing, 200);
  EXPECT_EQ(late.first_missing_line, 2);
  EXPECT_TRUE(std::isnan(late.numbers[199]));
  EXPECT_EQ(late.numbers[200], 200.0);
  const CsvTable::Column& empty = t.column("empty");
  EXPECT_FALSE(empty.numeric);
  EXPECT_EQ(empty.missing, rows);
  EXPECT_EQ(std::vector<std::string>(empty.text.begin(), empty.text.end()),
            std::vector<std::string>(rows, ""));
}

// Every number the reader takes is bitwise what strtod reads from the same
// field: the fast path (digits read eight at a time, one exact operation)
// and the fields it leaves to std::from_chars (16 digits and more, powers
// past 22), at every place in a line (the last field ends within eight
// bytes of the line's end), on all cores. A missing-value marker that is a
// number is missing, not that number.
TEST_F(ReadersTest, CsvTableNumbersAreBitwiseWhatStrtodReads) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-30, 30), digits(1, 17), form(0, 9);
  const char* fixed[] = {"0",
                         "-0",
                         "007",
                         "1.",
                         ".5",
                         "-.25",
                         "1e22",
                         "1e23",
                         "4.5e-22",
                         "123456789012345",
                         "1234567890123456",
                         "12345678901234567890",
                         "0.000000000000000000001",
                         "1E+05",
                         "2e-0",
                         "9007199254740993",
                         "0.1",
                         "-999",
                         "3.14159265358979",
                         "00000000000000000001.5"};
  std::vector<std::string> texts;
  for (const char* f : fixed) texts.emplace_back(f);
  char buffer[64];
  while (texts.size() < 60000) {
    const double v = mantissa(rng) * std::pow(10.0, exponent(rng));
    const int f = form(rng), d = digits(rng);
    if (f < 4) {
      std::snprintf(buffer, sizeof buffer, "%.*g", d, v);
    } else if (f < 6) {
      std::snprintf(buffer, sizeof buffer, "%.*f", d % 9, v * 1e-25 * std::pow(10.0, 25 - d));
    } else if (f < 8) {
      std::snprintf(buffer, sizeof buffer, "%.*e", d, v);
    } else {
      std::snprintf(buffer, sizeof buffer, "%lld", static_cast<long long>(v * 1e5));
    }
    texts.emplace_back(buffer);
  }
  // Three columns, so each text is read first, inside and last in a line.
  std::string csv = "a,b,c\n";
  const std::size_t rows = texts.size() / 3;
  for (std::size_t r = 0; r < rows; ++r)
    csv += texts[3 * r] + "," + texts[3 * r + 1] + "," + texts[3 * r + 2] + "\n";
  const std::string p = write("numbers.csv", csv);
  for (const std::string marker : {"", "-999"}) {
    const CsvTable t = read_csv_table(p, {.na_value = marker});
    ASSERT_EQ(t.rows, static_cast<std::int64_t>(rows));
    int missing = 0;
    for (std::size_t c = 0; c < 3; ++c) {
      const CsvTable::Column& col = t.columns[c];
      ASSERT_TRUE(col.numeric) << col.name;
      for (std::size_t r = 0; r < rows; ++r) {
        const std::string& text = texts[3 * r + c];
        const double got = col.numbers[r];
        if (text == marker) {
          EXPECT_TRUE(std::isnan(got)) << "the marker is missing, not a number";
          ++missing;
          continue;
        }
        const double want = std::strtod(text.c_str(), nullptr);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
            << "'" << text << "' (row " << r << ", column " << col.name << "): " << got << " vs "
            << want;
      }
    }
    EXPECT_EQ(missing, marker.empty() ? 0 : 1);
  }
}

// Fields that begin as numbers and are not one ("1.5x", "12-3", "1..2")
// make their column text, read in the middle of a line and at its end; a
// short number at a line's end is not joined to the next line's bytes.
TEST_F(ReadersTest, CsvTableFieldsThatOnlyBeginAsNumbersAreText) {
  const std::vector<std::string> odd = {"1.5x", "12-3", "-", "1..2", "--1", "1.2.3",
                                        "-.",   "1e",   ".", "0x1A", "+-1", "12345678.123456789"};
  for (std::size_t which = 0; which < odd.size(); ++which) {
    std::string csv = "a,b,c\n";
    std::vector<std::string> want;
    for (int r = 0; r < 400; ++r) {
      const std::string a = r == 300 ? odd[which] : std::to_string(r % 97) + ".25";
      want.push_back(a);
      csv += a + "," + a + "," + std::to_string(r % 7) + "\n";
    }
    const CsvTable t = read_csv_table(write("odd.csv", csv));
    const std::string& field = odd[which];
    if (field == "12345678.123456789") {  // a number, past the one-load path: from_chars
      ASSERT_TRUE(t.column("a").numeric);
      EXPECT_EQ(t.column("a").numbers[300], std::strtod(field.c_str(), nullptr));
      continue;
    }
    for (const char* name : {"a", "b"}) {
      const CsvTable::Column& col = t.column(name);
      ASSERT_FALSE(col.numeric) << "'" << field << "' in column " << name << " is no number";
      EXPECT_EQ(col.text[300], field);
      EXPECT_EQ(col.text[299], want[299]);
    }
    const CsvTable::Column& c = t.column("c");
    ASSERT_TRUE(c.numeric);
    for (int r = 0; r < 400; ++r) ASSERT_EQ(c.numbers[static_cast<std::size_t>(r)], r % 7) << r;
  }
}

// The file is read in parts (a reused buffer a core, never the whole
// file at once): a header longer than the first read, CRLF line ends, rows
// across the parts' cuts, quoted texts with doubled quotes, and no line end
// after the last row.
TEST_F(ReadersTest, CsvTableReadInPartsIsTheWholeFile) {
  std::string header;
  for (char c = 'a'; c <= 'c'; ++c) header += (c == 'a' ? "" : ",") + std::string(40000, c);
  std::string csv = header + "\r\n";
  const int rows = 20000;  // ~600 KB: several parts
  for (int r = 0; r < rows; ++r) {
    const std::string n = std::to_string(r);
    csv += n + ".5,\"t \"\"" + n + "\"\" x\",w" + std::to_string(r % 13);
    if (r + 1 < rows) csv += "\r\n";
  }
  const CsvTable t = read_csv_table(write("parts.csv", csv));
  ASSERT_EQ(t.rows, rows);
  ASSERT_EQ(t.columns.size(), 3u);
  EXPECT_EQ(t.columns[0].name, std::string(40000, 'a'));
  EXPECT_EQ(t.columns[2].name, std::string(40000, 'c'));
  const CsvTable::Column& a = t.columns[0];
  const CsvTable::Column& b = t.columns[1];
  const CsvTable::Column& c = t.columns[2];
  ASSERT_TRUE(a.numeric);
  ASSERT_FALSE(b.numeric);
  ASSERT_FALSE(c.numeric);
  for (int r = 0; r < rows; ++r) {
    const auto i = static_cast<std::size_t>(r);
    ASSERT_EQ(a.numbers[i], r + 0.5) << r;
    ASSERT_EQ(b.text[i], "t \"" + std::to_string(r) + "\" x") << r;
    ASSERT_EQ(c.text[i], "w" + std::to_string(r % 13)) << r;
  }
}

// Blank lines ("", "\r") anywhere (at every offset of the 64-byte blocks
// the rows are counted in, across the parts' cuts, and as a last line
// without its '\n') are no rows, and still count as lines in the errors.
TEST_F(ReadersTest, CsvTableBlankLinesAnywhereAreNoRowsButStillLines) {
  std::mt19937 rng(5);
  std::string csv = "a,b\n";
  std::vector<std::string> texts;
  std::int64_t line = 1, bad_line = 0;
  const int rows = 30000;  // ~1.5 MB: several parts
  const auto build = [&](bool with_bad_row) {
    csv = "a,b\n";
    texts.clear();
    line = 1;
    for (int r = 0; r < rows; ++r) {
      for (int blanks = static_cast<int>(rng() % 3); blanks > 0; --blanks) {
        csv += rng() % 2 ? "\n" : "\r\n";
        ++line;
      }
      texts.push_back(std::string(rng() % 90, 'x') + "y");
      const bool bad = with_bad_row && r == rows - 7;
      csv += std::to_string(r) + (bad ? "" : "," + texts.back()) + (rng() % 2 ? "\n" : "\r\n");
      ++line;
      if (bad) bad_line = line;
    }
    csv += "\r";  // a blank last line without its '\n'
  };
  build(false);
  const CsvTable t = read_csv_table(write("blank.csv", csv));
  ASSERT_EQ(t.rows, rows);
  for (int r = 0; r < rows; ++r) {
    const auto i = static_cast<std::size_t>(r);
    ASSERT_EQ(t.column("a").numbers[i], r) << r;
    ASSERT_EQ(t.column("b").text[i], texts[i]) << r;
  }
  build(true);
  expect_error<IOError>([&] { read_csv_table(write("blank_bad.csv", csv)); },
                        {"blank_bad.csv:" + std::to_string(bad_line), "got 1"});
}

// The table's numbers and texts live as long as any copy of it.
TEST_F(ReadersTest, CsvTableColumnsOutliveTheTableTheyWereReadInto) {
  const auto p = write("t.csv", "x,name\n1.5,\"a \"\"b\"\"\"\n2,c\n");
  CsvTable copy;
  {
    const CsvTable t = read_csv_table(p);
    copy = t;
  }
  EXPECT_EQ(copy.column("x").numbers[1], 2.0);
  EXPECT_EQ(copy.column("name").text[0], "a \"b\"");
  EXPECT_EQ(copy.column("name").text[1], "c");
}

// Of several bad rows in different parts of the file, the first is named.
TEST_F(ReadersTest, CsvTableNamesTheFirstBadLineOfMany) {
  std::string csv = "a,b\n";
  for (int r = 0; r < 3000; ++r) {
    csv += (r == 2900 || r == 1700) ? std::string("1\n") : std::to_string(r) + ",2\n";
  }
  expect_error<IOError>([&] { read_csv_table(write("many.csv", csv)); },
                        {"many.csv:1702", "expected 2 fields (as the header), got 1"});
}

TEST_F(ReadersTest, CsvTableErrorsNameFileAndLine) {
  expect_error<IOError>([&] { read_csv_table(write("e.csv", "")); }, {"e.csv", "empty"});
  expect_error<IOError>([&] { read_csv_table(write("h.csv", "a,b\n")); },
                        {"h.csv", "a header and no rows"});
  expect_error<IOError>([&] { read_csv_table(write("d.csv", "a,a\n1,2\n")); },
                        {"d.csv:1", "column 'a' twice"});
  expect_error<IOError>([&] { read_csv_table(write("n.csv", "a,b\n1,2\n3\n")); },
                        {"n.csv:3", "expected 2 fields (as the header), got 1"});
  expect_error<IOError>([&] { read_csv_table(write("q.csv", "a\n\"1\n")); },
                        {"q.csv:2", "unterminated quote"});
  expect_error<IOError>([&] { read_csv_table(write("g.csv", "a,b\n\"1\"x,2\n")); },
                        {"g.csv:2", "a quoted field is followed by 'x', not the delimiter"});
  expect_error<IOError>([&] { read_csv_table(path("none.csv")); }, {"none.csv", "cannot open"});
}

TEST_F(ReadersTest, CsvStateResumesAcrossFiles) {
  const auto a = write("a.csv", "0\n1\n2\n");
  const auto b = write("b.csv", "3\n4\n");
  Dataset ds = csv_dataset({a, b}, {.columns = {{DType::kInt64}}});
  EXPECT_EQ(scalars(ds), iota(5));
  for (int k = 0; k <= 5; ++k) {
    Iterator it = ds.make_iterator();
    scalars(it, k);
    const IteratorState s = it.save();
    Iterator r = ds.make_iterator();
    r.restore(s);
    EXPECT_EQ(scalars(r), iota(5 - k, k)) << k;
  }
}

TEST_F(ReadersTest, NpyRoundTripAndNumpyHeader) {
  Tensor t = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  const auto p = path("t.npy");
  write_npy(p, t);
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  // NumPy's own layout: magic, version 1.0, header length, dict padded to 64.
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(bytes.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"), 10u);
  EXPECT_EQ((bytes.size() - 24) % 64, 0u);
  EXPECT_EQ(read_npy(p).to_vector<float>(), t.to_vector<float>());
  EXPECT_EQ(read_npy(p).shape(), t.shape());
  write_npy(p, Tensor::from_vector<std::int64_t>({5, 6, 7}));
  EXPECT_EQ(read_npy(p).to_vector<std::int64_t>(), (std::vector<std::int64_t>{5, 6, 7}));
  EXPECT_NE(bytes.find("(2, 3)"), std::string::npos);
}

TEST_F(ReadersTest, NpyTruncatedOrCorruptNamesOffsetAndPromise) {
  const auto p = path("t.npy");
  write_npy(p, Tensor::zeros({4, 5}));
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const auto cut = write("cut.npy", bytes.substr(0, bytes.size() - 7));
  expect_error<IOError>(
      [&] { read_npy(cut); },
      {"cut.npy", "byte offset 128", "promises <f4 [4, 5] = 80 bytes", "the file has 73"});
  std::string wrong = bytes;
  wrong.replace(wrong.find("<f4"), 3, ">f4");
  expect_error<IOError>([&] { read_npy(write("be.npy", wrong)); }, {"unsupported dtype '>f4'"});
  expect_error<IOError>([&] { read_npy(write("junk.npy", "hello world")); }, {"not a .npy file"});
  // A shape whose size wraps 64 bits (2^40 x 2^40 x 4 bytes): named, never
  // multiplied out (core/checked.h).
  std::string huge = bytes;
  const std::string big_shape = "(1099511627776, 1099511627776)";
  huge.replace(huge.find("(4, 5)"), 6, big_shape);
  // The header keeps its length: as many of its padding spaces go.
  huge.erase(huge.find('\n') - (big_shape.size() - 6), big_shape.size() - 6);
  expect_error<IOError>([&] { read_npy(write("huge.npy", huge)); },
                        {"huge.npy", "claims over 2^62 bytes"});
}

TEST_F(ReadersTest, IdxPlainAndGzipAndTruncated) {
  // uint8 [2, 3]: 00 00 08 02 | 00 00 00 02 | 00 00 00 03 | 6 bytes
  std::string idx("\x00\x00\x08\x02\x00\x00\x00\x02\x00\x00\x00\x03", 12);
  idx += std::string("\x01\x02\x03\x04\x05\x06", 6);
  const auto plain = write("x.idx", idx);
  EXPECT_EQ(read_idx(plain).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  const auto gz = path("x.idx.gz");
  gzFile f = gzopen(gz.c_str(), "wb");
  gzwrite(f, idx.data(), static_cast<unsigned>(idx.size()));
  gzclose(f);
  EXPECT_EQ(read_idx(gz).shape(), Shape({2, 3}));
  const auto cut = write("cut.idx", idx.substr(0, 15));
  expect_error<IOError>([&] { read_idx(cut); }, {"cut.idx", "byte 15", "[2, 3]", "3 more bytes"});
  expect_error<IOError>([&] { read_idx(write("bad.idx", std::string("\x01\x00\x08\x01", 4))); },
                        {"byte 0", "not an IDX file"});
}

TEST_F(ReadersTest, ListFilesAndInterleaveReadFilesInParallel) {
  for (int f = 0; f < 3; ++f) {
    std::string rows;
    for (int r = 0; r < 4; ++r) rows += std::to_string(f * 100 + r) + "\n";
    write("part" + std::to_string(f) + ".csv", rows);
  }
  Dataset files = Dataset::list_files((dir_ / "part*.csv").string());
  EXPECT_EQ(files.cardinality(), 3);
  auto read = [](const Element& e) {
    return csv_dataset({e.string(0)}, {.columns = {{DType::kInt64}}});
  };
  Dataset ds = files.interleave(read, {.cycle_length = 3, .block_length = 2});
  EXPECT_EQ(scalars(ds),
            (std::vector<std::int64_t>{0, 1, 100, 101, 200, 201, 2, 3, 102, 103, 202, 203}));
  Dataset par =
      files.interleave(read, {.cycle_length = 3, .block_length = 2, .num_parallel_calls = 3});
  EXPECT_EQ(scalars(par), scalars(ds));
  expect_error<IOError>([&] { Dataset::list_files((dir_ / "*.parquet").string()); },
                        {"no files match"});
}

TEST_F(ReadersTest, FileCacheWritesOnceThenReads) {
  std::atomic<int> calls{0};
  const auto p = path("cache.bin");
  auto make = [&] {
    return Dataset::range(50)
        .map([&calls](const Element& e) {
          ++calls;
          const auto v = e[0].item<std::int64_t>();
          return Element({Tensor::from_vector<float>({static_cast<float>(v), 0.5f}),
                          Tensor::from_vector<std::int64_t>({v}, Shape{})},
                         {"x", "y"});
        })
        .cache(p);
  };
  // An abandoned first pass leaves no file.
  {
    Iterator it = make().make_iterator();
    it.get_next();
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator{}), 0);
  std::vector<std::int64_t> first;
  for (const Element& e : make()) first.push_back(e["y"].item<std::int64_t>());
  EXPECT_EQ(first, iota(50));
  EXPECT_TRUE(fs::exists(p));
  calls = 0;
  // A later run reads the file: the map is not called again, names survive.
  std::vector<std::int64_t> second;
  for (const Element& e : make()) {
    second.push_back(e["y"].item<std::int64_t>());
    EXPECT_EQ(e["x"].to_vector<float>()[1], 0.5f);
  }
  EXPECT_EQ(second, iota(50));
  EXPECT_EQ(calls.load(), 0);
  // Resume inside the file.
  Iterator it = make().make_iterator();
  scalars(it, 0);
  for (int i = 0; i < 20; ++i) it.get_next();
  const IteratorState s = it.save();
  Iterator r = make().make_iterator();
  r.restore(s);
  EXPECT_EQ(r.get_next()["y"].item<std::int64_t>(), 20);
}

TEST_F(ReadersTest, CorruptCacheFileIsAnErrorNotData) {
  const auto p = path("cache.bin");
  for (const Element& e : Dataset::range(10).cache(p)) (void)e;
  std::string bytes;
  {
    std::ifstream in(p, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(in)), {});
  }
  std::string flipped = bytes;
  flipped[30] ^= 0x5A;  // inside the first record's value
  write("cache.bin", flipped);
  expect_error<IOError>([&] { scalars(Dataset::range(10).cache(p)); },
                        {"cache.bin", "byte offset", "element 0 fails its checksum"});
  write("cache.bin", bytes.substr(0, bytes.size() - 5));
  expect_error<IOError>([&] { scalars(Dataset::range(10).cache(p)); },
                        {"cache.bin", "no valid footer"});
}

TEST_F(ReadersTest, StaleTemporariesOfDeadWritersAreRemoved) {
  const auto p = path("cache.bin");
  // A pid that cannot exist (above pid_max) stands for a killed writer.
  write(".cache.bin.tmp999999999.1", "partial");
  const std::string live = ".cache.bin.tmp" + std::to_string(::getpid()) + ".2";
  write(live, "in progress");
  EXPECT_EQ(remove_stale_temporaries(p), 1);
  EXPECT_FALSE(fs::exists(dir_ / ".cache.bin.tmp999999999.1"));
  EXPECT_TRUE(fs::exists(dir_ / live));
}

TEST_F(ReadersTest, WithShardedFilesSplitsTheFileListThroughTheUsualPipeline) {
  // Six files of three numbers each; the pipeline reads each file's numbers.
  for (int f = 0; f < 6; ++f) write("part-" + std::to_string(f) + ".txt", std::to_string(f * 3));
  auto pipeline = [&](const Dataset& files) {
    return files
        .interleave(
            [](const Element& e) {
              const std::int64_t first = std::stoll(slurp_file(e.string(0)));
              return Dataset::range(first, first + 3);
            },
            {.cycle_length = 2})
        .map([](const Element& e) { return e; })
        .shuffle(4, {.seed = 3})
        .batch(2)
        .prefetch(2);
  };
  const Dataset whole = pipeline(Dataset::list_files(path("part-*.txt")));
  std::vector<std::int64_t> seen;
  for (int shard = 0; shard < 3; ++shard) {
    const Dataset part = whole.with_sharded_files(3, shard);
    ASSERT_TRUE(part.defined()) << shard;
    for (const Element& batch : part) {
      for (std::int64_t v : batch[0].to_vector<std::int64_t>()) seen.push_back(v);
    }
  }
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> all(18);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(seen, all);  // disjoint and complete
  // Options pass through with_sharded_files and are read back.
  Options o;
  o.experimental_distribute.auto_shard_policy = AutoShardPolicy::kOff;
  const Dataset with = whole.with_options(o);
  EXPECT_EQ(with.options().experimental_distribute.auto_shard_policy, AutoShardPolicy::kOff);
  EXPECT_EQ(with.with_sharded_files(2, 1).options().experimental_distribute.auto_shard_policy,
            AutoShardPolicy::kOff);
  EXPECT_EQ(whole.options().experimental_distribute.auto_shard_policy, AutoShardPolicy::kAuto);
  EXPECT_EQ(with.cardinality(), whole.cardinality());
}

TEST_F(ReadersTest, WithShardedFilesIsUndefinedWhereFilesCannotBeSplit) {
  for (int f = 0; f < 2; ++f) write("f" + std::to_string(f), "x");
  const Dataset files = Dataset::list_files(path("f*"));
  EXPECT_TRUE(files.with_sharded_files(2, 0).defined());
  EXPECT_FALSE(files.with_sharded_files(3, 0).defined()) << "fewer files than shards";
  EXPECT_FALSE(Dataset::range(10).with_sharded_files(2, 0).defined()) << "no file list";
  EXPECT_FALSE(Dataset::zip({files, files}).with_sharded_files(2, 0).defined());
  EXPECT_FALSE(files.cache(path("c.cache")).with_sharded_files(2, 0).defined());
  EXPECT_TRUE(files.cache().with_sharded_files(2, 1).defined());
  EXPECT_THROW(files.with_sharded_files(2, 2), ValueError);
}

}  // namespace
}  // namespace lockstep::data

namespace lockstep::datasets {
namespace {

TEST(Datasets, MissingFilesNameThePathAndTheFix) {
  try {
    fashion_mnist::load_data("/nonexistent/fmnist");
    ADD_FAILURE() << "expected an error";
  } catch (const IOError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/fmnist/train-images-idx3-ubyte.gz"), std::string::npos) << msg;
    EXPECT_NE(msg.find("apt-get install dataset-fashion-mnist"), std::string::npos) << msg;
  }
}

TEST(Datasets, MnistLayoutFromAUserDirectory) {
  // Four tiny IDX files in the MNIST layout: 3 images of 2x2, 3 labels.
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("lockstep_mnist_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string images(
      "\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02"
      "abcdefghijkl",
      28);
  const std::string labels("\x00\x00\x08\x01\x00\x00\x00\x03\x07\x08\x09", 11);
  for (const char* split : {"train", "t10k"}) {
    std::ofstream(dir / (std::string(split) + "-images-idx3-ubyte"), std::ios::binary) << images;
    std::ofstream(dir / (std::string(split) + "-labels-idx1-ubyte"), std::ios::binary) << labels;
  }
  auto [train, test] = mnist::load_data(dir.string());
  EXPECT_EQ(train.first.shape(), Shape({3, 2, 2}));
  EXPECT_EQ(train.first.dtype(), DType::kUInt8);
  EXPECT_EQ(test.second.to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8, 9}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace lockstep::datasets
