// The in-process backend: replica threads of one process exchange data
// through shared memory. Summation is always in rank order (rank 0's value,
// plus rank 1's, ...), so every rank ends with bitwise-identical results and
// both algorithms agree exactly.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/core/error.h"
#include "lockstep/core/simd.h"
#include "lockstep/core/spin_wait.h"

namespace lockstep::comm {

namespace {

// A collective that completed when it was posted.
class CompletedWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

}  // namespace

WorkHandle Communicator::all_reduce_async(float* data, std::size_t count, ReduceOp op) {
  all_reduce(data, count, op);
  return std::make_unique<CompletedWork>();
}

WorkHandle Communicator::all_reduce_bf16_async(float*, std::size_t, ReduceOp) {
  lockstep::detail::throw_error<ValueError>(
      "all_reduce_bf16_async: this communicator does not compress (only the Gloo and MPI "
      "backends between worker processes do)");
}

namespace {

using Clock = std::chrono::steady_clock;

// Elements reduced per tile: the partial sums stay in L1.
constexpr std::size_t kTile = 2048;
// Asynchronous collectives in flight at once (per group). A rank that runs
// this far ahead of another waits for the oldest to be released.
constexpr std::uint64_t kSlots = 64;

template <typename T>
LOCKSTEP_VECTOR_CLONES void combine(T* __restrict acc, const T* __restrict x, std::size_t n,
                                    ReduceOp op) {
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

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// One all-reduce in flight. Rank r owns a chunk of the buffer: once every
// rank has posted, the owner sums that chunk over all ranks' buffers in rank
// order and writes the sum into every rank's buffer. No rank reads another's
// result, so there is no all-gather phase and no completion barrier: a rank's
// buffer is done when every chunk is, and the slot is recycled when every
// rank has seen that.
struct Slot {
  explicit Slot(int n, std::uint64_t first_seq)
      : seq(first_seq),
        buffers(static_cast<std::size_t>(n), nullptr),
        counts(static_cast<std::size_t>(n), 0),
        ops(static_cast<std::size_t>(n), ReduceOp::kSum),
        doubles(static_cast<std::size_t>(n), 0),
        posted_by(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(n))),
        chunk_done(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(n))) {}

  std::atomic<std::uint64_t> seq;  // which collective this slot holds now
  std::atomic<int> posted{0};
  std::atomic<int> reduced{0};
  std::atomic<int> released{0};
  // What each rank posted (checked against rank 0's before any reading).
  std::vector<void*> buffers;
  std::vector<std::size_t> counts;
  std::vector<ReduceOp> ops;
  std::vector<char> doubles;
  // Who has posted, whose chunk is done: only for naming the missing ranks.
  std::unique_ptr<std::atomic<bool>[]> posted_by;
  std::unique_ptr<std::atomic<bool>[]> chunk_done;
};

class Group;

class RankComm final : public Communicator {
 public:
  RankComm(Group* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce(float* data, std::size_t count, ReduceOp op) override;
  void all_reduce(double* data, std::size_t count, ReduceOp op) override;
  using Communicator::all_reduce;
  WorkHandle all_reduce_async(float* data, std::size_t count, ReduceOp op) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void all_gather(const void* data, std::size_t bytes, void* out) override;
  void barrier() override;
  void abort(const std::string& reason) override;

  // The asynchronous engine, driven by this rank's own calls.
  std::uint64_t post(void* data, std::size_t count, ReduceOp op, bool is_double);
  // Reduces this rank's chunk of every posted collective whose buffers are
  // all posted; with `until`, blocks until collectives up to `until` are done.
  void progress(std::optional<std::uint64_t> until);
  bool is_complete(std::uint64_t seq);
  void wait(std::uint64_t seq);
  void release(std::uint64_t seq);
  std::uint64_t posted_count() const { return next_seq_; }

 private:
  template <typename T>
  void reduce_chunk(Slot& slot);

  Group* group_;
  int rank_;
  std::uint64_t next_seq_ = 0;     // collectives this rank has posted
  std::uint64_t next_reduce_ = 0;  // the first one whose chunk this rank still owes
};

class InProcessWork final : public Work {
 public:
  InProcessWork(RankComm* comm, std::uint64_t seq) : comm_(comm), seq_(seq) {}
  ~InProcessWork() override {
    // Every rank must see every collective through, or the others would
    // wait for this rank's chunk forever; after an abort there is nothing
    // left to finish.
    if (!done_) {
      try {
        wait();
      } catch (const std::exception&) {
      }
    }
  }
  bool test() override {
    if (done_) return true;
    comm_->progress(std::nullopt);
    if (!comm_->is_complete(seq_)) return false;
    finish();
    return true;
  }
  void wait() override {
    if (done_) return;
    comm_->wait(seq_);
    finish();
  }

