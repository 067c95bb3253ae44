// The `lockstep` command line. Library errors become exit codes here and
// nowhere else.
//
//   lockstep train       the main job: the guide's MLP on Fashion-MNIST under
//                        MirroredStrategy, or any model on --data (train --help)
//   lockstep evaluate    a trained model on labelled examples (--model F --data S)
//   lockstep predict     a trained model's predictions (--output preds.csv | .npy)
//   lockstep launch      starts N local workers of a multi-worker job
//                        (launch --workers 2 -- lockstep train --strategy multi-worker),
//                        or a parameter-server job (launch --workers 2 --ps 1 -- lockstep
//                        train --strategy parameter-server)
//   lockstep supervise   runs one worker of a job started by hand, restarting it
//                        when it fails (each host its own: supervise -- lockstep train)
//   lockstep ps / worker serve a task of a parameter-server job (TF_CONFIG)
//   lockstep inspect F   lists a checkpoint's tensors and metadata and
//                        verifies every checksum (exit 1 when damaged)
//   lockstep devices     lists the logical CPU devices and their cores, and the
//                        GPUs (or why there are none)
//   lockstep version     prints the version (as lockstep --version)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "inspect.h"
#include "launch.h"
#include "lockstep/lockstep.h"
#include "serve.h"
#include "supervise.h"
#include "train.h"
#include "use_model.h"

namespace {

int devices() {
  for (const lockstep::Device* d : lockstep::logical_devices()) {
    std::string cores;
    for (int c : d->cores()) {
      if (!cores.empty()) cores += ',';
      cores += std::to_string(c);
    }
    std::printf("%s  cores=%s  threads=%d\n", d->name().c_str(), cores.c_str(), d->num_threads());
  }
  const std::vector<lockstep::Device*>& gpus = lockstep::gpu_devices();
  if (gpus.empty()) std::printf("no GPU: %s\n", lockstep::gpu_unavailable_reason().c_str());
  for (lockstep::Device* d : gpus)
    std::printf("%s  %s\n", d->name().c_str(), d->description().c_str());
  for (lockstep::Device* d : lockstep::fake_devices())
    std::printf("%s  %s\n", d->name().c_str(), d->description().c_str());
  return 0;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep: synchronous data-parallel training"};
  app.require_subcommand(1);
  lockstep::cli::TrainArgs train_args;
  CLI::App* train = lockstep::cli::add_train_command(app, train_args);
  lockstep::cli::LaunchArgs launch_args;
  CLI::App* launch = lockstep::cli::add_launch_command(app, launch_args);
  lockstep::cli::SuperviseArgs supervise_args;
  CLI::App* supervise = lockstep::cli::add_supervise_command(app, supervise_args);
  lockstep::cli::UseModelArgs evaluate_args, predict_args;
  CLI::App* evaluate = lockstep::cli::add_evaluate_command(app, evaluate_args);
  CLI::App* predict = lockstep::cli::add_predict_command(app, predict_args);
  lockstep::cli::InspectArgs inspect_args;
  CLI::App* inspect = lockstep::cli::add_inspect_command(app, inspect_args);
  lockstep::cli::ServeArgs serve_args;
  CLI::App* ps_cmd = nullptr;
  CLI::App* worker_cmd = nullptr;
  lockstep::cli::add_serve_commands(app, serve_args, ps_cmd, worker_cmd);
  CLI::App* devices_cmd = app.add_subcommand(
      "devices",
      "list the logical CPU devices (LOCKSTEP_CPU_DEVICES changes them) and the GPUs, or why "
      "there are none");
  CLI::App* version = app.add_subcommand("version", "print the version");
  app.set_version_flag("--version", "lockstep " LOCKSTEP_VERSION, "print the version and exit");
  // A misspelt command gets the nearest one (CLI11 would say only that a
  // subcommand is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::fprintf(stderr, "lockstep: unknown command '%s'; did you mean '%s'? (commands: %s)\n",
                   argv[1], lockstep::nearest_name(argv[1], names).c_str(), join(names).c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (train->parsed()) return lockstep::cli::run_train(train_args);
    if (evaluate->parsed()) return lockstep::cli::run_evaluate(evaluate_args);
    if (predict->parsed()) return lockstep::cli::run_predict(predict_args);
    if (launch->parsed()) return lockstep::cli::run_launch(launch_args);
    if (supervise->parsed()) return lockstep::cli::run_supervise(supervise_args);
    if (inspect->parsed()) return lockstep::cli::run_inspect(inspect_args);
    if (ps_cmd->parsed()) return lockstep::cli::run_serve(serve_args, "ps");
    if (worker_cmd->parsed()) return lockstep::cli::run_serve(serve_args, "worker");
    if (devices_cmd->parsed()) return devices();
    if (version->parsed()) {
      std::printf("lockstep %s\n", LOCKSTEP_VERSION);
      return 0;
    }
    return 2;
  } catch (const lockstep::RejoinError& e) {
    std::fprintf(stderr, "lockstep: %s\n", e.what());
    return lockstep::cli::kRejoinExitCode;
  } catch (const lockstep::DistributedError& e) {
    // A lost worker, a failed or timed-out collective: exit 4, so that a
    // launcher can tell it from bad input.
    std::fprintf(stderr, "lockstep: error: %s\n", e.what());
    return 4;
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "lockstep: error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "lockstep: error: out of memory (more than the machine or ulimit -v "
                 "allows)\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep: internal error: %s\n", e.what());
    return 3;
  }
}
