// `lockstep launch`: a MultiWorkerMirroredStrategy job on this machine, the
// way a cluster launcher would start it — N worker processes, each with its
// own TF_CONFIG (loopback addresses, free ports), one fresh job token
// (LOCKSTEP_JOB_TOKEN) for the rendezvous store, LOCKSTEP_LOCAL_REPLICAS,
// and its share of this process's cores. Output is forwarded line by line
// with a "[worker i] " prefix. When a worker fails, the others are stopped
// (SIGTERM, SIGKILL 5 s later) and launch exits with the failed worker's
// code (128 + signal when it was killed).
//
// With --max-restarts R, a worker's failure (an exit code other than 0, or
// a signal; not the user's interrupt) stops every worker as above and
// starts the whole job again — fresh ports and job token, the same
// command, LOCKSTEP_RESTART_COUNT set to the restart's number — up to R
// times. Workers of `lockstep train --checkpoint-dir` (any program with
// BackupAndRestore) resume from their last backup. The log names each
// failure (worker, exit code or signal) and the restart; when R restarts
// are used up, launch exits with the *first* failure's code and names it
// (in a crash loop the first cause is the one that matters). A job whose
// workers exit with kRejoinExitCode (a job that went on without a worker
// re-forms to take it back, at a backup) is started again at once, with
// LOCKSTEP_REJOIN=1, not counted as a restart (as `lockstep supervise`).
//
// With --ps M, a ParameterServerStrategy job: a chief, N workers, M ps
// tasks and, with --evaluator, an evaluator outside the cluster, all running
// the command with their own TF_CONFIG ("[chief] ", "[ps 0] " prefixes), one
// core each (round-robin). The chief decides: a worker or ps task that dies
// is the coordinator's to handle (it reruns a lost worker's functions, and
// fails on a lost ps), and when the chief exits the others — told by the
// coordinator that the job is over — get 10 s to exit before a SIGTERM;
// launch exits with the chief's code.
#include "launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>

#include "lockstep/core/error.h"

namespace lockstep::cli {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_second_signal = 0;

void on_signal(int sig) {
  if (g_stop_signal == 0) {
    g_stop_signal = sig;
  } else {
    g_second_signal = 1;
  }
}

int free_port(const std::string& host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  LOCKSTEP_CHECK(::inet_pton(AF_INET, host.c_str(), &a.sin_addr) == 1,
                 "launch: --host must be an IPv4 address, got '", host, "'");
  LOCKSTEP_CHECK_AS(IOError, ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0,
                    "launch: cannot bind ", host, ": ", std::strerror(errno));
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string fresh_token() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 8; ++i) {
    char b[9];
    std::snprintf(b, sizeof b, "%08x", rd());
    hex += b;
  }
  return hex;
}

std::vector<int> my_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cores.push_back(c);
    }
  }
  return cores;
}

struct Worker {
  std::string label;  // "worker 0", "chief", "ps 1"
  pid_t pid = -1;
  int out = -1;  // read end of its stdout + stderr
  std::string pending;
  bool running = true;
  int exit_code = 0;
};

void forward(Worker& w, bool flush_all) {
  std::size_t start = 0;
  for (;;) {
    const std::size_t nl = w.pending.find('\n', start);
    if (nl == std::string::npos) break;
    std::printf("[%s] %.*s\n", w.label.c_str(), static_cast<int>(nl - start),
                w.pending.data() + start);
    start = nl + 1;
  }
  w.pending.erase(0, start);
  if (flush_all && !w.pending.empty()) {
    std::printf("[%s] %s\n", w.label.c_str(), w.pending.c_str());
    w.pending.clear();
  }
  std::fflush(stdout);
}

// The workers train one model together only under the strategy of their
// job: `lockstep train` without --strategy gets it (multi-worker, or
// parameter-server with --ps); with another strategy each worker would
// train its own copy, so that is refused. Other programs choose their
// strategy themselves.
std::vector<std::string> with_job_strategy(std::vector<std::string> command, bool ps) {
  const std::string wanted = ps ? "parameter-server" : "multi-worker";
  const std::string program = command[0].substr(command[0].find_last_of('/') + 1);
  if (program != "lockstep" || command.size() < 2 || command[1] != "train") return command;
  for (std::size_t i = 2; i < command.size(); ++i) {
    std::string value;
    if (command[i] == "--strategy" && i + 1 < command.size()) {
      value = command[i + 1];
    } else if (command[i].rfind("--strategy=", 0) == 0) {
      value = command[i].substr(std::strlen("--strategy="));
    } else {
      continue;
    }
    LOCKSTEP_CHECK(value == wanted, "launch: the workers' command has --strategy ", value,
                   "; launched ", ps ? "tasks of a parameter-server job (--ps)" : "workers",
                   " train one model together only with --strategy ", wanted, " (with ", value,
                   " each worker would train its own copy)");
    return command;
  }
  command.insert(command.begin() + 2, {"--strategy", wanted});
  std::printf("lockstep launch: the workers run lockstep train with --strategy %s\n",
              wanted.c_str());
  return command;
}

}  // namespace

