#include "lockstep/core/file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <vector>

#include "lockstep/core/env.h"
#include "lockstep/core/error.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

std::array<std::uint32_t, 256> make_crc_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

[[noreturn]] void sys_error(const std::string& what, const std::string& path) {
  detail::throw_error<IOError>(path, ": ", what, " failed: ", std::strerror(errno));
}

fs::path directory_of(const fs::path& target) {
  return target.has_parent_path() ? target.parent_path() : fs::path(".");
}

std::string temporary_prefix(const fs::path& target) {
  return "." + target.filename().string() + ".tmp";
}

constexpr std::size_t kBufferBytes = 1 << 20;

// Fault injection for the crash tests (docs/checkpoints.md): with
// LOCKSTEP_CRASH_AT=<stage>:<n>, the n-th AtomicFileWriter of this process
// kills the process with SIGKILL at <stage> — before_write, mid_write,
// before_fsync, before_rename or after_rename — exactly as `kill -9` would.
struct CrashPoint {
  std::string stage;
  int writer = 0;
};

const CrashPoint& crash_point() {
  static const CrashPoint point = [] {
    CrashPoint p;
    const auto crash_at = env::crash_at();
    if (!crash_at) return p;
    const std::string spec = *crash_at;
    const auto colon = spec.find(':');
    p.stage = spec.substr(0, colon);
    p.writer = colon == std::string::npos ? 1 : std::atoi(spec.c_str() + colon + 1);
    return p;
  }();
  return point;
}

std::atomic<int> g_writers{0};

void maybe_crash(int writer, const char* stage) {
  const CrashPoint& p = crash_point();
  if (p.writer == writer && p.stage == stage) ::kill(::getpid(), SIGKILL);
}

}  // namespace

namespace {

std::uint32_t crc32c_table(const unsigned char* p, std::size_t size, std::uint32_t crc) {
  static const auto table = make_crc_table();
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
// SSE4.2's crc32 instruction computes exactly CRC32C, 8 bytes at a time.
// It takes three cycles and the core starts one each cycle, so one running
// CRC uses a third of it: the bytes go in blocks of three streams of
// kCrcStream bytes, each stream's CRC computed in the same loop, and the
// three joined (the register's update is linear: the CRC of A then B is
// A's CRC carried over |B| zero bytes, xor B's CRC from zero). 6 MiB (issue
// #38's encoded table): 0.64 ms on one stream, 0.23 ms on three (best of
// 50, AMD EPYC family 25 model 17, Zen 4).
constexpr std::size_t kCrcStream = 4096;

__attribute__((target("sse4.2"))) std::uint64_t crc32c_words(const unsigned char* p,
                                                             std::size_t size, std::uint64_t c) {
  for (; size >= 8; size -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  return c;
}

// A CRC register carried over kCrcStream zero bytes (linear in its 32
// bits: one table per byte of it, built from the CRCs of the 32 single
// bits).
struct CrcShift {
  std::array<std::array<std::uint32_t, 256>, 4> table{};
  CrcShift() {
    const std::vector<unsigned char> zeros(kCrcStream, 0);
    std::array<std::uint32_t, 32> bit{};
    for (int i = 0; i < 32; ++i)
      bit[i] = static_cast<std::uint32_t>(crc32c_words(zeros.data(), kCrcStream, 1u << i));
    for (int byte = 0; byte < 4; ++byte) {
      for (std::uint32_t v = 0; v < 256; ++v) {
        std::uint32_t c = 0;
        for (int j = 0; j < 8; ++j) {
          if (v >> j & 1) c ^= bit[8 * byte + j];
        }
        table[byte][v] = c;
      }
    }
  }
  std::uint32_t operator()(std::uint32_t c) const {
    return table[0][c & 0xFF] ^ table[1][c >> 8 & 0xFF] ^ table[2][c >> 16 & 0xFF] ^
           table[3][c >> 24];
  }
};

__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(const unsigned char* p,
                                                             std::size_t size, std::uint32_t crc) {
  std::uint64_t c = crc;
  if (size >= 3 * kCrcStream) {
    static const CrcShift shift;
    for (; size >= 3 * kCrcStream; size -= 3 * kCrcStream, p += 3 * kCrcStream) {
      std::uint64_t a = c, b = 0, d = 0;
      for (std::size_t i = 0; i < kCrcStream; i += 8) {
        std::uint64_t wa, wb, wd;
        std::memcpy(&wa, p + i, 8);
        std::memcpy(&wb, p + kCrcStream + i, 8);
        std::memcpy(&wd, p + 2 * kCrcStream + i, 8);
        a = __builtin_ia32_crc32di(a, wa);
        b = __builtin_ia32_crc32di(b, wb);
        d = __builtin_ia32_crc32di(d, wd);
      }
      c = shift(shift(static_cast<std::uint32_t>(a)) ^ static_cast<std::uint32_t>(b)) ^
          static_cast<std::uint32_t>(d);
    }
  }
  c = crc32c_words(p, size, c);
  p += size / 8 * 8;
  size %= 8;
  auto c32 = static_cast<std::uint32_t>(c);
  for (; size > 0; --size, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~crc32c_sse42(p, size, ~crc);
#endif
  return ~crc32c_table(p, size, ~crc);
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  const fs::path target(path_);
  std::random_device rd;
  tmp_ = (directory_of(target) /
          (temporary_prefix(target) + std::to_string(::getpid()) + "." + std::to_string(rd())))
             .string();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) sys_error("creating temporary file " + tmp_, path_);
  buffer_.reserve(kBufferBytes);
  index_ = ++g_writers;
  maybe_crash(index_, "before_write");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (committed_) return;
  if (fd_ >= 0) ::close(fd_);
  ::unlink(tmp_.c_str());  // never leave a partial file behind
}

void AtomicFileWriter::fail(const std::string& what) {
  const int saved = errno;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  errno = saved;
  sys_error(what, path_);
}

void AtomicFileWriter::flush() {
  std::size_t done = 0;
  while (done < buffer_.size()) {
    std::size_t chunk = buffer_.size() - done;
    if (!crash_point().stage.empty() && crash_point().stage == "mid_write") {
      chunk = std::max<std::size_t>(1, chunk / 2);  // half on disk, then the crash
      if (done > 0) maybe_crash(index_, "mid_write");
    }
    const ssize_t n = ::write(fd_, buffer_.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("writing " + std::to_string(buffer_.size() - done) + " bytes at byte " +
           std::to_string(written_ - buffer_.size() + done));
    }
    done += static_cast<std::size_t>(n);
  }
  buffer_.clear();
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  LOCKSTEP_CHECK_AS(IOError, !committed_ && fd_ >= 0, path_, ": write after commit or failure");
  const char* p = static_cast<const char*>(data);
  written_ += size;
  if (buffer_.size() + size > kBufferBytes) flush();
  if (size >= kBufferBytes) {
    buffer_.assign(p, size);
    flush();
    return;
  }
  buffer_.append(p, size);
}

void AtomicFileWriter::commit() {
  LOCKSTEP_CHECK_AS(IOError, !committed_ && fd_ >= 0, path_, ": commit after commit or failure");
  flush();
  maybe_crash(index_, "before_fsync");
  if (::fsync(fd_) != 0) fail("fsync");
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close");
  }
  fd_ = -1;
  maybe_crash(index_, "before_rename");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("rename");
  committed_ = true;
  maybe_crash(index_, "after_rename");
  const fs::path dir = directory_of(fs::path(path_));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);  // make the rename durable
    ::close(dfd);
  }
}

