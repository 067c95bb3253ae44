// The PNG adapter: decoding and encoding with Debian's libpng. The only file
// of Lockstep that includes png.h.
//
// libpng reports errors through a handler that must not return; it longjmps
// back to the png_jmpbuf of the calling function. As in jpeg.cc, every libpng
// call happens in a run_* function whose frame holds only plain C data, so no
// longjmp skips a destructor.
//
// The conversions to the requested channels are tf.io.decode_image's (with
// dtype uint8), so the pixels are TensorFlow's: 16-bit samples keep their
// high byte, sub-byte samples are unpacked and gray expanded to 8 bits, a
// palette expands to RGB (RGBA when it has transparency), colour becomes
// gray with libpng's 0.299 / 0.587 weights, gray becomes RGB by copying,
// alpha is dropped or added (opaque) as asked.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "data/image/codecs.h"
#include "lockstep/core/error.h"

namespace lockstep::data::image_detail {
namespace {

constexpr std::int64_t kMaxDecodedBytes = std::int64_t{1} << 29;  // as jpeg.cc

struct Reader {
  png_structp png;
  png_infop info;
  const std::uint8_t* data;
  std::size_t left;
  char message[256];
};

[[noreturn]] void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof(r->message), "%s", msg);
  png_longjmp(png, 1);
}

// Warnings (a bad ancillary chunk, an unknown sRGB profile) leave the image
// readable; TensorFlow logs and decodes too.
void on_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->left) png_error(png, "the file ends early (it is truncated)");
  std::memcpy(out, r->data, n);
  r->data += n;
  r->left -= n;
}

struct Header {
  png_uint_32 width, height;
  int bit_depth, color_type, interlace;
  bool has_trns;
  int channels;  // in the file (a palette counts 1)
};

bool run_read_header(Reader& r, Header& h) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, read_bytes);
  png_read_info(r.png, r.info);
  png_get_IHDR(r.png, r.info, &h.width, &h.height, &h.bit_depth, &h.color_type, &h.interlace,
               nullptr, nullptr);
  h.has_trns = png_get_valid(r.png, r.info, PNG_INFO_tRNS) != 0;
  h.channels = png_get_channels(r.png, r.info);
  return true;
}

// Sets up the conversions to `channels` (1..4) and 8-bit samples.
bool run_set_transforms(Reader& r, const Header& h, int channels) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  const bool has_alpha = (h.color_type & PNG_COLOR_MASK_ALPHA) != 0;
  if (channels % 2 == 0) {  // alpha wanted
    if (!has_alpha) {
      if (h.has_trns) {
        png_set_tRNS_to_alpha(r.png);
      } else {
        png_set_add_alpha(r.png, (1u << h.bit_depth) - 1, PNG_FILLER_AFTER);
      }
    }
  } else if (has_alpha || h.has_trns) {
    png_set_strip_alpha(r.png);
  }
  if (h.bit_depth > 8) png_set_strip_16(r.png);
  png_set_packing(r.png);
  png_set_interlace_handling(r.png);
  if (h.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  const bool is_gray = (h.color_type & PNG_COLOR_MASK_COLOR) == 0;
  if (is_gray && h.bit_depth < 8) png_set_expand_gray_1_2_4_to_8(r.png);
  if (channels < 3) {
    if (!is_gray) png_set_rgb_to_gray(r.png, 1, 0.299, 0.587);
  } else if (is_gray) {
    png_set_gray_to_rgb(r.png);
  }
  png_read_update_info(r.png, r.info);
  return true;
}

bool run_read_image(Reader& r, png_bytepp rows) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_read_image(r.png, rows);
  png_read_end(r.png, nullptr);
  return true;
}

struct ReaderOwner {
  Reader r{};
  ~ReaderOwner() {
    if (r.png) png_destroy_read_struct(&r.png, r.info ? &r.info : nullptr, nullptr);
  }
};

// ---- encoding ----

struct Writer {
  png_structp png;
  png_infop info;
  unsigned char* buffer;  // malloc'd, grown by write_bytes
  std::size_t size, capacity;
  char message[256];
};

[[noreturn]] void on_write_error(png_structp png, png_const_charp msg) {
  auto* w = static_cast<Writer*>(png_get_error_ptr(png));
  std::snprintf(w->message, sizeof(w->message), "%s", msg);
  png_longjmp(png, 1);
}

void write_bytes(png_structp png, png_bytep in, png_size_t n) {
  auto* w = static_cast<Writer*>(png_get_io_ptr(png));
  if (w->size + n > w->capacity) {
    std::size_t cap = w->capacity ? w->capacity : 4096;
    while (cap < w->size + n) cap *= 2;
    auto* grown = static_cast<unsigned char*>(std::realloc(w->buffer, cap));
    if (!grown) png_error(png, "out of memory");
    w->buffer = grown;
    w->capacity = cap;
  }
  std::memcpy(w->buffer + w->size, in, n);
  w->size += n;
}

