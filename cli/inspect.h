// `lockstep inspect FILE`: what a checkpoint or model file holds, read as a
// restore reads it (see inspect.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace lockstep::cli {

struct InspectArgs {
  std::string file;
};

CLI::App* add_inspect_command(CLI::App& app, InspectArgs& args);
// 0 when the file reads whole, 1 otherwise (an error naming the file).
int run_inspect(const InspectArgs& args);

}  // namespace lockstep::cli
