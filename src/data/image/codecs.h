// Internal to data: the two codec adapters behind data/image.h. jpeg.cc is
// the only file that includes libjpeg's headers and png.cc the only one that
// includes libpng's; everything else sees these plain functions. Each throws
// IOError (a file the library cannot read, with the library's reason) or
// ValueError (a valid file Lockstep does not decode, or a bad request),
// naming `what` (the file, or "image bytes").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/data/image.h"

namespace lockstep::data::image_detail {

// uint8 [height, width, channels]; channels 0 keeps the file's own (see
// decode_image in data/image.h for the conversions).
Tensor decode_jpeg(const std::uint8_t* data, std::size_t size, int channels,
                   const std::string& what);
Tensor decode_png(const std::uint8_t* data, std::size_t size, int channels,
                  const std::string& what);

// `image` is uint8 [height, width, channels], checked by the caller.
std::string encode_jpeg(const Tensor& image, const EncodeJpegOptions& options);
std::string encode_png(const Tensor& image, const EncodePngOptions& options);

}  // namespace lockstep::data::image_detail
