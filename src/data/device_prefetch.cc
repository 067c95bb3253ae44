// prefetch_to_device: the elements' tensors copied to a device ahead of
// their use. One producer thread reads the input and sends each element
// through a staging area of the device (tensor/device_kernels.h: on a GPU,
// page-locked memory and a copy stream of its own) while the device
// computes; the consumer takes the elements in order, each with one copy per
// tensor queued on the device's stream out of the area into the device's
// pool. buffer_size areas: an area is the producer's again as soon as its
// copies out are queued (the next send waits for them on the device), so
// buffer_size elements are ahead of the one the consumer has.
//
// Iterator state: the input's, and the elements sent but not taken, as host
// tensors (the producer keeps each element's host tensors until it is
// taken); a restored iterator sends those again first.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "internal.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"

namespace lockstep::data {
namespace {

using Input = std::shared_ptr<const DatasetImpl>;

// DevicePrefetchStats, process-wide: every consumer adds to them (the wait
// for the input's end is not counted: no step waits on it).
std::atomic<std::int64_t> g_elements{0}, g_waits{0}, g_wait_ns{0};

// An element taken, after `waited` (zero: it was ready).
void record_element(std::chrono::steady_clock::duration waited) {
  g_elements.fetch_add(1, std::memory_order_relaxed);
  if (waited == std::chrono::steady_clock::duration::zero()) return;
  g_waits.fetch_add(1, std::memory_order_relaxed);
  g_wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count(),
                      std::memory_order_relaxed);
}

// Each tensor starts at a multiple of this in the staging area (the widest
// vector load of a GPU kernel, and cudaMalloc's own alignment).
constexpr std::size_t kAlignment = 256;

struct DevicePrefetchConfig {
  Device* device = nullptr;
  PrefetchToDeviceOptions options{};
};

class DevicePrefetchIterator final : public IteratorImpl {
 public:
  DevicePrefetchIterator(DevicePrefetchConfig config, std::unique_ptr<IteratorImpl> input)
      : IteratorImpl("prefetch_to_device"), config_(config), input_(std::move(input)) {
    const auto areas = static_cast<std::size_t>(config_.options.buffer_size);
    areas_.resize(areas);
    for (std::size_t i = 0; i < areas; ++i) free_.push_back(areas - 1 - i);
  }
  ~DevicePrefetchIterator() override { stop_producer(); }

  std::optional<Element> next() override {
    start_producer();
    std::unique_lock lk(mu_);
    std::chrono::steady_clock::duration waited{};
    if (ready_.empty() && running_) {
      const auto t0 = std::chrono::steady_clock::now();
      consumer_cv_.wait(lk, [&] { return !ready_.empty() || !running_; });
      waited = std::chrono::steady_clock::now() - t0;
    }
    if (ready_.empty()) return std::nullopt;  // the end was taken before
    Entry e = std::move(ready_.front());
    ready_.pop_front();
    if (e.end) {
      ready_.push_front(e);  // the end stays: every later call sees it
      return std::nullopt;
    }
    lk.unlock();
    if (e.error) {
      give_back(e.area);
      std::rethrow_exception(e.error);
    }
    record_element(waited);
    return take(e);
  }

 protected:
  void save_fields(StateWriter& w) override {
    stop_producer();
    std::vector<Element> buffered;
    bool end = input_end_;
    for (const Entry& e : ready_) {
      LOCKSTEP_CHECK(!e.error, "Iterator::save: prefetch_to_device holds an error not yet ",
                     "delivered; read it before saving");
      if (e.end) {
        end = true;
      } else {
        buffered.push_back(e.host);
      }
    }
    for (const Element& e : pending_) buffered.push_back(e);
    w.json()["input_end"] = end;
    w.put_elements("buffer", buffered);
    save_child(w, "input", *input_);
  }
  void restore_fields(const StateReader& r) override {
    stop_producer();
    for (const Entry& e : ready_) give_back(e.area);
    ready_.clear();
    pending_.clear();
    end_queued_ = false;
    input_end_ = r.at("input_end").get<bool>();
    for (Element& e : r.elements("buffer")) pending_.push_back(std::move(e));
    restore_child(r, "input", *input_);
  }

 private:
  // Where one tensor of an element is: bytes in the area, or the tensor
  // itself when it is already on an accelerator.
  struct Part {
    std::size_t offset = 0;
    Shape shape;
    DType dtype = DType::kFloat32;
    Tensor as_is;  // defined: passed through
  };
  struct Entry {
    Element host;  // the element as read (what a saved state keeps)
    std::vector<Part> parts;
    std::size_t area = 0;
    std::exception_ptr error;
    bool end = false;
  };
  static constexpr std::size_t kNoArea = static_cast<std::size_t>(-1);

  void start_producer() {
    std::lock_guard lk(mu_);
    if (running_ || end_queued_) return;
    if (producer_.joinable()) producer_.join();  // it stopped to let a state be saved
    running_ = true;
    stop_ = false;
    producer_ = std::thread([this] { produce(); });
  }

  void stop_producer() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    producer_cv_.notify_all();
    if (producer_.joinable()) producer_.join();
    std::lock_guard lk(mu_);
    running_ = false;
  }

  void give_back(std::size_t area) {
    if (area == kNoArea) return;
    {
      std::lock_guard lk(mu_);
      free_.push_back(area);
    }
    producer_cv_.notify_all();
  }

