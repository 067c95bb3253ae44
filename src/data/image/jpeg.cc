// The JPEG adapter: decoding and encoding with Debian's libjpeg-turbo. The
// only file of Lockstep that includes jpeglib.h.
//
// libjpeg reports errors by calling error_exit, which must not return; we
// longjmp out of it. A longjmp must never cross a frame with a destructor
// to run, so every libjpeg call happens in a small function (run_*) whose
// frame holds only plain C data, and the C++ around it (tensors, strings,
// exceptions) lives in the callers.
//
// Decoding settings are tf.io.decode_image's, so that the pixels are
// TensorFlow's: the fast integer IDCT (JDCT_IFAST), fancy upsampling, and a
// premature end of data is an error (libjpeg alone would pad the image with
// gray and warn).
#include <csetjmp>
#include <cstdio>  // jpeglib.h uses FILE and size_t without including stdio.h
#include <cstdlib>
#include <cstring>
// clang-format off: jpeglib.h must come after <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include "data/image/codecs.h"
#include "lockstep/core/error.h"

namespace lockstep::data::image_detail {
namespace {

// TensorFlow refuses decoded images of 2^29 bytes or more; so do we (a
// forged header must not make us allocate gigabytes).
constexpr std::int64_t kMaxDecodedBytes = std::int64_t{1} << 29;

// libjpeg casts cinfo->err to this: `pub` must come first.
struct ErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) are ignored, as TensorFlow does, except a premature
// end of data: the file is truncated, which TensorFlow refuses too.
void on_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::strncat(err->message, " (the file is truncated)",
                 sizeof(err->message) - std::strlen(err->message) - 1);
    std::longjmp(err->jump, 1);
  }
}

void install(ErrorManager& err) {
  jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  err.message[0] = '\0';
}

// ---- decoding ----

struct Decoder {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created;
};

bool run_read_header(Decoder& d, const std::uint8_t* data, std::size_t size) {
  d.cinfo.err = &d.err.pub;
  if (setjmp(d.err.jump)) return false;
  jpeg_create_decompress(&d.cinfo);
  d.created = true;
  jpeg_mem_src(&d.cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d.cinfo, TRUE);
  return true;
}

bool run_calc_dimensions(Decoder& d, J_COLOR_SPACE out_space) {
  if (setjmp(d.err.jump)) return false;
  d.cinfo.out_color_space = out_space;
  d.cinfo.dct_method = JDCT_IFAST;
  d.cinfo.do_fancy_upsampling = TRUE;
  jpeg_calc_output_dimensions(&d.cinfo);
  return true;
}

bool run_decompress(Decoder& d, std::uint8_t* out, std::size_t row_bytes) {
  if (setjmp(d.err.jump)) return false;
  jpeg_start_decompress(&d.cinfo);
  while (d.cinfo.output_scanline < d.cinfo.output_height) {
    JSAMPROW row = out + static_cast<std::size_t>(d.cinfo.output_scanline) * row_bytes;
    jpeg_read_scanlines(&d.cinfo, &row, 1);
  }
  jpeg_finish_decompress(&d.cinfo);
  return true;
}

// Owns the decoder in a frame no longjmp crosses.
struct DecoderOwner {
  Decoder d{};
  ~DecoderOwner() {
    if (d.created) jpeg_destroy_decompress(&d.cinfo);
  }
};

const char* color_space_name(J_COLOR_SPACE s) {
  switch (s) {
    case JCS_GRAYSCALE:
      return "grayscale";
    case JCS_RGB:
      return "RGB";
    case JCS_YCbCr:
      return "YCbCr";
    case JCS_CMYK:
      return "CMYK";
    case JCS_YCCK:
      return "YCCK";
    default:
      return "an unusual colour space";
  }
}

// ---- encoding ----

struct Encoder {
  jpeg_compress_struct cinfo;
  ErrorManager err;
  bool created;
  unsigned char* buffer;  // malloc'd by libjpeg's memory destination
  unsigned long size;
};

struct EncodeParams {
  const std::uint8_t* pixels;
  int height, width, channels, quality;
  bool progressive, chroma_downsampling;
};

