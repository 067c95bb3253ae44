// NCCL (nccl.h): communicators for the replicas of one process on distinct
// GPUs, made together by ncclCommInitAll, or for the ranks of several
// processes, joined by a unique id with a deadline; sums queued on the
// replicas' streams; abort for the failure of a peer.
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tensor/backend/cuda/gpu_api.h"
#include "tensor/backend/cuda/nccl.h"

namespace lockstep::backend::cuda::nccl {
namespace {

// NCCL's error string and its last message ("Duplicate GPU detected: ...").
[[noreturn]] void fail(const char* what, ncclResult_t r, ncclComm_t comm) {
  std::string message = std::string(what) + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') message += std::string(" (") + last + ")";
  throw std::runtime_error(message);
}

struct Comm {
  std::mutex mutex;  // abort against a thread queueing
  ncclComm_t comm = nullptr;
  bool aborted = false;
};

Comm& as(void* comm) { return *static_cast<Comm*>(comm); }

}  // namespace

std::string version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch since 2.9.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void init_all(int count, const int* gpus, void** comms) {
  check_one_rank_per_gpu("ncclCommInitAll", count, gpus);
  std::vector<ncclComm_t> made(static_cast<std::size_t>(count), nullptr);
  const ncclResult_t r = ncclCommInitAll(made.data(), count, gpus);
  if (r != ncclSuccess) fail("ncclCommInitAll", r, nullptr);
  for (int i = 0; i < count; ++i) {
    auto* c = new Comm();
    c->comm = made[static_cast<std::size_t>(i)];
    comms[i] = c;
  }
}

void unique_id(char* id) {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes);
  ncclUniqueId u{};
  const ncclResult_t r = ncclGetUniqueId(&u);
  if (r != ncclSuccess) fail("ncclGetUniqueId", r, nullptr);
  std::memcpy(id, &u, sizeof u);
}

// Non-blocking communicators (config.blocking = 0): their creation is
// polled against the deadline, and aborted when it passes, instead of
// waiting for ever for a process that will not come.
void init_ranks(int count, const int* gpus, int nranks, int first_rank, const char* id,
                double timeout_s, void** comms) {
  check_one_rank_per_gpu("ncclCommInitRank", count, gpus);
  ncclUniqueId u{};
  std::memcpy(&u, id, sizeof u);
  std::vector<ncclComm_t> made(static_cast<std::size_t>(count), nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  int current = 0;  // the caller's GPU, as runtime.cu's use_gpu remembers it
  cudaGetDevice(&current);
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; r == ncclSuccess && i < count; ++i) {
    cudaSetDevice(gpus[i]);
    r = ncclCommInitRankConfig(&made[static_cast<std::size_t>(i)], nranks, u, first_rank + i,
                               &config);
    if (r == ncclInProgress) r = ncclSuccess;
  }
  const ncclResult_t ended = ncclGroupEnd();
  cudaSetDevice(current);
  if (r == ncclSuccess && ended != ncclInProgress) r = ended;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (std::size_t i = 0; r == ncclSuccess && i < made.size(); ++i) {
    ncclResult_t state = ncclInProgress;
    while (state == ncclInProgress) {
      if (made[i] == nullptr || ncclCommGetAsyncError(made[i], &state) != ncclSuccess) break;
      if (state != ncclInProgress) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (ncclComm_t c : made)
          if (c != nullptr) (void)ncclCommAbort(c);
        throw std::runtime_error("ncclCommInitRank: the other ranks of " + std::to_string(nranks) +
                                 " did not join within " + std::to_string(timeout_s) + " s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    r = state;
  }
  if (r != ncclSuccess) {
    for (ncclComm_t c : made)
      if (c != nullptr) (void)ncclCommAbort(c);
    fail("ncclCommInitRank", r, nullptr);
  }
  for (int i = 0; i < count; ++i) {
    auto* c = new Comm();
    c->comm = made[static_cast<std::size_t>(i)];
    comms[i] = c;
  }
}

void all_reduce(void* comm, void* stream, float* buf, std::int64_t n) {
  Comm& c = as(comm);
  std::lock_guard lock(c.mutex);
  if (c.aborted) throw std::runtime_error("ncclAllReduce: the communicator was aborted");
  ncclResult_t r = ncclAllReduce(buf, buf, static_cast<std::size_t>(n), ncclFloat32, ncclSum,
                                 c.comm, static_cast<cudaStream_t>(stream));
  // A non-blocking communicator (init_ranks) may still be queueing it.
  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(c.comm, &r) != ncclSuccess) break;
    if (r == ncclInProgress) std::this_thread::yield();
  }
  if (r != ncclSuccess) fail("ncclAllReduce", r, c.comm);
}

void abort(void* comm) {
  Comm& c = as(comm);
  std::lock_guard lock(c.mutex);
  if (c.aborted) return;
  c.aborted = true;
  (void)ncclCommAbort(c.comm);  // frees it, whatever it reports
  c.comm = nullptr;
}

void destroy(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  {
    std::lock_guard lock(c->mutex);
    if (!c->aborted && c->comm != nullptr) (void)ncclCommDestroy(c->comm);
  }
  delete c;
}

}  // namespace lockstep::backend::cuda::nccl
