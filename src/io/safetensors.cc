// safetensors reading and writing with checksums and atomic replacement.
#include "lockstep/io/safetensors.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/core/checked.h"
#include "lockstep/core/file.h"

namespace lockstep::io {
namespace {

using json = nlohmann::json;

const char* safetensors_dtype(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "F32";
    case DType::kInt32:
      return "I32";
    case DType::kInt64:
      return "I64";
    case DType::kUInt8:
      return "U8";
    case DType::kBool:
      return "BOOL";
    case DType::kBFloat16:
      return "BF16";
    case DType::kFloat16:
      return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType& out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::kFloat32}, {"I32", DType::kInt32}, {"I64", DType::kInt64},
      {"U8", DType::kUInt8},    {"BOOL", DType::kBool}, {"F16", DType::kFloat16}};
  for (const auto& [name, d] : table) {
    if (s == name) {
      out = d;
      return true;
    }
  }
  return false;
}

constexpr const char* kHeaderChecksumKey = "lockstep/header_crc32c";

// Where the 8 hex digits of the header checksum start in the header text
// (npos: the header has none — a file from another writer).
std::size_t header_checksum_position(const std::string& text) {
  const std::string key = std::string("\"") + kHeaderChecksumKey + "\":\"";
  const std::size_t at = text.find(key);
  if (at == std::string::npos || at + key.size() + 8 > text.size()) return std::string::npos;
  return at + key.size();
}

std::string hex32(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", v);
  return buf;
}

}  // namespace

const Tensor& TensorFile::at(const std::string& name) const {
  for (const auto& [n, t] : tensors) {
    if (n == name) return t;
  }
  detail::throw_error<IOError>(path, ": no tensor named '", name, "'");
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  json meta = json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  std::uint64_t offset = 0;
  // The bytes in host memory (a tensor on a GPU copied first).
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    LOCKSTEP_CHECK(t.defined(), "write_safetensors: tensor '", name, "' is undefined");
    host.push_back(t.cpu());
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::string& name = tensors[i].first;
    const Tensor& t = host[i];
    LOCKSTEP_CHECK(name != "__metadata__" && !header.contains(name),
                   "write_safetensors: tensor name '", name, "' is reserved or used twice");
    header[name] = {{"dtype", safetensors_dtype(t.dtype())},
                    {"shape", t.shape().to_vector()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    meta["crc32c/" + name] = hex32(crc32c(t.raw_data(), t.nbytes()));
    offset += t.nbytes();
  }
  meta[kHeaderChecksumKey] = std::string(8, '0');  // placeholder, patched below
  header["__metadata__"] = meta;
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';  // data starts 8-byte aligned
  std::string prefix(8, '\0');
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    prefix[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  // The header's own checksum covers the length and every header byte
  // (with its own 8 digits as zeros), so no flipped byte there goes unseen.
  const std::size_t at = header_checksum_position(text);
  text.replace(at, 8, hex32(crc32c(text.data(), text.size(), crc32c(prefix.data(), 8))));
  AtomicFileWriter out(path);
  out.write(prefix.data(), prefix.size());
  out.write(text.data(), text.size());
  for (const Tensor& t : host) {
    if (t.nbytes() > 0) out.write(t.raw_data(), t.nbytes());
  }
  out.commit();
}

namespace {

// The header's __metadata__: Lockstep's per-tensor checksums (returned, by
// tensor name) and the user's entries (into file.metadata).
std::map<std::string, std::string> read_metadata(const std::string& path, const json& header,
                                                 std::uint64_t header_len, TensorFile& file) {
  std::map<std::string, std::string> checksums;
  if (header.contains("__metadata__")) {
    const json& meta = header.at("__metadata__");
    LOCKSTEP_CHECK_AS(IOError, meta.is_object(), path, ": __metadata__ is not an object");
    for (const auto& [k, v] : meta.items()) {
      LOCKSTEP_CHECK_AS(IOError, v.is_string(), path, ": __metadata__ value '", k,
                        "' is not a string");
      if (k.rfind("crc32c/", 0) == 0) {
        checksums[k.substr(7)] = v.get<std::string>();
      } else if (k == kHeaderChecksumKey) {
        continue;
      } else {
        // Lockstep's own keys are known: another one is a damaged name.
        LOCKSTEP_CHECK_AS(IOError, k.rfind("lockstep/", 0) != 0, path, ": bytes 8 to ",
                          8 + header_len - 1, ": unknown metadata key '", k,
                          "' (the header is corrupt)");
        file.metadata[k] = v.get<std::string>();
      }
    }
  }
  return checksums;
}

// One tensor of the header, checked against the data section (bounds, size,
// overlap with the tensors before it, in `ranges`) and its checksum.
Tensor read_entry(const std::string& path, const std::string& name, const json& entry,
                  const std::vector<char>& data, std::uint64_t data_start,
                  const std::map<std::string, std::string>& checksums,
                  std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges) {
  const std::uint64_t data_size = data.size();
  auto bad = [&, tensor = name](const std::string& what) {
    detail::throw_error<IOError>(path, ": tensor '", tensor, "': ", what);
  };
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    bad("expected an object with dtype, shape and data_offsets");
  }
  DType dtype;
  if (!entry["dtype"].is_string() || !parse_dtype(entry["dtype"].get<std::string>(), dtype)) {
    bad("unsupported dtype " + entry["dtype"].dump() + " (supported: F32, I32, I64, U8, BOOL)");
  }
  Shape shape;
  if (!entry["shape"].is_array() ||
      entry["shape"].size() > static_cast<std::size_t>(Shape::kMaxRank))
    bad("bad shape");
  for (const auto& d : entry["shape"]) {
    if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
    shape.push_back(d.get<std::int64_t>());
  }
  const json& off = entry["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    bad("data_offsets must be two non-negative integers");
  }
  const std::uint64_t begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
  if (begin > end || end > data_size) {
    bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
        ") fall outside the data section of " + std::to_string(data_size) + " bytes (file offset " +
        std::to_string(data_start + begin) + ")");
  }
  const std::uint64_t expected = static_cast<std::uint64_t>(shape.numel()) * dtype_size(dtype);
  if (end - begin != expected) {
    bad("shape " + shape.to_string() + " of " + std::string(dtype_name(dtype)) + " needs " +
        std::to_string(expected) + " bytes, data_offsets give " + std::to_string(end - begin) +
        " (file offset " + std::to_string(data_start + begin) + ")");
  }
  for (const auto& [b, e] : ranges) {
    if (begin < e && b < end)
      bad("its bytes overlap another tensor's (file offset " + std::to_string(data_start + begin) +
          ")");
  }
  ranges.emplace_back(begin, end);
  Tensor t = Tensor::empty(shape, dtype);
  std::memcpy(t.raw_data(), data.data() + begin, expected);
  auto crc = checksums.find(name);
  // A file written with checksums has one for every tensor; a tensor without
  // one was renamed or injected.
  if (crc == checksums.end() && !checksums.empty())
    bad("has no checksum in the metadata (renamed or corrupt header)");
  if (crc != checksums.end() && crc->second != hex32(crc32c(t.raw_data(), t.nbytes()))) {
    bad("checksum mismatch: the " + std::to_string(expected) + " bytes at file offset " +
        std::to_string(data_start + begin) + " are corrupt (crc32c " +
        hex32(crc32c(t.raw_data(), t.nbytes())) + ", expected " + crc->second + ")");
  }
  return t;
}

}  // namespace

