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

bool pin_workers() { return get("LOCKSTEP_PIN_WORKERS").value_or("1") != "0"; }

}  // namespace lockstep::env
