// image_dataset_from_directory and load_image against what Keras 3 itself
// gives on the same folder and files (tests/interop/make_image_fixtures.py):
// the printed lines, the class names, the file order after NumPy's shuffle
// and the split, the labels and the pixels; then every error it promises.
#include "lockstep/data/image_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "data/data_test_util.h"
#include "lockstep/data/datasets.h"
#include "lockstep/data/image.h"
#include "lockstep/tensor/ops.h"
#include "support/files.h"
#include "support/image_fixtures.h"

namespace lockstep::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::expect_error;
using testing_support::ImageFixtures;
using testing_support::max_abs_difference;
using testing_support::spit;
using testing_support::TempDir;

// Keras's keyword arguments (from the manifest) as Lockstep's options.
ImageDatasetOptions options_from(const json& kw, std::ostream* out) {
  ImageDatasetOptions o{.out = out};
  o.image_size = {kw["image_size"][0].get<std::int64_t>(), kw["image_size"][1].get<std::int64_t>()};
  o.batch_size = kw["batch_size"].get<std::int64_t>();
  o.shuffle = kw.value("shuffle", true);
  if (kw.contains("seed")) o.seed = kw["seed"].get<std::uint64_t>();
  o.validation_split = kw.value("validation_split", 0.0);
  o.subset = kw.value("subset", std::string());
  o.color_mode = kw.value("color_mode", std::string("rgb"));
  if (kw.contains("label_mode")) {
    if (kw["label_mode"].is_null()) {
      o.label_mode = std::nullopt;
    } else {
      o.label_mode = kw["label_mode"].get<std::string>();
    }
  }
  o.interpolation = kw.value("interpolation", std::string("bilinear"));
  o.crop_to_aspect_ratio = kw.value("crop_to_aspect_ratio", false);
  o.pad_to_aspect_ratio = kw.value("pad_to_aspect_ratio", false);
  if (kw.contains("class_names")) o.class_names = kw["class_names"].get<std::vector<std::string>>();
  return o;
}

// All elements of `ds` (in order) joined along the batch axis.
std::vector<Tensor> gather_all(const Dataset& ds) {
  std::vector<std::vector<Tensor>> parts;
  for (const Element& e : ds) {
    if (parts.empty()) parts.resize(e.size());
    for (std::size_t i = 0; i < e.size(); ++i) parts[i].push_back(e[i]);
  }
  std::vector<Tensor> out;
  for (const auto& p : parts) out.push_back(concat(p, 0));
  return out;
}

TEST(ImageDatasetFromDirectory, MatchesKerasOnTheFixtureFolderRunByRun) {
  const auto& f = ImageFixtures::get();
  const std::string root = f.path("folder");
  int runs = 0;
  for (const auto& [name, run] : f.manifest()["folder"].items()) {
    SCOPED_TRACE(name);
    std::ostringstream printed;
    const ImageDatasetOptions o = options_from(run["kwargs"], &printed);
    std::vector<ImageDataset> got;
    if (o.subset == "both") {
      auto [train, val] = image_dataset_from_directory_split(root, o);
      got = {train, val};
    } else {
      got = {image_dataset_from_directory(root, o)};
    }
    EXPECT_EQ(printed.str(), run["printed"].get<std::string>());
    ASSERT_EQ(got.size(), run["datasets"].size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const json& want = run["datasets"][i];
      std::vector<std::string> rel;
      for (const std::string& p : got[i].file_paths())
        rel.push_back(fs::relative(p, root).string());
      EXPECT_EQ(rel, want["file_paths"].get<std::vector<std::string>>()) << "dataset " << i;
      if (want["class_names"].is_null()) {
        EXPECT_TRUE(got[i].class_names().empty());
      } else {
        EXPECT_EQ(got[i].class_names(), want["class_names"].get<std::vector<std::string>>());
      }
      const std::string prefix = "folder/" + name + "/" + std::to_string(i) + "/";
      if (!f.has(prefix + "images")) continue;  // shuffled: the per-epoch order is not Keras's
      const std::vector<Tensor> all = gather_all(got[i]);
      // The same decoder, the same resize: Keras's pixels exactly (JPEGs too).
      EXPECT_EQ(max_abs_difference(all[0], f.array(prefix + "images")), 0.0);
      if (f.has(prefix + "labels")) {
        ASSERT_EQ(all.size(), 2u);
        EXPECT_EQ(max_abs_difference(cast(all[1], DType::kFloat32), f.array(prefix + "labels")),
                  0.0);
      } else {
        EXPECT_EQ(all.size(), 1u);
      }
    }
    ++runs;
  }
  EXPECT_EQ(runs, 11);
}

