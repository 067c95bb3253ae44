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

// A regular file read in parts, from any thread at once (pread): for a
// parser that keeps only what it needs of each part, so that no buffer the
// size of the file is allocated. On the project's VM a fresh 10 MB buffer
// cost 2.4 ms and now and then 40–100 ms (its pages' first touch), a
// reused 256 KiB one 1.2 ms for the same bytes (issue #38's CSV table).
//
//   lockstep::FileParts file(path);
//   std::vector<char> part(4096);
//   file.read(0, std::min<std::uint64_t>(file.size(), part.size()), part.data());
class FileParts {
 public:
  // Opens `path`: an IOError naming it when it cannot be opened or is not
  // a regular file.
  explicit FileParts(std::string path);
  ~FileParts();
  FileParts(const FileParts&) = delete;
  FileParts& operator=(const FileParts&) = delete;

  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Bytes [offset, offset + length) into `to`; an IOError naming the file
  // when they are not all there (it shrank while read) or cannot be read.
  void read(std::uint64_t offset, std::size_t length, char* to) const;

 private:
  std::string path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

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
