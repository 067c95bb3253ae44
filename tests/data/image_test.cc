// Decoding and encoding images (data/image.h) against what TensorFlow
// decodes from the same files (tests/interop/make_image_fixtures.py), and
// every way a file can be refused.
#include "lockstep/data/image.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "data/data_test_util.h"
#include "support/files.h"
#include "support/image_fixtures.h"

namespace lockstep::data {
namespace {

using testing::expect_error;
using testing_support::ImageFixtures;
using testing_support::max_abs_difference;
using testing_support::slurp;
using testing_support::spit;
using testing_support::TempDir;

// "decode/png/rgb8.png/c3" -> ("png/rgb8.png", 3)
std::pair<std::string, int> file_and_channels(const std::string& name) {
  const auto last = name.rfind('/');
  return {name.substr(7, last - 7), std::stoi(name.substr(last + 2))};
}

// Decodes every fixture file under `prefix` ("decode/png/") to each channel
// count TensorFlow decoded it to, expecting its pixels exactly.
void expect_tensorflows_pixels(const std::string& prefix, std::size_t expected_count) {
  const auto& f = ImageFixtures::get();
  const auto names = f.names(prefix);
  ASSERT_EQ(names.size(), expected_count);
  for (const std::string& name : names) {
    const auto [file, channels] = file_and_channels(name);
    const Tensor got = read_image(f.path(file), channels);
    EXPECT_EQ(max_abs_difference(got, f.array(name)), 0) << name;
  }
}

TEST(DecodeImage, EveryKindOfPngDecodesToExactlyTensorFlowsPixels) {
  expect_tensorflows_pixels("decode/png/", 19 * 4);  // 19 files, channels 0, 1, 3, 4
}

// TensorFlow bundles its own libjpeg-turbo; Debian's is 2.1.5. With the same
// IDCT (JDCT_IFAST) and upsampling the two agree on every pixel of these
// files: baseline and progressive, 4:2:0 and 4:4:4, RGB and grayscale, each
// decoded to 1 and 3 channels.
TEST(DecodeImage, JpegsDecodeToExactlyTensorFlowsPixels) {
  expect_tensorflows_pixels("decode/jpeg/", 6 * 3);  // 6 files, channels 0, 1, 3
}

TEST(DecodeImage, ChannelsZeroKeepsTheFilesOwn) {
  const auto& f = ImageFixtures::get();
  EXPECT_EQ(read_image(f.path("png/gray_alpha8.png")).shape(), Shape({11, 13, 2}));
  EXPECT_EQ(read_image(f.path("png/palette4_trns.png")).shape(), Shape({11, 13, 4}));
  EXPECT_EQ(read_image(f.path("png/palette8.png")).shape(), Shape({11, 13, 3}));
  EXPECT_EQ(read_image(f.path("jpeg/gray_baseline.jpg")).shape(), Shape({29, 37, 1}));
  EXPECT_EQ(read_image(f.path("jpeg/rgb_baseline.jpg")).shape(), Shape({29, 37, 3}));
}

TEST(DecodeImage, ACmykJpegIsRefusedNamingTheFileAndAHint) {
  const std::string path = ImageFixtures::get().path("jpeg/cmyk.jpg");
  expect_error<ValueError>([&] { read_image(path, 3); },
                           {path, "CMYK JPEG", "grayscale and YCbCr", "Hint"});
}

TEST(DecodeImage, FourChannelsOfAJpegAreRefusedAsTensorFlowRefusesThem) {
  const std::string path = ImageFixtures::get().path("jpeg/rgb_baseline.jpg");
  expect_error<ValueError>([&] { read_image(path, 4); }, {path, "no alpha", "rgb"});
}

TEST(DecodeImage, ATruncatedJpegIsAnIOErrorNamingTheFileAndWhy) {
  TempDir dir;
  const std::string bytes = slurp(ImageFixtures::get().path("jpeg/rgb_baseline.jpg"));
  spit(dir / "cut.jpg", bytes.substr(0, bytes.size() / 2));
  expect_error<IOError>([&] { read_image(dir / "cut.jpg", 3); },
                        {dir / "cut.jpg", "corrupt JPEG", "Premature end", "truncated"});
  // Cut inside the header.
  spit(dir / "head.jpg", bytes.substr(0, 40));
  expect_error<IOError>([&] { read_image(dir / "head.jpg", 3); },
                        {dir / "head.jpg", "not a readable JPEG"});
}

TEST(DecodeImage, ACorruptJpegHeaderIsAnIOErrorWithLibjpegsReason) {
  TempDir dir;
  std::string bytes = slurp(ImageFixtures::get().path("jpeg/rgb_baseline.jpg"));
  // The SOF0 marker's component count: 3 becomes 0.
  const auto sof = bytes.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  bytes[sof + 9] = 0;
  spit(dir / "bad.jpg", bytes);
  expect_error<IOError>([&] { read_image(dir / "bad.jpg", 3); }, {dir / "bad.jpg", "JPEG"});
}

TEST(DecodeImage, ATruncatedOrCorruptPngIsAnIOErrorNamingTheFileAndWhy) {
  TempDir dir;
  const std::string bytes = slurp(ImageFixtures::get().path("png/rgb8.png"));
  spit(dir / "cut.png", bytes.substr(0, bytes.size() - 60));
  expect_error<IOError>([&] { read_image(dir / "cut.png", 3); },
                        {dir / "cut.png", "corrupt PNG", "truncated"});
  const auto idat = bytes.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  std::string flipped = bytes;  // a byte of the compressed pixels
  flipped[idat + 10] = static_cast<char>(flipped[idat + 10] ^ 0x55);
  spit(dir / "data.png", flipped);
  expect_error<IOError>([&] { read_image(dir / "data.png", 3); },
                        {dir / "data.png", "corrupt PNG", "IDAT"});
  flipped = bytes;  // a byte of the chunk's checksum
  const auto length = static_cast<std::size_t>(static_cast<unsigned char>(bytes[idat - 2])) << 8 |
                      static_cast<unsigned char>(bytes[idat - 1]);
  flipped[idat + 4 + length] = static_cast<char>(flipped[idat + 4 + length] ^ 1);
  spit(dir / "crc.png", flipped);
  expect_error<IOError>([&] { read_image(dir / "crc.png", 3); }, {dir / "crc.png", "CRC error"});
  spit(dir / "head.png", bytes.substr(0, 20));
  expect_error<IOError>([&] { read_image(dir / "head.png", 3); },
                        {dir / "head.png", "not a readable PNG"});
}

TEST(DecodeImage, GifAndBmpAreRecognisedAndRefusedWithAHint) {
  expect_error<ValueError>([] { decode_image("GIF89a\x01\x00\x01\x00", {.filename = "a.gif"}); },
                           {"'a.gif' is a GIF image", "JPEG and PNG only", "Hint"});
  expect_error<ValueError>([] { decode_image("BM\x3a\x00\x00\x00", {.filename = "a.bmp"}); },
                           {"'a.bmp' is a BMP image"});
}

TEST(DecodeImage, BytesOfNoKnownFormatAndEmptyFilesAreIOErrors) {
  expect_error<IOError>([] { decode_image("not an image", {.filename = "x.png"}); },
                        {"'x.png' is neither a JPEG nor a PNG"});
  expect_error<IOError>([] { decode_image("", {.filename = "x.png"}); }, {"'x.png' is empty"});
  expect_error<IOError>([] { read_image("/nonexistent/x.png"); }, {"/nonexistent/x.png"});
  expect_error<ValueError>([] { decode_image("\x89PNG", {.channels = 2}); },
                           {"channels must be 0, 1, 3 or 4, got 2"});
}

TEST(EncodeImage, PngRoundTripsExactlyForEveryChannelCount) {
  for (int c = 1; c <= 4; ++c) {
    Tensor img = Tensor::empty({5, 7, c}, DType::kUInt8);
    std::uint8_t* p = img.data<std::uint8_t>();
    for (std::int64_t i = 0; i < img.numel(); ++i) p[i] = static_cast<std::uint8_t>(i * 37 + c);
    const Tensor back = decode_image(encode_png(img));
    EXPECT_EQ(max_abs_difference(back, img), 0) << c << " channels";
  }
}

TEST(EncodeImage, JpegRoundTripsCloselyBaselineAndProgressiveGrayAndRgb) {
  // A smooth image: JPEG at quality 100 without chroma subsampling keeps it
  // within a few levels.
  for (int c : {1, 3}) {
    for (bool progressive : {false, true}) {
      Tensor img = Tensor::empty({24, 40, c}, DType::kUInt8);
      std::uint8_t* p = img.data<std::uint8_t>();
      for (std::int64_t y = 0; y < 24; ++y)
        for (std::int64_t x = 0; x < 40; ++x)
          for (int k = 0; k < c; ++k)
            p[(y * 40 + x) * c + k] = static_cast<std::uint8_t>(3 * x + 2 * y + 20 * k);
      const std::string bytes = encode_jpeg(
          img, {.quality = 100, .progressive = progressive, .chroma_downsampling = false});
      const Tensor back = decode_image(bytes);
      EXPECT_LE(max_abs_difference(back, img), 4) << c << " channels, progressive " << progressive;
    }
  }
}

TEST(EncodeImage, BadImagesAreRefusedNamingTheShapeOrDtype) {
  expect_error<ValueError>([] { encode_jpeg(Tensor::zeros({4, 4, 3})); }, {"uint8", "float32"});
  expect_error<ShapeError>(
      [] {
        encode_jpeg(Tensor::zeros({4, 4, 4}, DType::kUInt8));
      },
      {"1 or 3 channels", "[4, 4, 4]"});
  expect_error<ShapeError>(
      [] {
        encode_png(Tensor::zeros({4, 4}, DType::kUInt8));
      },
      {"[height, width, channels]"});
  expect_error<ValueError>(
      [] {
        encode_jpeg(Tensor::zeros({4, 4, 3}, DType::kUInt8), {.quality = 101});
      },
      {"quality must be in [0, 100], got 101"});
}

}  // namespace
}  // namespace lockstep::data
