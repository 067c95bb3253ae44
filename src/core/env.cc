// The single reader of environment variables (see env.h for the list).
#include "lockstep/core/env.h"

#include <cstdlib>

namespace lockstep::env {
namespace {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

}  // namespace

std::optional<std::string> cpu_devices() { return get("LOCKSTEP_CPU_DEVICES"); }

std::optional<std::string> fake_devices() { return get("LOCKSTEP_FAKE_DEVICES"); }

std::optional<std::string> logical_gpus() { return get("LOCKSTEP_LOGICAL_GPUS"); }

std::optional<std::string> cuda_library() { return get("LOCKSTEP_CUDA_LIBRARY"); }

std::optional<std::string> tf_config() { return get("TF_CONFIG"); }

const char* launcher_variable(const char* name) {
  return std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read-only use
}

std::optional<std::string> job_token() { return get("LOCKSTEP_JOB_TOKEN"); }

std::optional<std::string> local_replicas() { return get("LOCKSTEP_LOCAL_REPLICAS"); }

int restart_count() {
  const std::optional<std::string> v = get("LOCKSTEP_RESTART_COUNT");
  if (!v || v->empty() || v->size() > 6) return 0;
  for (char c : *v)
    if (c < '0' || c > '9') return 0;
  return std::stoi(*v);
}

bool rejoin() { return get("LOCKSTEP_REJOIN").value_or("") == "1"; }

std::optional<std::string> crash_at() { return get("LOCKSTEP_CRASH_AT"); }

bool pin_workers() { return get("LOCKSTEP_PIN_WORKERS").value_or("1") != "0"; }

}  // namespace lockstep::env