void flush_bytes(png_structp) {}

bool run_write(Writer& w, const std::uint8_t* pixels, int height, int width, int channels,
               int compression) {
  if (setjmp(png_jmpbuf(w.png))) return false;
  static constexpr int kColorTypes[] = {PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                        PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  png_set_write_fn(w.png, &w, write_bytes, flush_bytes);
  if (compression >= 0) png_set_compression_level(w.png, compression);
  png_set_IHDR(w.png, w.info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               kColorTypes[channels - 1], PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  const std::size_t row_bytes = static_cast<std::size_t>(width) * channels;
  for (int y = 0; y < height; ++y) {
    // libpng does not write through the row pointer.
    png_write_row(w.png, const_cast<std::uint8_t*>(pixels) + y * row_bytes);
  }
  png_write_end(w.png, nullptr);
  return true;
}

struct WriterOwner {
  Writer w{};
  ~WriterOwner() {
    if (w.png) png_destroy_write_struct(&w.png, w.info ? &w.info : nullptr);
    std::free(w.buffer);
  }
};

}  // namespace

Tensor decode_png(const std::uint8_t* data, std::size_t size, int channels,
                  const std::string& what) {
  ReaderOwner owner;
  Reader& r = owner.r;
  r.data = data;
  r.left = size;
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  if (r.png) r.info = png_create_info_struct(r.png);
  LOCKSTEP_CHECK_AS(InternalError, r.png && r.info, "decode_image: libpng could not start (", what,
                    ")");
  Header h{};
  if (!run_read_header(r, h)) {
    detail::throw_error<IOError>("decode_image: ", what, " is not a readable PNG: ", r.message);
  }
  if (channels == 0) {
    channels = h.color_type == PNG_COLOR_TYPE_PALETTE ? (h.has_trns ? 4 : 3) : h.channels;
  }
  const std::int64_t height = h.height, width = h.width;
  LOCKSTEP_CHECK_AS(IOError, height * width * channels < kMaxDecodedBytes, "decode_image: ", what,
                    " claims a PNG of ", width, " x ", height,
                    " pixels; Lockstep decodes images of fewer than 2^29 bytes (as TensorFlow)");
  if (!run_set_transforms(r, h, channels)) {
    detail::throw_error<IOError>("decode_image: ", what, " is not a decodable PNG: ", r.message);
  }
  const auto row_bytes = static_cast<std::size_t>(png_get_rowbytes(r.png, r.info));
  LOCKSTEP_CHECK_AS(InternalError, row_bytes == static_cast<std::size_t>(width * channels),
                    "decode_image: ", what, ": libpng gives rows of ", row_bytes, " bytes for ",
                    width, " pixels of ", channels, " channels");
  Tensor out = Tensor::empty({height, width, channels}, DType::kUInt8);
  std::uint8_t* base = out.data<std::uint8_t>();
  std::vector<png_bytep> rows(static_cast<std::size_t>(height));
  for (std::int64_t y = 0; y < height; ++y)
    rows[static_cast<std::size_t>(y)] = base + y * row_bytes;
  if (!run_read_image(r, rows.data())) {
    detail::throw_error<IOError>("decode_image: ", what, " is a corrupt PNG (", width, " x ",
                                 height, "): ", r.message);
  }
  return out;
}

std::string encode_png(const Tensor& image, const EncodePngOptions& options) {
  LOCKSTEP_CHECK(options.compression >= -1 && options.compression <= 9,
                 "encode_png: compression must be in [-1, 9], got ", options.compression);
  const int channels = static_cast<int>(image.dim(2));
  LOCKSTEP_CHECK_AS(ShapeError, channels >= 1 && channels <= 4,
                    "encode_png: expected an image of 1 to 4 channels, got shape ", image.shape());
  WriterOwner owner;
  Writer& w = owner.w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_write_error, on_warning);
  if (w.png) w.info = png_create_info_struct(w.png);
  LOCKSTEP_CHECK_AS(InternalError, w.png && w.info, "encode_png: libpng could not start");
  if (!run_write(w, image.data<std::uint8_t>(), static_cast<int>(image.dim(0)),
                 static_cast<int>(image.dim(1)), channels, options.compression)) {
    detail::throw_error<InternalError>("encode_png: libpng failed on an image of shape ",
                                       image.shape(), ": ", w.message);
  }
  return {reinterpret_cast<const char*>(w.buffer), w.size};
}

}  // namespace lockstep::data::image_detail
