// A Communicator whose collectives run one at a time on a communication
// thread, with deadlines and failure reports (internal; the Gloo and MPI
// backends derive from it and implement the do_* collectives).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/process_group.h"

namespace lockstep::comm::detail {

// One collective posted to the communication thread.
struct Task {
  std::function<void()> run;
  std::string what;  // "all_reduce of 4096 floats"
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

// A thread that runs tasks in the order posted. If a task never returns (a
// library blocked on a dead peer without a deadline), the owner marks the
// executor stuck and it is detached instead of joined at destruction.
class SerialExecutor {
 public:
  SerialExecutor();
  ~SerialExecutor();
  void post(std::shared_ptr<Task> task);
  void mark_stuck() { stuck_ = true; }
  bool stuck() const { return stuck_; }

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stop_ = false;
  std::atomic<bool> stuck_{false};
  std::thread thread_;
};

class SerialCommunicator : public Communicator {
 public:
  SerialCommunicator(ProcessGroupOptions options, std::string backend,
                     std::shared_ptr<SerialExecutor> executor);
  ~SerialCommunicator() override;

  int rank() const override { return options_.rank; }
  int size() const override { return options_.size; }
  void all_reduce(float* data, std::size_t count, ReduceOp op) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op) override;
  WorkHandle all_reduce_async(float* data, std::size_t count, ReduceOp op) override;
  WorkHandle all_reduce_bf16_async(float* data, std::size_t count, ReduceOp op) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void all_gather(const void* data, std::size_t bytes, void* out) override;
  void barrier() override;
  void abort(const std::string& reason) override;
  std::optional<std::chrono::steady_clock::time_point> waiting_since() const override;

  // Waits for a posted task within the deadline; throws its failure.
  void wait_task(Task& task);

 protected:
  // Run on the communication thread; throw on failure.
  virtual void do_all_reduce_f32(float* data, std::size_t count, ReduceOp op) = 0;
  virtual void do_all_reduce_f64(double* data, std::size_t count, ReduceOp op) = 0;
  // `bf16` holds the floats rounded to bfloat16; sums it across the ranks
  // in place (each addition in float32, rounded back to bfloat16).
  virtual void do_all_reduce_bf16(std::uint16_t* bf16, std::size_t count, ReduceOp op) = 0;
  virtual void do_broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void do_all_gather(const void* data, std::size_t bytes, void* out) = 0;
  virtual void do_barrier() = 0;

  const ProcessGroupOptions& options() const { return options_; }
  // Posts `fn` and waits for it.
  void run(std::string what, std::function<void()> fn);
  std::shared_ptr<Task> post(std::string what, std::function<void()> fn);
  // Waits until every task posted so far has run (unless the thread is
  // stuck); derived destructors call it before their library state goes.
  void drain();
  // A collective failed or the group was aborted.
  bool broken();
  // From now on a failure is reported without asking options().diagnose
  // (leaving the group: the failure is swallowed, and asking the chief
  // whom it lost would hold this process for a heartbeat timeout before it
  // tells the chief's store it left).
  void stop_diagnosing() { diagnosing_ = false; }
  // The communication thread is left inside a library call (a timeout, or
  // an abort while a peer was stopped): the library's state must outlive it.
  bool stuck() const { return executor_->stuck(); }

 private:
  [[noreturn]] void fail(const Task& task, const std::string& message, bool timeout);
  void check_not_broken();

  ProcessGroupOptions options_;
  std::string backend_;
  std::shared_ptr<SerialExecutor> executor_;
  std::mutex mu_;
  std::string broken_;  // the first failure; later collectives fail with it
  // Tasks posted and not yet waited for: abort() wakes their waiters, who
  // then fail at once with its reason instead of at the deadline.
  std::vector<std::weak_ptr<Task>> pending_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> diagnosing_{true};
  // Callers in wait_task, and when the first of them began (under wait_mu_).
  mutable std::mutex wait_mu_;
  int waiters_ = 0;
  std::chrono::steady_clock::time_point wait_began_{};
  // all_reduce_bf16_async's bfloat16 copy of the data, kept between calls
  // (one allocation, not one per gradient bucket); touched only by tasks on
  // the communication thread, which run one at a time.
  std::vector<std::uint16_t> bf16_wire_;
};

}  // namespace lockstep::comm::detail
