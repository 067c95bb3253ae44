// Transformations that work on background threads: prefetch, parallel map,
// and interleave (whose inputs read ahead through prefetch).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "internal.h"
#include "lockstep/core/spin_wait.h"

namespace lockstep::data {
namespace {

using Input = std::shared_ptr<const DatasetImpl>;
using Clock = std::chrono::steady_clock;

std::atomic<std::size_t> g_memory_budget{std::size_t{256} << 20};

int hardware_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

// ---- The asynchronous buffer behind prefetch and parallel map ----
//
// Worker threads pull input elements one at a time (in order, under
// input_mu_), reserve the next slot of the queue, then — outside every lock —
// apply the map function. The consumer takes slots in order (or the first
// ready one when not deterministic). Errors travel in their slot.
//
// Autotuning (buffer_size / num_parallel_calls = kAutotune): the consumer
// measures the time between its calls (what it spends per element) and the
// workers the time one element costs them; the pipeline runs
// ceil(produce / consume) workers and buffers twice that, at least one more
// each time the consumer had to wait — within the memory budget.
struct AsyncConfig {
  const char* op;
  MapFunction fn;         // empty: prefetch (identity)
  int max_workers;        // threads started
  bool autotune_workers;  // else all max_workers work
  std::int64_t capacity;  // kAutotune or a fixed number of buffered elements
  bool deterministic;
};

class AsyncIterator final : public IteratorImpl {
 public:
  AsyncIterator(AsyncConfig config, std::unique_ptr<IteratorImpl> input)
      : IteratorImpl(config.op), config_(std::move(config)), input_(std::move(input)) {
    active_workers_ = config_.autotune_workers ? 1 : config_.max_workers;
    capacity_ = config_.capacity == kAutotune
                    ? std::max<std::int64_t>(2, 2 * active_workers_)
                    : std::max<std::int64_t>(config_.capacity, config_.max_workers);
  }
  ~AsyncIterator() override { stop_workers(); }

  std::optional<Element> next() override {
    start_workers();
    const auto call_start = Clock::now();
    std::unique_lock lk(mu_);
    if (last_return_) note_consumer_time(call_start - *last_return_);
    std::shared_ptr<Slot> slot;
    bool waited = false, spun = false;
    while (true) {
      slot = take_ready_locked();
      if (slot || (queue_.empty() && input_end_)) break;
      waited = true;
      if (!spun) {
        // A condition-variable wake-up costs tens of microseconds here; an
        // element is usually that close, so poll briefly before sleeping.
        spun = true;
        const std::uint64_t seen = ready_events_.load(std::memory_order_acquire);
        lk.unlock();
        const auto until = Clock::now() + kSpinBeforeSleep;
        while (ready_events_.load(std::memory_order_acquire) == seen && Clock::now() < until) {
        }
        lk.lock();
        continue;
      }
      consumer_cv_.wait(lk);
    }
    if (waited) grow_after_stall_locked();
    worker_cv_.notify_all();
    last_return_ = Clock::now();
    if (!slot) return std::nullopt;
    if (slot->error) std::rethrow_exception(slot->error);
    bytes_per_element_ =
        0.9 * bytes_per_element_ + 0.1 * static_cast<double>(slot->value->nbytes());
    return std::move(slot->value);
  }

  // The tuning the pipeline has arrived at (for tests and benchmarks).
  int active_workers() const {
    std::lock_guard lk(mu_);
    return active_workers_;
  }

 protected:
  void save_fields(StateWriter& w) override {
    stop_workers();  // every reserved slot is now filled
    std::vector<Element> buffered;
    for (const auto& s : queue_) {
      LOCKSTEP_CHECK(!s->error, "Iterator::save: ", op(),
                     " holds an error not yet delivered; read it before saving");
      if (s->value) buffered.push_back(*s->value);
    }
    w.json()["input_end"] = input_end_;
    w.put_elements("buffer", buffered);
    save_child(w, "input", *input_);
  }
  void restore_fields(const StateReader& r) override {
    stop_workers();
    queue_.clear();
    input_end_ = r.at("input_end").get<bool>();
    for (auto& e : r.elements("buffer")) {
      auto s = std::make_shared<Slot>();
      s->value = std::move(e);
      s->ready = true;
      queue_.push_back(std::move(s));
    }
    restore_child(r, "input", *input_);
  }

 private:
  struct Slot {
    std::optional<Element> value;
    std::exception_ptr error;
    bool ready = false;
    bool end = false;  // the input ended here
  };

