// `lockstep supervise [--max-restarts N] [--state-dir DIR] -- COMMAND...`:
// one worker of a job started by hand (each host runs its own supervisor,
// as torchrun's per-node agent), restarted when it fails (see supervise.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace lockstep::cli {

struct SuperviseArgs {
  int max_restarts = 3;
  // Where the restart count is kept; empty: the command's --checkpoint-dir
  // (its backups' folder), else the count lives only as long as this process.
  std::string state_dir;
  // Seconds between a failure and the restart: the job's other workers
  // fail first when they lose this one (at once when its connection drops,
  // else at the collective deadline), so that the new process meets their
  // new ones at the chief's rendezvous, not the old chief.
  double restart_delay = 3.0;
  std::vector<std::string> command;
};

CLI::App* add_supervise_command(CLI::App& app, SuperviseArgs& args);
int run_supervise(const SuperviseArgs& args);

}  // namespace lockstep::cli