 private:
  void finish() {
    done_ = true;
    comm_->release(seq_);
  }
  RankComm* comm_;
  std::uint64_t seq_;
  bool done_ = false;
};

class Group final : public InProcessGroup {
 public:
  Group(int size, Options options)
      : options_(options),
        arrived_flags_(static_cast<std::size_t>(size), 0),
        buffers_(static_cast<std::size_t>(size), nullptr) {
    for (int r = 0; r < size; ++r) ranks_.push_back(std::make_unique<RankComm>(this, r));
    for (std::uint64_t i = 0; i < kSlots; ++i) slots_.push_back(std::make_unique<Slot>(size, i));
  }
  int size() const override { return static_cast<int>(ranks_.size()); }
  Communicator& communicator(int rank) override {
    LOCKSTEP_CHECK_AS(IndexError, rank >= 0 && rank < size(), "InProcessGroup: rank ", rank,
                      " out of range for a group of ", size());
    return *ranks_[static_cast<std::size_t>(rank)];
  }
  const Options& options() const { return options_; }
  Slot& slot(std::uint64_t seq) { return *slots_[seq % kSlots]; }

  // Waits until every rank has arrived; the last one releases the others.
  // A rank first finishes its share of the asynchronous collectives it has
  // posted: the others may be waiting for it there before they arrive here.
  void wait_all(int rank, const char* what) {
    ranks_[static_cast<std::size_t>(rank)]->progress(
        ranks_[static_cast<std::size_t>(rank)]->posted_count());
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
        std::vector<int> missing;
        for (int r = 0; r < size(); ++r) {
          if (!arrived_flags_[static_cast<std::size_t>(r)]) missing.push_back(r);
        }
        lk.unlock();
        fail_timeout(rank, what, missing);
      }
    }
  }

  // Waits for `ready()` (an atomic condition another rank makes true), first
  // spinning, then sleeping until a rank signals progress. `missing()` names
  // the ranks still owed when the deadline passes.
  template <typename Ready, typename Missing>
  void wait_for(int rank, const char* what, Ready&& ready, Missing&& missing) {
    if (ready()) return;
    const auto spin_until = Clock::now() + kSpinBeforeSleep;
    while (Clock::now() < spin_until) {
      if (ready()) return;
      throw_if_aborted(rank);
    }
    const auto deadline = Clock::now() + options_.timeout;
    std::unique_lock lk(mu_);
    sleepers_.fetch_add(1);
    struct Leave {
      std::atomic<int>& n;
      ~Leave() { n.fetch_sub(1); }
    } leave{sleepers_};
    while (!ready()) {
      throw_if_aborted(rank);
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !ready()) {
        lk.unlock();
        fail_timeout(rank, what, missing());
      }
    }
  }

  // Wakes ranks sleeping in wait_for after this rank changed shared state.
  void signal() {
    if (sleepers_.load() == 0) return;
    { std::lock_guard lk(mu_); }
    cv_.notify_all();
  }

  [[noreturn]] void fail_timeout(int rank, const char* what, const std::vector<int>& missing) {
    const std::string msg =
        "rank " + std::to_string(rank) + " waited " + std::to_string(options_.timeout.count()) +
        " ms in " + what +
        (missing.empty() ? std::string(" for a rank that never finished it")
                         : " for rank(s) " + rank_list(missing) + " that never arrived");
    abort(msg);
    throw TimeoutError(msg);
  }

  void abort(const std::string& reason) {
    {
      std::lock_guard lk(mu_);
      if (!aborted_.load()) {
        abort_reason_ = reason;
        aborted_.store(true, std::memory_order_release);
      }
    }
    cv_.notify_all();
  }

  // abort_reason_ is written once, before aborted_ is set, and never again:
  // reading it after seeing the flag needs no lock.
  void throw_if_aborted(int rank) const {
    if (aborted_.load(std::memory_order_acquire))
      throw DistributedError("collective on rank " + std::to_string(rank) +
                             " abandoned: " + abort_reason_);
  }

  std::vector<void*>& buffers() { return buffers_; }

 private:
  Options options_;
  std::vector<std::unique_ptr<RankComm>> ranks_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<std::uint64_t> generation_{0};
  int arrived_ = 0;
  std::vector<char> arrived_flags_;
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  std::vector<void*> buffers_;  // each rank's buffer for the blocking collective in flight
};

int RankComm::size() const { return group_->size(); }

std::uint64_t RankComm::post(void* data, std::size_t count, ReduceOp op, bool is_double) {
  const std::uint64_t seq = next_seq_++;
  Slot& slot = group_->slot(seq);
  if (slot.seq.load(std::memory_order_acquire) != seq) {
    // Ring full: finish this rank's part of the older collectives so the
    // others can release the one that holds this slot.
    progress(seq);
    group_->wait_for(
        rank_, "all_reduce_async (a free slot: the collective posted 64 before this one)",
        [&] { return slot.seq.load(std::memory_order_acquire) == seq; },
        [&] { return std::vector<int>{}; });  // some rank has not finished it
  }
  const auto r = static_cast<std::size_t>(rank_);
  slot.buffers[r] = data;
  slot.counts[r] = count;
  slot.ops[r] = op;
  slot.doubles[r] = is_double;
  slot.posted_by[r].store(true, std::memory_order_relaxed);
  slot.posted.fetch_add(1);  // releases this rank's buffer contents to the others
  group_->signal();
  progress(std::nullopt);
  return seq;
}