  std::shared_ptr<Slot> take_ready_locked() {
    if (queue_.empty()) return nullptr;
    auto take = [&](std::deque<std::shared_ptr<Slot>>::iterator it) {
      auto s = *it;
      queue_.erase(it);
      return s;
    };
    if (queue_.front()->ready) {
      auto s = take(queue_.begin());
      if (s->end) {
        queue_.clear();
        return nullptr;  // the caller sees queue_.empty() && input_end_
      }
      return s;
    }
    if (!config_.deterministic) {
      for (auto it = queue_.begin(); it != queue_.end(); ++it) {
        if ((*it)->ready && !(*it)->end) return take(it);
      }
    }
    return nullptr;
  }

  void note_consumer_time(Clock::duration d) {
    const double s = std::chrono::duration<double>(d).count();
    consume_seconds_ = consume_seconds_ == 0 ? s : 0.9 * consume_seconds_ + 0.1 * s;
    retune_locked();
  }

  // Bytes the buffer may hold / the size of one element.
  std::int64_t budget_elements_locked() const {
    if (bytes_per_element_ <= 0) return std::numeric_limits<std::int64_t>::max();
    return std::max<std::int64_t>(
        1, static_cast<std::int64_t>(static_cast<double>(autotune_memory_budget()) /
                                     bytes_per_element_));
  }

  void retune_locked() {
    if (config_.autotune_workers && produce_seconds_ > 0 && consume_seconds_ > 0) {
      const int want = static_cast<int>(std::ceil(produce_seconds_ / consume_seconds_));
      active_workers_ = std::clamp(want, 1, config_.max_workers);
    }
    if (config_.capacity == kAutotune) {
      capacity_ = std::max<std::int64_t>(capacity_, 2 * active_workers_);
      capacity_ = std::min(capacity_, budget_elements_locked());
    }
  }

  void grow_after_stall_locked() {
    if (config_.capacity == kAutotune)
      capacity_ = std::min<std::int64_t>(
          capacity_ + 1, std::min<std::int64_t>(kMaxAutotuneCapacity, budget_elements_locked()));
  }

  void start_workers() {
    if (!workers_.empty() || input_end_) return;
    stop_ = false;
    for (int i = 0; i < config_.max_workers; ++i) workers_.emplace_back([this, i] { work(i); });
  }

  void stop_workers() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    worker_cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
  }

  bool may_work_locked(int index) const {
    return !stop_ && !input_end_ && static_cast<std::int64_t>(queue_.size()) < capacity_ &&
           index < active_workers_;
  }

  void work(int index) {
    // Pipeline workers are many small tasks: one intra-op thread each keeps
    // them from oversubscribing the cores that training uses.
    omp_set_num_threads(1);
    while (true) {
      {
        std::unique_lock lk(mu_);
        worker_cv_.wait(lk, [&] { return stop_ || may_work_locked(index); });
        if (stop_) return;
      }
      std::shared_ptr<Slot> slot;
      std::optional<Element> in;
      std::exception_ptr error;
      const auto start = Clock::now();
      {
        std::lock_guard in_lock(input_mu_);
        {
          std::lock_guard lk(mu_);
          if (!may_work_locked(index)) continue;
          slot = std::make_shared<Slot>();
          queue_.push_back(slot);
        }
        try {
          in = input_->next();
        } catch (...) {
          error = std::current_exception();
        }
        if (!in) {
          // The input ended or failed: no worker may pull from it again.
          std::lock_guard lk(mu_);
          input_end_ = true;
        }
      }
      Element out;
      if (in && config_.fn) {
        try {
          out = config_.fn(*in);
        } catch (...) {
          error = std::current_exception();
        }
      } else if (in) {
        out = std::move(*in);
      }
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      {
        std::lock_guard lk(mu_);
        if (error) {
          slot->error = error;
        } else if (!in) {
          slot->end = true;
        } else {
          slot->value = std::move(out);
          produce_seconds_ =
              produce_seconds_ == 0 ? seconds : 0.9 * produce_seconds_ + 0.1 * seconds;
        }
        slot->ready = true;
      }
      ready_events_.fetch_add(1, std::memory_order_release);
      consumer_cv_.notify_one();
      worker_cv_.notify_all();
    }
  }

  static constexpr std::int64_t kMaxAutotuneCapacity = 64;