TensorFile read_safetensors(const std::string& path) {
  const std::uint64_t file_size = regular_file_size(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) detail::throw_error<IOError>(path, ": cannot open: ", std::strerror(errno));
  LOCKSTEP_CHECK_AS(IOError, file_size >= 8, path, ": byte 0: file of ", file_size,
                    " bytes is too short for a safetensors header length (8 bytes)");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  LOCKSTEP_CHECK_AS(IOError, header_len <= file_size - 8, path, ": byte 0: the header claims ",
                    header_len, " bytes but only ", file_size - 8, " follow");
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  bool header_checked = false;
  if (const std::size_t at = header_checksum_position(text); at != std::string::npos) {
    const std::string stored = text.substr(at, 8);
    std::string zeroed = text;
    zeroed.replace(at, 8, std::string(8, '0'));
    const std::string actual = hex32(crc32c(zeroed.data(), zeroed.size(), crc32c(len_bytes, 8)));
    LOCKSTEP_CHECK_AS(IOError, stored == actual, path, ": bytes 0 to ", 8 + header_len - 1,
                      ": the header is corrupt (header crc32c ", actual, ", stored ", stored, ")");
    header_checked = true;
  }
  check_json_nesting(text, path + ": the header", 8);
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(path, ": byte 8: the header is not valid JSON (", e.what(), ")");
  }
  LOCKSTEP_CHECK_AS(IOError, header.is_object(), path, ": byte 8: the header is not a JSON object");
  const std::uint64_t data_start = 8 + header_len, data_size = file_size - data_start;
  std::vector<char> data(data_size);
  in.read(data.data(), static_cast<std::streamsize>(data_size));
  LOCKSTEP_CHECK_AS(IOError, static_cast<std::uint64_t>(in.gcount()) == data_size, path,
                    ": short read of the data section");

  TensorFile file;
  file.path = path;
  const std::map<std::string, std::string> checksums =
      read_metadata(path, header, header_len, file);
  // Lockstep writes its checksums together: per-tensor checksums without the
  // header's mean the header checksum's key was damaged (and with it the
  // check of every header byte).
  LOCKSTEP_CHECK_AS(IOError, header_checked || checksums.empty(), path, ": bytes 8 to ",
                    8 + header_len - 1, ": the header has tensor checksums but no ",
                    kHeaderChecksumKey, " (the header is corrupt)");
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    file.tensors.emplace_back(name,
                              read_entry(path, name, entry, data, data_start, checksums, ranges));
  }
  if (header_checked) {
    // Our writer leaves no byte unaccounted for: a file longer than its
    // tensors was appended to (or the header lies about the sizes).
    std::uint64_t used = 0;
    for (const auto& [b, e] : ranges) used += e - b;
    LOCKSTEP_CHECK_AS(IOError, used == data_size, path, ": byte ", data_start + used,
                      ": the data section holds ", data_size, " bytes but the tensors use ", used);
  }
  file.header_checked = header_checked;
  for (const auto& [name, crc] : checksums) {
    LOCKSTEP_CHECK_AS(IOError, header.contains(name), path,
                      ": the metadata has a checksum for tensor '", name,
                      "', which the file does not hold (renamed or corrupt header)");
  }
  // Keep file order (the JSON object is sorted by name).
  std::sort(file.tensors.begin(), file.tensors.end(), [&](const auto& a, const auto& b) {
    return header[a.first]["data_offsets"][0].template get<std::uint64_t>() <
           header[b.first]["data_offsets"][0].template get<std::uint64_t>();
  });
  return file;
}

}  // namespace lockstep::io
