// The emulated adapter's NCCL (emulated_nccl.cc): ncclCommInitAll's
// communicators as a clique of ranks in this process, each all-reduce a
// meeting of every rank's calling thread (the emulated streams run their
// work at once, on the thread that queues it): the last rank to arrive sums
// the buffers in rank order and writes the sum into each, so every rank
// gets the same bits; the others wait for it. A rank whose peer never comes
// waits until the communicator is aborted (as a GPU's NCCL kernel spins
// until ncclCommAbort), then fails — or after a minute, saying that a GPU
// would hang there. Ranks in several processes (nccl_init_ranks) meet
// in files instead, each rank's buffer written whole, summed in rank order
// by every rank. LOCKSTEP_EMULATED_NCCL_FAIL_RANK=r makes rank r's
// all-reduces fail as they are queued, LOCKSTEP_EMULATED_NCCL_INIT_FAIL
// makes the communicators' creation fail, LOCKSTEP_EMULATED_NCCL_STALL_RANK=r
// makes rank r's sums never arrive (they wait until aborted, as a hung
// GPU's), LOCKSTEP_EMULATED_NCCL_STOP_RANK=r stops rank r's process
// (SIGSTOP) in its sum (the tests' planted failures).
#pragma once

#include <cstdint>
#include <string>

namespace lockstep::backend::cuda::emulated {

void nccl_init_all(int count, const int* gpus, void** comms);
// Across processes: the id names a fresh folder (under
// LOCKSTEP_EMULATED_NCCL_DIR, else /tmp) where the ranks meet in files;
// `gpus` are the ranks' GPUs as the machine counts them ("host:N").
void nccl_unique_id(char* id);
void nccl_init_ranks(int count, const std::string* gpus, int nranks, int first_rank, const char* id,
                     double timeout_s, void** comms);
// The collective itself, run when the emulated stream runs it.
void nccl_all_reduce(void* comm, float* buf, std::int64_t n);
void nccl_check(void* comm);  // throws if aborted (at queueing, as NCCL's enqueue)
void nccl_abort(void* comm);
void nccl_destroy(void* comm);

}  // namespace lockstep::backend::cuda::emulated