  AsyncConfig config_;
  std::unique_ptr<IteratorImpl> input_;
  mutable std::mutex mu_;
  std::mutex input_mu_;
  std::condition_variable worker_cv_, consumer_cv_;
  std::deque<std::shared_ptr<Slot>> queue_;
  std::vector<std::thread> workers_;
  bool stop_ = false, input_end_ = false;
  int active_workers_ = 1;
  std::int64_t capacity_ = 2;
  double produce_seconds_ = 0, consume_seconds_ = 0, bytes_per_element_ = 0;
  std::optional<Clock::time_point> last_return_;
  std::atomic<std::uint64_t> ready_events_{0};  // bumped each time a slot becomes ready
};

class AsyncDataset final : public DatasetImpl {
 public:
  AsyncDataset(Input input, AsyncConfig config)
      : input_(std::move(input)), config_(std::move(config)) {}
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override {
    return std::make_unique<AsyncIterator>(config_, input_->make_iterator(key));
  }
  const Input& input() const { return input_; }
  const AsyncConfig& config() const { return config_; }
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    Input sharded = input_->with_sharded_files(n, i);
    return sharded ? std::make_shared<AsyncDataset>(std::move(sharded), config_) : nullptr;
  }

 private:
  Input input_;
  AsyncConfig config_;
};

// ---- interleave ----

class InterleaveDataset final : public DatasetImpl {
 public:
  InterleaveDataset(Input input, std::function<Dataset(const Element&)> fn, InterleaveOptions o)
      : input_(std::move(input)), fn_(std::move(fn)), options_(o) {
    if (options_.cycle_length == kAutotune) options_.cycle_length = hardware_threads();
  }
  std::int64_t cardinality() const override {
    const std::int64_t n = input_->cardinality();
    return n == 0 ? 0 : kUnknownCardinality;
  }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override;
  // The usual file pipeline, list_files -> interleave(read each file): its
  // input is the file list.
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t n,
                                                        std::int64_t i) const override {
    Input sharded = input_->with_sharded_files(n, i);
    return sharded ? std::make_shared<InterleaveDataset>(std::move(sharded), fn_, options_)
                   : nullptr;
  }

  // The dataset for one input element (read ahead when parallel).
  Dataset inner(const Element& e) const {
    Dataset d = fn_(e);
    LOCKSTEP_CHECK(d.defined(), "interleave: the function returned an undefined dataset");
    if (options_.num_parallel_calls == kAutotune || options_.num_parallel_calls > 1)
      d = d.prefetch(std::max<std::int64_t>(2, options_.block_length));
    return d;
  }
  const InterleaveOptions& options() const { return options_; }
  const DatasetImpl& input() const { return *input_; }

 private:
  Input input_;
  std::function<Dataset(const Element&)> fn_;
  InterleaveOptions options_;
};

class InterleaveIterator final : public IteratorImpl {
 public:
  InterleaveIterator(const InterleaveDataset& ds, std::unique_ptr<IteratorImpl> input,
                     std::uint64_t key)
      : IteratorImpl("interleave"),
        ds_(ds),
        input_(std::move(input)),
        key_(key),
        cycle_(static_cast<std::size_t>(ds.options().cycle_length)) {}

  // tf.data's deterministic interleave: visit the cycle's slots in turn,
  // taking block_length elements from each; an empty slot opens the next
  // input element's dataset.
  std::optional<Element> next() override {
    while (!end_of_input_ || open_ > 0) {
      Open& slot = cycle_[cycle_index_];
      if (slot.iterator) {
        if (auto e = slot.iterator->next()) {
          if (++block_index_ == ds_.options().block_length) advance();
          return e;
        }
        slot.close();
        --open_;
        advance();
      } else if (!end_of_input_) {
        auto e = input_->next();
        if (!e) {
          end_of_input_ = true;
          continue;
        }
        open(slot, std::move(*e), inputs_taken_++);
        ++open_;
      } else {
        advance();
      }
    }
    return std::nullopt;
  }

 protected:
  void save_fields(StateWriter& w) override {
    w.json()["key"] = key_;
    w.json()["cycle_index"] = cycle_index_;
    w.json()["block_index"] = block_index_;
    w.json()["end_of_input"] = end_of_input_;
    w.json()["inputs_taken"] = inputs_taken_;
    save_child(w, "input", *input_);
    for (std::size_t i = 0; i < cycle_.size(); ++i) {
      if (!cycle_[i].iterator) continue;
      StateWriter c = w.child("slot" + std::to_string(i));
      c.json()["index"] = cycle_[i].index;
      c.put_element("element", cycle_[i].element);
      save_child(c, "iterator", *cycle_[i].iterator);
    }
  }
  void restore_fields(const StateReader& r) override {
    key_ = r.at("key").get<std::uint64_t>();
    cycle_index_ = r.at("cycle_index").get<std::size_t>();
    block_index_ = r.at("block_index").get<std::int64_t>();
    end_of_input_ = r.at("end_of_input").get<bool>();
    inputs_taken_ = r.at("inputs_taken").get<std::uint64_t>();
    LOCKSTEP_CHECK(cycle_index_ < cycle_.size(), "Iterator::restore: interleave cycle index ",
                   cycle_index_, " is outside a cycle of ", cycle_.size());
    restore_child(r, "input", *input_);
    open_ = 0;
    for (std::size_t i = 0; i < cycle_.size(); ++i) {
      cycle_[i].close();
      const std::string name = "slot" + std::to_string(i);
      if (!r.json().contains(name)) continue;
      const StateReader c = r.child(name);
      open(cycle_[i], c.element("element"), c.at("index").get<std::uint64_t>());
      restore_child(c, "iterator", *cycle_[i].iterator);
      ++open_;
    }
  }

