// `lockstep ps` and `lockstep worker`: the serving roles of a
// ParameterServerStrategy job when its tasks are started by hand or by a
// cluster manager, each with its own TF_CONFIG (see serve.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace lockstep::cli {

struct ServeArgs {
  std::string data_dir;  // worker: where the training data is (empty: Debian's)
};

// Adds both commands; `ps` and `worker` are set to them.
void add_serve_commands(CLI::App& app, ServeArgs& args, CLI::App*& ps, CLI::App*& worker);
// Serves the task TF_CONFIG names, which must be of kind `role`.
int run_serve(const ServeArgs& args, const std::string& role);

}  // namespace lockstep::cli
