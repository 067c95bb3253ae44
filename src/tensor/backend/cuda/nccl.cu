// NCCL (nccl.h): communicators for the replicas of one process on distinct
// GPUs, made together by ncclCommInitAll; sums queued on the replicas'
// streams; abort for the failure of a peer.
#include <nccl.h>

#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

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

void all_reduce(void* comm, void* stream, float* buf, std::int64_t n) {
  Comm& c = as(comm);
  std::lock_guard lock(c.mutex);
  if (c.aborted) throw std::runtime_error("ncclAllReduce: the communicator was aborted");
  const ncclResult_t r = ncclAllReduce(buf, buf, static_cast<std::size_t>(n), ncclFloat32, ncclSum,
                                       c.comm, static_cast<cudaStream_t>(stream));
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
