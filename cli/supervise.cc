// `lockstep supervise`: restarts one worker of a job started by hand, for
// clusters without `lockstep launch` (each host runs `lockstep supervise
// --max-restarts N -- lockstep train ...` with its own TF_CONFIG, or a
// Kubernetes pod runs it as its command).
//
// The worker runs in its own process group with this process's environment
// and LOCKSTEP_RESTART_COUNT. When it fails (an exit code other than 0, or
// a signal; not the user's interrupt), the supervisor says why and starts it
// again after --restart-delay, up to N times; the other workers of the job
// fail too when they lose it (the collectives name the lost worker), their
// supervisors restart them, they meet again at the chief's new rendezvous
// store and resume from the chief's backups (`lockstep train
// --checkpoint-dir` on a folder every worker reaches). The delay is what
// keeps a restarted worker from joining the old chief before that one has
// failed: the supervisors share no state besides the backups' folder. The count is kept in the
// backups' folder (supervisor-<task>.json: the restarts used and the first
// failure), so a supervisor that is itself started again — the host
// rebooted, the pod was rescheduled — goes on counting, and a crash loop
// stops at N with the *first* failure's code and cause, not the last's. A
// run that ends well removes the file. SIGINT and SIGTERM are passed to the
// worker as one SIGTERM (a second signal: SIGKILL) and end supervision.
// Exit code 75 (a RejoinError) is not a failure: a job that went on without
// some workers (elastic shrink) re-forms with them; the worker starts again
// after the delay, uncounted, with LOCKSTEP_RESTART_COUNT still counting
// every start and LOCKSTEP_REJOIN=1, so that the chief waits for every
// worker as on a first start (they are all coming back).
#include "supervise.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "launch.h"
#include "lockstep/lockstep.h"

namespace lockstep::cli {
namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_again = 0;
void on_signal(int sig) {
  if (g_signal == 0) {
    g_signal = sig;
  } else {
    g_again = 1;
  }
}

// The restarts used and the first failure, as kept on disk.
struct Count {
  int restarts = 0;
  std::string first_failure{};
  int first_code = 0;
};

// --state-dir, or the command's --checkpoint-dir (either spelling).
std::string state_dir_of(const SuperviseArgs& a) {
  if (!a.state_dir.empty()) return a.state_dir;
  for (std::size_t i = 0; i < a.command.size(); ++i) {
    const std::string& arg = a.command[i];
    if (arg == "--checkpoint-dir" && i + 1 < a.command.size()) return a.command[i + 1];
    if (arg.rfind("--checkpoint-dir=", 0) == 0) return arg.substr(17);
  }
  return "";
}

// supervisor-worker-1.json: one file per task, so that workers sharing a
// folder keep their own counts.
std::string state_file(const std::string& dir) {
  std::string task = "task";
  if (auto r = distribute::ClusterResolver::from_environment())
    task = r->task_type() + "-" + std::to_string(r->task_id());
  return (std::filesystem::path(dir) / ("supervisor-" + task + ".json")).string();
}

std::optional<Count> read_count(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    return Count{j.at("restarts").get<int>(), j.at("first_failure").get<std::string>(),
                 j.at("first_code").get<int>()};
  } catch (const std::exception& e) {
    detail::throw_error<IOError>("supervise: ", path, " is not a restart count (", e.what(),
                                 "); remove it to start counting again");
  }
}

// Written whole, then renamed over the old one: never half a file.
void write_count(const std::string& path, const Count& c) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"restarts", c.restarts},
                          {"first_failure", c.first_failure},
                          {"first_code", c.first_code}}
               .dump();
    LOCKSTEP_CHECK_AS(IOError, out.good(), "supervise: cannot write ", tmp);
  }
  std::filesystem::rename(tmp, path);
}

// Runs the command once; its wait status.
int run_once(const std::vector<std::string>& command, int restart, bool rejoin) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  LOCKSTEP_CHECK_AS(IOError, pid >= 0, "supervise: fork: ", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the supervisor, which passes it on once
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::setenv("LOCKSTEP_RESTART_COUNT", std::to_string(restart).c_str(), 1);
    if (rejoin)
      ::setenv("LOCKSTEP_REJOIN", "1", 1);
    else
      ::unsetenv("LOCKSTEP_REJOIN");
    std::vector<char*> argv;
    for (const std::string& s : command) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "lockstep supervise: cannot run %s: %s\n", command[0].c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  bool termed = false, killed = false;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, 0);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) return 1 << 8;
    if (g_signal && !termed) {
      ::kill(-pid, SIGTERM);
      termed = true;
    }
    if (g_again && !killed) {
      ::kill(-pid, SIGKILL);
      killed = true;
    }
  }
}

