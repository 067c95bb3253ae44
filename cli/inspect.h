// `lockstep inspect FILE`: what a checkpoint or model file holds, with every
// checksum verified (see inspect.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace lockstep::cli {

struct InspectArgs {
  std::string file;
};

CLI::App* add_inspect_command(CLI::App& app, InspectArgs& args);
// 0 when the file is whole (every checksum verified), 1 otherwise.
int run_inspect(const InspectArgs& args);

}  // namespace lockstep::cli
