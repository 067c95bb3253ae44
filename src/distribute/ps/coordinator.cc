// The ClusterCoordinator: functions queued by schedule() (bounded; schedule
// blocks while it is full), one dispatcher per worker that brings its worker
// up (the variable table, its per-worker datasets and resources — again from
// scratch when the worker comes back as a new process), sends it one
// function at a time, and on a lost worker puts the function back for
// another (at least once); the first error is kept to be raised once, the
// queued functions cancelled. RemoteValue and the public faces.
#include "distribute/ps/coordinator.h"

#include <cstdio>
#include <string>
#include <string_view>

#include "distribute/ps/wire.h"
#include "lockstep/core/error.h"
#include "lockstep/core/log.h"

namespace lockstep::distribute {

using Clock = std::chrono::steady_clock;

// ---- RemoteValue ----

void RemoteValueState::finish(std::vector<Tensor> values) {
  {
    std::lock_guard lk(mu);
    results = std::move(values);
    status = Status::kDone;
  }
  cv.notify_all();
}

void RemoteValueState::fail(std::string cls, std::string message) {
  {
    std::lock_guard lk(mu);
    error_class = std::move(cls);
    error_message = std::move(message);
    status = Status::kFailed;
  }
  cv.notify_all();
}

std::vector<Tensor> RemoteValue::fetch() const {
  LOCKSTEP_CHECK(state_ != nullptr, "RemoteValue::fetch: an empty RemoteValue (from schedule())");
  std::unique_lock lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->status != RemoteValueState::Status::kPending; });
  if (state_->status == RemoteValueState::Status::kFailed)
    detail::throw_error_of_class(state_->error_class, state_->error_message);
  return state_->results;
}

Tensor RemoteValue::get() const {
  std::vector<Tensor> all = fetch();
  LOCKSTEP_CHECK(all.size() == 1, "RemoteValue::get: the function returned ", all.size(),
                 " tensors; use fetch() for all of them");
  return all[0];
}

bool RemoteValue::done() const {
  LOCKSTEP_CHECK(state_ != nullptr, "RemoteValue::done: an empty RemoteValue");
  std::lock_guard lk(state_->mu);
  return state_->status != RemoteValueState::Status::kPending;
}

// ---- The coordinator ----

namespace {

// What a worker raised (in `function`, if given), as the chief reports it:
// the worker named once — what a worker says about itself starts with its
// own name already.
std::string from_worker(const std::string& worker, std::string_view what,
                        const std::string& function = "") {
  if (what.starts_with(worker + ": ")) what.remove_prefix(worker.size() + 2);
  return worker + ": " + (function.empty() ? "" : function + ": ") + std::string(what);
}

}  // namespace

CoordinatorImpl::CoordinatorImpl(ParameterServerStrategyImpl* strategy) : strategy_(strategy) {
  const ClusterResolver& r = strategy->resolver();
  const int n = r.cluster_spec().num_tasks("worker");
  const int size = strategy->options().closure_queue_size;
  capacity_ = static_cast<std::size_t>(size > 0 ? size : 256 * n);
  for (auto& channel :
       ps::open_channels(r, "worker", strategy->token(), strategy->options().timeout))
    workers_.push_back({std::move(channel)});
  // Not yet answering: the wait for the first worker counts against
  // worker_timeout too.
  down_since_.assign(workers_.size(), Clock::now());
  for (int w = 0; w < n; ++w) dispatchers_.emplace_back([this, w] { dispatch(w); });
}

CoordinatorImpl::~CoordinatorImpl() { stop(); }

void CoordinatorImpl::stop() {
  {
    std::lock_guard lk(mu_);
    if (stopping_ && dispatchers_.empty()) return;
    stopping_ = true;
    for (Closure& c : queue_) {
      c.value->fail("CancelledError", "cancelled: the coordinator stopped before it ran");
      ++stats_.cancelled;
    }
    queue_.clear();
  }
  work_cv_.notify_all();
  space_cv_.notify_all();
  idle_cv_.notify_all();
  stop_cv_.notify_all();
  for (auto& t : dispatchers_) t.join();
  dispatchers_.clear();
}