CLI::App* add_launch_command(CLI::App& app, LaunchArgs& a) {
  CLI::App* launch = app.add_subcommand(
      "launch",
      "start N local workers of a multi-worker job: lockstep launch --workers 2 -- lockstep "
      "train --strategy multi-worker");
  launch->add_option("--workers", a.workers, "worker processes")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  launch
      ->add_option("--local-replicas", a.local_replicas,
                   "replicas in each worker (LOCKSTEP_LOCAL_REPLICAS)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  launch
      ->add_option("--ps", a.ps,
                   "ps tasks: a parameter-server job (a chief that coordinates, the workers, the "
                   "ps tasks)")
      ->check(CLI::Range(0, 64));
  launch
      ->add_flag("--evaluator", a.evaluator,
                 "parameter-server job: add an evaluator outside the cluster, a sidecar that "
                 "evaluates each new checkpoint")
      ->needs("--ps");
  launch->add_option("--host", a.host, "the workers' address (IPv4)")->capture_default_str();
  launch->add_option("--port", a.port, "first port (worker i gets port + i); 0: free ports")
      ->check(CLI::Range(0, 65535));
  launch->add_flag("!--no-pin", a.pin,
                   "let every worker use every core (sets LOCKSTEP_PIN_WORKERS=0 in the workers)");
  launch
      ->add_option("--max-restarts", a.max_restarts,
                   "multi-worker job: when a worker fails, stop every worker and start the job "
                   "again, up to N times; workers resume from their last backup "
                   "(--checkpoint-dir)")
      ->check(CLI::Range(0, 1000))
      ->excludes("--ps");
  launch->add_option("command", a.command, "the worker command (after --)")->required();
  return launch;
}

// Starts one worker of the job: its own process group, its
// TF_CONFIG and the job's token in its environment, its share of the cores
// (empty: every core), its stdout and stderr into a pipe launch reads.
Worker spawn_worker(const LaunchArgs& a, const std::vector<std::string>& command,
                    const std::string& tf_config, const std::string& token,
                    const std::vector<int>& share, const std::string& label, int restart,
                    bool rejoin) {
  int fds[2];
  LOCKSTEP_CHECK_AS(IOError, ::pipe2(fds, O_CLOEXEC) == 0, "launch: pipe: ", std::strerror(errno));
  std::fflush(stdout);
  const pid_t pid = ::fork();
  LOCKSTEP_CHECK_AS(IOError, pid >= 0, "launch: fork: ", std::strerror(errno));
  if (pid == 0) {
    // Its own process group, so that a terminal's Ctrl-C reaches launch
    // alone, which stops the workers with one SIGTERM each (a worker that
    // got SIGINT too would take the second signal as "exit at once");
    // and a SIGTERM if launch itself dies.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::setenv("TF_CONFIG", tf_config.c_str(), 1);
    ::setenv("LOCKSTEP_JOB_TOKEN", token.c_str(), 1);
    ::setenv("LOCKSTEP_LOCAL_REPLICAS", std::to_string(a.local_replicas).c_str(), 1);
    ::setenv("LOCKSTEP_RESTART_COUNT", std::to_string(restart).c_str(), 1);
    if (rejoin)
      ::setenv("LOCKSTEP_REJOIN", "1", 1);
    else
      ::unsetenv("LOCKSTEP_REJOIN");
    // --no-pin: the workers keep every core, and do not split them
    // themselves either (distribute/host_cores.cc).
    if (!a.pin) ::setenv("LOCKSTEP_PIN_WORKERS", "0", 1);
    if (!share.empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : share) CPU_SET(c, &set);
      ::sched_setaffinity(0, sizeof set, &set);
      ::setenv("OMP_NUM_THREADS", std::to_string(share.size()).c_str(), 1);
    }
    std::vector<char*> argv;
    for (auto& s : command) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "lockstep launch: cannot run %s: %s\n", a.command[0].c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  Worker w;
  w.label = label;
  w.pid = pid;
  w.out = fds[0];
  return w;
}

// Waits up to 50 ms for the workers' output and forwards what came, line by
// line with each worker's prefix (forward); closes the pipes that ended.
void pump_output(std::vector<Worker>& workers) {
  std::vector<pollfd> pfds;
  std::vector<int> owners;
  for (int i = 0; i < static_cast<int>(workers.size()); ++i) {
    if (workers[static_cast<std::size_t>(i)].out >= 0) {
      pfds.push_back({workers[static_cast<std::size_t>(i)].out, POLLIN, 0});
      owners.push_back(i);
    }
  }
  if (!pfds.empty())
    ::poll(pfds.data(), pfds.size(), 50);
  else
    ::usleep(20000);
  for (std::size_t k = 0; k < pfds.size(); ++k) {
    if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    auto& w = workers[static_cast<std::size_t>(owners[k])];
    char buf[4096];
    const ssize_t got = ::read(w.out, buf, sizeof buf);
    if (got > 0) {
      w.pending.append(buf, static_cast<std::size_t>(got));
      forward(w, false);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      forward(w, true);
      ::close(w.out);
      w.out = -1;
    }
  }
}

namespace {

// One process of the job: how launch calls it, its TF_CONFIG, its cores.
struct Task {
  std::string label;
  std::string tf_config;
  std::vector<int> share;
};

std::string address_list(const std::string& host, const std::vector<int>& ports) {
  std::string list;
  for (int p : ports)
    list += (list.empty() ? "\"" : ", \"") + host + ":" + std::to_string(p) + "\"";
  return list;
}

std::string task_json(const std::string& type, int index) {
  return "\"task\": {\"type\": \"" + type + "\", \"index\": " + std::to_string(index) + "}";
}

// A MultiWorkerMirroredStrategy job: the workers, each its share of the cores.
std::vector<Task> multi_worker_tasks(const LaunchArgs& a, const std::vector<int>& cores) {
  const int n = a.workers;
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) ports.push_back(a.port > 0 ? a.port + i : free_port(a.host));
  const std::string cluster = "{\"cluster\": {\"worker\": [" + address_list(a.host, ports) + "]}, ";
  const bool pin = a.pin && !cores.empty() && static_cast<int>(cores.size()) >= n;
  std::vector<Task> tasks;
  for (int i = 0; i < n; ++i) {
    Task t{"worker " + std::to_string(i), cluster + task_json("worker", i) + "}", {}};
    if (pin) {
      const std::size_t per = cores.size() / static_cast<std::size_t>(n);
      for (std::size_t k = 0; k < per; ++k)
        t.share.push_back(cores[static_cast<std::size_t>(i) * per + k]);
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

// A ParameterServerStrategy job: the chief first, then the workers, the ps
// tasks and the evaluator (outside the cluster), one core each, round-robin.
std::vector<Task> parameter_server_tasks(const LaunchArgs& a, const std::vector<int>& cores) {
  int next_port = a.port;
  auto port = [&] { return a.port > 0 ? next_port++ : free_port(a.host); };
  const int chief = port();
  std::vector<int> workers, ps;
  for (int i = 0; i < a.workers; ++i) workers.push_back(port());
  for (int i = 0; i < a.ps; ++i) ps.push_back(port());
  const std::string cluster = "{\"cluster\": {\"chief\": [" + address_list(a.host, {chief}) +
                              "], \"worker\": [" + address_list(a.host, workers) + "], \"ps\": [" +
                              address_list(a.host, ps) + "]}, ";
  std::vector<Task> tasks = {{"chief", cluster + task_json("chief", 0) + "}", {}}};
  for (int i = 0; i < a.workers; ++i)
    tasks.push_back({"worker " + std::to_string(i), cluster + task_json("worker", i) + "}", {}});
  for (int i = 0; i < a.ps; ++i)
    tasks.push_back({"ps " + std::to_string(i), cluster + task_json("ps", i) + "}", {}});
  if (a.evaluator) tasks.push_back({"evaluator", cluster + task_json("evaluator", 0) + "}", {}});
  if (a.pin && !cores.empty()) {
    // Workers first, so that they get cores of their own when there are enough.
    std::size_t k = 0;
    for (std::size_t i = 1; i <= static_cast<std::size_t>(a.workers); ++i)
      tasks[i].share = {cores[k++ % cores.size()]};
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      if (tasks[i].share.empty()) tasks[i].share = {cores[k++ % cores.size()]};
    }
  }
  return tasks;
}

}  // namespace

namespace {

// How one run of the job's processes ended.
struct Outcome {
  int failed = -1;    // the first worker that failed; a parameter-server job's chief when it ended
  int exit_code = 0;  // its code (128 + signal when it was killed)
  std::string cause;  // "worker 1 was killed by signal 9 (Killed)", "worker 0 exited with code 3"
  bool rejoin = false;  // no failure, and a worker exited with kRejoinExitCode
};

// Whether the workers keep backups a restart resumes from: `lockstep train
// --checkpoint-dir`. Of another program launch cannot tell.
std::string resume_note(const std::vector<std::string>& command) {
  const std::string program = command[0].substr(command[0].find_last_of('/') + 1);
  if (program != "lockstep" && program != "exe")
    return " (they resume from their backups if the program keeps them)";
  for (const std::string& arg : command) {
    if (arg == "--checkpoint-dir" || arg.rfind("--checkpoint-dir=", 0) == 0)
      return " and resumes from its last backup (--checkpoint-dir)";
  }
  return " from the beginning (the command has no --checkpoint-dir to resume from)";
}

// Starts the job's tasks (one fresh job token) and supervises them until
// every one has exited: forwards their output, stops the others when one
// fails (or, in a parameter-server job, after the chief), and passes the
// user's interrupt on.
Outcome supervise(const LaunchArgs& a, const std::vector<std::string>& command,
                  const std::vector<Task>& tasks, bool ps_job, int restart, bool rejoin) {
  const std::string token = fresh_token();
  const int n = static_cast<int>(tasks.size());
  std::vector<Worker> workers(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Task& t = tasks[static_cast<std::size_t>(i)];
    workers[static_cast<std::size_t>(i)] =
        spawn_worker(a, command, t.tf_config, token, t.share, t.label, restart, rejoin);
  }

  Outcome outcome;
  Clock::time_point kill_at = Clock::time_point::max();  // max: no SIGKILL due
  bool forwarded_signal = false;
  bool sigterm_at_kill = false;  // at kill_at, SIGTERM first (a parameter-server job's end)
  auto stop_others = [&](int sig) {
    for (auto& w : workers) {
      if (w.running) ::kill(w.pid, sig);
    }
  };
  for (;;) {
    bool any_running = false, any_output = false;
    for (const auto& w : workers) {
      any_running |= w.running;
      any_output |= w.out >= 0;
    }
    if (!any_output && !any_running) break;
    pump_output(workers);
    for (int i = 0; i < n; ++i) {
      auto& w = workers[static_cast<std::size_t>(i)];
      if (!w.running) continue;
      int status = 0;
      if (::waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.running = false;
      w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (ps_job) {
        // The chief decides: the others were told the job is over, or, when
        // the chief failed, are of no use.
        if (i == 0 && !forwarded_signal) {
          outcome = {0, w.exit_code, describe_exit(w.label, status)};
          if (w.exit_code != 0)
            std::fprintf(stderr, "lockstep launch: the chief exited with code %d\n", w.exit_code);
          kill_at = std::min(kill_at, Clock::now() + std::chrono::seconds(10));
          sigterm_at_kill = true;
        } else if (w.exit_code != 0 && !forwarded_signal && outcome.failed < 0) {
          std::fprintf(stderr,
                       "lockstep launch: %s exited with code %d; the chief's coordinator handles "
                       "it\n",
                       w.label.c_str(), w.exit_code);
        }
        continue;
      }
      // Not a failure: the job re-forms to take back a worker left out, and
      // every worker stops after the same backup.
      if (w.exit_code == kRejoinExitCode && !forwarded_signal) {
        outcome.rejoin = true;
        continue;
      }
      // Workers stopped because the user interrupted launch are not failures.
      if (w.exit_code != 0 && outcome.failed < 0 && !forwarded_signal) {
        outcome = {i, w.exit_code, describe_exit(w.label, status)};
        std::fprintf(stderr, "lockstep launch: %s; stopping the other workers\n",
                     outcome.cause.c_str());
        stop_others(SIGTERM);
        kill_at = Clock::now() + std::chrono::seconds(5);
      }
    }
    if (g_stop_signal && !forwarded_signal) {
      forwarded_signal = true;
      std::fprintf(stderr,
                   ps_job ? "lockstep launch: interrupted (%s); stopping the tasks (SIGTERM: the "
                            "chief stops at once, its last backup kept; a second interrupt "
                            "kills them)\n"
                          : "lockstep launch: interrupted (%s); stopping the workers (SIGTERM: "
                            "each backs up and stops; a second interrupt kills them)\n",
                   g_stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
      stop_others(SIGTERM);
      // Backing up takes a moment (a worker agrees on a step, then writes).
      kill_at = Clock::now() + std::chrono::seconds(30);
    }
    if (g_second_signal) {
      g_second_signal = 0;
      stop_others(SIGKILL);
    }
    if (Clock::now() > kill_at) {
      if (sigterm_at_kill) {
        // A parameter-server job's last tasks after its chief: first asked.
        stop_others(SIGTERM);
        sigterm_at_kill = false;
        kill_at = Clock::now() + std::chrono::seconds(5);
      } else {
        stop_others(SIGKILL);
        kill_at = Clock::time_point::max();
      }
    }
  }
  return outcome;
}

}  // namespace

std::string describe_exit(const std::string& label, int status) {
  if (WIFSIGNALED(status)) {
    return label + " was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           ::strsignal(WTERMSIG(status)) + ")";
  }
  return label + " exited with code " + std::to_string(WEXITSTATUS(status));
}

int run_launch(const LaunchArgs& a) {
  LOCKSTEP_CHECK(a.host != "0.0.0.0",
                 "launch: --host 0.0.0.0 is the wildcard address (every "
                 "interface), not one the workers can dial; give this machine's address, e.g. "
                 "127.0.0.1");
  const bool ps_job = a.ps > 0;
  std::vector<std::string> command = with_job_strategy(a.command, ps_job);
  const std::vector<int> cores = my_cores();
  // `lockstep` as the command means this very program.
  if (command[0] == "lockstep") command[0] = "/proc/self/exe";

  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::optional<Outcome> first_failure;
  // LOCKSTEP_RESTART_COUNT counts every start after the first; restarts
  // after failures alone count against --max-restarts.
  int starts = 0, consecutive_rejoins = 0;
  bool rejoin = false;
  // A job re-forms at a backup, so a command that exits kRejoinExitCode at
  // once, start after start, is not re-forming: it is stopped.
  constexpr int kMaxConsecutiveRejoins = 10;
  for (int restart = 0;; ++restart) {
    // Fresh ports (unless --port) and a fresh token for every start.
    const std::vector<Task> tasks =
        ps_job ? parameter_server_tasks(a, cores) : multi_worker_tasks(a, cores);
    const Outcome o = supervise(a, command, tasks, ps_job, starts++, rejoin);
    if (o.failed < 0 && g_stop_signal) {
      std::fprintf(stderr, "lockstep launch: stopped by the user's interrupt\n");
      return 128 + g_stop_signal;
    }
    rejoin = o.failed < 0 && o.rejoin && !ps_job;
    consecutive_rejoins = rejoin ? consecutive_rejoins + 1 : 0;
    if (consecutive_rejoins > kMaxConsecutiveRejoins) {
      std::fprintf(stderr,
                   "lockstep launch: the workers asked to re-form the job %d times in a row "
                   "(exit code %d each time); giving up\n",
                   consecutive_rejoins, kRejoinExitCode);
      return kRejoinExitCode;
    }
    if (rejoin) {
      std::fprintf(stderr,
                   "lockstep launch: the job re-forms to take back a worker left out; every "
                   "worker starts again (not counted as a restart)\n");
      --restart;
      continue;
    }
    if (o.failed < 0 || ps_job) return o.exit_code;
    if (!first_failure) first_failure = o;
    if (restart == a.max_restarts || g_stop_signal) {
      if (a.max_restarts > 0) {
        std::fprintf(stderr,
                     "lockstep launch: giving up after %d restart%s; the first failure: %s\n",
                     restart, restart == 1 ? "" : "s", first_failure->cause.c_str());
      }
      return first_failure->exit_code;
    }
    std::fprintf(stderr,
                 "lockstep launch: restart %d of %d after %s: every worker starts again%s\n",
                 restart + 1, a.max_restarts, o.cause.c_str(), resume_note(command).c_str());
  }
}

}  // namespace lockstep::cli
