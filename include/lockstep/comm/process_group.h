// Communicators between processes: one rank per worker process, over Gloo
// (TCP, rendezvous through the chief's store) or MPI (the ranks mpirun
// started). The collectives are the libraries' own; Lockstep adds what a
// training job needs around them:
//   - every collective runs on one communication thread per communicator, in
//     the order posted, so all_reduce_async overlaps a gradient bucket's
//     reduction with the rest of backward, and MPI is only ever called from
//     the thread that initialised it;
//   - every collective has a deadline; a failure (a peer's connection closed,
//     a deadline passed) breaks the communicator and is reported as a
//     DistributedError naming this worker, the collective, the library's
//     message and — from `diagnose` — which worker the job lost and why.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "lockstep/comm/communicator.h"
#include "lockstep/comm/store.h"

namespace lockstep::comm {

struct ProcessGroupOptions {
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // Called after a collective failed; says who was lost ("" if unknown).
  std::function<std::string()> diagnose{};
};

// Gloo's TCP transport bound to `hostname` (this worker's address in the
// cluster spec), its full mesh connected through `store` under `prefix`.
// Sets SIGPIPE to be ignored (unless the program handles it): Gloo's writes
// to a dead peer would otherwise kill the process instead of failing.
std::unique_ptr<Communicator> create_gloo_communicator(StoreClient& store,
                                                       const std::string& hostname,
                                                       const std::string& prefix,
                                                       ProcessGroupOptions options);

// MPI_COMM_WORLD. MPI is initialised (MPI_THREAD_FUNNELED at least, checked)
// on first use on a communication thread of its own and finalised at exit.
// options.rank/size must match MPI's.
std::unique_ptr<Communicator> create_mpi_communicator(ProcessGroupOptions options);

// MPI's own rank and size, initialising MPI if needed.
std::pair<int, int> mpi_world_rank_and_size();

}  // namespace lockstep::comm
