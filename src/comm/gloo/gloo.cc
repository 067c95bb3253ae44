// The Gloo backend: Gloo's TCP transport and its collectives, its full mesh
// connected through Lockstep's authenticated rendezvous store.
//
// All-reduce up to kMaxHalvingDoublingBytes runs Gloo's halving-doubling
// algorithm (gloo::AllreduceHalvingDoubling) instead of gloo::allreduce:
// measured on this project's 2-core VM (docs/benchmarks.md, issue #8,
// "Gloo's all-reduce algorithm"), the tag-based gloo::allreduce takes 4 ms for 8
// bytes and 15-57 ms for 16-256 KiB between two processes (its per-message
// notifications each wake the peer's event loop and then the caller),
// halving-doubling 0.2-1 ms — 3-96x faster up to 1 MiB, about the same from
// 4 MiB. PyTorch's gloo backend has the tag-based cost (2.5 ms for 1 KiB
// here).
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <csignal>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "comm/serial_communicator.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"

namespace lockstep::comm {
namespace {

// Gloo's Store interface over the rendezvous store.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(StoreClient& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return store_.get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(std::chrono::seconds(60)));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(prefix_ + k);
    store_.wait(full, timeout);
  }

 private:
  StoreClient& store_;
  std::string prefix_;
};

// One bfloat16 on the wire (gradient compression): Gloo moves and reduces
// it as an opaque 2-byte element.
struct Bf16Wire {
  std::uint16_t bits;
};

float widen(Bf16Wire x) { return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16); }

// x = x (op) y, each in float32, rounded back to bfloat16 (ties to even).
template <typename Combine>
void bf16_combine(Bf16Wire* x, const Bf16Wire* y, std::size_t n, Combine combine) {
  for (std::size_t i = 0; i < n; ++i)
    x[i].bits = bfloat16::round(combine(widen(x[i]), widen(y[i])));
}
void bf16_sum(Bf16Wire* x, const Bf16Wire* y, std::size_t n) {
  bf16_combine(x, y, n, [](float a, float b) { return a + b; });
}
void bf16_max(Bf16Wire* x, const Bf16Wire* y, std::size_t n) {
  bf16_combine(x, y, n, [](float a, float b) { return std::max(a, b); });
}
void bf16_min(Bf16Wire* x, const Bf16Wire* y, std::size_t n) {
  bf16_combine(x, y, n, [](float a, float b) { return std::min(a, b); });
}

template <typename T>
gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  if constexpr (std::is_same_v<T, Bf16Wire>) {
    switch (op) {
      case ReduceOp::kMax:
        return [](void* c, const void* a, const void* b, size_t n) {
          std::memcpy(c, a, n * sizeof(Bf16Wire));
          bf16_max(static_cast<Bf16Wire*>(c), static_cast<const Bf16Wire*>(b), n);
        };
      case ReduceOp::kMin:
        return [](void* c, const void* a, const void* b, size_t n) {
          std::memcpy(c, a, n * sizeof(Bf16Wire));
          bf16_min(static_cast<Bf16Wire*>(c), static_cast<const Bf16Wire*>(b), n);
        };
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        break;
    }
    return [](void* c, const void* a, const void* b, size_t n) {
      std::memmove(c, a, n * sizeof(Bf16Wire));
      bf16_sum(static_cast<Bf16Wire*>(c), static_cast<const Bf16Wire*>(b), n);
    };
  } else {
    switch (op) {
      case ReduceOp::kMax:
        return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
      case ReduceOp::kMin:
        return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        break;
    }
    return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
  }
}

template <typename T>
const gloo::ReductionFunction<T>* reduction(ReduceOp op) {
  if constexpr (std::is_same_v<T, Bf16Wire>) {
    static const auto* sum = new gloo::ReductionFunction<Bf16Wire>(gloo::SUM, &bf16_sum);
    static const auto* max = new gloo::ReductionFunction<Bf16Wire>(gloo::MAX, &bf16_max);
    static const auto* min = new gloo::ReductionFunction<Bf16Wire>(gloo::MIN, &bf16_min);
    return op == ReduceOp::kMax ? max : op == ReduceOp::kMin ? min : sum;
  } else {
    switch (op) {
      case ReduceOp::kMax:
        return gloo::ReductionFunction<T>::max;
      case ReduceOp::kMin:
        return gloo::ReductionFunction<T>::min;
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        break;
    }
    return gloo::ReductionFunction<T>::sum;
  }
}

