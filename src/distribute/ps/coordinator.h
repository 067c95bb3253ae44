// CoordinatorImpl: the scheduled functions of a ParameterServerStrategy —
// the bounded queue, one dispatcher thread per worker, what each worker
// must be given before it runs a function (the variable table, its
// per-worker datasets, its per-worker resources: again after it rejoins),
// the first error and the cancelled rest. Internal to distribute/
// (cluster_coordinator.h is its face).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distribute/ps/ps_strategy.h"
#include "lockstep/distribute/cluster_coordinator.h"

namespace lockstep::distribute {

struct RemoteValueState {
  enum class Status { kPending, kDone, kFailed };
  std::mutex mu;
  std::condition_variable cv;
  Status status = Status::kPending;
  std::vector<Tensor> results;
  std::string error_class, error_message;  // kFailed (CancelledError: never ran)

  void finish(std::vector<Tensor> values);
  void fail(std::string error_class, std::string message);
};

// Whether this process has the function (worker.cc's registry): the
// coordinator runs the same binary as its workers, so a name it does not
// know is a mistake it can name at once.
bool worker_function_registered(const std::string& name);
bool dataset_function_registered(const std::string& name);

class CoordinatorImpl {
 public:
  explicit CoordinatorImpl(ParameterServerStrategyImpl* strategy);
  ~CoordinatorImpl();
  CoordinatorImpl(const CoordinatorImpl&) = delete;
  CoordinatorImpl& operator=(const CoordinatorImpl&) = delete;

  RemoteValue schedule(const std::string& name, std::vector<RemoteArgument> arguments);
  void join();
  bool done();
  std::int64_t add_per_worker_dataset(const std::string& name, std::vector<Tensor> arguments);
  void add_per_worker_resource(const std::string& name, std::vector<Tensor> arguments);
  CoordinatorStats stats() const;
  // Cancels what waits, lets the running functions finish, stops the
  // dispatchers (the strategy's end).
  void stop();

 private:
  struct Closure {
    std::string function;
    std::vector<RemoteArgument> arguments;
    std::shared_ptr<RemoteValueState> value;
  };
  // What a worker is given before its functions, in order, once per
  // incarnation: a per-worker dataset (iterator_id >= 0) or a resource
  // function.
  struct Setup {
    std::int64_t iterator_id = -1;
    std::string function;
    std::vector<Tensor> arguments;
  };
  struct Worker {
    std::shared_ptr<comm::rpc::Channel> channel;
    std::uint64_t incarnation = 0;  // 0: never reached
    bool ready = false;
    std::int64_t table_version = -1;
    std::size_t setup_done = 0;
  };

  void dispatch(int w);
  // Waits until worker w answers (a new incarnation: set up from scratch);
  // false when stopping.
  bool bring_up(int w);
  // Marks worker w as not answering; the job's error when no worker has
  // answered for worker_timeout, else nullopt.
  std::optional<std::string> no_worker_left(int w);
  // The table and the set-up the worker has not had yet.
  void catch_up(int w);
  // The first error of the job (raised once); the queued functions are
  // cancelled.
  void record_error(const std::string& error_class, const std::string& message);
  void raise_pending(std::unique_lock<std::mutex>& lk);

  ParameterServerStrategyImpl* strategy_;
  std::size_t capacity_;
  std::vector<Worker> workers_;  // fixed size; each touched by its dispatcher only
  // When each worker stopped answering (under mu_); none: it answers. All
  // set for longer than worker_timeout: the job cannot go on.
  std::vector<std::optional<std::chrono::steady_clock::time_point>> down_since_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, space_cv_, idle_cv_, stop_cv_;
  std::deque<Closure> queue_;
  int inflight_ = 0;
  bool stopping_ = false;
  std::optional<std::pair<std::string, std::string>> error_;  // class, message
  std::vector<Setup> setup_;
  std::int64_t next_iterator_ = 0;
  CoordinatorStats stats_;
  std::vector<std::thread> dispatchers_;
};

}  // namespace lockstep::distribute
