// The containers of Keras's files: HDF5 trees (round trip, files h5py
// wrote, damage named) and zip archives (stored members, files Python's
// zipfile wrote, truncation and flipped bytes named).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockstep/io/hdf5.h"
#include "lockstep/io/zip.h"
#include "support/errors.h"
#include "support/files.h"

namespace lockstep::io {
namespace {

namespace fs = std::filesystem;
using testing_support::message_of;
using testing_support::slurp;
using testing_support::spit;
using testing_support::TempDir;

const fs::path kFixtures = fs::path(LOCKSTEP_SOURCE_DIR) / "tests/interop/keras_fixtures";

template <typename T>
std::vector<T> values(const Tensor& t) {
  return {t.data<T>(), t.data<T>() + t.numel()};
}

TEST(Hdf5, ATreeRoundTripsWithEveryDtypeAndAttributeKind) {
  TempDir dir;
  H5Group root;
  H5Group& vars = root.group("layers/dense/vars");
  vars.attributes["name"] = std::string("dense_7");
  vars.datasets["0"] = Tensor::from_vector<float>({1.5f, -2.25f, 3, 4, 5, 6}, Shape({2, 3}));
  vars.datasets["1"] = Tensor::from_vector<std::int64_t>({1LL << 40}, Shape{});
  vars.datasets["2"] = Tensor::from_vector<std::int32_t>({-7, 9}, Shape({2}));
  vars.datasets["3"] = Tensor::from_vector<std::uint8_t>({0, 255}, Shape({2}));
  vars.datasets["4"] = Tensor::zeros(Shape({0, 4}));
  root.attributes["layer_names"] = std::vector<std::string>{"a", "bé", ""};
  root.attributes["numbers"] = std::vector<double>{0.5, 3};
  write_h5((dir.path / "t.h5").string(), root);

  const H5Group back = read_h5((dir.path / "t.h5").string());
  const H5Group* g = back.find_group("layers/dense/vars");
  ASSERT_NE(g, nullptr);
  ASSERT_NE(g->string_attribute("name"), nullptr);
  EXPECT_EQ(*g->string_attribute("name"), "dense_7");
  EXPECT_EQ(g->datasets.at("0").shape(), Shape({2, 3}));
  EXPECT_EQ(values<float>(g->datasets.at("0")), (std::vector<float>{1.5f, -2.25f, 3, 4, 5, 6}));
  EXPECT_EQ(g->datasets.at("1").dtype(), DType::kInt64);
  EXPECT_EQ(g->datasets.at("1").shape(), Shape{});
  EXPECT_EQ(values<std::int64_t>(g->datasets.at("1")), (std::vector<std::int64_t>{1LL << 40}));
  EXPECT_EQ(values<std::int32_t>(g->datasets.at("2")), (std::vector<std::int32_t>{-7, 9}));
  EXPECT_EQ(values<std::uint8_t>(g->datasets.at("3")), (std::vector<std::uint8_t>{0, 255}));
  EXPECT_EQ(g->datasets.at("4").shape(), Shape({0, 4}));
  EXPECT_EQ(std::get<std::vector<std::string>>(back.attributes.at("layer_names")),
            (std::vector<std::string>{"a", "bé", ""}));
  EXPECT_EQ(std::get<std::vector<double>>(back.attributes.at("numbers")),
            (std::vector<double>{0.5, 3}));
  ASSERT_NE(back.find_dataset("layers/dense/vars/0"), nullptr);
  EXPECT_EQ(back.find_dataset("layers/dense/vars/9"), nullptr);
}

TEST(Hdf5, ReadsTheLegacyFileKerasWrote) {
  // Keras's legacy saver (h5py): string-list attributes, nested groups,
  // an int64 scalar.
  const H5Group f = read_h5((kFixtures / "mlp_legacy.h5").string());
  const H5Group* weights = f.find_group("model_weights");
  ASSERT_NE(weights, nullptr);
  EXPECT_EQ(std::get<std::vector<std::string>>(weights->attributes.at("layer_names")),
            (std::vector<std::string>{"input_layer", "dense", "dense_1", "dense_2"}));
  const Tensor* kernel = f.find_dataset("model_weights/dense/dense/kernel");
  ASSERT_NE(kernel, nullptr);
  EXPECT_EQ(kernel->shape(), Shape({64, 32}));
  EXPECT_EQ(kernel->dtype(), DType::kFloat32);
  const Tensor* steps = f.find_dataset("optimizer_weights/adam/iteration");
  ASSERT_NE(steps, nullptr);
  EXPECT_EQ(steps->dtype(), DType::kInt64);
  EXPECT_EQ(steps->data<std::int64_t>()[0], 3);  // the fixture trained 3 steps
  ASSERT_NE(f.string_attribute("model_config"), nullptr);
  EXPECT_NE(f.string_attribute("model_config")->find("\"Functional\""), std::string::npos);
}

TEST(Hdf5, DamageIsNamedWithTheFile) {
  TempDir dir;
  const std::string bytes = slurp(kFixtures / "mlp.weights.h5");
  const fs::path cut = dir.path / "cut.h5";
  spit(cut, bytes.substr(0, bytes.size() / 2));
  std::string msg = message_of([&] { read_h5(cut.string()); });
  EXPECT_NE(msg.find("cut.h5"), std::string::npos) << msg;

  const fs::path other = dir.path / "other.h5";
  spit(other, "{\"not\": \"hdf5\"}");
  msg = message_of([&] { read_h5(other.string()); });
  EXPECT_NE(msg.find("other.h5: not an HDF5 file (byte 0"), std::string::npos) << msg;

  msg = message_of([&] { read_h5((dir.path / "missing.h5").string()); });
  EXPECT_NE(msg.find("missing.h5"), std::string::npos) << msg;
}

TEST(Zip, MembersAreStoredAndReadBackInOrder) {
  TempDir dir;
  const std::vector<ZipMember> members = {{"metadata.json", "{\"keras_version\": \"3\"}"},
                                          {"config.json", std::string(5000, 'x')},
                                          {"model.weights.h5", std::string("\0\1\2\3", 4)}};
  const std::string image = zip_archive_image(members, 1700000000);
  EXPECT_TRUE(looks_like_zip(image));
  // Stored, as Keras writes: the member bytes appear verbatim.
  EXPECT_NE(image.find(std::string(5000, 'x')), std::string::npos);
  spit(dir.path / "a.zip", image);
  const std::vector<ZipMember> back = read_zip((dir.path / "a.zip").string());
  ASSERT_EQ(back.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back[i].name, members[i].name);
    EXPECT_EQ(back[i].data, members[i].data);
  }
  // The same members at the same time give the same bytes.
  EXPECT_EQ(zip_archive_image(members, 1700000000), image);
}

TEST(Zip, ReadsTheArchiveKerasWrote) {
  const std::vector<ZipMember> m = read_zip((kFixtures / "mlp.keras").string());
  std::vector<std::string> names;
  for (const ZipMember& e : m) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"metadata.json", "config.json", "model.weights.h5"}));
  EXPECT_TRUE(looks_like_h5(m[2].data.substr(0, 8)));
}

TEST(Zip, TruncationAndFlippedBytesAreNamed) {
  TempDir dir;
  const std::string bytes = slurp(kFixtures / "mlp.keras");
  const fs::path cut = dir.path / "cut.keras";
  spit(cut, bytes.substr(0, bytes.size() - 100));
  std::string msg = message_of([&] { read_zip(cut.string()); });
  EXPECT_NE(msg.find("cut.keras: not a readable zip archive"), std::string::npos) << msg;

  // A flipped byte inside config.json's data: its CRC no longer matches.
  std::string flipped = bytes;
  const std::size_t at = flipped.find("\"class_name\"");
  ASSERT_NE(at, std::string::npos);
  flipped[at + 2] ^= 0x20;
  const fs::path bad = dir.path / "bad.keras";
  spit(bad, flipped);
  msg = message_of([&] { read_zip(bad.string()); });
  EXPECT_NE(msg.find("bad.keras: member 'config.json'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("CRC"), std::string::npos) << msg;
}

}  // namespace
}  // namespace lockstep::io
