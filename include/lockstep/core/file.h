// Files that are never seen half-written, and the checksum that guards them.
//
// AtomicFileWriter streams into a temporary file in the target's directory
// (".<name>.tmp<pid>.<random>"); commit() fsyncs it, renames it over the
// target and fsyncs the directory. Destroyed without commit() — an error, an
// exception, an abandoned pass — it removes the temporary file. A process
// killed with SIGKILL leaves only the temporary file, which no reader opens;
// remove_stale_temporaries() deletes those whose writer is gone.
//
//   lockstep::AtomicFileWriter out("cache.bin");
//   out.write(data, n);
//   out.commit();
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "lockstep/core/huge_pages.h"

namespace lockstep {

// CRC32C (Castagnoli polynomial), chainable: crc32c(b, nb, crc32c(a, na)).
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);

class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  std::uint64_t bytes_written() const { return written_; }
  // Makes the file visible under its final name, durably.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  void flush();
  [[noreturn]] void fail(const std::string& what);

  std::string path_, tmp_;
  int fd_ = -1;
  std::string buffer_;
  std::uint64_t written_ = 0;
  bool committed_ = false;
  int index_ = 0;  // this process's n-th writer (fault injection, file.cc)
};

// Writes `contents` to `path` atomically (an AtomicFileWriter in one call).
void atomic_write(const std::string& path, const std::string& contents);

// The size of `path`, which must be a regular file (following symlinks).
// A directory, a FIFO, a device or a socket is an IOError naming what it is
// — before any reader opens it: open() blocks forever on a FIFO, and a
// directory's "size" made a reader allocate terabytes. Readers bound every
// length a header claims by this size.
std::uint64_t regular_file_size(const std::string& path);

// The whole of the regular file `path`. An IOError names the file when it
// cannot be opened, is not a regular file, changes size while read, or is
// larger than this process can hold (a huge sparse file made an allocation
// failure that named nothing: issue #41).
std::string read_whole_file(const std::string& path);

// The same bytes in a buffer on transparent huge pages (core/huge_pages.h),
// a file of 8 MiB or more read in two halves at once: for a large file read
// once by a parser, whose 4 KiB page faults would cost more than its copy
// (issue #38's CSV table: 10 MB).
HugePageVector<char> read_whole_file_to_huge_pages(const std::string& path);

// Checks, before the work whose result goes to `path`, that it can be
// written there: an IOError naming `path` when it is a directory or its
// folder takes no new file (read-only, missing, no permission). Removes the
// temporary files a killed writer left for `path` on the way. A training
// run calls it for its --save target before the first step, not after the
// last (issue #41: the trained model was lost).
void check_writable(const std::string& path);

// Deletes the temporary files AtomicFileWriter left for `path` whose writing
// process no longer exists (killed before commit). Returns how many.
int remove_stale_temporaries(const std::string& path);

}  // namespace lockstep
