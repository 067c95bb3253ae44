// The emulated adapter's NCCL (emulated_nccl.h).
#include "emulated_nccl.h"

#include <signal.h>  // raise
#include <stdlib.h>  // mkdtemp

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tensor/backend/cuda/gpu_api.h"
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

// The ranks of several processes (nccl_init_ranks): they meet in files of
// a folder named by the unique id, one per rank and collective.
struct Files {
  std::string dir;
  int nranks = 0;
  std::atomic<bool> aborted{false};  // this process's members'
};

struct Comm {
  std::shared_ptr<Clique> clique;  // in one process (nccl_init_all)
  std::shared_ptr<Files> files;    // across processes (nccl_init_ranks)
  int rank = 0;
  std::uint64_t round = 0;  // files: this rank's collectives so far
};

constexpr char kIdPrefix[] = "emulated-nccl:";

// Waits for `path` until the deadline or an abort; false when it never came.
bool wait_for_file(const std::string& path, const Files& f,
                   std::chrono::steady_clock::time_point deadline) {
  while (!std::filesystem::exists(path)) {
    if (f.aborted.load() || std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

// Written whole or not at all: a peer never reads half a file.
void write_file(const std::string& path, const void* data, std::size_t bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
    if (!out) throw std::runtime_error("emulated NCCL: could not write " + tmp);
  }
  std::filesystem::rename(tmp, path);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void all_reduce_files(Comm& c, float* buf, std::int64_t n) {
  Files& f = *c.files;
  const auto name = [&](std::uint64_t round, int rank) {
    return f.dir + "/r" + std::to_string(round) + "_" + std::to_string(rank) + ".bin";
  };
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  write_file(name(c.round, c.rank), buf, bytes);
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  std::vector<float> sum(static_cast<std::size_t>(n), 0.0f);
  for (int r = 0; r < f.nranks; ++r) {
    const std::string path = name(c.round, r);
    if (!wait_for_file(path, f, deadline))
      throw std::runtime_error(f.aborted.load()
                                   ? "ncclAllReduce: aborted while rank " + std::to_string(c.rank) +
                                         " waited for rank " + std::to_string(r)
                                   : "ncclAllReduce: rank " + std::to_string(c.rank) + " waited " +
                                         std::to_string(kPatience.count()) + " s for rank " +
                                         std::to_string(r) + " (a GPU would hang here)");
    const std::string data = read_file(path);
    if (data.size() != bytes)
      throw std::runtime_error("ncclAllReduce: rank " + std::to_string(r) + " reduces " +
                               std::to_string(data.size() / sizeof(float)) + " floats and rank " +
                               std::to_string(c.rank) + " " + std::to_string(n));
    const auto* v = reinterpret_cast<const float*>(data.data());
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      sum[k] = r == 0 ? v[i] : sum[k] + v[i];  // rank order, from rank 0's value
    }
  }
  std::memcpy(buf, sum.data(), bytes);
  // Every rank wrote this round's file after reading the last round's: the
  // last one is read by all.
  if (c.round > 0) std::filesystem::remove(name(c.round - 1, c.rank));
  ++c.round;
}

Comm& as(void* comm) { return *static_cast<Comm*>(comm); }

// Whether the planted failure `variable` names this rank.
bool planted(const char* variable, int rank) {
  const char* v = std::getenv(variable);  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr && std::atoi(v) == rank;
}

// LOCKSTEP_EMULATED_NCCL_STALL_RANK: the rank's sum never arrives, and
// waits as a hung GPU's kernel would: until its communicator is aborted.
[[noreturn]] void stall(Comm& c) {
  const auto until = std::chrono::steady_clock::now() + kPatience;
  const auto aborted = [&] {
    if (c.files) return c.files->aborted.load();
    std::lock_guard lock(c.clique->mutex);
    return c.clique->aborted;
  };
  while (!aborted() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  throw std::runtime_error(
      aborted() ? "ncclAllReduce: rank " + std::to_string(c.rank) +
                      " was stalled (LOCKSTEP_EMULATED_NCCL_STALL_RANK) until aborted"
                : "ncclAllReduce: rank " + std::to_string(c.rank) + " stalled " +
                      std::to_string(kPatience.count()) +
                      " s and nothing aborted it (a GPU would hang here)");
}

}  // namespace

void nccl_init_all(int count, const int* gpus, void** comms) {
  if (count < 1) throw std::runtime_error("ncclCommInitAll: no ranks");
  nccl::check_one_rank_per_gpu("ncclCommInitAll", count, gpus);
  if (std::getenv("LOCKSTEP_EMULATED_NCCL_INIT_FAIL") != nullptr)  // NOLINT(concurrency-mt-unsafe)
    throw std::runtime_error(
        "ncclCommInitAll: a planted failure (LOCKSTEP_EMULATED_NCCL_INIT_FAIL)");
  auto clique = std::make_shared<Clique>(count);
  clique->sizes.assign(static_cast<std::size_t>(count), 0);
  for (int i = 0; i < count; ++i) comms[i] = new Comm{clique, nullptr, i, 0};
}

void nccl_unique_id(char* id) {
  const char* base = std::getenv("LOCKSTEP_EMULATED_NCCL_DIR");  // NOLINT(concurrency-mt-unsafe)
  std::string pattern =
      std::string(base != nullptr ? base : "/tmp") + "/lockstep_emulated_nccl_XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("emulated NCCL: could not make a folder like " + pattern);
  const std::string text = kIdPrefix + pattern;
  if (text.size() >= static_cast<std::size_t>(kNcclIdBytes))
    throw std::runtime_error("emulated NCCL: the folder's name is too long for an id: " + pattern);
  std::memset(id, 0, static_cast<std::size_t>(kNcclIdBytes));
  std::memcpy(id, text.data(), text.size());
}

void nccl_init_ranks(int count, const std::string* gpus, int nranks, int first_rank, const char* id,
                     double timeout_s, void** comms) {
  const std::string text(id, strnlen(id, static_cast<std::size_t>(kNcclIdBytes)));
  if (text.rfind(kIdPrefix, 0) != 0)
    throw std::runtime_error("ncclCommInitRank: not an id of the emulated NCCL");
  auto files = std::make_shared<Files>();
  files->dir = text.substr(sizeof kIdPrefix - 1);
  files->nranks = nranks;
  // Each rank says which GPU it is on; every rank then checks all of them,
  // so every process refuses a GPU named twice, as NCCL's bootstrap does.
  for (int i = 0; i < count; ++i) {
    const std::string& gpu = gpus[i];
    write_file(files->dir + "/gpu_" + std::to_string(first_rank + i), gpu.data(), gpu.size());
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_s));
  std::vector<std::string> named(static_cast<std::size_t>(nranks));
  for (int r = 0; r < nranks; ++r) {
    const std::string path = files->dir + "/gpu_" + std::to_string(r);
    if (!wait_for_file(path, *files, deadline))
      throw std::runtime_error("ncclCommInitRank: rank " + std::to_string(r) + " of " +
                               std::to_string(nranks) + " did not join within " +
                               std::to_string(timeout_s) + " s");
    named[static_cast<std::size_t>(r)] = read_file(path);
    for (int q = 0; q < r; ++q) {
      if (named[static_cast<std::size_t>(q)] == named[static_cast<std::size_t>(r)])
        throw std::runtime_error("ncclCommInitRank: " + named[static_cast<std::size_t>(r)] +
                                 " is named for ranks " + std::to_string(q) + " and " +
                                 std::to_string(r) +
                                 " (NCCL takes one rank per GPU: \"Duplicate GPU detected\")");
    }
  }
  for (int i = 0; i < count; ++i) comms[i] = new Comm{nullptr, files, first_rank + i, 0};
}

void nccl_check(void* comm) {
  // A planted failure, for the tests of what a failing rank leaves behind.
  const char* fail =
      std::getenv("LOCKSTEP_EMULATED_NCCL_FAIL_RANK");  // NOLINT(concurrency-mt-unsafe)
  if (fail != nullptr && std::atoi(fail) == as(comm).rank)
    throw std::runtime_error("ncclAllReduce: a planted failure of rank " + std::string(fail) +
                             " (LOCKSTEP_EMULATED_NCCL_FAIL_RANK)");
  const bool aborted = as(comm).files ? as(comm).files->aborted.load() : [&] {
    Clique& q = *as(comm).clique;
    std::lock_guard lock(q.mutex);
    return q.aborted;
  }();
  if (aborted) throw std::runtime_error("ncclAllReduce: the communicator was aborted");
}

void nccl_all_reduce(void* comm, float* buf, std::int64_t n) {
  // LOCKSTEP_EMULATED_NCCL_STOP_RANK: the rank's process stops (SIGSTOP)
  // in its sum, as a host that hangs there: its heartbeats stop too.
  if (planted("LOCKSTEP_EMULATED_NCCL_STOP_RANK", as(comm).rank)) ::raise(SIGSTOP);
  if (planted("LOCKSTEP_EMULATED_NCCL_STALL_RANK", as(comm).rank)) stall(as(comm));
  if (as(comm).files) {
    all_reduce_files(as(comm), buf, n);
    return;
  }
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
  if (as(comm).files) {
    as(comm).files->aborted.store(true);
    return;
  }
  Clique& q = *as(comm).clique;
  std::lock_guard lock(q.mutex);
  q.aborted = true;
  q.met.notify_all();
}

void nccl_destroy(void* comm) { delete static_cast<Comm*>(comm); }

}  // namespace lockstep::backend::cuda::emulated