void CoordinatorImpl::raise_pending(std::unique_lock<std::mutex>& lk) {
  if (!error_) return;
  const auto [cls, message] = *error_;
  error_.reset();
  lk.unlock();
  detail::throw_error_of_class(cls, message);
}

void CoordinatorImpl::record_error(const std::string& cls, const std::string& message) {
  {
    std::lock_guard lk(mu_);
    if (!error_) error_ = {cls, message};
    for (Closure& c : queue_) {
      c.value->fail("CancelledError",
                    "cancelled: an earlier scheduled function failed (" + message + ")");
      ++stats_.cancelled;
    }
    queue_.clear();
  }
  space_cv_.notify_all();
  idle_cv_.notify_all();
}

RemoteValue CoordinatorImpl::schedule(const std::string& name,
                                      std::vector<RemoteArgument> arguments) {
  LOCKSTEP_CHECK(worker_function_registered(name), "ClusterCoordinator::schedule: no function '",
                 name,
                 "' is registered in this process; register it with register_worker_function in "
                 "every process of the job (the same binary runs everywhere)");
  RemoteValue value;
  value.state_ = std::make_shared<RemoteValueState>();
  std::unique_lock lk(mu_);
  raise_pending(lk);
  space_cv_.wait(lk, [&] { return stopping_ || error_ || queue_.size() < capacity_; });
  raise_pending(lk);
  LOCKSTEP_CHECK_AS(CancelledError, !stopping_,
                    "ClusterCoordinator::schedule: the coordinator "
                    "has stopped");
  queue_.push_back({name, std::move(arguments), value.state_});
  ++stats_.scheduled;
  lk.unlock();
  work_cv_.notify_one();
  return value;
}

void CoordinatorImpl::join() {
  std::unique_lock lk(mu_);
  idle_cv_.wait(lk, [&] { return stopping_ || (queue_.empty() && inflight_ == 0); });
  raise_pending(lk);
}

bool CoordinatorImpl::done() {
  std::unique_lock lk(mu_);
  raise_pending(lk);
  return queue_.empty() && inflight_ == 0;
}

std::int64_t CoordinatorImpl::add_per_worker_dataset(const std::string& name,
                                                     std::vector<Tensor> arguments) {
  LOCKSTEP_CHECK(dataset_function_registered(name),
                 "ClusterCoordinator::create_per_worker_dataset: no dataset function '", name,
                 "' is registered in this process; register it with register_dataset_function in "
                 "every process of the job (the same binary runs everywhere)");
  std::lock_guard lk(mu_);
  const std::int64_t id = next_iterator_++;
  setup_.push_back({id, name, std::move(arguments)});
  return id;
}

void CoordinatorImpl::add_per_worker_resource(const std::string& name,
                                              std::vector<Tensor> arguments) {
  LOCKSTEP_CHECK(worker_function_registered(name),
                 "ClusterCoordinator::create_per_worker_resource: no function '", name,
                 "' is registered in this process");
  std::lock_guard lk(mu_);
  setup_.push_back({-1, name, std::move(arguments)});
}

CoordinatorStats CoordinatorImpl::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

