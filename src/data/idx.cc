// IDX reader over zlib's gz* interface (which reads plain files too).
#include "lockstep/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/core/file.h"

namespace lockstep::data {
namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads exactly n bytes at `offset` (uncompressed) or throws naming them.
void read_exact(gzFile f, void* dst, std::size_t n, std::uint64_t offset, const std::string& path,
                const std::string& what) {
  std::size_t done = 0;
  while (done < n) {
    const auto chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
    const int got = gzread(f, static_cast<char*>(dst) + done, chunk);
    if (got <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      detail::throw_error<IOError>(
          path, ": ", got == 0 ? "file ends" : "read error", " at byte ", offset + done,
          " (uncompressed) while reading ", what, "; expected ", n - done, " more bytes",
          err != Z_OK && err != Z_STREAM_END ? std::string(" (") + msg + ")" : std::string());
    }
    done += static_cast<std::size_t>(got);
  }
}

// Data is read 64 MiB at a time; no file may claim more than 1 TiB.
constexpr std::uint64_t kChunkBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 40;

std::uint32_t big_endian32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         p[3];
}

}  // namespace

Tensor read_idx(const std::string& path) {
  (void)regular_file_size(path);  // a FIFO or directory is named, never opened
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) detail::throw_error<IOError>(path, ": cannot open: ", std::strerror(errno));
  unsigned char header[4];
  read_exact(f.get(), header, 4, 0, path, "the IDX magic number");
  if (header[0] != 0 || header[1] != 0) {
    detail::throw_error<IOError>(path, ": byte 0: not an IDX file (magic starts with ",
                                 int{header[0]}, " ", int{header[1]}, ", expected 0 0)");
  }
  const int type = header[2], rank = header[3];
  std::size_t elem = 0;
  switch (type) {
    case 0x08:
    case 0x09:
      elem = 1;
      break;
    case 0x0B:
      elem = 2;
      break;
    case 0x0C:
    case 0x0D:
      elem = 4;
      break;
    case 0x0E:
      elem = 8;
      break;
    default:
      detail::throw_error<IOError>(path, ": byte 2: unknown IDX element type 0x", std::hex, type,
                                   " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  }
  if (rank < 1 || rank > Shape::kMaxRank) {
    detail::throw_error<IOError>(path, ": byte 3: IDX rank ", rank, " is outside 1..",
                                 Shape::kMaxRank);
  }
  std::vector<unsigned char> dims_raw(static_cast<std::size_t>(rank) * 4);
  read_exact(f.get(), dims_raw.data(), dims_raw.size(), 4, path, "the dimensions");
  Shape shape;
  for (int i = 0; i < rank; ++i)
    shape.push_back(big_endian32(&dims_raw[static_cast<std::size_t>(i) * 4]));
  std::uint64_t count = 1;
  for (std::int64_t d : shape.dims()) {
    LOCKSTEP_CHECK_AS(IOError, d == 0 || count <= kMaxBytes / static_cast<std::uint64_t>(d) / elem,
                      path, ": byte 4: the dimensions ", shape, " claim more than ", kMaxBytes,
                      " bytes of data");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t data_offset = 4 + dims_raw.size();
  const std::uint64_t bytes = count * elem;
  // Read in chunks, so that memory follows the data present, never the
  // claim alone (a 7.8 MB file claiming 2.1 GB took 2.1 GB before failing;
  // a gzip'd file's size says nothing of its contents').
  std::vector<unsigned char> raw;
  raw.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, kChunkBytes)));
  while (raw.size() < bytes) {
    const std::size_t at = raw.size();
    raw.resize(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, at + kChunkBytes)));
    read_exact(f.get(), raw.data() + at, raw.size() - at, data_offset + at, path,
               "the data: the header promises " + shape.to_string() + " values of " +
                   std::to_string(elem) + " byte(s)");
  }
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) > 0) {
    detail::throw_error<IOError>(path, ": byte ", data_offset + raw.size(),
                                 ": unexpected data after the ", count,
                                 " values the header promises for shape ", shape);
  }
  const DType dtype = type == 0x08                     ? DType::kUInt8
                      : (type == 0x0D || type == 0x0E) ? DType::kFloat32
                                                       : DType::kInt32;
  Tensor out = Tensor::empty(shape, dtype);
  for (std::uint64_t i = 0; i < count; ++i) {
    const unsigned char* p = &raw[i * elem];
    switch (type) {
      case 0x08:
        out.data<std::uint8_t>()[i] = p[0];
        break;
      case 0x09:
        out.data<std::int32_t>()[i] = static_cast<std::int8_t>(p[0]);
        break;
      case 0x0B:
        out.data<std::int32_t>()[i] = static_cast<std::int16_t>((p[0] << 8) | p[1]);
        break;
      case 0x0C:
        out.data<std::int32_t>()[i] = static_cast<std::int32_t>(big_endian32(p));
        break;
      case 0x0D: {
        const std::uint32_t bits = big_endian32(p);
        float v;
        std::memcpy(&v, &bits, 4);
        out.data<float>()[i] = v;
        break;
      }
      default: {
        const std::uint64_t bits = (std::uint64_t{big_endian32(p)} << 32) | big_endian32(p + 4);
        double v;
        std::memcpy(&v, &bits, 8);
        out.data<float>()[i] = static_cast<float>(v);
      }
    }
  }
  return out;
}

}  // namespace lockstep::data
