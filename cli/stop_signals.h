// SIGINT and SIGTERM during `lockstep train`: the first one stops training
// at the end of the step in flight (after writing a backup when there is a
// --checkpoint-dir, so that the rerun redoes nothing); a second one exits at
// once. See stop_signals.cc.
#pragma once

#include <memory>

#include "lockstep/lockstep.h"

namespace lockstep::cli {

// Before any other thread starts: blocks SIGINT and SIGTERM
// in every thread and takes them on a thread of their own, which ends the
// process (exit 128 + signal) as the default action would ...
void take_stop_signals();
// ... except between these two calls (training), where the first one is
// recorded for stop_on_signal and a second one exits at once — or, given
// `exit_at_once`, the first one exits after saying it. A parameter-server
// chief takes that: its epoch's steps run on workers that a launcher's
// SIGTERM stops too, so waiting for the epoch's end waited for ever (issue
// #41: Ctrl-C to a parameter-server `launch` took 40 s and a SIGKILL); the
// rerun resumes from the backup of the last whole epoch, as a
// parameter-server epoch always restarts at its first batch.
void catch_stop_signals(const char* exit_at_once = nullptr);
void restore_default_signals();

// The signal that asked training to stop, or 0.
int stop_signal();

// A callback that ends fit after the step in which a stop signal arrived —
// under several workers, at a step all of them agree on (they compare every
// kAgreeEvery steps) — backing up first through `backup` (may be null).
std::shared_ptr<Callback> stop_on_signal(std::shared_ptr<BackupAndRestore> backup);

}  // namespace lockstep::cli
