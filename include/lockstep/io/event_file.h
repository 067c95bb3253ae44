// TensorBoard event files: what the TensorBoard callback writes and the
// real TensorBoard reads.
//
// A file "events.out.tfevents.<seconds>.<host>.<pid>.<n>" is a sequence of
// TFRecords — uint64 length, uint32 masked CRC32C of the length, the bytes,
// uint32 masked CRC32C of the bytes (all little-endian) — each holding one
// serialized tensorflow.Event protocol buffer. The first says
// file_version "brain.Event:2"; each scalar is an Event with wall_time, step
// and a Summary of one Value {tag, simple_value}. The few protobuf fields
// needed are encoded here by hand (no protobuf dependency).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::io {

// TFRecord's checksum: CRC32C rotated right by 15 bits plus a constant.
std::uint32_t masked_crc32c(const void* data, std::size_t size);

class EventFileWriter {
 public:
  // Creates `directory` if needed and a new event file in it.
  explicit EventFileWriter(const std::string& directory);
  void add_scalar(const std::string& tag, double value, std::int64_t step);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::ofstream out_;
};

// One decoded scalar event (for tests and tools).
struct ScalarEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string tag{};
  float value = 0;
};

// Reads an event file, checking every record's framing and both checksums
// (an IOError naming the file and offset otherwise); returns the scalars and
// sets `file_version` from the first event.
std::vector<ScalarEvent> read_event_file(const std::string& path,
                                         std::string* file_version = nullptr);

}  // namespace lockstep::io
