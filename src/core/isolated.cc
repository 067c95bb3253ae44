// run_isolated: fork, limits, a memfd for the result, a watched wait.
#include "lockstep/core/isolated.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "lockstep/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define LOCKSTEP_ISOLATED_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOCKSTEP_ISOLATED_SANITIZED 1
#endif
#endif
#ifdef LOCKSTEP_ISOLATED_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

namespace lockstep {

namespace {

// The child's exit codes: 0 the result, kFailed an exception's message,
// kOutOfMemory a std::bad_alloc. Anything else is a crash of some kind.
constexpr int kFailed = 3;
constexpr int kOutOfMemory = 4;

// The parent's mapped address space, bytes (/proc/self/statm's first field).
std::uint64_t mapped_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long long pages = 0;
  const int got = std::fscanf(f, "%llu", &pages);
  std::fclose(f);
  return got == 1 ? pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

bool write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void set_limit(int resource, rlim_t soft, rlim_t hard) {
  rlimit current{};
  if (::getrlimit(resource, &current) != 0) return;
  // Never above what the parent was allowed.
  if (current.rlim_max != RLIM_INFINITY) {
    soft = std::min<rlim_t>(soft, current.rlim_max);
    hard = std::min<rlim_t>(hard, current.rlim_max);
  }
  const rlimit limit{soft, hard};
  ::setrlimit(resource, &limit);
}

[[noreturn]] void run_child(int out, std::uint64_t parent_mapped, const IsolationLimits& limits,
                            const std::function<std::string()>& work) {
  // The terminal's Ctrl-C and a launcher's SIGTERM end the child too, whatever
  // the parent installed for itself.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGXCPU, SIG_DFL);
  // A crash ends the child by its signal, whatever handlers the parent had
  // (a sanitizer's, a fuzzer's that would record the parent's input as a
  // crash of its own); a sanitizer's report ends it without its callbacks.
  for (const int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
#ifdef LOCKSTEP_ISOLATED_SANITIZED
  __sanitizer_set_death_callback(nullptr);
#endif
  set_limit(RLIMIT_CORE, 0, 0);  // a crash here is expected: no core file
  // What a crashing library prints ("malloc(): unaligned tcache chunk
  // detected") would stand before the error that explains it, and says
  // less: the parent's IOError names the file and the signal.
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDERR_FILENO);
    ::close(null);
  }
  set_limit(RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1);
  set_limit(RLIMIT_NOFILE, 64, 64);  // opens nothing of its own: the result goes to `out`
#ifndef LOCKSTEP_ISOLATED_SANITIZED
  set_limit(RLIMIT_AS, parent_mapped + limits.memory_bytes, parent_mapped + limits.memory_bytes);
#else
  (void)parent_mapped;
#endif
  int code = 0;
  std::string result;
  try {
    result = work();
  } catch (const std::bad_alloc&) {
    result = "ran out of the reader's memory limit";
    code = kOutOfMemory;
  } catch (const std::exception& e) {
    result = e.what();
    code = kFailed;
  }
  if (!write_all(out, result)) ::_exit(kOutOfMemory);
  ::_exit(code);
}

std::string signal_name(int sig) {
  const char* d = ::strsignal(sig);
  return "signal " + std::to_string(sig) + (d != nullptr ? std::string(", ") + d : std::string());
}

}  // namespace

std::string run_isolated(const std::string& source, const IsolationLimits& limits,
                         const std::function<std::string()>& work) {
  const int out = ::memfd_create("lockstep-isolated", MFD_CLOEXEC);
  LOCKSTEP_CHECK_AS(IOError, out >= 0, source, ": cannot make the reader's result file (",
                    std::strerror(errno), ")");
  const std::uint64_t parent_mapped = mapped_bytes();
  const pid_t pid = ::fork();
  if (pid == 0) run_child(out, parent_mapped, limits, work);
  if (pid < 0) {
    const int e = errno;
    ::close(out);
    detail::throw_error<IOError>(source, ": cannot start the reader's process (", std::strerror(e),
                                 ")");
  }

  // Wait, polling: the caller may have other children, and a SIGCHLD
  // handler is the program's, not ours. 0.1 ms at first (a small file is
  // read in about a millisecond), then up to 5 ms.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(limits.wall_seconds);
  int status = 0;
  bool timed_out = false;
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid) break;
    if (got < 0 && errno != EINTR) {
      const int e = errno;
      ::close(out);
      detail::throw_error<IOError>(source, ": lost the reader's process (", std::strerror(e), ")");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(5000));
  }

  struct stat st {};
  std::string result;
  if (::fstat(out, &st) == 0 && st.st_size > 0) {
    result.resize(static_cast<std::size_t>(st.st_size));
    std::size_t done = 0;
    while (done < result.size()) {
      const ssize_t n =
          ::pread(out, result.data() + done, result.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    result.resize(done);
  }
  ::close(out);

  const std::string consequence =
      "; nothing was loaded. The file is damaged or was made to harm its reader (it was read in a "
      "separate process, which ended)";
  if (timed_out)
    detail::throw_error<IOError>(source, ": reading took more than ", limits.wall_seconds, " s",
                                 consequence);
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    if (code == 0) return result;
    if (code == kFailed) throw IOError(result);
    if (code == kOutOfMemory)
      detail::throw_error<IOError>(source, ": reading needed more than ", limits.memory_bytes,
                                   " bytes of memory", consequence);
    detail::throw_error<IOError>(source, ": the reader failed (exit code ", code, ")", consequence);
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU)
      detail::throw_error<IOError>(source, ": reading used more than ", limits.cpu_seconds,
                                   " s of CPU (", signal_name(sig), ")", consequence);
    detail::throw_error<IOError>(source, ": the reader crashed (", signal_name(sig), ")",
                                 consequence);
  }
  detail::throw_error<IOError>(source, ": the reader ended oddly (wait status ", status, ")",
                               consequence);
}

}  // namespace lockstep