bool run_compress(Encoder& e, const EncodeParams& p) {
  e.cinfo.err = &e.err.pub;
  if (setjmp(e.err.jump)) return false;
  jpeg_create_compress(&e.cinfo);
  e.created = true;
  jpeg_mem_dest(&e.cinfo, &e.buffer, &e.size);
  e.cinfo.image_width = static_cast<JDIMENSION>(p.width);
  e.cinfo.image_height = static_cast<JDIMENSION>(p.height);
  e.cinfo.input_components = p.channels;
  e.cinfo.in_color_space = p.channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&e.cinfo);
  jpeg_set_quality(&e.cinfo, p.quality, TRUE);
  if (p.channels == 3 && !p.chroma_downsampling) {
    for (int c = 0; c < 3; ++c) {
      e.cinfo.comp_info[c].h_samp_factor = 1;
      e.cinfo.comp_info[c].v_samp_factor = 1;
    }
  }
  if (p.progressive) jpeg_simple_progression(&e.cinfo);
  jpeg_start_compress(&e.cinfo, TRUE);
  const std::size_t row_bytes = static_cast<std::size_t>(p.width) * p.channels;
  while (e.cinfo.next_scanline < e.cinfo.image_height) {
    // libjpeg does not write through the row pointer.
    JSAMPROW row = const_cast<std::uint8_t*>(p.pixels) + e.cinfo.next_scanline * row_bytes;
    jpeg_write_scanlines(&e.cinfo, &row, 1);
  }
  jpeg_finish_compress(&e.cinfo);
  return true;
}

struct EncoderOwner {
  Encoder e{};
  ~EncoderOwner() {
    if (e.created) jpeg_destroy_compress(&e.cinfo);
    std::free(e.buffer);
  }
};

}  // namespace

Tensor decode_jpeg(const std::uint8_t* data, std::size_t size, int channels,
                   const std::string& what) {
  LOCKSTEP_CHECK(channels == 0 || channels == 1 || channels == 3, "decode_image: ", what,
                 " is a JPEG, which has no alpha channel; asked for ", channels,
                 " channels. Hint: ask for 3 (color_mode \"rgb\") or 1 (\"grayscale\"), "
                 "as TensorFlow, which refuses 4 for a JPEG too");
  DecoderOwner owner;
  Decoder& d = owner.d;
  install(d.err);
  if (!run_read_header(d, data, size)) {
    detail::throw_error<IOError>("decode_image: ", what,
                                 " is not a readable JPEG: ", d.err.message);
  }
  const J_COLOR_SPACE in_space = d.cinfo.jpeg_color_space;
  if (in_space == JCS_CMYK || in_space == JCS_YCCK) {
    detail::throw_error<ValueError>(
        "decode_image: ", what, " is a ", color_space_name(in_space),
        " JPEG; Lockstep decodes grayscale and YCbCr (RGB) JPEGs only. Hint: convert it "
        "to RGB first (for example `convert in.jpg -colorspace sRGB out.jpg`)");
  }
  if (channels == 0) channels = d.cinfo.num_components >= 3 ? 3 : 1;
  if (!run_calc_dimensions(d, channels == 1 ? JCS_GRAYSCALE : JCS_RGB)) {
    detail::throw_error<IOError>("decode_image: ", what, " is not a decodable JPEG (",
                                 color_space_name(in_space), "): ", d.err.message);
  }
  const std::int64_t h = d.cinfo.output_height, w = d.cinfo.output_width;
  LOCKSTEP_CHECK_AS(IOError, h > 0 && w > 0 && h * w * channels < kMaxDecodedBytes,
                    "decode_image: ", what, " claims a JPEG of ", w, " x ", h,
                    " pixels; Lockstep decodes images of fewer than 2^29 bytes (as TensorFlow)");
  Tensor out = Tensor::empty({h, w, channels}, DType::kUInt8);
  if (!run_decompress(d, out.data<std::uint8_t>(), static_cast<std::size_t>(w * channels))) {
    detail::throw_error<IOError>("decode_image: ", what, " is a corrupt JPEG (", w, " x ", h,
                                 ", stopped at row ", d.cinfo.output_scanline,
                                 "): ", d.err.message);
  }
  return out;
}

std::string encode_jpeg(const Tensor& image, const EncodeJpegOptions& options) {
  LOCKSTEP_CHECK(options.quality >= 0 && options.quality <= 100,
                 "encode_jpeg: quality must be in [0, 100], got ", options.quality);
  const int channels = static_cast<int>(image.dim(2));
  LOCKSTEP_CHECK_AS(ShapeError, channels == 1 || channels == 3,
                    "encode_jpeg: expected an image of 1 or 3 channels, got shape ", image.shape(),
                    ". Hint: JPEG has no alpha; drop it or use encode_png");
  EncoderOwner owner;
  Encoder& e = owner.e;
  install(e.err);
  const EncodeParams p{.pixels = image.data<std::uint8_t>(),
                       .height = static_cast<int>(image.dim(0)),
                       .width = static_cast<int>(image.dim(1)),
                       .channels = channels,
                       .quality = options.quality,
                       .progressive = options.progressive,
                       .chroma_downsampling = options.chroma_downsampling};
  if (!run_compress(e, p)) {
    detail::throw_error<InternalError>("encode_jpeg: libjpeg failed on an image of shape ",
                                       image.shape(), ": ", e.err.message);
  }
  return {reinterpret_cast<const char*>(e.buffer), static_cast<std::size_t>(e.size)};
}

}  // namespace lockstep::data::image_detail
