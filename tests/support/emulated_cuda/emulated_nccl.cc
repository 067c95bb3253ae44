// The emulated adapter's NCCL (emulated_nccl.h).
#include "emulated_nccl.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensor/backend/cuda/nccl.h"

namespace lockstep::backend::cuda::emulated {
namespace {

constexpr std::chrono::seconds kPatience{60};

struct Clique {
  explicit Clique(int n) : size(n), buffers(static_cast<std::size_t>(n)) {}
  const int size;
  std::mutex mutex;
  std::condition_variable met;
  std::vector<float*> buffers;      // this round's, by rank
  std::vector<std::int64_t> sizes;  // this round's counts, by rank
  int arrived = 0;
  std::uint64_t round = 0;  // collectives completed
  bool aborted = false;
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
};

Comm& as(void* comm) { return *static_cast<Comm*>(comm); }

}  // namespace

void nccl_init_all(int count, const int* gpus, void** comms) {
  if (count < 1) throw std::runtime_error("ncclCommInitAll: no ranks");
  nccl::check_one_rank_per_gpu("ncclCommInitAll", count, gpus);
  if (std::getenv("LOCKSTEP_EMULATED_NCCL_INIT_FAIL") != nullptr)  // NOLINT(concurrency-mt-unsafe)
    throw std::runtime_error(
        "ncclCommInitAll: a planted failure (LOCKSTEP_EMULATED_NCCL_INIT_FAIL)");
  auto clique = std::make_shared<Clique>(count);
  clique->sizes.assign(static_cast<std::size_t>(count), 0);
  for (int i = 0; i < count; ++i) comms[i] = new Comm{clique, i};
}

void nccl_check(void* comm) {
  // A planted failure, for the tests of what a failing rank leaves behind.
  const char* fail =
      std::getenv("LOCKSTEP_EMULATED_NCCL_FAIL_RANK");  // NOLINT(concurrency-mt-unsafe)
  if (fail != nullptr && std::atoi(fail) == as(comm).rank)
    throw std::runtime_error("ncclAllReduce: a planted failure of rank " + std::string(fail) +
                             " (LOCKSTEP_EMULATED_NCCL_FAIL_RANK)");
  Clique& q = *as(comm).clique;
  std::lock_guard lock(q.mutex);
  if (q.aborted) throw std::runtime_error("ncclAllReduce: the communicator was aborted");
}

void nccl_all_reduce(void* comm, float* buf, std::int64_t n) {
  const std::shared_ptr<Clique> clique = as(comm).clique;  // the comm may be destroyed meanwhile
  const int rank = as(comm).rank;
  Clique& q = *clique;
  std::unique_lock lock(q.mutex);
  if (q.aborted) throw std::runtime_error("ncclAllReduce: the communicator was aborted");
  const std::uint64_t round = q.round;
  q.buffers[static_cast<std::size_t>(rank)] = buf;
  q.sizes[static_cast<std::size_t>(rank)] = n;
  if (++q.arrived < q.size) {
    // A GPU would wait for ever; the emulation gives up after kPatience, so
    // that a test of a missing abort fails instead of hanging.
    if (!q.met.wait_for(lock, kPatience, [&] { return q.round != round || q.aborted; }))
      throw std::runtime_error("ncclAllReduce: rank " + std::to_string(rank) + " waited " +
                               std::to_string(kPatience.count()) +
                               " s for its peers and nothing aborted it (a GPU would hang here)");
    if (q.round == round)
      throw std::runtime_error("ncclAllReduce: aborted while rank " + std::to_string(rank) +
                               " waited for its peers");
    return;
  }
  for (int r = 0; r < q.size; ++r) {
    if (q.sizes[static_cast<std::size_t>(r)] != n) {
      q.aborted = true;  // as a real mismatch would leave NCCL: unusable
      q.met.notify_all();
      throw std::runtime_error("ncclAllReduce: rank " + std::to_string(r) + " reduces " +
                               std::to_string(q.sizes[static_cast<std::size_t>(r)]) +
                               " floats and rank " + std::to_string(rank) + " " +
                               std::to_string(n));
    }
  }
  // Every rank's buffer is still (its thread waits): sum in rank order.
  std::vector<float> sum(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    float acc = q.buffers[0][i];
    for (int r = 1; r < q.size; ++r) acc += q.buffers[static_cast<std::size_t>(r)][i];
    sum[static_cast<std::size_t>(i)] = acc;
  }
  for (float* b : q.buffers) {
    for (std::int64_t i = 0; i < n; ++i) b[i] = sum[static_cast<std::size_t>(i)];
  }
  q.arrived = 0;
  ++q.round;
  q.met.notify_all();
}

void nccl_abort(void* comm) {
  Clique& q = *as(comm).clique;
  std::lock_guard lock(q.mutex);
  q.aborted = true;
  q.met.notify_all();
}

void nccl_destroy(void* comm) { delete static_cast<Comm*>(comm); }

}  // namespace lockstep::backend::cuda::emulated
