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
#include <string>
#include <thread>

#include "lockstep/distribute/strategy_extended.h"

namespace lockstep::cli {
namespace {

constexpr std::int64_t kAgreeEvery = 16;

std::atomic<int> g_signal{0};
std::atomic<bool> g_catching{false};
// Set (before catching starts) where the first signal ends the process at
// once, with this said first: a parameter-server chief (see catch_stop_signals).
std::atomic<const char*> g_exit_at_once{nullptr};

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
    if (g_catching.load() && g_exit_at_once.load() != nullptr) {
      const char* note = g_exit_at_once.load();
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      // write(2): this thread may interrupt nothing, but stdio's lock may
      // be held by another thread at this moment.
      const std::string line = std::string("lockstep: ") + name + ": " + note + "\n";
      [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
      ::_exit(128 + sig);
    }
    if (!g_catching.load() || !g_signal.compare_exchange_strong(expected, sig)) {
      ::_exit(128 + sig);  // outside training, or the second signal
    }
  }
}

class StopOnSignal : public Callback {
 public:
  explicit StopOnSignal(std::shared_ptr<BackupAndRestore> backup) : backup_(std::move(backup)) {}

  void on_train_batch_end(std::int64_t, const Logs&) override { check(); }

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
};

}  // namespace

void take_stop_signals() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread(wait_for_signals).detach();
}

void catch_stop_signals(const char* exit_at_once) {
  g_exit_at_once.store(exit_at_once);
  g_catching.store(true);
}

void restore_default_signals() { g_catching.store(false); }

int stop_signal() { return g_signal.load(); }

std::shared_ptr<Callback> stop_on_signal(std::shared_ptr<BackupAndRestore> backup) {
  return std::make_shared<StopOnSignal>(std::move(backup));
}

}  // namespace lockstep::cli
