// `lockstep launch --workers N [--local-replicas K] -- COMMAND...`: starts N
// local workers of a MultiWorkerMirroredStrategy job; with --ps M
// [--evaluator], a ParameterServerStrategy job; --max-restarts R restarts a
// failed multi-worker job (see launch.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace lockstep::cli {

struct LaunchArgs {
  int workers = 2;
  // > 0: a ParameterServerStrategy job: a chief (the coordinator), the
  // workers, this many ps tasks (and an evaluator), all running the command.
  int ps = 0;
  bool evaluator = false;
  int local_replicas = 1;
  std::string host = "127.0.0.1";
  int port = 0;     // first port; 0: free ports chosen by the system
  bool pin = true;  // give each worker its share of this process's cores
  // A multi-worker job: when a worker fails, stop every worker and start the
  // whole job again, up to this many times (they resume from their backups).
  int max_restarts = 0;
  std::vector<std::string> command;
};

CLI::App* add_launch_command(CLI::App& app, LaunchArgs& args);
int run_launch(const LaunchArgs& args);

// `lockstep`'s exit code for a RejoinError (EX_TEMPFAIL): not a failure —
// a job that went on without some workers re-forms with them; start the
// worker again (supervise does, without counting it as a restart).
inline constexpr int kRejoinExitCode = 75;

// "worker 1 was killed by signal 9 (Killed)", "worker 0 exited with code 3":
// how a child's wait status is said (launch and supervise).
std::string describe_exit(const std::string& label, int status);

}  // namespace lockstep::cli
