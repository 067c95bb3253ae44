// NCCL for the CUDA adapter (nccl.cu): the communicators GpuApi's nccl_*
// entries hand out, each NCCL's ncclComm_t behind a lock, so that a peer's
// failure may abort it while a replica thread queues on it. No CUDA or
// NCCL header here: the emulated adapter shares its rank rule.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace lockstep::backend::cuda::nccl {

// NCCL takes one rank per GPU: a GPU named twice in gpus[0 .. count) is
// a std::runtime_error naming it (both adapters check it first).
inline void check_one_rank_per_gpu(const char* what, int count, const int* gpus) {
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < i; ++j) {
      if (gpus[i] == gpus[j])
        throw std::runtime_error(std::string(what) + ": GPU " + std::to_string(gpus[i]) +
                                 " is named for ranks " + std::to_string(j) + " and " +
                                 std::to_string(i) + " (NCCL takes one rank per GPU)");
    }
  }
}

std::string version();
// gpu_api.h's contracts; `stream` is a cudaStream_t.
void init_all(int count, const int* gpus, void** comms);
void unique_id(char* id);
void init_ranks(int count, const int* gpus, int nranks, int first_rank, const char* id,
                double timeout_s, void** comms);
void all_reduce(void* comm, void* stream, float* buf, std::int64_t n);
void abort(void* comm);
void destroy(void* comm);

}  // namespace lockstep::backend::cuda::nccl
