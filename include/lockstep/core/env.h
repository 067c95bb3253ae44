// The one place where Lockstep reads environment variables.
//
// Every variable the library honours is listed here; nothing else in the tree
// calls getenv.
#pragma once

#include <optional>
#include <string>

namespace lockstep::env {

// LOCKSTEP_CPU_DEVICES: how to split the machine's cores into logical
// devices, e.g. "2" (two devices over all cores) or "0,1;2,3" (explicit
// core lists separated by ';'). Unset: one device per physical core.
std::optional<std::string> cpu_devices();

// LOCKSTEP_PIN_WORKERS: "0" stops the workers of a multi-worker job that
// share a host from splitting its cores among themselves (`lockstep launch
// --no-pin` sets it). Unset or anything else: they split them.
bool pin_workers();

}  // namespace lockstep::env