TEST(LoadImage, CropAndPadToAspectRatioEqualKerasLoadImage) {
  const auto& f = ImageFixtures::get();
  const auto names = f.names("load/");
  ASSERT_EQ(names.size(), 2u * 2 * 2 * 5);
  for (const std::string& name : names) {
    // load/<png|jpeg>/<crop|pad>/<method>/<h>x<w>
    std::vector<std::string> part;
    std::stringstream ss(name);
    for (std::string s; std::getline(ss, s, '/');) part.push_back(s);
    const auto x = part[4].find('x');
    const std::string file = part[1] == "png" ? "png/rgb8.png" : "jpeg/rgb_baseline.jpg";
    const Tensor got = load_image(f.path(file), {.image_size = {std::stoll(part[4].substr(0, x)),
                                                                std::stoll(part[4].substr(x + 1))},
                                                 .interpolation = part[3],
                                                 .crop_to_aspect_ratio = part[2] == "crop",
                                                 .pad_to_aspect_ratio = part[2] == "pad"});
    EXPECT_EQ(max_abs_difference(got, f.array(name)), 0.0) << name;
  }
}

// A class folder tree of tiny JPEGs: {"a": 3} writes root/a/0.jpg ... 2.jpg.
void write_folder(const TempDir& dir, const std::map<std::string, int>& classes) {
  Tensor img = Tensor::full({6, 8, 3}, 120.0, DType::kUInt8);
  const std::string jpeg = encode_jpeg(img);
  for (const auto& [cls, count] : classes) {
    fs::create_directories(dir.path / cls);
    for (int i = 0; i < count; ++i) spit(dir.path / cls / (std::to_string(i) + ".jpg"), jpeg);
  }
}

TEST(ImageDatasetFromDirectory, ElementsAreFloatImagesOfTheSizeAndLabelsOfTheMode) {
  TempDir dir;
  write_folder(dir, {{"a", 3}, {"b", 2}});
  std::ostringstream quiet;
  const ImageDatasetOptions base{.batch_size = 4, .image_size = {5, 7}, .seed = 1, .out = &quiet};
  ImageDatasetOptions o = base;
  Element first = image_dataset_from_directory(dir.path.string(), o).make_iterator().get_next();
  EXPECT_EQ(first[0].shape(), Shape({4, 5, 7, 3}));
  EXPECT_EQ(first[0].dtype(), DType::kFloat32);
  EXPECT_EQ(first[1].shape(), Shape({4}));
  EXPECT_EQ(first[1].dtype(), DType::kInt32);
  o.label_mode = "categorical";
  o.color_mode = "grayscale";
  first = image_dataset_from_directory(dir.path.string(), o).make_iterator().get_next();
  EXPECT_EQ(first[0].shape(), Shape({4, 5, 7, 1}));
  EXPECT_EQ(first[1].shape(), Shape({4, 2}));
  o = base;
  o.label_mode = "binary";
  o.batch_size = std::nullopt;
  first = image_dataset_from_directory(dir.path.string(), o).make_iterator().get_next();
  EXPECT_EQ(first[0].shape(), Shape({5, 7, 3}));
  EXPECT_EQ(first[1].shape(), Shape({1}));
  EXPECT_EQ(first[1].dtype(), DType::kFloat32);
  o = base;
  o.label_mode = std::nullopt;
  first = image_dataset_from_directory(dir.path.string(), o).make_iterator().get_next();
  EXPECT_EQ(first.size(), 1u);
  EXPECT_EQ(quiet.str(),
            "Found 5 files belonging to 2 classes.\nFound 5 files belonging to 2 "
            "classes.\nFound 5 files belonging to 2 classes.\nFound 5 files.\n");
}