// Halving-doubling instances bind their buffers (and Gloo slots) when they
// are made, so one is kept per (type, count, op), each with a staging buffer
// the data is copied through. They are never dropped while the communicator
// lives: Gloo may still hold a finished instance's last notification in its
// send queue, so destroying it early could leave the event loop a dangling
// buffer. Past kMaxInstances or kMaxStagingBytes a new shape goes to
// gloo::allreduce instead. Every rank makes the same calls in the same
// order, so every rank makes the same choice.
class HalvingDoublingCache {
 public:
  static constexpr std::size_t kMaxInstances = 64;
  static constexpr std::size_t kMaxStagingBytes = std::size_t{64} << 20;

  explicit HalvingDoublingCache(std::shared_ptr<gloo::Context> context)
      : context_(std::move(context)) {}

  // False (and nothing done) when the shape is new and the cache is full.
  template <typename T>
  bool all_reduce(T* data, std::size_t count, ReduceOp op) {
    Entry* e = find_or_make<T>(count, op);
    if (!e) return false;
    std::memcpy(e->staging.data(), data, count * sizeof(T));
    e->algorithm->run();
    std::memcpy(data, e->staging.data(), count * sizeof(T));
    return true;
  }

 private:
  struct Entry {
    std::size_t type_size, count;
    ReduceOp op;
    std::vector<std::uint8_t> staging;
    std::unique_ptr<gloo::Algorithm> algorithm;
  };

  // T is float, double or Bf16Wire, told apart by size.
  template <typename T>
  Entry* find_or_make(std::size_t count, ReduceOp op) {
    if (op == ReduceOp::kMean) op = ReduceOp::kSum;  // the caller divides
    for (Entry& e : entries_) {
      if (e.type_size == sizeof(T) && e.count == count && e.op == op) return &e;
    }
    const std::size_t bytes = count * sizeof(T);
    if (entries_.size() >= kMaxInstances || staging_bytes_ + bytes > kMaxStagingBytes)
      return nullptr;
    Entry& e = entries_.emplace_back(
        Entry{sizeof(T), count, op, std::vector<std::uint8_t>(bytes), nullptr});
    e.algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<T>>(
        context_, std::vector<T*>{reinterpret_cast<T*>(e.staging.data())}, static_cast<int>(count),
        reduction<T>(op));
    staging_bytes_ += bytes;
    return &e;
  }

  std::shared_ptr<gloo::Context> context_;
  std::deque<Entry> entries_;  // stable addresses
  std::size_t staging_bytes_ = 0;
};

class GlooCommunicator final : public detail::SerialCommunicator {
 public:
  GlooCommunicator(StoreClient& store, const std::string& hostname, const std::string& prefix,
                   ProcessGroupOptions options)
      : SerialCommunicator(options, "gloo", std::make_shared<detail::SerialExecutor>()) {
    // Connect on the communication thread, like every other Gloo call.
    run("connecting the Gloo full mesh", [&] {
      gloo::transport::tcp::attr attr;
      attr.hostname = hostname;
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
      context->setTimeout(options.timeout);
      GlooStore gloo_store(store, prefix);
      context->connectFullMesh(gloo_store, device_);
      context_ = std::move(context);
      // Halving-doubling gets its own connections, so its slot-addressed
      // buffers and the tag-addressed collectives never share a socket.
      auto hd_context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
      hd_context->setTimeout(options.timeout);
      GlooStore hd_store(store, prefix + "hd/");
      hd_context->connectFullMesh(hd_store, device_);
      halving_doubling_ = std::make_unique<HalvingDoublingCache>(std::move(hd_context));
    });
  }

  ~GlooCommunicator() override {
    farewell();
    drain();
    if (stuck()) {
      // The communication thread is still inside gloo, waiting on a peer
      // that stopped without closing its connections (aborted when the
      // chief named it lost, before gloo's own deadline): the objects it
      // uses stay alive for it, for the rest of the process (a failed job
      // exits). Destroying them waited in ~Buffer for gloo's deadline.
      // Never destroyed, not even at exit (which would wait the same way).
      static std::mutex kept_mu;
      static auto* kept = new std::vector<std::shared_ptr<void>>;
      std::lock_guard lk(kept_mu);
      kept->push_back(device_);
      kept->push_back(context_);
      kept->push_back(std::shared_ptr<HalvingDoublingCache>(std::move(halving_doubling_)));
    }
  }

