// Stopping `lockstep train` on SIGINT / SIGTERM without losing work.
//
// The signals are blocked in every thread before any thread starts (threads
// inherit the mask) and taken by one thread of their own with sigwait(), so
// they never interrupt a compute thread. With an ordinary handler (one
// atomic store, SA_RESTART) about 1 run in 20 of
// tests/reliability/stop_signals.sh ended in glibc's "corrupted size vs.
// prev_size" while training went on; the same stop without a real signal,
// and runs under ASan and TSan, never did, and the cause was not found
// (docs/reliability.md). With sigwait: 0 in 60. Until training starts a
// signal ends the process as the default action would; during training the
// first one asks for a stop and a second one exits at once.
//
// A single worker stops after the step in flight. Workers of one job must
// stop at the same step — a worker that stopped alone would leave the
// others waiting in their next all-reduce — so they compare their flags in
// an all-reduce every kAgreeEvery steps: one small collective per 16 steps
// (a Gloo all-reduce of 8 bytes takes 0.2-0.3 ms here, docs/benchmarks.md),
// and the stop comes at most 15 steps later than asked.
#include "stop_signals.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "lockstep/distribute/strategy_extended.h"

namespace lockstep::cli {
namespace {

constexpr std::int64_t kAgreeEvery = 16;

std::atomic<int> g_signal{0};
std::atomic<bool> g_catching{false};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

void wait_for_signals() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    int expected = 0;
    if (!g_catching.load() || !g_signal.compare_exchange_strong(expected, sig)) {
      ::_exit(128 + sig);  // outside training, or the second signal
    }
  }
}

class StopOnSignal : public Callback {
 public:
  StopOnSignal(std::shared_ptr<BackupAndRestore> backup, bool at_epoch_end)
      : backup_(std::move(backup)), at_epoch_end_(at_epoch_end) {}

  void on_train_batch_end(std::int64_t, const Logs&) override {
    if (!at_epoch_end_) check();
  }
  // Under ParameterServerStrategy the epoch's scheduled steps finish first
  // (the backup fit takes at the epoch's end is the one a rerun resumes).
  void on_epoch_end(int, const Logs&) override {
    if (at_epoch_end_ && g_signal.load() != 0) model()->stop_training();
  }
  bool implements_train_batch_hooks() const override { return !at_epoch_end_; }

 private:
  void check() {
    std::vector<double> stop{g_signal.load() != 0 ? 1.0 : 0.0};
    const distribute::Strategy& strategy = model()->distribute_strategy();
    if (strategy.num_workers() > 1) {
      if (model()->optimizer().iterations() % kAgreeEvery != 0) return;
      strategy.extended().sum_across_workers(stop);  // how many workers were told to stop
    }
    if (stop[0] == 0.0) return;
    if (backup_) backup_->backup_now();
    model()->stop_training();
  }

  std::shared_ptr<BackupAndRestore> backup_;
  bool at_epoch_end_;
};

}  // namespace

void take_stop_signals() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(wait_for_signals).detach();
}

void catch_stop_signals() { g_catching.store(true); }

void restore_default_signals() { g_catching.store(false); }

int stop_signal() { return g_signal.load(); }

std::shared_ptr<Callback> stop_on_signal(std::shared_ptr<BackupAndRestore> backup,
                                         bool at_epoch_end) {
  return std::make_shared<StopOnSignal>(std::move(backup), at_epoch_end);
}

}  // namespace lockstep::cli
