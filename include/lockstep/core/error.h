// The Lockstep error hierarchy and the always-on LOCKSTEP_CHECK.
//
// Library code reports every failure by throwing a subclass of
// lockstep::Error; only the CLI's main turns them into exit codes. Messages
// name the operation, what was expected and what was got, and a hint where
// one helps:
//
//   LOCKSTEP_CHECK_AS(ShapeError, a.rank() == 2, "matmul: expected a of rank 2, got ",
//                     a.shape());
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lockstep {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value is outside what the operation accepts (wrong dtype, bad option).
class ValueError : public Error {
 public:
  using Error::Error;
};

// Shapes that do not fit together (broadcasting, matmul, reshape).
class ShapeError : public ValueError {
 public:
  using ValueError::ValueError;
};

// An index or axis outside its valid range.
class IndexError : public ValueError {
 public:
  using ValueError::ValueError;
};

// A file that cannot be read or written, or whose contents are corrupt.
class IOError : public Error {
 public:
  using Error::Error;
};

// A failure in another replica, worker or collective.
class DistributedError : public Error {
 public:
  using Error::Error;
};

// A blocking call that exceeded its deadline.
class TimeoutError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// A task the job cannot go on without is gone — a parameter server that
// died (tf.errors.UnavailableError); the job restarts from its last
// checkpoint.
class UnavailableError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// Work that did not run because an earlier failure cancelled it (a
// scheduled function after another one failed: tf.errors.CancelledError).
class CancelledError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// Not a failure: a multi-worker job that went on without some of its
// workers (elastic shrink) re-forms with those waiting to come back, after
// a backup. Every worker stops; each is to be started again at once and
// resumes from that backup (`lockstep` exits with code 75, which `lockstep
// supervise` restarts without counting it).
class RejoinError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

// A device that does not exist or cannot be used (no CUDA driver), device
// memory that ran out, or host code that reached for device memory.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// A bug in Lockstep or a failure inside a backend library (oneDNN).
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename E, typename... Args>
[[noreturn]] void throw_error(Args&&... args) {
  throw E(str_cat(std::forward<Args>(args)...));
}

// Rethrows the exception in flight (call inside a catch block) with `prefix`
// in front of its message, keeping its Lockstep type so callers can still
// catch by kind; other std::exceptions become Error.
[[noreturn]] void rethrow_with_prefix(const std::string& prefix);

// The same for an error met while reading `source` (a file, a member of it):
// the message gets "<source>: " in front unless it already begins with it, so
// a reader can wrap a whole parse and every error still names the file once.
[[noreturn]] void rethrow_naming(const std::string& source);

// An error's class by name ("ShapeError"; "Error" for other exceptions),
// and an error of the class so named (Error for an unknown name): how an
// error crosses from one process to another.
const char* error_class_name(const std::exception& e);
[[noreturn]] void throw_error_of_class(const std::string& name, const std::string& message);

}  // namespace detail
}  // namespace lockstep

// Checks `cond` in every build type; on failure throws `ErrorType` whose
// message is the remaining arguments streamed together. The message
// arguments are evaluated only on failure.
#define LOCKSTEP_CHECK_AS(ErrorType, cond, ...)                \
  do {                                                         \
    if (!(cond)) [[unlikely]] {                                \
      ::lockstep::detail::throw_error<ErrorType>(__VA_ARGS__); \
    }                                                          \
  } while (false)

#define LOCKSTEP_CHECK(cond, ...) LOCKSTEP_CHECK_AS(::lockstep::ValueError, cond, __VA_ARGS__)
