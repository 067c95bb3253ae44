#include "serial_communicator.h"

#include <bit>
#include <chrono>
#include <vector>

#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"

namespace lockstep::comm::detail {

SerialExecutor::SerialExecutor() : thread_([this] { loop(); }) {}

SerialExecutor::~SerialExecutor() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A task blocked forever in a library (a dead peer, no deadline) must not
  // hold the process hostage: leave the thread to the process's exit.
  if (stuck_) {
    thread_.detach();
  } else {
    thread_.join();
  }
}

void SerialExecutor::post(std::shared_ptr<Task> task) {
  {
    std::lock_guard lk(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void SerialExecutor::loop() {
  for (;;) {
    std::shared_ptr<Task> task;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      task->run();
    } catch (...) {
      task->error = std::current_exception();
    }
    {
      std::lock_guard lk(task->mu);
      task->done = true;
    }
    task->cv.notify_all();
  }
}

namespace {

class TaskWork final : public Work {
 public:
  TaskWork(SerialCommunicator* comm, std::shared_ptr<Task> task)
      : comm_(comm), task_(std::move(task)) {}
  ~TaskWork() override {
    if (!waited_) {
      try {
        comm_->wait_task(*task_);
      } catch (...) {
        // Dropped handles do not throw; the next collective reports it.
      }
    }
  }
  bool test() override {
    std::lock_guard lk(task_->mu);
    if (!task_->done) return false;
    if (task_->error) {
      waited_ = true;
      comm_->wait_task(*task_);
    }
    return true;
  }
  void wait() override {
    waited_ = true;
    comm_->wait_task(*task_);
  }

 private:
  SerialCommunicator* comm_;
  std::shared_ptr<Task> task_;
  bool waited_ = false;
};

std::string seconds(std::chrono::milliseconds ms) {
  return std::to_string(ms.count() / 1000) + "." + std::to_string((ms.count() % 1000) / 100) + " s";
}

}  // namespace

SerialCommunicator::SerialCommunicator(ProcessGroupOptions options, std::string backend,
                                       std::shared_ptr<SerialExecutor> executor)
    : options_(std::move(options)), backend_(std::move(backend)), executor_(std::move(executor)) {}

SerialCommunicator::~SerialCommunicator() = default;

bool SerialCommunicator::broken() {
  std::lock_guard lk(mu_);
  return !broken_.empty() || executor_->stuck();
}

void SerialCommunicator::check_not_broken() {
  std::lock_guard lk(mu_);
  if (!broken_.empty()) throw DistributedError(broken_);
}

std::shared_ptr<Task> SerialCommunicator::post(std::string what, std::function<void()> fn) {
  check_not_broken();
  auto task = std::make_shared<Task>();
  task->what = std::move(what);
  task->run = [this, fn = std::move(fn)] {
    {
      std::lock_guard lk(mu_);
      if (!broken_.empty()) throw DistributedError(broken_);
    }
    fn();
  };
  {
    std::lock_guard lk(mu_);
    std::erase_if(pending_, [](const std::weak_ptr<Task>& t) { return t.expired(); });
    pending_.push_back(task);
  }
  executor_->post(task);
  return task;
}

void SerialCommunicator::drain() {
  if (executor_->stuck()) return;
  auto task = std::make_shared<Task>();
  task->run = [] {};
  executor_->post(task);
  std::unique_lock lk(task->mu);
  if (!task->cv.wait_for(lk, options_.timeout + std::chrono::seconds(2),
                         [&] { return task->done; }))
    executor_->mark_stuck();
}

void SerialCommunicator::run(std::string what, std::function<void()> fn) {
  auto task = post(std::move(what), std::move(fn));
  wait_task(*task);
}

std::optional<std::chrono::steady_clock::time_point> SerialCommunicator::waiting_since() const {
  std::lock_guard lk(wait_mu_);
  if (waiters_ == 0) return std::nullopt;
  return wait_began_;
}

void SerialCommunicator::wait_task(Task& task) {
  {
    std::lock_guard lk(wait_mu_);
    if (waiters_++ == 0) wait_began_ = std::chrono::steady_clock::now();
  }
  struct Done {
    SerialCommunicator* self;
    ~Done() {
      std::lock_guard lk(self->wait_mu_);
      --self->waiters_;
    }
  } done{this};
  // The library's own deadline is options_.timeout; ours comes 2 s later so
  // that its message (which names the peer) is the one reported.
  const auto deadline =
      std::chrono::steady_clock::now() + options_.timeout + std::chrono::seconds(2);
  std::unique_lock lk(task.mu);
  if (!task.cv.wait_until(lk, deadline, [&] { return task.done || aborted_.load(); })) {
    lk.unlock();
    executor_->mark_stuck();
    fail(task, "did not finish within " + seconds(options_.timeout), true);
  }
  if (!task.done) {
    // Aborted while the library still waits on a peer: this rank stops
    // waiting; the library's call ends at its own deadline, on the
    // communication thread, which is left behind (as after a timeout).
    lk.unlock();
    executor_->mark_stuck();
    std::lock_guard blk(mu_);
    throw DistributedError(broken_);
  }
  if (task.error) {
    std::string message = "unknown error";
    try {
      std::rethrow_exception(task.error);
    } catch (const DistributedError& e) {
      // Already a report (this communicator was broken before).
      std::lock_guard blk(mu_);
      if (e.what() == broken_) throw;
      message = e.what();
    } catch (const std::exception& e) {
      message = e.what();
    }
    lk.unlock();
    fail(task, message, false);
  }
}

void SerialCommunicator::fail(const Task& task, const std::string& message, bool timeout) {
  std::string report =
      lockstep::detail::str_cat("worker ", options_.rank, ": ", task.what, " across ",
                                options_.size, " workers (", backend_, ") failed: ", message);
  if (options_.diagnose && diagnosing_) {
    std::string diagnosis;
    try {
      diagnosis = options_.diagnose();
    } catch (const std::exception& e) {
      diagnosis = e.what();
    }
    if (!diagnosis.empty()) report += "; " + diagnosis;
  }
  {
    std::lock_guard lk(mu_);
    if (broken_.empty()) broken_ = report;
  }
  if (timeout) throw TimeoutError(report);
  throw DistributedError(report);
}

void SerialCommunicator::all_reduce(float* data, std::size_t count, ReduceOp op) {
  run("all_reduce of " + std::to_string(count) + " floats",
      [=, this] { do_all_reduce_f32(data, count, op); });
}

void SerialCommunicator::all_reduce(double* data, std::size_t count, ReduceOp op) {
  run("all_reduce of " + std::to_string(count) + " doubles",
      [=, this] { do_all_reduce_f64(data, count, op); });
}

WorkHandle SerialCommunicator::all_reduce_async(float* data, std::size_t count, ReduceOp op) {
  auto task = post("all_reduce of " + std::to_string(count) + " floats",
                   [=, this] { do_all_reduce_f32(data, count, op); });
  return std::make_unique<TaskWork>(this, std::move(task));
}

WorkHandle SerialCommunicator::all_reduce_bf16_async(float* data, std::size_t count, ReduceOp op) {
  auto task = post("all_reduce of " + std::to_string(count) + " floats as bfloat16", [=, this] {
    std::vector<std::uint16_t>& wire = bf16_wire_;  // this thread's alone
    wire.resize(count);
    for (std::size_t i = 0; i < count; ++i) wire[i] = bfloat16::round(data[i]);
    do_all_reduce_bf16(wire.data(), count, op == ReduceOp::kMean ? ReduceOp::kSum : op);
    const float scale = op == ReduceOp::kMean ? 1.0f / static_cast<float>(size()) : 1.0f;
    for (std::size_t i = 0; i < count; ++i)
      data[i] = std::bit_cast<float>(static_cast<std::uint32_t>(wire[i]) << 16) * scale;
  });
  return std::make_unique<TaskWork>(this, std::move(task));
}

void SerialCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  LOCKSTEP_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is not a rank of ",
                 size());
  run("broadcast of " + std::to_string(bytes) + " bytes from worker " + std::to_string(root),
      [=, this] { do_broadcast(data, bytes, root); });
}

void SerialCommunicator::all_gather(const void* data, std::size_t bytes, void* out) {
  run("all_gather of " + std::to_string(bytes) + " bytes",
      [=, this] { do_all_gather(data, bytes, out); });
}

void SerialCommunicator::barrier() {
  run("barrier", [this] { do_barrier(); });
}

void SerialCommunicator::abort(const std::string& reason) {
  std::vector<std::shared_ptr<Task>> waiting;
  {
    std::lock_guard lk(mu_);
    if (broken_.empty())
      broken_ = lockstep::detail::str_cat("worker ", options_.rank, ": ", reason);
    aborted_.store(true);
    for (const auto& t : pending_) {
      if (auto task = t.lock()) waiting.push_back(std::move(task));
    }
  }
  for (const auto& task : waiting) {
    std::lock_guard lk(task->mu);  // a waiter between its check and its wait sees the flag
    task->cv.notify_all();
  }
}

}  // namespace lockstep::comm::detail
