// Shared by the file-parser fuzz targets: the input is written to a file
// (the readers take paths) in a private temporary directory, and the reader
// runs on it. A lockstep::Error is the expected answer to bad input; any
// other exception escapes and libFuzzer reports it, as it reports crashes,
// an error whose message does not name the file (`names_source`),
// leaks, undefined behaviour and allocations past -malloc_limit_mb (a
// reader that believes a header).
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep::fuzz {

inline const std::string& input_path(const char* name) {
  static const std::string path = [name] {
    const auto dir =
        std::filesystem::temp_directory_path() / ("lockstep-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    return (dir / name).string();
  }();
  return path;
}

inline void write_input(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) __builtin_trap();
  if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
  std::fclose(f);
}

// A clear error names what was read: the user must learn which file is bad.
// A message that does not is a finding, reported as a crash with the message.
inline void names_source(const lockstep::Error& e, const std::string& source) {
  if (std::string(e.what()).find(source) != std::string::npos) return;
  std::fprintf(stderr, "the error does not name '%s': %s\n", source.c_str(), e.what());
  __builtin_trap();
}

template <typename F>
int run_on_file(const char* name, const std::uint8_t* data, std::size_t size, F&& read) {
  const std::string& path = input_path(name);
  write_input(path, data, size);
  try {
    read(path);
  } catch (const lockstep::Error& e) {
    names_source(e, path);  // a clear error: what bad input must get
  }
  return 0;
}

}  // namespace lockstep::fuzz