void atomic_write(const std::string& path, const std::string& contents) {
  AtomicFileWriter out(path);
  out.write(contents.data(), contents.size());
  out.commit();
}

std::uint64_t regular_file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    detail::throw_error<IOError>(path, ": cannot open: ", std::strerror(errno));
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : nullptr;
  if (kind) detail::throw_error<IOError>(path, ": is ", kind, ", not a regular file");
  return static_cast<std::uint64_t>(st.st_size);
}

FileParts::FileParts(std::string path) : path_(std::move(path)) {
  size_ = regular_file_size(path_);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) sys_error("opening", path_);
}

FileParts::~FileParts() {
  if (fd_ >= 0) ::close(fd_);
}

void FileParts::read(std::uint64_t offset, std::size_t length, char* to) const {
  std::size_t got = 0;
  while (got < length) {
    const ssize_t n = ::pread(fd_, to + got, length - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) sys_error("reading", path_);
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  LOCKSTEP_CHECK_AS(IOError, got == length, path_, ": read ", got, " of the ", length,
                    " bytes at offset ", offset, " of its ", size_, " (did it shrink while read?)");
}

std::string read_whole_file(const std::string& path) {
  const FileParts file(path);
  std::string bytes;
  try {
    bytes.resize(static_cast<std::size_t>(file.size()));
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    detail::throw_error<IOError>(path, ": ", file.size(),
                                 " bytes: more than this process can hold in memory (is it a "
                                 "sparse or damaged file?)");
  }
  file.read(0, bytes.size(), bytes.data());
  return bytes;
}

void check_writable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    detail::throw_error<IOError>(path, ": is a directory; a file is written here");
  remove_stale_temporaries(path);
  const fs::path target(path);
  const std::string probe =
      (directory_of(target) / (temporary_prefix(target) + std::to_string(::getpid()) + ".probe"))
          .string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) sys_error("creating a file in its folder", path);
  ::close(fd);
  ::unlink(probe.c_str());
}

int remove_stale_temporaries(const std::string& path) {
  const fs::path target(path);
  const std::string prefix = temporary_prefix(target);
  std::error_code ec;
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(directory_of(target), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    // ".<name>.tmp<pid>.<random>": the writer is gone when <pid> is.
    const std::string rest = name.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot == std::string::npos || dot == 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(rest.c_str(), &end, 10);
    if (end != rest.c_str() + dot || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (fs::remove(entry.path(), ec)) ++removed;
  }
  return removed;
}

}  // namespace lockstep
