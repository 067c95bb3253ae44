// The `lockstep` command line. Library errors become exit codes here and
// nowhere else.
//
//   lockstep train       the main job: the guide's MLP on Fashion-MNIST under
//                        MirroredStrategy (train --help for the flags)
//   lockstep launch      starts N local workers of a multi-worker job
//                        (launch --workers 2 -- lockstep train --strategy multi-worker)
//   lockstep inspect F   lists a checkpoint's tensors and metadata and
//                        verifies every checksum (exit 1 when damaged)
//   lockstep devices     lists the logical CPU devices and their cores
//   lockstep version     prints the version
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "inspect.h"
#include "launch.h"
#include "lockstep/lockstep.h"
#include "train.h"

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
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lockstep: synchronous data-parallel training"};
  app.require_subcommand(1);
  lockstep::cli::TrainArgs train_args;
  CLI::App* train = lockstep::cli::add_train_command(app, train_args);
  lockstep::cli::LaunchArgs launch_args;
  CLI::App* launch = lockstep::cli::add_launch_command(app, launch_args);
  lockstep::cli::InspectArgs inspect_args;
  CLI::App* inspect = lockstep::cli::add_inspect_command(app, inspect_args);
  CLI::App* devices_cmd = app.add_subcommand(
      "devices", "list the logical CPU devices (LOCKSTEP_CPU_DEVICES changes them)");
  CLI::App* version = app.add_subcommand("version", "print the version");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    if (train->parsed()) return lockstep::cli::run_train(train_args);
    if (launch->parsed()) return lockstep::cli::run_launch(launch_args);
    if (inspect->parsed()) return lockstep::cli::run_inspect(inspect_args);
    if (devices_cmd->parsed()) return devices();
    if (version->parsed()) {
      std::printf("lockstep 0.1.0\n");
      return 0;
    }
    return 2;
  } catch (const lockstep::DistributedError& e) {
    // A lost worker, a failed or timed-out collective: exit 4, so that a
    // launcher can tell it from bad input.
    std::fprintf(stderr, "lockstep: error: %s\n", e.what());
    return 4;
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "lockstep: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep: internal error: %s\n", e.what());
    return 3;
  }
}