TEST(ImageDatasetFromDirectory, ExplicitLabelsFollowTheSortedFilesAndNameTheirClasses) {
  TempDir dir;
  write_folder(dir, {{"a", 2}, {"b", 2}});
  std::ostringstream printed;
  const auto ds = image_dataset_from_directory(dir.path.string(), {.labels = {7, 3, 3, 7},
                                                                   .batch_size = 4,
                                                                   .image_size = {4, 4},
                                                                   .shuffle = false,
                                                                   .out = &printed});
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"3", "7"}));
  EXPECT_EQ(ds.make_iterator().get_next()[1].to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{7, 3, 3, 7}));
  EXPECT_EQ(printed.str(), "Found 4 files belonging to 2 classes.\n");
}

TEST(ImageDatasetFromDirectory, EachEpochReshufflesReproduciblyAndCoversEveryFile) {
  TempDir dir;
  write_folder(dir, {{"a", 9}, {"b", 8}});
  std::ostringstream quiet;
  const auto ds = image_dataset_from_directory(dir.path.string(), {.label_mode = std::nullopt,
                                                                   .batch_size = std::nullopt,
                                                                   .image_size = {2, 2},
                                                                   .seed = 5,
                                                                   .out = &quiet});
  // Which file each element is: make every file's first pixel its index.
  TempDir marked;
  for (std::size_t i = 0; i < ds.file_paths().size(); ++i) {
    Tensor img = Tensor::full({2, 2, 3}, static_cast<double>(10 * i), DType::kUInt8);
    spit(ds.file_paths()[i], encode_png(img));
  }
  auto order = [&](std::uint64_t epoch) {
    std::vector<int> seen;
    Iterator it = ds.make_iterator({.epoch = epoch});
    while (auto e = it.next()) seen.push_back(static_cast<int>((*e)[0].to_vector<float>()[0]) / 10);
    return seen;
  };
  const auto e0 = order(0), e1 = order(1);
  EXPECT_EQ(e0, order(0));
  EXPECT_NE(e0, e1);
  EXPECT_EQ(std::set<int>(e0.begin(), e0.end()).size(), 17u);
  EXPECT_EQ(std::set<int>(e1.begin(), e1.end()).size(), 17u);
}

TEST(ImageDatasetFromDirectory, ParallelDecodingGivesTheSerialElements) {
  const std::string root = ImageFixtures::get().path("folder");
  std::ostringstream quiet;
  auto run = [&](std::int64_t calls) {
    return gather_all(image_dataset_from_directory(root, {.batch_size = 3,
                                                          .image_size = {9, 5},
                                                          .seed = 11,
                                                          .out = &quiet,
                                                          .num_parallel_calls = calls}));
  };
  const auto serial = run(1), parallel = run(2), autotuned = run(kAutotune);
  EXPECT_EQ(max_abs_difference(serial[0], parallel[0]), 0.0);
  EXPECT_EQ(max_abs_difference(serial[1], parallel[1]), 0.0);
  EXPECT_EQ(max_abs_difference(serial[0], autotuned[0]), 0.0);
}

TEST(ImageDatasetFromDirectory, SymlinkedFoldersInsideAClassCountOnlyWithFollowLinks) {
  TempDir dir, elsewhere;
  write_folder(dir, {{"a", 1}, {"b", 1}});
  write_folder(elsewhere, {{"more", 2}});
  fs::create_directory_symlink(elsewhere.path / "more", dir.path / "a" / "linked");
  std::ostringstream printed;
  image_dataset_from_directory(dir.path.string(), {.shuffle = false, .out = &printed});
  image_dataset_from_directory(dir.path.string(),
                               {.shuffle = false, .follow_links = true, .out = &printed});
  EXPECT_EQ(printed.str(),
            "Found 2 files belonging to 2 classes.\n"
            "Found 4 files belonging to 2 classes.\n");
}

