// The one place where Lockstep reads environment variables.
//
// Every variable the library honours is listed here; nothing else in the tree
// calls getenv.
#pragma once

#include <optional>
#include <string>

namespace lockstep::env {

// LOCKSTEP_CPU_DEVICES: how to split the machine's cores into logical
// devices, e.g. "2" (two devices over all cores) or "0,1;2,3" (explicit
// core lists separated by ';'). Unset: one device per physical core.
std::optional<std::string> cpu_devices();

// LOCKSTEP_FAKE_DEVICES: how many fake accelerator devices to make (the
// GPU's rules on host memory, for CI). Unset: none.
std::optional<std::string> fake_devices();

// LOCKSTEP_LOGICAL_GPUS: logical GPUs per physical GPU (default 1).
std::optional<std::string> logical_gpus();

// LOCKSTEP_CUDA_LIBRARY: the path of liblockstep_cuda.so, the CUDA kernels,
// when it is not beside the program or on the loader's path.
std::optional<std::string> cuda_library();

// TF_CONFIG: the multi-worker cluster spec (distribute/cluster_resolver.cc).
std::optional<std::string> tf_config();

// An MPI launcher's variables (OMPI_COMM_WORLD_RANK, PMI_SIZE, SLURM_PROCID,
// ...), by name: the cluster of processes mpirun or srun started. Null when
// unset.
const char* launcher_variable(const char* name);

// LOCKSTEP_JOB_TOKEN: the multi-worker job's shared secret for the chief's
// rendezvous store (`lockstep launch` makes one).
std::optional<std::string> job_token();

// LOCKSTEP_LOCAL_REPLICAS: `lockstep train --strategy multi-worker`'s replicas
// per worker when --local-replicas is not given (`lockstep launch` sets it).
std::optional<std::string> local_replicas();

// LOCKSTEP_RESTART_COUNT: which restart of its job this process is (0 or
// unset: the first start), as `lockstep launch` and `lockstep supervise` set
// it; anything but a count reads as 0.
int restart_count();

// LOCKSTEP_REJOIN=1: this start re-forms a job that went on without some of
// its workers, to take them back (`lockstep supervise` sets it after exit
// code 75): every worker is coming, so none is left out.
bool rejoin();

// LOCKSTEP_CRASH_AT=<stage>:<n>: fault injection for the checkpoint tests
// (core/file.cc, docs/checkpoints.md).
std::optional<std::string> crash_at();

// LOCKSTEP_PIN_WORKERS: "0" stops the workers of a multi-worker job that
// share a host from splitting its cores among themselves (`lockstep launch
// --no-pin` sets it). Unset or anything else: they split them.
bool pin_workers();

}  // namespace lockstep::env
