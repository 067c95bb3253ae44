// `lockstep ps` / `lockstep worker`: serve one task of a ParameterServerStrategy
// job — the coordinator is a `lockstep train --strategy parameter-server`
// (or any program of this binary's registered functions) on the chief —
// until the coordinator ends the job. The task is TF_CONFIG's; the job token
// LOCKSTEP_JOB_TOKEN's.
#include "serve.h"

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "train.h"

namespace lockstep::cli {

void add_serve_commands(CLI::App& app, ServeArgs& a, CLI::App*& ps, CLI::App*& worker) {
  ps = app.add_subcommand(
      "ps", "serve this task as a parameter server of a parameter-server job (TF_CONFIG names it)");
  worker = app.add_subcommand(
      "worker", "serve this task as a worker of a parameter-server job (TF_CONFIG names it)");
  worker->add_option("--data-dir", a.data_dir,
                     "directory with the IDX files (default: /usr/share/datasets/fashion-mnist)");
}

int run_serve(const ServeArgs& a, const std::string& role) {
  const auto resolver = distribute::ClusterResolver::from_environment();
  LOCKSTEP_CHECK(resolver.has_value() && resolver->launcher() == distribute::Launcher::kTfConfig,
                 "lockstep ", role,
                 ": no TF_CONFIG; set it to the job's cluster with this task, e.g. {\"cluster\": "
                 "{\"chief\": [...], \"worker\": [...], \"ps\": [...]}, \"task\": {\"type\": \"",
                 role, "\", \"index\": 0}}");
  LOCKSTEP_CHECK(resolver->task_type() == role, "lockstep ", role, ": TF_CONFIG's task.type is \"",
                 resolver->task_type(), "\"; run lockstep ",
                 resolver->task_type() == "chief" ? "train --strategy parameter-server"
                                                  : resolver->task_type(),
                 " for it");
  return serve_task(*resolver, a.data_dir);
}

}  // namespace lockstep::cli
