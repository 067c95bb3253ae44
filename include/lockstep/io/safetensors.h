// The safetensors file format: Lockstep's weights and checkpoint container.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON —
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]},
//  ..., "__metadata__": {"key": "value", ...}} — then the raw little-endian
// data. Python's `safetensors` and any other reader of the format open our
// files. Lockstep adds a CRC32C of every tensor to the metadata
// ("crc32c/<name>") and one of the header itself ("lockstep/header_crc32c",
// computed with its own digits as zeros), and verifies both on read, so
// every flipped byte and every truncation of a file we wrote is detected.
//
// Writes are atomic: a temporary file in the same directory, fsync'd,
// renamed over the final name, then the directory fsync'd — a crash leaves
// the old file or the new one, never a half file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/file.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::io {

struct TensorFile {
  std::string path{};
  std::vector<std::pair<std::string, Tensor>> tensors{};  // in file order
  std::map<std::string, std::string> metadata{};          // without the checksum entries
  // The header carried Lockstep's checksum (files from other writers may not).
  bool header_checked = false;
  const Tensor& at(const std::string& name) const;
};

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Validates everything before trusting it (header length within the file,
// JSON, dtypes, shapes against byte ranges, ranges inside the data and not
// overlapping, checksums); a bad file is an IOError naming the file, the
// tensor and the byte offset.
TensorFile read_safetensors(const std::string& path);

// The checksum and the atomic writer live in core (lockstep/core/file.h).
using lockstep::atomic_write;
using lockstep::crc32c;

}  // namespace lockstep::io
