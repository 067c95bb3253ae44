// decode_image, read_image, encode_jpeg and encode_png (data/image.h): the
// format sniffed from the first bytes, as tf.io.decode_image does, then the
// codec adapter of that format (jpeg.cc, png.cc).
#include <iterator>

#include "data/image/codecs.h"
#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep::data {
namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

void check_image(const Tensor& image, const char* op) {
  check_defined(image, op, "image");
  LOCKSTEP_CHECK(image.dtype() == DType::kUInt8, op, ": expected a uint8 image, got ",
                 dtype_name(image.dtype()),
                 ". Hint: cast float pixels in [0, 255] with lockstep::cast(x, DType::kUInt8)");
  LOCKSTEP_CHECK_AS(ShapeError, image.rank() == 3 && image.dim(0) > 0 && image.dim(1) > 0, op,
                    ": expected an image of shape [height, width, channels] with at least "
                    "one pixel, got shape ",
                    image.shape());
}

}  // namespace

Tensor decode_image(std::string_view contents, const DecodeImageOptions& options) {
  const std::string what = options.filename.empty() ? "image bytes" : "'" + options.filename + "'";
  const int channels = options.channels;
  LOCKSTEP_CHECK(channels == 0 || channels == 1 || channels == 3 || channels == 4,
                 "decode_image: channels must be 0, 1, 3 or 4, got ", channels, " (", what, ")");
  LOCKSTEP_CHECK_AS(IOError, !contents.empty(), "decode_image: ", what, " is empty");
  const auto* data = reinterpret_cast<const std::uint8_t*>(contents.data());
  if (starts_with(contents, "\xff\xd8\xff"))
    return image_detail::decode_jpeg(data, contents.size(), channels, what);
  if (starts_with(contents, "\x89PNG\r\n\x1a\n"))
    return image_detail::decode_png(data, contents.size(), channels, what);
  const char* refused = starts_with(contents, "GIF8") ? "GIF"
                        : starts_with(contents, "BM") ? "BMP"
                                                      : nullptr;
  if (refused) {
    detail::throw_error<ValueError>(
        "decode_image: ", what, " is a ", refused,
        " image; Lockstep decodes JPEG and PNG only (Debian's libjpeg-turbo and libpng). "
        "Hint: convert it, e.g. `convert in.",
        refused[0] == 'G' ? "gif" : "bmp", " out.png`");
  }
  detail::throw_error<IOError>(
      "decode_image: ", what,
      " is neither a JPEG nor a PNG (its first bytes are not a known "
      "image signature). Hint: the file may be damaged, or not an image despite its name");
}

Tensor read_image(const std::string& path, int channels) {
  return decode_image(read_whole_file(path), {.channels = channels, .filename = path});
}

std::string encode_jpeg(const Tensor& image, const EncodeJpegOptions& options) {
  check_image(image, "encode_jpeg");
  return image_detail::encode_jpeg(image, options);
}

std::string encode_png(const Tensor& image, const EncodePngOptions& options) {
  check_image(image, "encode_png");
  return image_detail::encode_png(image, options);
}

}  // namespace lockstep::data