int exit_code_of(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

// The delay before a restart, cut short by a signal (false: which then
// ends supervision).
bool sleep_unless_signalled(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_signal && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return !g_signal;
}

}  // namespace

CLI::App* add_supervise_command(CLI::App& app, SuperviseArgs& a) {
  CLI::App* s = app.add_subcommand(
      "supervise",
      "run one worker of a job started by hand and restart it when it fails (each host its "
      "own supervisor): lockstep supervise --max-restarts 3 -- lockstep train --strategy "
      "multi-worker --checkpoint-dir DIR");
  s->add_option("--max-restarts", a.max_restarts,
                "restart the worker when it fails, up to N times in all (counted in the state "
                "folder, across supervisors)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  s->add_option("--restart-delay", a.restart_delay,
                "seconds between a failure and the restart, so that the job's other workers "
                "fail first and all meet again at the chief's new rendezvous")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  s->add_option("--state-dir", a.state_dir,
                "where the restart count is kept (default: the command's --checkpoint-dir)");
  s->add_option("command", a.command, "the worker command (after --)")->required();
  return s;
}

int run_supervise(const SuperviseArgs& a) {
  std::vector<std::string> command = a.command;
  if (command[0] == "lockstep") command[0] = "/proc/self/exe";  // this very program
  const std::string dir = state_dir_of(a);
  const std::string path = dir.empty() ? "" : state_file(dir);
  Count count = path.empty() ? Count{} : read_count(path).value_or(Count{});
  if (count.restarts > 0) {
    std::fprintf(stderr,
                 "lockstep supervise: %s counts %d restart%s of %d used; the first "
                 "failure: %s\n",
                 path.c_str(), count.restarts, count.restarts == 1 ? "" : "s", a.max_restarts,
                 count.first_failure.c_str());
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  // LOCKSTEP_RESTART_COUNT: the restarts counted, and those to rejoin a
  // job that went on without this worker (counted in no file).
  int starts = count.restarts;
  bool rejoin = false;  // this start re-forms the job after an exit 75
  const auto give_up = [&] {
    std::fprintf(stderr,
                 "lockstep supervise: giving up after %d restart%s; the first failure: %s%s\n",
                 count.restarts, count.restarts == 1 ? "" : "s", count.first_failure.c_str(),
                 path.empty() ? "" : ("; remove " + path + " to start counting again").c_str());
    return count.first_code;
  };
  // A count used up by an earlier supervisor: the command does not run.
  if (!count.first_failure.empty() && count.restarts >= a.max_restarts) return give_up();
  for (;;) {
    const int status = run_once(command, starts++, rejoin);
    rejoin = WIFEXITED(status) && WEXITSTATUS(status) == kRejoinExitCode;
    if (g_signal) {
      std::fprintf(stderr, "lockstep supervise: stopped by a signal; %s\n",
                   describe_exit("the worker", status).c_str());
      return 128 + g_signal;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      if (!path.empty()) std::filesystem::remove(path);
      return 0;
    }
    if (rejoin) {
      // Not a failure: the job re-forms with a worker that was left out.
      std::fprintf(stderr,
                   "lockstep supervise: the job re-forms to take back a worker left out; the "
                   "worker starts again (not counted as a restart)\n");
      if (!sleep_unless_signalled(a.restart_delay)) return 128 + g_signal;
      continue;
    }
    const std::string cause = describe_exit("the worker", status);
    if (count.first_failure.empty()) {
      count.first_failure = cause;
      count.first_code = exit_code_of(status);
    }
    if (count.restarts >= a.max_restarts) {
      if (!path.empty()) write_count(path, count);
      return give_up();
    }
    ++count.restarts;
    if (!path.empty()) write_count(path, count);
    std::fprintf(stderr,
                 "lockstep supervise: restart %d of %d after %s; it resumes from its last "
                 "backup%s\n",
                 count.restarts, a.max_restarts, cause.c_str(),
                 dir.empty() ? " if it keeps one" : (" in " + dir).c_str());
    if (!sleep_unless_signalled(a.restart_delay)) return 128 + g_signal;
  }
}

}  // namespace lockstep::cli
