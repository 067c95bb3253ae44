// CollectiveWatchdog: a deadline for the replicas' sums on their GPUs
// (NCCL). A sum whose peer never comes — a worker stopped or a GPU hung
// between the host's flags and the sum — waits on the device for ever, and
// the replica thread with it. A thread polls the members' waiting_since:
// once a sum has waited longer than an interval it asks who the job lost
// (the chief's store, from its heartbeats) and aborts the sums naming
// that worker; at the strategy's collective timeout it aborts them
// anyway, saying so. As PyTorch's ProcessGroupNCCL watchdog, and as the
// host collectives' own deadline and liveness watch (multi_worker.cc).
// Internal to distribute/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/tensor/device_kernels.h"

namespace lockstep::distribute {

class CollectiveWatchdog {
 public:
  struct Options {
    // A sum in flight longer than this is aborted.
    std::chrono::milliseconds deadline{std::chrono::minutes(5)};
    // How often the members are polled; a sum waiting longer than this
    // makes the watchdog ask `lost`.
    std::chrono::milliseconds every{std::chrono::milliseconds(500)};
    // Who the job lost, described ("worker 1 (host:port) was lost: no
    // heartbeat for 5.0 s"); "" when nobody. Unset with one worker.
    std::function<std::string()> lost{};
    // Said after a deadline's abort (the workers the chief lost, if any).
    std::function<std::string()> diagnose{};
    // The strategy's name, for the warning an abort logs.
    std::string name{};
  };
  // Watches `members` (they outlive it) until destroyed.
  CollectiveWatchdog(std::vector<detail::DeviceCollective*> members, Options options);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

 private:
  void watch();
  // Why the sums must end now; "" while they may wait.
  std::string verdict();

  std::vector<detail::DeviceCollective*> members_;
  Options options_;
  std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts when the members it uses exist
};

}  // namespace lockstep::distribute
