// run_isolated (issue #41): work in a child process comes back as its bytes,
// its exception's message, or an error naming the source for a crash, an
// endless loop, a child that hangs, and one that allocates past its limit.
#include "lockstep/core/isolated.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>
#include <vector>

#include "lockstep/core/error.h"
#include "support/errors.h"

namespace lockstep {
namespace {

using testing_support::expect_error_containing;

TEST(Isolated, TheChildsBytesComeBackWhole) {
  const std::string big(3 << 20, 'x');  // more than a pipe would hold
  EXPECT_EQ(run_isolated("f", {}, [&] { return big + "!"; }), big + "!");
  EXPECT_EQ(run_isolated("f", {}, [] { return std::string(); }), "");
  // The parent is untouched by what the child changed.
  int changed = 0;
  (void)run_isolated("f", {}, [&] {
    changed = 1;
    return std::string("done");
  });
  EXPECT_EQ(changed, 0);
}

TEST(Isolated, AnExceptionInTheChildIsAnIOErrorWithItsMessage) {
  expect_error_containing<IOError>(
      [] { run_isolated("f", {}, []() -> std::string { throw ValueError("w.h5: bad dataset"); }); },
      "w.h5: bad dataset");
}

TEST(Isolated, ACrashIsAnErrorNamingTheSourceAndTheSignal) {
  expect_error_containing<IOError>(
      [] {
        run_isolated("hostile.h5", {}, []() -> std::string {
          std::abort();  // SIGABRT: AddressSanitizer leaves it to the default action
        });
      },
      "hostile.h5: the reader crashed (signal 6");
  expect_error_containing<IOError>(
      [] { run_isolated("hostile.h5", {}, []() -> std::string { ::_exit(1); }); },
      "hostile.h5: the reader failed (exit code 1); nothing was loaded");
}

TEST(Isolated, AnEndlessLoopIsStoppedAtTheCpuLimit) {
  IsolationLimits limits;
  limits.cpu_seconds = 1;
  expect_error_containing<IOError>(
      [&] {
        run_isolated("loop.h5", limits, []() -> std::string {
          volatile std::uint64_t spins = 0;
          for (;;) spins = spins + 1;
        });
      },
      "loop.h5: reading used more than 1 s of CPU (signal 24");
}

TEST(Isolated, AChildThatNeitherEndsNorComputesIsKilledAtTheWallLimit) {
  IsolationLimits limits;
  limits.wall_seconds = 1;
  const auto start = std::chrono::steady_clock::now();
  expect_error_containing<IOError>(
      [&] {
        run_isolated("stuck.h5", limits, []() -> std::string {
          std::this_thread::sleep_for(std::chrono::hours(1));
          return "";
        });
      },
      "stuck.h5: reading took more than 1 s; nothing was loaded");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(Isolated, AllocatingPastTheMemoryLimitIsAnErrorNotTheSystemsMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer: the address-space limit is not set (core/isolated.h)";
#endif
  IsolationLimits limits;
  limits.memory_bytes = std::uint64_t{64} << 20;
  expect_error_containing<IOError>(
      [&] {
        run_isolated("bomb.h5", limits, []() -> std::string {
          std::vector<char> v(std::size_t{1} << 30, 1);  // 1 GiB against 64 MiB
          return std::string(1, v[12345]);
        });
      },
      "bomb.h5: reading needed more than 67108864 bytes of memory");
}

}  // namespace
}  // namespace lockstep
