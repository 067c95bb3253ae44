// MultiWorkerMirroredStrategy with real processes: workers started on their
// own with TF_CONFIG (Gloo) or by mpirun (MPI) train like one process; a
// worker that never joins, dies, or runs another model is named on the
// others, which exit in bounded time; a restarted job resumes bitwise; a
// stranger at the store's port changes nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Process {
  pid_t pid = -1;
  std::string log;  // stdout and stderr
};

Process spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
              const std::string& log) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    const std::string key = s.substr(0, s.find('='));
    if (!env.count(key) && key != "TF_CONFIG" && key.rfind("OMPI_COMM_WORLD", 0) != 0)
      env_strings.push_back(s);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args_copy = args;
  for (auto& a : args_copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  Process p;
  p.log = log;
  const int rc = posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  EXPECT_EQ(rc, 0) << "posix_spawn " << args[0];
  return p;
}

// Exit code (128 + signal when killed); kills it and fails after `limit`.
int wait_exit(const Process& p, std::chrono::seconds limit = 120s) {
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(p.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      ADD_FAILURE() << "process " << p.pid << " did not exit within " << limit.count() << " s";
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::string logs;
};

Trained read_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  Trained t;
  for (;;) {
    std::uint64_t n = 0;
    if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || n == 0) break;
    std::vector<float> v(n);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
    t.weights.push_back(std::move(v));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  t.logs = ss.str();
  return t;
}

void expect_bitwise(const Trained& a, const Trained& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].size(), b.weights[i].size()) << what;
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4), 0)
        << what << ": weight " << i;
  }
}

void expect_close(const Trained& a, const Trained& b, double rel, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  ASSERT_FALSE(a.weights.empty()) << what;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].size(), b.weights[i].size()) << what;
    for (std::size_t j = 0; j < a.weights[i].size(); ++j)
      ASSERT_NEAR(a.weights[i][j], b.weights[i][j], rel * std::max(1.0f, std::abs(a.weights[i][j])))
          << what << ": weight " << i << " element " << j;
  }
}

class MultiWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("lockstep_mw_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure() && !std::getenv("LOCKSTEP_KEEP_TEST_FILES")) fs::remove_all(dir_);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A TF_CONFIG for worker `index` of `ports.size()` on loopback.
  static std::string tf_config(const std::vector<int>& ports, int index) {
    std::string workers;
    for (int p : ports)
      workers +=
          (workers.empty() ? "\"" : ", \"") + std::string("127.0.0.1:") + std::to_string(p) + "\"";
    return "{\"cluster\": {\"worker\": [" + workers +
           "]}, \"task\": {\"type\": \"worker\", \"index\": " + std::to_string(index) + "}}";
  }

  // Starts n workers; extra[i] are worker i's extra arguments.
  std::vector<Process> start_workers(int n, const std::vector<std::string>& args,
                                     const std::string& tag,
                                     std::map<int, std::vector<std::string>> extra = {},
                                     std::vector<int> ports = {}) {
    if (ports.empty()) {
      for (int i = 0; i < n; ++i) ports.push_back(free_port());
    }
    ports_ = ports;
    std::vector<Process> ps;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> a = {MULTI_WORKER_TRAIN_PATH};
      a.insert(a.end(), args.begin(), args.end());
      for (const auto& e : extra[i]) a.push_back(e);
      ps.push_back(spawn(a,
                         {{"TF_CONFIG", tf_config(ports, i)},
                          {"LOCKSTEP_JOB_TOKEN", "test-token-" + tag},
                          {"OMP_NUM_THREADS", "1"}},
                         path(tag + "-worker" + std::to_string(i) + ".log")));
    }
    return ps;
  }

  Trained reference(const std::vector<std::string>& args, const std::string& tag) {
    std::vector<std::string> a = {MULTI_WORKER_TRAIN_PATH, "--strategy", "none", "--out",
                                  path(tag + "-ref.bin")};
    a.insert(a.end(), args.begin(), args.end());
    const Process p = spawn(a, {{"OMP_NUM_THREADS", "1"}}, path(tag + "-ref.log"));
    EXPECT_EQ(wait_exit(p), 0) << slurp(p.log);
    return read_weights(path(tag + "-ref.bin"));
  }

  fs::path dir_;
  std::vector<int> ports_;
};