  void produce() {
    while (true) {
      std::size_t area = 0;
      std::optional<Element> host;
      {
        std::unique_lock lk(mu_);
        producer_cv_.wait(lk, [&] { return stop_ || !free_.empty(); });
        if (stop_) break;
        area = free_.back();
        free_.pop_back();
        if (!pending_.empty()) {
          host = std::move(pending_.front());
          pending_.pop_front();
        }
      }
      Entry e;
      e.area = area;
      try {
        if (!host && !input_end_) host = input_->next();
        if (host) {
          e.parts = send(area, *host);
          e.host = std::move(*host);
        } else {
          input_end_ = true;
          e.end = true;
        }
      } catch (...) {
        e.error = std::current_exception();
      }
      const bool last = e.end || e.error;
      if (last) {
        std::lock_guard lk(mu_);
        free_.push_back(area);
        e.area = kNoArea;
      }
      {
        std::lock_guard lk(mu_);
        // After an error the input is not read again: the iterator ends.
        end_queued_ = last;
        ready_.push_back(std::move(e));
        if (last) running_ = false;
      }
      consumer_cv_.notify_all();
      if (last) return;
    }
    std::lock_guard lk(mu_);
    running_ = false;
  }

  // Producer: the element's host tensors into area `a`, then to the device.
  std::vector<Part> send(std::size_t a, const Element& e) {
    if (!areas_[a]) areas_[a] = config_.device->kernels()->make_staging_area(*config_.device);
    std::vector<Part> parts;
    std::size_t total = 0;
    for (const Tensor& t : e.components()) {
      Part p{.offset = 0, .shape = t.shape(), .dtype = t.dtype(), .as_is = {}};
      if (!t.device().host_accessible()) {
        p.as_is = t;
      } else {
        p.offset = (total + kAlignment - 1) / kAlignment * kAlignment;
        total = p.offset + t.nbytes();
      }
      parts.push_back(std::move(p));
    }
    if (total == 0) return parts;
    unsigned char* host = areas_[a]->host(total);
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const Tensor& t = e.components()[i];
      if (!parts[i].as_is.defined() && t.nbytes() > 0)
        std::memcpy(host + parts[i].offset, t.raw_data(), t.nbytes());
    }
    areas_[a]->send(total);
    return parts;
  }

  // Consumer: the element on the device, its copies queued on the device's
  // stream; the area is the producer's again.
  Element take(const Entry& e) {
    Device& device = *config_.device;
    std::vector<Tensor> out;
    out.reserve(e.parts.size());
    for (const Part& p : e.parts) {
      if (p.as_is.defined()) {
        out.push_back(p.as_is);
        continue;
      }
      Tensor t = Tensor::empty_on(device, p.shape, p.dtype);
      if (t.nbytes() > 0) areas_[e.area]->copy_out(detail::device_pointer(t), p.offset, t.nbytes());
      out.push_back(std::move(t));
    }
    if (areas_[e.area]) areas_[e.area]->copied_out();
    if (config_.options.synchronize) device.kernels()->synchronize(device);
    give_back(e.area);
    return Element(std::move(out), e.host.names());
  }

  DevicePrefetchConfig config_;
  std::unique_ptr<IteratorImpl> input_;
  std::vector<std::unique_ptr<detail::StagingArea>> areas_;

  std::mutex mu_;
  std::condition_variable producer_cv_, consumer_cv_;
  std::vector<std::size_t> free_;  // areas the producer may fill
  std::deque<Entry> ready_;        // sent, in order; an end or an error last
  std::deque<Element> pending_;    // restored, to send before reading on
  std::thread producer_;
  bool running_ = false, stop_ = false, end_queued_ = false;
  bool input_end_ = false;  // the producer's (the consumer's after stopping it)
};

class DevicePrefetchDataset final : public DatasetImpl {
 public:
  DevicePrefetchDataset(Input input, DevicePrefetchConfig config)
      : input_(std::move(input)), config_(config) {}
  std::int64_t cardinality() const override { return input_->cardinality(); }
  std::unique_ptr<IteratorImpl> make_iterator(std::uint64_t key) const override {
    return std::make_unique<DevicePrefetchIterator>(config_, input_->make_iterator(key));
  }
  const Options* attached_options() const override { return input_->attached_options(); }
  std::shared_ptr<const DatasetImpl> with_sharded_files(std::int64_t num_shards,
                                                        std::int64_t index) const override {
    auto sharded = input_->with_sharded_files(num_shards, index);
    if (!sharded) return nullptr;
    return std::make_shared<DevicePrefetchDataset>(std::move(sharded), config_);
  }

 private:
  Input input_;
  DevicePrefetchConfig config_;
};

}  // namespace

DevicePrefetchStats device_prefetch_stats() {
  return {.elements = g_elements.load(std::memory_order_relaxed),
          .waits = g_waits.load(std::memory_order_relaxed),
          .seconds_waited = 1e-9 * static_cast<double>(g_wait_ns.load(std::memory_order_relaxed))};
}

void reset_device_prefetch_stats() {
  g_elements.store(0, std::memory_order_relaxed);
  g_waits.store(0, std::memory_order_relaxed);
  g_wait_ns.store(0, std::memory_order_relaxed);
}

Dataset Dataset::prefetch_to_device(Device& device, PrefetchToDeviceOptions options) const {
  checked("prefetch_to_device");
  LOCKSTEP_CHECK(options.buffer_size >= 1,
                 "Dataset::prefetch_to_device: buffer_size must be >= 1, got ",
                 options.buffer_size);
  if (device.kernels() == nullptr) return prefetch(options.buffer_size);
  return Dataset(std::make_shared<DevicePrefetchDataset>(
      impl_, DevicePrefetchConfig{.device = &device, .options = options}));
}

Dataset Dataset::prefetch_to_device(const std::string& device, std::int64_t buffer_size) const {
  return prefetch_to_device(lockstep::device(device), {.buffer_size = buffer_size});
}

}  // namespace lockstep::data