 protected:
  template <typename T>
  void all_reduce_t(T* data, std::size_t count, ReduceOp op) {
    if (count == 0 || size() == 1) {
      return;
    }
    if (count * sizeof(T) > kMaxHalvingDoublingBytes ||
        !halving_doubling_->all_reduce(data, count, op)) {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data, count);
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(next_tag());
      opts.setTimeout(options().timeout);
      gloo::allreduce(opts);
    }
    if constexpr (!std::is_same_v<T, Bf16Wire>) {
      if (op == ReduceOp::kMean) {
        const T n = static_cast<T>(size());
        for (std::size_t i = 0; i < count; ++i) data[i] /= n;
      }
    }
  }
  void do_all_reduce_f32(float* data, std::size_t count, ReduceOp op) override {
    all_reduce_t(data, count, op);
  }
  // As float32, with 2-byte elements each reduced in float32 (Bf16Wire):
  // halving-doubling for small buffers, gloo::allreduce for large ones.
  void do_all_reduce_bf16(std::uint16_t* bf16, std::size_t count, ReduceOp op) override {
    all_reduce_t(reinterpret_cast<Bf16Wire*>(bf16), count, op);
  }
  void do_all_reduce_f64(double* data, std::size_t count, ReduceOp op) override {
    all_reduce_t(data, count, op);
  }
  void do_broadcast(void* data, std::size_t bytes, int root) override {
    if (bytes == 0 || size() == 1) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<std::uint8_t*>(data), bytes);
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::broadcast(opts);
  }
  void do_all_gather(const void* data, std::size_t bytes, void* out) override {
    auto* o = static_cast<std::uint8_t*>(out);
    std::memcpy(o + static_cast<std::size_t>(rank()) * bytes, data, bytes);
    if (bytes == 0 || size() == 1) return;
    gloo::AllgatherOptions opts(context_);
    // In place: this rank's part of `out` is its input.
    opts.setOutput(o, bytes * static_cast<std::size_t>(size()));
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::allgather(opts);
  }
  void do_barrier() override {
    if (size() == 1) return;
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::barrier(opts);
  }

 private:
  // Collectives run one at a time; distinct tags keep a late message of one
  // from being taken for the next.
  std::uint32_t next_tag() { return tag_++; }

  // The workers leave together, as MPI_Finalize makes them: a worker that
  // exits while a peer is still reading its part of the last collective can
  // reset the connection under it (seen: 3 workers on 2 cores, the slowest
  // failing its last all-reduce with "Connection closed by peer" after the
  // others had finished). After a barrier every message to every worker has
  // been read. Skipped once the group is broken (a lost worker must not
  // delay the others' exit), and bounded: a worker that lingers in its own
  // code for long is not waited for.
  void farewell() {
    if (size() == 1 || broken()) return;
    stop_diagnosing();
    try {
      run("leaving the group", [this] {
        gloo::BarrierOptions opts(context_);
        opts.setTag(next_tag());
        opts.setTimeout(std::min<std::chrono::milliseconds>(options().timeout, kFarewellTimeout));
        gloo::barrier(opts);
      });
    } catch (const std::exception&) {
      // Leaving anyway: nothing is left to send.
    }
  }
  static constexpr std::chrono::milliseconds kFarewellTimeout{10000};

  // Above this the two algorithms take about the same time (4 MiB: 5-11 ms
  // for both; 64 MiB: 92 vs 94 ms) and gloo::allreduce works in place,
  // without halving-doubling's two staging copies (which cost more than the
  // algorithm gains from 3 MiB up).
  static constexpr std::size_t kMaxHalvingDoublingBytes = std::size_t{2} << 20;

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<HalvingDoublingCache> halving_doubling_;
  std::uint32_t tag_ = 1;
};

}  // namespace

// Gloo writes to its sockets with writev, which raises SIGPIPE when a peer
// has died — killing this process instead of failing the collective (found
// by the kill test: a survivor exited with 141). Ignore SIGPIPE unless the
// program has its own handler.
void ignore_sigpipe_unless_handled() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    ::signal(SIGPIPE, SIG_IGN);
}

std::unique_ptr<Communicator> create_gloo_communicator(StoreClient& store,
                                                       const std::string& hostname,
                                                       const std::string& prefix,
                                                       ProcessGroupOptions options) {
  ignore_sigpipe_unless_handled();
  LOCKSTEP_CHECK(options.size >= 1 && options.rank >= 0 && options.rank < options.size,
                 "create_gloo_communicator: rank ", options.rank, " is not in [0, ", options.size,
                 ")");
  return std::make_unique<GlooCommunicator>(store, hostname, prefix, std::move(options));
}

}  // namespace lockstep::comm