 private:
  struct Open {
    Dataset dataset;  // owns what the iterator refers to
    std::unique_ptr<IteratorImpl> iterator;
    Element element;  // the input element the dataset came from (for restore)
    std::uint64_t index = 0;
    // The iterator first: it refers to the dataset.
    void close() {
      iterator.reset();
      dataset = Dataset();
      element = Element();
    }
  };

  void open(Open& slot, Element e, std::uint64_t index) {
    slot.iterator.reset();
    slot.dataset = ds_.inner(e);
    slot.iterator = slot.dataset.impl()->make_iterator(mix_key(key_, index));
    slot.element = std::move(e);
    slot.index = index;
  }
  void advance() {
    block_index_ = 0;
    cycle_index_ = (cycle_index_ + 1) % cycle_.size();
  }

  const InterleaveDataset& ds_;
  std::unique_ptr<IteratorImpl> input_;
  std::uint64_t key_;
  std::vector<Open> cycle_;
  std::size_t cycle_index_ = 0;
  std::int64_t block_index_ = 0;
  std::int64_t open_ = 0;
  bool end_of_input_ = false;
  std::uint64_t inputs_taken_ = 0;
};

std::unique_ptr<IteratorImpl> InterleaveDataset::make_iterator(std::uint64_t key) const {
  return std::make_unique<InterleaveIterator>(*this, input_->make_iterator(key), key);
}

}  // namespace

void set_autotune_memory_budget(std::size_t bytes) {
  LOCKSTEP_CHECK(bytes > 0, "set_autotune_memory_budget: the budget must be > 0 bytes");
  g_memory_budget = bytes;
}

std::size_t autotune_memory_budget() { return g_memory_budget; }

std::shared_ptr<const DatasetImpl> make_prefetch(Input input, std::int64_t buffer_size) {
  // prefetch right after a parallel map (or a prefetch) deepens that node's
  // buffer instead of adding a thread and a hand-off: same elements, same
  // order, one wake-up less per element.
  if (const auto* async = dynamic_cast<const AsyncDataset*>(input.get())) {
    AsyncConfig config = async->config();
    config.capacity = (config.capacity == kAutotune || buffer_size == kAutotune)
                          ? kAutotune
                          : std::max(config.capacity, buffer_size);
    return std::make_shared<AsyncDataset>(async->input(), std::move(config));
  }
  return std::make_shared<AsyncDataset>(std::move(input), AsyncConfig{.op = "prefetch",
                                                                      .fn = {},
                                                                      .max_workers = 1,
                                                                      .autotune_workers = false,
                                                                      .capacity = buffer_size,
                                                                      .deterministic = true});
}

std::shared_ptr<const DatasetImpl> make_parallel_map(Input input, MapFunction fn,
                                                     MapOptions options) {
  const bool autotune = options.num_parallel_calls == kAutotune;
  return std::make_shared<AsyncDataset>(
      std::move(input),
      AsyncConfig{.op = "parallel_map",
                  .fn = std::move(fn),
                  // Autotuned: at most one worker per core but one, which
                  // the consumer (the training step) keeps to itself.
                  .max_workers = autotune ? std::max(1, hardware_threads() - 1)
                                          : static_cast<int>(options.num_parallel_calls),
                  .autotune_workers = autotune,
                  .capacity = autotune ? kAutotune : options.num_parallel_calls,
                  .deterministic = options.deterministic});
}

std::shared_ptr<const DatasetImpl> make_interleave(Input input,
                                                   std::function<Dataset(const Element&)> fn,
                                                   InterleaveOptions options) {
  return std::make_shared<InterleaveDataset>(std::move(input), std::move(fn), options);
}

}  // namespace lockstep::data