TEST(FashionMnistImageFolder, WritesTwoClassesThatReadBackWithTheirLabelsAndPixels) {
  namespace fm = datasets::fashion_mnist;
  if (!fs::exists(fm::kDefaultDir)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const auto counts = fm::write_image_folder(dir.path.string(), {.image_size = 28, .count = 30});
  const auto [train, test] = fm::load_data();
  const std::vector<std::uint8_t> labels = train.second.to_vector<std::uint8_t>();
  std::int64_t footwear = 0;
  for (int i = 0; i < 30; ++i) footwear += labels[i] == 5 || labels[i] == 7 || labels[i] == 9;
  EXPECT_EQ(counts.footwear, footwear);
  EXPECT_EQ(counts.other, 30 - footwear);
  std::ostringstream printed;
  const auto ds = image_dataset_from_directory(dir.path.string(), {.label_mode = "binary",
                                                                   .batch_size = std::nullopt,
                                                                   .image_size = {28, 28},
                                                                   .shuffle = false,
                                                                   .out = &printed});
  EXPECT_EQ(printed.str(), "Found 30 files belonging to 2 classes.\n");
  EXPECT_EQ(ds.class_names(), (std::vector<std::string>{"footwear", "other"}));
  // Each file is its source image (at 28 x 28 the resize is the identity),
  // as RGB, through JPEG at quality 95: within a few levels on average.
  Iterator it = ds.make_iterator();
  for (const std::string& path : ds.file_paths()) {
    const Element e = it.get_next();
    const int index = std::stoi(fs::path(path).stem().string().substr(6));  // train_00012
    EXPECT_EQ(e[1].item<float>(),
              (labels[index] == 5 || labels[index] == 7 || labels[index] == 9) ? 0.0f : 1.0f);
    const Tensor source =
        cast(reshape(train.first.view_rows(index, index + 1), {28, 28, 1}), DType::kFloat32);
    const Tensor gray = slice(e[0], {0, 0, 0}, {-1, -1, 1});
    EXPECT_LT(mean(abs(gray - source)).item<float>(), 3.0f) << path;
  }
}

// ---- errors ----

TEST(ImageDatasetFromDirectory, AMissingFolderIsAnIOErrorNamingIt) {
  expect_error<IOError>([] { image_dataset_from_directory("/nonexistent/flowers"); },
                        {"'/nonexistent/flowers' does not exist", "Hint"});
  TempDir dir;
  spit(dir / "file.png", "x");
  expect_error<IOError>([&] { image_dataset_from_directory(dir / "file.png"); },
                        {"is not a folder"});
}

TEST(ImageDatasetFromDirectory, AnEmptyClassFolderIsAnErrorNamingIt) {
  TempDir dir;
  write_folder(dir, {{"a", 2}, {"empty", 0}});
  spit(dir.path / "empty" / "notes.txt", "not an image");
  std::ostringstream quiet;
  expect_error<ValueError>(
      [&] { image_dataset_from_directory(dir.path.string(), {.seed = 1, .out = &quiet}); },
      {"class folder '" + (dir.path / "empty").string() + "' holds no images", ".png", "Hint"});
}

TEST(ImageDatasetFromDirectory, AFolderWithoutImagesIsAnError) {
  TempDir dir;
  fs::create_directories(dir.path / "a");
  spit(dir.path / "a" / "notes.txt", "not an image");
  std::ostringstream printed;
  expect_error<ValueError>(
      [&] { image_dataset_from_directory(dir.path.string(), {.seed = 1, .out = &printed}); },
      {"no images found in folder '" + dir.path.string() + "'", "Allowed formats"});
  EXPECT_EQ(printed.str(), "Found 0 files belonging to 1 classes.\n");  // Keras's line, as is
  TempDir bare;
  expect_error<ValueError>([&] { image_dataset_from_directory(bare.path.string()); },
                           {"has no class subfolders"});
}

TEST(ImageDatasetFromDirectory, ACorruptImageIsAnIOErrorNamingTheFileWhenRead) {
  TempDir dir;
  write_folder(dir, {{"a", 2}, {"b", 1}});
  spit(dir.path / "b" / "0.jpg", "\xff\xd8\xff\xe0 this is not a JPEG any more");
  std::ostringstream quiet;
  const auto ds =
      image_dataset_from_directory(dir.path.string(), {.shuffle = false, .out = &quiet});
  expect_error<IOError>([&] { gather_all(ds); },
                        {(dir.path / "b" / "0.jpg").string(), "not a readable JPEG"});
  spit(dir.path / "b" / "0.jpg", "BM this is a bitmap");
  expect_error<ValueError>([&] { gather_all(ds); },
                           {(dir.path / "b" / "0.jpg").string(), "BMP", "JPEG and PNG only"});
}

TEST(ImageDatasetFromDirectory, ArgumentsKerasRefusesAreValueErrorsSayingWhy) {
  TempDir dir;
  write_folder(dir, {{"a", 3}, {"b", 3}, {"c", 3}});
  const std::string d = dir.path.string();
  std::ostringstream quiet;
  auto call = [&](ImageDatasetOptions o) {
    o.out = &quiet;
    return [o, d] { image_dataset_from_directory(d, o); };
  };
  expect_error<ValueError>(call({.validation_split = 0.2, .subset = "training"}),
                           {"needs a seed", "Hint"});
  expect_error<ValueError>(
      call({.seed = 1, .validation_split = 0.2, .subset = "train"}),
      {"subset must be \"training\", \"validation\" or \"both\", got \"train\""});
  expect_error<ValueError>(call({.seed = 1, .validation_split = 0.2}), {"set both or neither"});
  expect_error<ValueError>(call({.subset = "training"}), {"set both or neither"});
  expect_error<ValueError>(call({.seed = 1, .validation_split = 1.5, .subset = "training"}),
                           {"between 0 and 1, got 1.5"});
  expect_error<ValueError>(call({.seed = 1, .validation_split = 0.05, .subset = "validation"}),
                           {"leaves no file for validation"});
  expect_error<ValueError>(call({.seed = 1, .validation_split = 0.2, .subset = "both"}),
                           {"image_dataset_from_directory_split"});
  expect_error<ValueError>(call({.label_mode = "binary", .seed = 1}),
                           {"\"binary\" needs exactly 2 classes, got 3"});
  expect_error<ValueError>(call({.label_mode = "sparse"}), {"label_mode must be"});
  expect_error<ValueError>(call({.color_mode = "cmyk"}), {"color_mode must be"});
  expect_error<ValueError>(call({.interpolation = "bicubic"}), {"\"bicubic\" is not implemented"});
  expect_error<ValueError>(call({.class_names = {"a", "zebra"}}),
                           {"'zebra' is not one", "a, b, c"});
  expect_error<ValueError>(call({.labels = {1, 2}}), {"got 2 labels for the 9 files"});
  expect_error<ValueError>(call({.labels = "inferred_from_names"}), {"labels must be"});
  expect_error<ValueError>(call({.seed = std::uint64_t{1} << 33}), {"between 0 and 2^32 - 1"});
  expect_error<ValueError>(call({.crop_to_aspect_ratio = true, .pad_to_aspect_ratio = true}),
                           {"only one of crop_to_aspect_ratio and pad_to_aspect_ratio"});
  EXPECT_TRUE(quiet.str().empty() || quiet.str().find("Found") != std::string::npos);
}

}  // namespace
}  // namespace lockstep::data
