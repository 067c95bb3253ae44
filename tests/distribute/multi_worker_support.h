// Starting multi-worker test jobs as real processes (multi_worker_train
// workers with TF_CONFIG or under mpirun) and reading their results.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace lockstep::testing_support {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Process {
  pid_t pid = -1;
  std::string log;  // stdout and stderr
};

inline Process spawn(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, const std::string& log) {
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
inline int wait_exit(const Process& p, std::chrono::seconds limit = 120s) {
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

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Whether this process now holds port `port` for its cluster, against every
// other test process on the machine: an abstract Unix socket named after the
// port, bound until the process exits (the kernel frees it then, so no file
// is left behind). A test that kills a worker and restarts it on its port
// leaves that port free for a moment; another test's free_port() drew it in
// that moment once, and the two jobs reached each other's tasks (CI, ASan).
inline bool reserve_port_for_this_process(int port) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // no Unix sockets: the bind check below stays
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const std::string name = "lockstep-test-port-" + std::to_string(port);
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    ::close(fd);
    return false;  // another test process holds it
  }
  return true;  // fd stays open for the life of the process
}

// A loopback port nothing listens on, for a worker to bind later. Taken at
// random below the kernel's ephemeral range (32768+): a port the kernel hands
// out (bind to 0) can be given again, in the moment before the worker binds
// it, to an outgoing connection of a test running alongside (Gloo opens
// many), and that worker then fails to start. Reserved for this process
// (above), so no test running alongside draws it while a worker restarts.
inline int free_port() {
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                          static_cast<unsigned>(std::random_device{}()));
  std::uniform_int_distribution<int> pick(20000, 32000);
  // Never the same port twice in one process: two tasks of one test's
  // cluster drew the same port once (a TF_CONFIG naming one address twice).
  static std::set<int> given;
  for (;;) {
    const int port = pick(rng);
    if (given.count(port)) continue;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    const bool bindable = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (bindable && reserve_port_for_this_process(port)) {
      given.insert(port);
      return port;
    }
  }
}

struct Trained {
  std::vector<std::vector<float>> weights;
  std::string logs;
};

inline Trained read_weights(const std::string& path) {
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

inline void expect_bitwise(const Trained& a, const Trained& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].size(), b.weights[i].size()) << what;
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * 4), 0)
        << what << ": weight " << i;
  }
}

inline void expect_close(const Trained& a, const Trained& b, double rel, const std::string& what) {
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
                                     std::vector<int> ports = {},
                                     const std::map<std::string, std::string>& env = {}) {
    if (ports.empty()) {
      for (int i = 0; i < n; ++i) ports.push_back(free_port());
    }
    ports_ = ports;
    std::vector<Process> ps;
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> a = {MULTI_WORKER_TRAIN_PATH};
      a.insert(a.end(), args.begin(), args.end());
      for (const auto& e : extra[i]) a.push_back(e);
      std::map<std::string, std::string> worker_env = env;
      worker_env.insert({{"TF_CONFIG", tf_config(ports, i)},
                         {"LOCKSTEP_JOB_TOKEN", "multi-worker-test-token-" + tag},
                         {"OMP_NUM_THREADS", "1"}});
      ps.push_back(spawn(a, worker_env, path(tag + "-worker" + std::to_string(i) + ".log")));
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

}  // namespace lockstep::testing_support
