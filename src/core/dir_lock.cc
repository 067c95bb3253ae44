// DirectoryLock: flock(2) on <dir>/.lock, with the holder written inside.
#include "lockstep/core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"

namespace lockstep {
namespace {

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// "pid <n> on <host>" as the holder wrote it, or "" for an empty file.
std::string read_holder(int fd) {
  char text[512] = {};
  const ssize_t got = ::pread(fd, text, sizeof text - 1, 0);
  if (got <= 0) return "";
  std::string s(text, static_cast<std::size_t>(got));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& dir, const std::string& what)
    : path_((std::filesystem::path(dir) / ".lock").string()) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  LOCKSTEP_CHECK_AS(IOError, !ec, what, " ", dir, ": cannot create it: ", ec.message());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  LOCKSTEP_CHECK_AS(IOError, fd_ >= 0, what, " ", dir, ": cannot open its lock file ", path_, ": ",
                    std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      detail::throw_error<ValueError>(what, " ", dir, " is in use by another run (",
                                      holder.empty() ? "a process" : holder, ", lock file ", path_,
                                      "); wait for it to finish, stop it, or use another ", what);
    }
    detail::throw_error<IOError>(what, " ", dir, ": cannot lock ", path_, ": ", std::strerror(err));
  }
  // Ours now. A holder recorded in the file is a process that ended without
  // releasing it cleanly (the kernel released its flock).
  const std::string previous = read_holder(fd_);
  if (!previous.empty()) {
    log(LogLevel::kWarning,
        detail::str_cat("lockstep: ", what, " ", dir, ": taking over the lock of ", previous,
                        ", which is gone\n"));
  }
  const std::string me = "pid " + std::to_string(::getpid()) + " on " + hostname();
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The lock holds without the note; only a second run's message is poorer.
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ < 0) return;
  // Clear the holder before unlocking, so that the next run does not report
  // a takeover of a lock released cleanly.
  if (::ftruncate(fd_, 0) != 0) {
    // Nothing to do: the next run says it took over, which is harmless.
  }
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

DirectoryLock::DirectoryLock(DirectoryLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_) {
  other.fd_ = -1;
}

DirectoryLock& DirectoryLock::operator=(DirectoryLock&& other) noexcept {
  if (this != &other) {
    this->~DirectoryLock();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

}  // namespace lockstep
