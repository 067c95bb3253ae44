// TensorBoard event files: TFRecord framing and the few protobuf fields of
// tensorflow.Event / Summary that scalars need.
#include "lockstep/io/event_file.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep::io {
namespace {

// Protobuf wire format: a field key is (number << 3 | wire type) as a varint.
enum Wire { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void put_key(std::string& out, int field, Wire wire) {
  put_varint(out, static_cast<std::uint64_t>(field) << 3 | wire);
}
template <typename T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64)
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string), summary = 5 (Summary). Summary: value = 1 (Value). Value:
// tag = 1 (string), simple_value = 2 (float).
std::string event(double wall_time, std::int64_t step) {
  std::string e;
  put_key(e, 1, kFixed64);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<std::uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::atomic<int> g_files{0};

// A cursor over one record's bytes for decoding.
struct Reader {
  const unsigned char* p;
  const unsigned char* end;
  bool ok = true;
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) break;
      const unsigned char b = *p++;
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (end - p < static_cast<std::ptrdiff_t>(sizeof(T))) {
      ok = false;
      return v;
    }
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  Reader sub() {
    const std::uint64_t n = varint();
    if (!ok || static_cast<std::uint64_t>(end - p) < n) {
      ok = false;
      return {p, p, false};
    }
    Reader r{p, p + n};
    p += n;
    return r;
  }
  void skip(Wire wire) {
    switch (wire) {
      case kVarint:
        varint();
        break;
      case kFixed64:
        fixed<std::uint64_t>();
        break;
      case kFixed32:
        fixed<std::uint32_t>();
        break;
      case kBytes:
        sub();
        break;
      default:
        ok = false;
    }
  }
};

}  // namespace

std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

EventFileWriter::EventFileWriter(const std::string& directory) {
  std::error_code ec;
  std::filesystem::create_directories(directory, ec);
  LOCKSTEP_CHECK_AS(IOError, !ec, directory, ": cannot create the log directory: ", ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(static_cast<long long>(now_seconds())) + "." +
            host + "." + std::to_string(::getpid()) + "." + std::to_string(g_files++)))
              .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  LOCKSTEP_CHECK_AS(IOError, out_.good(), path_, ": cannot open for writing");
  std::string first = event(now_seconds(), 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
  flush();
}

void EventFileWriter::write_record(const std::string& bytes) {
  std::string header;
  put_fixed(header, static_cast<std::uint64_t>(bytes.size()));
  std::string record = header;
  put_fixed(record, masked_crc32c(header.data(), header.size()));
  record += bytes;
  put_fixed(record, masked_crc32c(bytes.data(), bytes.size()));
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  LOCKSTEP_CHECK_AS(IOError, out_.good(), path_, ": write failed");
}

void EventFileWriter::add_scalar(const std::string& tag, double value, std::int64_t step) {
  std::string v;
  put_bytes(v, 1, tag);
  put_key(v, 2, kFixed32);
  put_fixed(v, static_cast<float>(value));
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event(now_seconds(), step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void EventFileWriter::flush() {
  out_.flush();
  LOCKSTEP_CHECK_AS(IOError, out_.good(), path_, ": write failed");
}

std::vector<ScalarEvent> read_event_file(const std::string& path, std::string* file_version) {
  std::ifstream in(path, std::ios::binary);
  LOCKSTEP_CHECK_AS(IOError, in.good(), path, ": cannot open");
  const std::string data{std::istreambuf_iterator<char>(in), {}};
  std::vector<ScalarEvent> out;
  std::size_t at = 0;
  int record = 0;
  auto bad = [&](const std::string& what) {
    detail::throw_error<IOError>(path, ": byte ", at, " (record ", record, "): ", what);
  };
  while (at < data.size()) {
    if (data.size() - at < 12) bad("truncated record header");
    std::uint64_t len;
    std::uint32_t len_crc;
    std::memcpy(&len, data.data() + at, 8);
    std::memcpy(&len_crc, data.data() + at + 8, 4);
    if (masked_crc32c(data.data() + at, 8) != len_crc) bad("length checksum mismatch");
    if (data.size() - at - 12 < len + 4)
      bad("truncated record of " + std::to_string(len) + " bytes");
    const char* bytes = data.data() + at + 12;
    std::uint32_t data_crc;
    std::memcpy(&data_crc, bytes + len, 4);
    if (masked_crc32c(bytes, len) != data_crc) bad("data checksum mismatch");
    Reader r{reinterpret_cast<const unsigned char*>(bytes),
             reinterpret_cast<const unsigned char*>(bytes) + len};
    ScalarEvent ev;
    bool has_scalar = false;
    while (r.ok && r.p < r.end) {
      const std::uint64_t key = r.varint();
      const int field = static_cast<int>(key >> 3);
      const auto wire = static_cast<Wire>(key & 7);
      if (field == 1 && wire == kFixed64) {
        ev.wall_time = r.fixed<double>();
      } else if (field == 2 && wire == kVarint) {
        ev.step = static_cast<std::int64_t>(r.varint());
      } else if (field == 3 && wire == kBytes) {
        Reader s = r.sub();
        if (file_version && s.ok) file_version->assign(s.p, s.end);
      } else if (field == 5 && wire == kBytes) {
        Reader summary = r.sub();
        while (summary.ok && summary.p < summary.end) {
          const std::uint64_t k = summary.varint();
          if ((k >> 3) != 1 || (k & 7) != kBytes) {
            summary.skip(static_cast<Wire>(k & 7));
            continue;
          }
          Reader value = summary.sub();
          while (value.ok && value.p < value.end) {
            const std::uint64_t vk = value.varint();
            if ((vk >> 3) == 1 && (vk & 7) == kBytes) {
              Reader tag = value.sub();
              if (tag.ok) ev.tag.assign(tag.p, tag.end);
            } else if ((vk >> 3) == 2 && (vk & 7) == kFixed32) {
              ev.value = value.fixed<float>();
              has_scalar = true;
            } else {
              value.skip(static_cast<Wire>(vk & 7));
            }
          }
          if (!value.ok) r.ok = false;
        }
        if (!summary.ok) r.ok = false;
      } else {
        r.skip(wire);
      }
    }
    if (!r.ok) bad("malformed Event protocol buffer");
    if (has_scalar) out.push_back(ev);
    at += 12 + len + 4;
    ++record;
  }
  return out;
}

}  // namespace lockstep::io