bool CoordinatorImpl::bring_up(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  if (worker.ready) return true;
  const auto started = Clock::now();
  bool warned = false;
  for (;;) {
    {
      std::lock_guard lk(mu_);
      if (stopping_) return false;
    }
    try {
      const std::uint64_t incarnation = worker.channel->connect(std::chrono::seconds(1));
      if (incarnation != worker.incarnation) {
        if (worker.incarnation != 0) {
          log(LogLevel::kWarning,
              detail::str_cat("ClusterCoordinator: ", worker.channel->peer(),
                              " rejoined (a new process); its datasets and resources are "
                              "built again\n"));
          std::lock_guard lk(mu_);
          ++stats_.worker_rejoins;
        }
        worker.incarnation = incarnation;
        worker.table_version = -1;
        worker.setup_done = 0;
      }
      worker.ready = true;
      std::lock_guard lk(mu_);
      down_since_[static_cast<std::size_t>(w)].reset();
      return true;
    } catch (const comm::rpc::RpcError& e) {
      if (!e.peer_lost()) {
        // Reached, but refused (another job's token): a mistake, not a loss.
        record_error("DistributedError", std::string("ClusterCoordinator: ") + e.what());
        std::unique_lock lk(mu_);
        stop_cv_.wait(lk, [&] { return stopping_; });
        return false;
      }
    }
    if (const std::optional<std::string> why = no_worker_left(w)) {
      record_error("UnavailableError", *why);
      std::unique_lock lk(mu_);
      stop_cv_.wait(lk, [&] { return stopping_; });
      return false;
    }
    if (!warned && Clock::now() - started > strategy_->options().connect_timeout) {
      warned = true;
      const auto waited =
          std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started).count();
      log(LogLevel::kWarning,
          detail::str_cat("ClusterCoordinator: ", worker.channel->peer(), " has not answered for ",
                          waited, " s; the other workers take its share until it does\n"));
    }
    std::unique_lock lk(mu_);
    stop_cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return stopping_; });
  }
}

std::optional<std::string> CoordinatorImpl::no_worker_left(int w) {
  std::lock_guard lk(mu_);
  auto& since = down_since_[static_cast<std::size_t>(w)];
  if (!since) since = Clock::now();
  if (error_ || stopping_) return std::nullopt;
  // The last time any worker answered: every one down since then.
  Clock::time_point last_answer = Clock::time_point::min();
  for (const auto& d : down_since_) {
    if (!d) return std::nullopt;  // this one answers
    last_answer = std::max(last_answer, *d);
  }
  const auto limit = strategy_->options().worker_timeout;
  if (Clock::now() - last_answer < limit) return std::nullopt;
  std::string names;
  for (const Worker& worker : workers_)
    names += (names.empty() ? "" : ", ") + worker.channel->peer();
  return "ClusterCoordinator: no worker has answered for " +
         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(limit).count()) + " s (" +
         names +
         "); the job cannot go on without one. Restart the workers within worker_timeout and it "
         "goes on; rerun the job and it resumes from its last backup";
}

void CoordinatorImpl::catch_up(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  std::int64_t version = 0;
  std::vector<comm::rpc::VariableLayout> table = strategy_->layouts(&version);
  if (worker.table_version != version) {
    worker.channel->set_variables(std::move(table));
    worker.table_version = version;
  }
  std::vector<Setup> todo;
  {
    std::lock_guard lk(mu_);
    todo.assign(setup_.begin() + static_cast<std::ptrdiff_t>(worker.setup_done), setup_.end());
  }
  const int n = static_cast<int>(workers_.size());
  for (const Setup& s : todo) {
    std::vector<comm::rpc::WireTensor> args;
    for (const Tensor& t : s.arguments) args.push_back(ps::to_wire(t));
    if (s.iterator_id >= 0) {
      worker.channel->create_dataset({.iterator_id = s.iterator_id,
                                      .function = s.function,
                                      .arguments = std::move(args),
                                      .num_input_pipelines = n,
                                      .input_pipeline_id = w,
                                      .num_replicas_in_sync = 1});
    } else {
      std::vector<comm::rpc::FunctionArgument> fargs;
      for (auto& a : args) fargs.push_back({std::move(a), -1});
      const comm::rpc::FunctionResult r = worker.channel->run_function(
          s.function, std::move(fargs), strategy_->options().function_timeout);
      if (r.failed) {
        if (r.error_kind == "ps_unavailable") throw UnavailableError(r.error_message);
        detail::throw_error_of_class(
            r.error_type, from_worker(worker.channel->peer(), r.error_message, s.function));
      }
    }
    ++worker.setup_done;
  }
}

