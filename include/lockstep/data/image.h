// Image files: decoding and encoding JPEG and PNG (tf.io.decode_image,
// tf.io.encode_jpeg, tf.io.encode_png), with Debian's libjpeg-turbo and
// libpng behind an adapter (src/data/image/).
//
//   auto img = ls::data::read_image("cat.jpg", {.channels = 3});  // uint8 [h, w, 3]
//   std::string jpeg = ls::data::encode_jpeg(img, {.quality = 90});
//
// Decoded pixels are TensorFlow's: a JPEG is decoded as tf.io.decode_image
// decodes it (libjpeg's fast integer IDCT, fancy upsampling), a PNG through
// the same libpng conversions (16-bit samples keep their high byte; colour to
// gray with weights 0.299 / 0.587 / 0.114; palette and transparency expanded).
// tests/data/image_test.cc compares both with TensorFlow's own output.
//
// The format is sniffed from the bytes, not the file name (as TensorFlow
// does). BMP and GIF are recognised and refused with a clear error: Debian's
// libraries give Lockstep no decoder for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lockstep/tensor/tensor.h"

namespace lockstep::data {

struct DecodeImageOptions {
  // 0: the file's own channels (JPEG 1 or 3; PNG 1, 2, 3 or 4). 1: grayscale,
  // 3: RGB, 4: RGBA (PNG only, as TensorFlow: a JPEG has no alpha).
  int channels = 0;
  // Named in error messages ("" says "image bytes").
  std::string filename{};
};

// tf.io.decode_image(contents, channels, expand_animations=False) for JPEG
// (baseline and progressive, grayscale and YCbCr; CMYK is refused) and PNG
// (1 to 16 bits per sample, gray, gray + alpha, RGB, RGBA, palette). Returns
// uint8 [height, width, channels]. A truncated or corrupt file is an IOError
// with the library's reason.
Tensor decode_image(std::string_view contents, const DecodeImageOptions& options = {});

// Reads `path` and decodes it; errors name the path.
Tensor read_image(const std::string& path, int channels = 0);

struct EncodeJpegOptions {
  int quality = 95;                 // 0..100, tf.io.encode_jpeg's default
  bool progressive = false;         // a progressive JPEG (several scans)
  bool chroma_downsampling = true;  // 4:2:0 chroma (false: 4:4:4)
};
// uint8 [height, width, 1 or 3] as JPEG bytes.
std::string encode_jpeg(const Tensor& image, const EncodeJpegOptions& options = {});

struct EncodePngOptions {
  int compression = -1;  // zlib level 0..9; -1: zlib's default
};
// uint8 [height, width, 1..4] (gray, gray + alpha, RGB, RGBA) as 8-bit PNG bytes.
std::string encode_png(const Tensor& image, const EncodePngOptions& options = {});

}  // namespace lockstep::data
