// The in-process backend: replica threads of one process exchange data
// through shared memory. Summation is always in rank order (rank 0's value,
// plus rank 1's, ...), so every rank ends with bitwise-identical results and
// both algorithms agree exactly.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <sstream>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/core/error.h"

namespace lockstep::comm {

void Communicator::all_reduce(const Tensor& t, ReduceOp op) {
  check_defined(t, "all_reduce", "tensor");
  if (t.dtype() == DType::kFloat32) {
    all_reduce(static_cast<float*>(t.raw_data()), static_cast<std::size_t>(t.numel()), op);
  } else {
    detail::throw_error<ValueError>("all_reduce: expected a float32 tensor, got ", t.dtype());
  }
}

namespace {

using Clock = std::chrono::steady_clock;

// Elements reduced per tile: the partial sums stay in L1.
constexpr std::size_t kTile = 2048;

template <typename T>
void combine(T* acc, const T* x, std::size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      for (std::size_t i = 0; i < n; ++i) acc[i] += x[i];
      break;
    case ReduceOp::kMax:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
      break;
    case ReduceOp::kMin:
      for (std::size_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], x[i]);
      break;
  }
}

class Group;

class RankComm final : public Communicator {
 public:
  RankComm(Group* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce(float* data, std::size_t count, ReduceOp op) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op) override;
  using Communicator::all_reduce;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void all_gather(const void* data, std::size_t bytes, void* out) override;
  void barrier() override;
  void abort(const std::string& reason) override;

 private:
  template <typename T>
  void reduce(T* data, std::size_t count, ReduceOp op);

  Group* group_;
  int rank_;
};

class Group final : public InProcessGroup {
 public:
  Group(int size, Options options)
      : options_(options),
        arrived_flags_(static_cast<std::size_t>(size), 0),
        buffers_(static_cast<std::size_t>(size), nullptr),
        counts_(static_cast<std::size_t>(size), 0) {
    for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<RankComm>(this, r));
  }
  int size() const override { return static_cast<int>(ranks_.size()); }
  Communicator& communicator(int rank) override {
    LOCKSTEP_CHECK_AS(IndexError, rank >= 0 && rank < size(), "InProcessGroup: rank ", rank,
                      " out of range for a group of ", size());
    return *ranks_[static_cast<std::size_t>(rank)];
  }
  const Options& options() const { return options_; }

  // Waits until every rank has arrived; the last one releases the others.
  void wait_all(int rank, const char* what) {
    const auto deadline = Clock::now() + options_.timeout;
    std::unique_lock lk(mu_);
    throw_if_aborted(rank);
    const std::uint64_t gen = generation_.load(std::memory_order_acquire);
    arrived_flags_[static_cast<std::size_t>(rank)] = 1;
    if (++arrived_ == size()) {
      arrived_ = 0;
      std::fill(arrived_flags_.begin(), arrived_flags_.end(), 0);
      generation_.fetch_add(1, std::memory_order_acq_rel);
      lk.unlock();
      cv_.notify_all();
      return;
    }
    // The others are usually microseconds away: poll before sleeping.
    lk.unlock();
    const auto spin_until = Clock::now() + std::chrono::microseconds(30);
    while (Clock::now() < spin_until) {
      if (generation_.load(std::memory_order_acquire) != gen) return;
      if (aborted_.load(std::memory_order_acquire)) break;
    }
    lk.lock();
    while (generation_.load(std::memory_order_acquire) == gen) {
      throw_if_aborted(rank);
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout &&
          generation_.load(std::memory_order_acquire) == gen) {
        std::ostringstream missing;
        int n = 0;
        for (int r = 0; r < size(); ++r) {
          if (!arrived_flags_[static_cast<std::size_t>(r)]) missing << (n++ ? ", " : "") << r;
        }
        const std::string msg = "rank " + std::to_string(rank) + " waited " +
                                std::to_string(options_.timeout.count()) + " ms in " + what +
                                " for rank(s) " + missing.str() + " that never arrived";
        abort_locked(msg);
        lk.unlock();
        cv_.notify_all();
        throw TimeoutError(msg);
      }
    }
  }

  void abort(const std::string& reason) {
    {
      std::lock_guard lk(mu_);
      abort_locked(reason);
    }
    cv_.notify_all();
  }

  std::vector<void*>& buffers() { return buffers_; }
  std::vector<std::size_t>& counts() { return counts_; }

 private:
  void abort_locked(const std::string& reason) {
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }
  void throw_if_aborted(int rank) const {
    if (aborted_.load(std::memory_order_acquire))
      throw DistributedError("collective on rank " + std::to_string(rank) +
                             " abandoned: " + abort_reason_);
  }

  Options options_;
  std::vector<std::unique_ptr<RankComm>> ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<std::uint64_t> generation_{0};
  int arrived_ = 0;
  std::vector<char> arrived_flags_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  std::vector<void*> buffers_;       // each rank's buffer for the collective in flight
  std::vector<std::size_t> counts_;  // and its length, checked against rank 0's
};

