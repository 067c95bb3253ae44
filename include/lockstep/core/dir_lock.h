// An exclusive lock on a directory, held by one process at a time: two
// training runs must not share a checkpoint directory (one would resume the
// other's backup, and each would delete the other's files).
//
//   lockstep::DirectoryLock lock("ckpt");   // throws ValueError when held
//
// The lock is flock(2) on "<dir>/.lock", which the kernel releases when the
// holder dies however it dies, so a lock is never stale; the file records
// the holder (pid and host) for the message a second process gets. Taking
// over from a holder that is gone is said on stderr.
//
// Move-only; released by the destructor.
#pragma once

#include <string>

namespace lockstep {

class DirectoryLock {
 public:
  // Creates the directory if needed. `what` names the directory's role in
  // messages ("--checkpoint-dir").
  explicit DirectoryLock(const std::string& dir, const std::string& what = "directory");
  ~DirectoryLock();
  DirectoryLock(DirectoryLock&& other) noexcept;
  DirectoryLock& operator=(DirectoryLock&& other) noexcept;
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;  // the lock file
  int fd_ = -1;
};

}  // namespace lockstep
