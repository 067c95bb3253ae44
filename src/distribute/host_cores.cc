// Workers that share a host split its cores, as `lockstep launch` does for
// the workers it starts. Workers started by hand (each with its own
// TF_CONFIG) would otherwise each take every core: one intra-op thread per
// core in every worker, the cores oversubscribed, steps 30x slower (63-90 ms
// against 2 ms for the seed MLP on 2 workers, issue #16). The workers find
// their neighbours at start-up: each tells the others its host (the
// kernel's boot id and the host name — network namespaces of one machine
// share its cores, and its boot id) and the cores it may run on.
#include "host_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "lockstep/core/env.h"
#include "lockstep/core/file.h"
#include "lockstep/core/log.h"
#include "lockstep/tensor/device.h"

namespace lockstep::distribute {
namespace {

constexpr int kMaxCpus = 1024;

// What each worker tells the others.
struct HostRecord {
  std::uint64_t host = 0;                            // boot id and host name
  std::array<std::uint64_t, kMaxCpus / 64> cores{};  // physical cores it may run on
};

std::uint64_t host_key() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  const std::string host(name);
  return (static_cast<std::uint64_t>(crc32c(boot_id.data(), boot_id.size())) << 32) |
         crc32c(host.data(), host.size());
}

std::vector<int> cores_of(const HostRecord& r) {
  std::vector<int> cores;
  for (int c = 0; c < kMaxCpus; ++c) {
    if (r.cores[static_cast<std::size_t>(c / 64)] >> (c % 64) & 1) cores.push_back(c);
  }
  return cores;
}

std::string core_list(const std::vector<int>& cores) {
  std::ostringstream os;
  for (std::size_t i = 0; i < cores.size();) {
    std::size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    os << (i ? "," : "") << cores[i];
    if (j > i) os << "-" << cores[j];
    i = j + 1;
  }
  return os.str();
}

}  // namespace

void split_host_cores(comm::Communicator& workers, const ClusterResolver& resolver) {
  HostRecord mine;
  mine.host = host_key();
  for (int c : available_physical_cores()) {
    if (c < kMaxCpus) mine.cores[static_cast<std::size_t>(c / 64)] |= std::uint64_t{1} << (c % 64);
  }
  std::vector<HostRecord> all(static_cast<std::size_t>(workers.size()));
  workers.all_gather(&mine, sizeof mine, all.data());  // collective: every worker takes part
  if (logical_devices_configured() || !env::pin_workers()) return;

  std::vector<int> neighbours;  // workers on this host, by rank (this one included)
  for (int w = 0; w < workers.size(); ++w) {
    if (all[static_cast<std::size_t>(w)].host == mine.host) neighbours.push_back(w);
  }
  if (neighbours.size() < 2) return;
  bool overlap = false;
  std::set<int> pool;
  for (int w : neighbours) {
    for (int c : cores_of(all[static_cast<std::size_t>(w)])) overlap |= !pool.insert(c).second;
  }
  if (!overlap) return;  // already apart (lockstep launch, mpirun's binding, taskset)

  const std::vector<int> cores(pool.begin(), pool.end());
  const auto k = neighbours.size(), n = cores.size();
  const auto i = static_cast<std::size_t>(
      std::find(neighbours.begin(), neighbours.end(), workers.rank()) - neighbours.begin());
  std::vector<int> share;
  if (n >= k) {
    share.assign(cores.begin() + static_cast<std::ptrdiff_t>(i * n / k),
                 cores.begin() + static_cast<std::ptrdiff_t>((i + 1) * n / k));
  } else {
    share = {cores[i % n]};  // more workers than cores: they take turns
  }
  confine_process_to_cores(share);
  log(LogLevel::kInfo,
      detail::str_cat("MultiWorkerMirroredStrategy: ", resolver.describe_worker(workers.rank()),
                      " shares this host with ", k - 1, " other worker", k == 2 ? "" : "s",
                      "; it runs on core", share.size() == 1 ? "" : "s", " ", core_list(share),
                      " of ", core_list(cores),
                      " (LOCKSTEP_PIN_WORKERS=0 or LOCKSTEP_CPU_DEVICES to choose "
                      "otherwise)\n"));
}

}  // namespace lockstep::distribute
