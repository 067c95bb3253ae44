// MultiWorkerMirroredStrategy under kill -9 (ctest label `fault`): one of
// two workers killed at 10 random steps; the survivor exits within the
// collective timeout + 2 s naming the lost worker, no port stays open, and
// the restarted job resumes from the chief's backup bitwise equal to an
// uninterrupted run.
#include <signal.h>

#include <random>

#include "distribute/multi_worker_support.h"

namespace {

using namespace lockstep::testing_support;
using namespace std::chrono_literals;

TEST_F(MultiWorkerTest, AKilledWorkerStopsTheOthersInBoundedTimeAndARestartResumesBitwise) {
  // The uninterrupted job, with the same backups.
  auto full =
      start_workers(2, {"--out", path("full-{rank}.bin"), "--backup", path("full-backup")}, "full");
  for (auto& p : full) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const Trained expected = read_weights(path("full-0.bin"));
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 10; ++trial) {
    const std::string tag = "kill" + std::to_string(trial);
    const int victim = static_cast<int>(rng() % 2);
    const int step = 1 + static_cast<int>(rng() % 30);  // of 32
    const std::string backup = path(tag + "-backup");
    const std::vector<std::string> args = {
        "--out", path(tag + "-{rank}.bin"), "--backup", backup, "--timeout-ms", "5000"};
    auto ps = start_workers(2, args, tag, {{victim, {"--kill-at-step", std::to_string(step)}}});
    ASSERT_EQ(wait_exit(ps[static_cast<std::size_t>(victim)]), 128 + SIGKILL)
        << slurp(ps[static_cast<std::size_t>(victim)].log);
    const auto killed = Clock::now();
    const Process& survivor = ps[static_cast<std::size_t>(1 - victim)];
    EXPECT_EQ(wait_exit(survivor, 60s), 3) << slurp(survivor.log);
    // Bounded: the collective timeout (5 s) + 2 s.
    EXPECT_LT(Clock::now() - killed, 7s) << tag;
    const std::string log = slurp(survivor.log);
    if (victim == 1) {
      EXPECT_NE(log.find("worker 1 (127.0.0.1:"), std::string::npos) << tag << "\n" << log;
      EXPECT_NE(log.find("was lost"), std::string::npos) << tag << "\n" << log;
    } else {
      EXPECT_NE(log.find("chief"), std::string::npos) << tag << "\n" << log;
    }
    // No port left listening: the chief's store port is free again.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(ports_[0]));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_NE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << tag;
    ::close(fd);
    // The whole job restarted: resumes from the chief's backup, bitwise.
    auto again = start_workers(2, args, tag + "-again");
    for (auto& p : again) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    expect_bitwise(read_weights(path(tag + "-0.bin")), expected, tag + " resumed vs uninterrupted");
    expect_bitwise(read_weights(path(tag + "-1.bin")), expected, tag + " worker 1 resumed");
  }
}

}  // namespace