TEST_F(MultiWorkerTest, TwoAndThreeGlooWorkersTrainLikeOneProcess) {
  const Trained ref = reference({}, "ref");
  for (int n : {2, 3}) {
    const std::string tag = "gloo" + std::to_string(n);
    auto ps = start_workers(n, {"--out", path(tag + "-{rank}.bin")}, tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, tag + " vs one process");
    for (int i = 1; i < n; ++i)
      expect_bitwise(read_weights(path(tag + "-" + std::to_string(i) + ".bin")), w0,
                     tag + " worker " + std::to_string(i) + " vs worker 0");
    // Every worker reports the global metrics (merged across workers).
    EXPECT_EQ(read_weights(path(tag + "-1.bin")).logs, w0.logs);
    EXPECT_NE(slurp(ps[0].log).find("worker 0 of " + std::to_string(n) + " done"),
              std::string::npos);
  }
}

TEST_F(MultiWorkerTest, LocalReplicasInEveryWorkerReduceHierarchically) {
  const Trained ref = reference({}, "ref");
  auto ps = start_workers(2, {"--out", path("h-{rank}.bin"), "--local-replicas", "2"}, "h");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const Trained w0 = read_weights(path("h-0.bin"));
  expect_close(w0, ref, 1e-5, "2 workers x 2 replicas vs one process");
  expect_bitwise(read_weights(path("h-1.bin")), w0, "worker 1 vs worker 0");
}

TEST_F(MultiWorkerTest, MpirunWorkersTrainLikeOneProcess) {
  const Trained ref = reference({}, "ref");
  for (int n : {2, 3}) {
    const std::string tag = "mpi" + std::to_string(n);
    const Process p = spawn({MPIEXEC_PATH, "-n", std::to_string(n), "--oversubscribe",
                             MULTI_WORKER_TRAIN_PATH, "--out", path(tag + "-{rank}.bin")},
                            {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                             {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                             {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
                             {"OMP_NUM_THREADS", "1"}},
                            path(tag + ".log"));
    ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, tag + " vs one process");
    for (int i = 1; i < n; ++i)
      expect_bitwise(read_weights(path(tag + "-" + std::to_string(i) + ".bin")), w0,
                     tag + " rank " + std::to_string(i) + " vs rank 0");
  }
}

TEST_F(MultiWorkerTest, AWorkerThatNeverJoinsIsNamedWithinTheJoinTimeout) {
  const std::vector<int> ports = {free_port(), free_port()};
  const auto start = Clock::now();
  auto ps = start_workers(1, {"--timeout-ms", "2000"}, "alone", {}, ports);
  EXPECT_EQ(wait_exit(ps[0]), 3);
  EXPECT_LT(Clock::now() - start, 15s);
  const std::string log = slurp(ps[0].log);
  EXPECT_NE(log.find("worker 1 (127.0.0.1:" + std::to_string(ports[1]) + ") did not join within 2"),
            std::string::npos)
      << log;
}

TEST_F(MultiWorkerTest, AWorkerWithAnotherModelIsRefusedAtStartUpOnEveryWorker) {
  auto ps = start_workers(2, {}, "mismatch", {{1, {"--hidden", "16"}}});
  for (auto& p : ps) {
    EXPECT_EQ(wait_exit(p), 3);
    const std::string log = slurp(p.log);
    EXPECT_NE(log.find("elements of type float32 on worker 1 (127.0.0.1:"), std::string::npos)
        << log;
    EXPECT_NE(log.find("every worker must build the same model"), std::string::npos) << log;
  }
}

TEST_F(MultiWorkerTest, AStrangerAtTheStorePortChangesNothing) {
  const Trained ref = reference({}, "ref");
  std::atomic<bool> stop{false};
  std::atomic<int> connected{0};
  std::vector<int> ports = {free_port(), free_port()};
  std::thread stranger([&] {
    // Junk instead of an HMAC, again and again, while the job starts and trains.
    while (!stop) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(ports[0]));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const char junk[] = "\xff\xff\xff\x7fGET / HTTP/1.0\r\n\r\n padding to 32 bytes";
        (void)::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        ++connected;
      }
      ::close(fd);
      std::this_thread::sleep_for(2ms);
    }
  });
  auto ps = start_workers(2, {"--out", path("s-{rank}.bin")}, "s", {}, ports);
  for (auto& p : ps) EXPECT_EQ(wait_exit(p), 0) << slurp(p.log);
  stop = true;
  stranger.join();
  EXPECT_GT(connected.load(), 0);
  expect_close(read_weights(path("s-0.bin")), ref, 1e-5, "with a stranger knocking");
}

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