void CoordinatorImpl::dispatch(int w) {
  Worker& worker = workers_[static_cast<std::size_t>(w)];
  const std::string& name = worker.channel->peer();
  for (;;) {
    if (!bring_up(w)) return;
    Closure c;
    {
      std::unique_lock lk(mu_);
      work_cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      c = std::move(queue_.front());
      queue_.pop_front();
      ++inflight_;
    }
    space_cv_.notify_one();
    bool failed = true;
    try {
      catch_up(w);
      std::vector<comm::rpc::FunctionArgument> args;
      for (const RemoteArgument& a : c.arguments) {
        if (a.iterator() >= 0) {
          args.push_back({{}, a.iterator()});
        } else {
          args.push_back({ps::to_wire(a.tensor()), -1});
        }
      }
      comm::rpc::FunctionResult r = worker.channel->run_function(
          c.function, std::move(args), strategy_->options().function_timeout);
      if (!r.failed) {
        std::vector<Tensor> results;
        for (const auto& t : r.results) results.push_back(ps::from_wire(t, name + ": a result"));
        c.value->finish(std::move(results));
        failed = false;
        std::lock_guard lk(mu_);
        ++stats_.completed;
      } else if (r.error_kind == "ps_unavailable") {
        c.value->fail("UnavailableError", r.error_message);
        record_error("UnavailableError", r.error_message);
      } else {
        const std::string message = from_worker(name, r.error_message, c.function);
        c.value->fail(r.error_type, message);
        record_error(r.error_type, message);
      }
    } catch (const comm::rpc::RpcError& e) {
      if (e.peer_lost()) {
        // The worker is gone (or hangs): the function goes back to the
        // front of the queue for any worker, this one included once back.
        log(LogLevel::kWarning,
            detail::str_cat("ClusterCoordinator: ", name, " was lost (", e.what(),
                            "); its function ", c.function, " is put back\n"));
        worker.ready = false;
        failed = false;
        {
          std::lock_guard lk(mu_);
          if (!stopping_) {
            queue_.push_front(std::move(c));
            ++stats_.rerun;
          } else {
            c.value->fail("CancelledError", "cancelled: the coordinator stopped before it ran");
          }
        }
        work_cv_.notify_one();
      } else {
        c.value->fail("DistributedError", e.what());
        record_error("DistributedError", e.what());
      }
    } catch (const std::exception& e) {
      // Set-up the worker refused (a dataset function that failed there).
      const std::string message = from_worker(name, e.what());
      c.value->fail(detail::error_class_name(e), message);
      record_error(detail::error_class_name(e), message);
    }
    {
      std::lock_guard lk(mu_);
      --inflight_;
      if (failed) ++stats_.failed;
    }
    idle_cv_.notify_all();
  }
}

// ---- Public faces ----

ClusterCoordinator::ClusterCoordinator(const ParameterServerStrategy& strategy)
    : impl_(strategy.ps_impl()->coordinator()) {}

RemoteValue ClusterCoordinator::schedule(const std::string& name,
                                         std::vector<RemoteArgument> arguments) {
  return impl_->schedule(name, std::move(arguments));
}

void ClusterCoordinator::join() { impl_->join(); }
bool ClusterCoordinator::done() { return impl_->done(); }

std::vector<std::vector<Tensor>> ClusterCoordinator::fetch(
    const std::vector<RemoteValue>& values) const {
  std::vector<std::vector<Tensor>> out;
  for (const RemoteValue& v : values) out.push_back(v.fetch());
  return out;
}

PerWorkerDataset ClusterCoordinator::create_per_worker_dataset(const std::string& name,
                                                               std::vector<Tensor> arguments) {
  PerWorkerDataset d;
  d.coordinator_ = impl_;
  d.function_ = name;
  d.arguments_ = std::move(arguments);
  return d;
}

PerWorkerIterator PerWorkerDataset::iter() const {
  PerWorkerIterator it;
  it.id_ = coordinator_->add_per_worker_dataset(function_, arguments_);
  return it;
}

void ClusterCoordinator::create_per_worker_resource(const std::string& name,
                                                    std::vector<Tensor> arguments) {
  impl_->add_per_worker_resource(name, std::move(arguments));
}

CoordinatorStats ClusterCoordinator::stats() const { return impl_->stats(); }

}  // namespace lockstep::distribute
