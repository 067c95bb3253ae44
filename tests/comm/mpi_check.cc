// The MPI backend under a real `mpirun -n N` (see tests/CMakeLists.txt):
// every collective's result checked on every rank, and bitwise equality of
// the all-reduce across ranks. Exit 0 when all hold, 1 with the reason.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/core/error.h"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what, int rank) {
  if (!ok) {
    std::fprintf(stderr, "rank %d: FAILED: %s\n", rank, what.c_str());
    ++failures;
  }
}

}  // namespace

int main() {
  using namespace lockstep::comm;
  try {
    const auto [rank, size] = mpi_world_rank_and_size();
    auto c = create_mpi_communicator({.rank = rank, .size = size});
    // Sum of a long vector (several MPI segments), then compared across
    // ranks through an all-gather of a checksum of its bits.
    std::vector<float> v(1 << 20);
    for (std::size_t k = 0; k < v.size(); ++k)
      v[k] = 0.1f * static_cast<float>(rank + 1) + 1e-3f * static_cast<float>(k % 89);
    auto work = c->all_reduce_async(v.data(), v.size(), ReduceOp::kSum);
    work->wait();
    const float expected0 = 0.1f * static_cast<float>(size * (size + 1) / 2);
    expect(std::abs(v[0] - expected0) < 1e-5f, "sum", rank);
    std::uint64_t bits = 1469598103934665603ull;
    for (float f : v) {
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      bits = (bits ^ u) * 1099511628211ull;
    }
    std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
    c->all_gather(&bits, sizeof bits, all.data());
    for (int r = 0; r < size; ++r)
      expect(all[static_cast<std::size_t>(r)] == all[0], "bitwise equal sums on every rank", rank);
    std::vector<double> d = {static_cast<double>(rank), 1.0};
    c->all_reduce(d.data(), d.size(), ReduceOp::kMean);
    expect(d[0] == (size - 1) / 2.0 && d[1] == 1.0, "mean of doubles", rank);
    float m = static_cast<float>(rank);
    c->all_reduce(&m, 1, ReduceOp::kMax);
    expect(m == static_cast<float>(size - 1), "max", rank);
    char text[8] = {};
    if (rank == size - 1) std::strcpy(text, "last");
    c->broadcast(text, sizeof text, size - 1);
    expect(std::string(text) == "last", "broadcast from the last rank", rank);
    c->barrier();
    if (failures == 0) std::printf("rank %d of %d: mpi collectives OK\n", rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