template <typename T>
void RankComm::reduce_chunk(Slot& slot) {
  const int n = group_->size();
  const std::size_t count = slot.counts[0];
  std::size_t begin = 0, end = 0;
  if (group_->options().algorithm == Algorithm::kReductionToOneDevice) {
    if (rank_ == 0) end = count;
  } else {
    begin = count * static_cast<std::size_t>(rank_) / static_cast<std::size_t>(n);
    end = count * static_cast<std::size_t>(rank_ + 1) / static_cast<std::size_t>(n);
  }
  const ReduceOp op = slot.ops[0];
  auto buf = [&](int r) { return static_cast<T*>(slot.buffers[static_cast<std::size_t>(r)]); };
  T tile[kTile];
  for (std::size_t b = begin; b < end; b += kTile) {
    const std::size_t len = std::min(kTile, end - b);
    std::memcpy(tile, buf(0) + b, len * sizeof(T));
    for (int r = 1; r < n; ++r) combine(tile, buf(r) + b, len, op);
    if (op == ReduceOp::kMean) {
      for (std::size_t i = 0; i < len; ++i) tile[i] /= static_cast<T>(n);
    }
    for (int r = 0; r < n; ++r) std::memcpy(buf(r) + b, tile, len * sizeof(T));
  }
}

void RankComm::progress(std::optional<std::uint64_t> until) {
  const int n = group_->size();
  while (next_reduce_ < next_seq_ && (!until || next_reduce_ <= *until)) {
    Slot& slot = group_->slot(next_reduce_);
    auto all_posted = [&] { return slot.posted.load(std::memory_order_acquire) == n; };
    if (!all_posted()) {
      if (!until) return;
      group_->wait_for(rank_, "all_reduce", all_posted, [&] {
        std::vector<int> missing;
        for (int r = 0; r < n; ++r) {
          if (!slot.posted_by[static_cast<std::size_t>(r)].load()) missing.push_back(r);
        }
        return missing;
      });
    }
    // Every rank checks every rank's call before touching another rank's
    // buffer, so all of them fail together and none reads past a shorter one.
    for (int r = 1; r < n; ++r) {
      const auto i = static_cast<std::size_t>(r);
      std::string problem;
      if (slot.counts[i] != slot.counts[0]) {
        problem = "rank " + std::to_string(r) + " has " + std::to_string(slot.counts[i]) +
                  " elements but rank 0 has " + std::to_string(slot.counts[0]);
      } else if (slot.ops[i] != slot.ops[0] || slot.doubles[i] != slot.doubles[0]) {
        problem = "rank " + std::to_string(r) + " asked for another operation or type than rank 0";
      }
      if (!problem.empty()) {
        const std::string msg = "all_reduce: " + problem;
        group_->abort(msg);
        throw DistributedError(msg);
      }
    }
    if (slot.doubles[0]) {
      reduce_chunk<double>(slot);
    } else {
      reduce_chunk<float>(slot);
    }
    slot.chunk_done[static_cast<std::size_t>(rank_)].store(true, std::memory_order_relaxed);
    slot.reduced.fetch_add(1);  // releases the written sums
    group_->signal();
    ++next_reduce_;
  }
}

bool RankComm::is_complete(std::uint64_t seq) {
  return next_reduce_ > seq &&
         group_->slot(seq).reduced.load(std::memory_order_acquire) == group_->size();
}

void RankComm::wait(std::uint64_t seq) {
  progress(seq);
  Slot& slot = group_->slot(seq);
  const int n = group_->size();
  group_->wait_for(
      rank_, "all_reduce", [&] { return slot.reduced.load(std::memory_order_acquire) == n; },
      [&] {
        std::vector<int> missing;
        for (int r = 0; r < n; ++r) {
          if (!slot.chunk_done[static_cast<std::size_t>(r)].load()) missing.push_back(r);
        }
        return missing;
      });
}

void RankComm::release(std::uint64_t seq) {
  Slot& slot = group_->slot(seq);
  const int n = group_->size();
  if (slot.released.fetch_add(1) + 1 < n) return;
  // The last rank to see the collective through recycles the slot.
  slot.posted.store(0);
  slot.reduced.store(0);
  slot.released.store(0);
  for (int r = 0; r < n; ++r) {
    slot.posted_by[static_cast<std::size_t>(r)].store(false);
    slot.chunk_done[static_cast<std::size_t>(r)].store(false);
  }
  slot.seq.store(seq + kSlots, std::memory_order_release);
  group_->signal();
}

WorkHandle RankComm::all_reduce_async(float* data, std::size_t count, ReduceOp op) {
  if (size() == 1) return Communicator::all_reduce_async(data, count, op);
  return std::make_unique<InProcessWork>(this, post(data, count, op, false));
}

void RankComm::all_reduce(float* data, std::size_t count, ReduceOp op) {
  if (size() == 1) return;
  InProcessWork(this, post(data, count, op, false)).wait();
}

void RankComm::all_reduce(double* data, std::size_t count, ReduceOp op) {
  if (size() == 1) return;
  InProcessWork(this, post(data, count, op, true)).wait();
}

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