int RankComm::size() const { return group_->size(); }

template <typename T>
void RankComm::reduce(T* data, std::size_t count, ReduceOp op) {
  const int n = group_->size();
  if (n == 1) return;
  auto& bufs = group_->buffers();
  bufs[static_cast<std::size_t>(rank_)] = data;
  group_->counts()[static_cast<std::size_t>(rank_)] = count;
  group_->wait_all(rank_, "all_reduce");
  // Every rank checks every length before touching another rank's buffer,
  // so all of them fail together and none reads past a shorter buffer.
  const std::size_t expected = group_->counts()[0];
  for (int r = 1; r < n; ++r) {
    const std::size_t c = group_->counts()[static_cast<std::size_t>(r)];
    if (c != expected)
      throw DistributedError("all_reduce: rank " + std::to_string(r) + " has " + std::to_string(c) +
                             " elements but rank 0 has " + std::to_string(expected));
  }
  auto buf = [&](int r) { return static_cast<T*>(bufs[static_cast<std::size_t>(r)]); };
  // Reduces [begin, end) of every rank's buffer, in rank order, into `dst`.
  auto reduce_range = [&](std::size_t begin, std::size_t end, T* dst) {
    T tile[kTile];
    for (std::size_t b = begin; b < end; b += kTile) {
      const std::size_t len = std::min(kTile, end - b);
      std::memcpy(tile, buf(0) + b, len * sizeof(T));
      for (int r = 1; r < n; ++r) combine(tile, buf(r) + b, len, op);
      if (op == ReduceOp::kMean) {
        for (std::size_t i = 0; i < len; ++i) tile[i] /= static_cast<T>(n);
      }
      std::memcpy(dst + b, tile, len * sizeof(T));
    }
  };
  if (group_->options().algorithm == Algorithm::kReductionToOneDevice) {
    if (rank_ == 0) reduce_range(0, count, data);
    group_->wait_all(rank_, "all_reduce (reduction to one device)");
    if (rank_ != 0 && count > 0) std::memcpy(data, buf(0), count * sizeof(T));
  } else {
    // Reduce-scatter: this rank reduces its chunk into its own buffer (no
    // other rank reads that chunk of this buffer in this phase) ...
    auto chunk = [&](int r) {
      return std::pair{count * static_cast<std::size_t>(r) / static_cast<std::size_t>(n),
                       count * static_cast<std::size_t>(r + 1) / static_cast<std::size_t>(n)};
    };
    const auto [b, e] = chunk(rank_);
    reduce_range(b, e, data);
    group_->wait_all(rank_, "all_reduce (reduce-scatter)");
    // ... all-gather: copy every other rank's reduced chunk.
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      const auto [rb, re] = chunk(r);
      if (re > rb) std::memcpy(data + rb, buf(r) + rb, (re - rb) * sizeof(T));
    }
  }
  // Nobody may reuse its buffer while another rank still reads it.
  group_->wait_all(rank_, "all_reduce (completion)");
}

void RankComm::all_reduce(float* data, std::size_t count, ReduceOp op) { reduce(data, count, op); }
void RankComm::all_reduce(double* data, std::size_t count, ReduceOp op) { reduce(data, count, op); }

void RankComm::broadcast(void* data, std::size_t bytes, int root) {
  LOCKSTEP_CHECK_AS(IndexError, root >= 0 && root < size(), "broadcast: root ", root,
                    " out of range for a group of ", size());
  if (size() == 1) return;
  group_->buffers()[static_cast<std::size_t>(rank_)] = data;
  group_->wait_all(rank_, "broadcast");
  if (rank_ != root) std::memcpy(data, group_->buffers()[static_cast<std::size_t>(root)], bytes);
  group_->wait_all(rank_, "broadcast (completion)");
}

void RankComm::all_gather(const void* data, std::size_t bytes, void* out) {
  group_->buffers()[static_cast<std::size_t>(rank_)] = const_cast<void*>(data);
  group_->wait_all(rank_, "all_gather");
  for (int r = 0; r < size(); ++r)
    std::memcpy(static_cast<char*>(out) + static_cast<std::size_t>(r) * bytes,
                group_->buffers()[static_cast<std::size_t>(r)], bytes);
  group_->wait_all(rank_, "all_gather (completion)");
}

void RankComm::barrier() { group_->wait_all(rank_, "barrier"); }

void RankComm::abort(const std::string& reason) { group_->abort(reason); }

}  // namespace

std::shared_ptr<InProcessGroup> InProcessGroup::create(int size, Options options) {
  LOCKSTEP_CHECK(size >= 1, "InProcessGroup: size must be >= 1, got ", size);
  LOCKSTEP_CHECK(options.timeout.count() > 0, "InProcessGroup: the timeout must be positive");
  return std::make_shared<Group>(size, options);
}

}  // namespace lockstep::comm
