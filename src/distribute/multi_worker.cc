// MultiWorkerMirroredStrategy: how its workers find each other — the
// job's token, the rendezvous at the chief's store (who joined, with which
// cluster spec), the Gloo or MPI communicator between them, the split of a
// shared host's cores — and its replicas on each worker.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "distribute/job_token.h"
#include "host_cores.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store.h"
#include "lockstep/core/error.h"
#include "lockstep/core/log.h"
#include "strategy_impl.h"

namespace lockstep::distribute {

using Clock = std::chrono::steady_clock;

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The rendezvous store's secret: given, or LOCKSTEP_JOB_TOKEN. A cluster on
// loopback alone may go without (derived from the cluster spec, said once).
std::string job_token(const MultiWorkerMirroredStrategyOptions& o, const ClusterResolver& r) {
  const char* who = "MultiWorkerMirroredStrategy";
  if (auto token = given_job_token(o.job_token, who)) return *token;
  bool loopback = true;
  for (int w = 0; w < r.num_workers(); ++w) loopback &= is_loopback(r.worker_address(w).host);
  LOCKSTEP_CHECK(loopback,
                 "MultiWorkerMirroredStrategy: set LOCKSTEP_JOB_TOKEN to the same secret on "
                 "every worker (or pass job_token): the chief's rendezvous store admits only "
                 "processes that know it");
  static std::once_flag said;
  std::call_once(said, [] {
    log(LogLevel::kWarning,
        "MultiWorkerMirroredStrategy: LOCKSTEP_JOB_TOKEN is not set; on this loopback "
        "cluster the store's token is derived from the cluster spec\n");
  });
  return "lockstep-loopback-job:" + r.canonical_cluster_spec();
}

std::string format_lost(const std::vector<comm::LostWorker>& lost, const ClusterResolver& r) {
  std::string s;
  for (const auto& l : lost)
    s += (s.empty() ? "" : "; ") + r.describe_worker(l.rank) + " was lost: " + l.reason;
  return s.empty() ? s : "the chief reports " + s;
}

// Aborts this worker's collectives as soon as the chief's store names a
// lost worker — a heartbeat missed for heartbeat_timeout, or its connection
// closed — instead of at the collective's deadline: a worker stopped by
// SIGSTOP (or a host gone without closing its connections) stalled the job
// for --timeout, 300 s by default, without a word (issue #41). The chief
// asks its own store; a worker asks the chief, once a heartbeat interval. A
// chief out of reach is left to the collective's deadline, whose report
// already says so. It asks only while a collective has been waiting for
// longer than an interval: a healthy job's collectives take milliseconds,
// so it costs nothing then, and at the job's end (no collective left) it
// never holds the store's client while the chief goes away.
class LivenessWatcher {
 public:
  LivenessWatcher(std::function<std::vector<comm::LostWorker>()> lost, comm::Communicator* comm,
                  ClusterResolver r, std::chrono::milliseconds every)
      : thread_([this, lost = std::move(lost), comm, r = std::move(r), every] {
          std::unique_lock lk(mu_);
          while (!cv_.wait_for(lk, every, [&] { return stop_; })) {
            const auto since = comm->waiting_since();
            if (!since || Clock::now() - *since < every) continue;
            lk.unlock();
            std::vector<comm::LostWorker> gone;
            try {
              gone = lost();
            } catch (const Error&) {
            }
            if (!gone.empty()) {
              comm->abort(format_lost(gone, r));
              return;
            }
            lk.lock();
          }
        }) {}
  ~LivenessWatcher() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  LivenessWatcher(const LivenessWatcher&) = delete;
  LivenessWatcher& operator=(const LivenessWatcher&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;  // last: starts when the members it uses exist
};

// Waits until every worker has joined through the store; names those that
// did not, and those given another cluster spec.
void join_through_store(comm::StoreClient& store, const ClusterResolver& r,
                        std::chrono::milliseconds join_timeout) {
  const int rank = r.worker_rank();
  const std::string spec = r.canonical_cluster_spec();
  std::vector<std::string> keys;
  for (int w = 0; w < r.num_workers(); ++w) keys.push_back("lockstep/joined/" + std::to_string(w));
  // A worker reads the chief's spec first: one given another cluster list
  // (one with a worker more, say) hears it at once instead of waiting for a
  // worker that will never come. It reads it before it announces itself:
  // once it has, the chief may see the difference and exit, taking the
  // store with it. The chief names the difference from its side below.
  std::optional<std::string> chiefs_spec;
  if (rank != 0) {
    try {
      store.wait({keys[0]}, join_timeout);
    } catch (const TimeoutError&) {
      throw TimeoutError(lockstep::detail::str_cat(
          "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": the chief, ",
          r.describe_worker(0), ", did not join within ", join_timeout.count() / 1000.0, " s"));
    }
    const std::vector<char> chiefs = store.get(keys[0]);
    chiefs_spec.emplace(chiefs.begin(), chiefs.end());
  }
  const std::vector<char> mine(spec.begin(), spec.end());
  if (chiefs_spec && *chiefs_spec != spec) {
    // Announced all the same, so that the chief names the difference too;
    // it may exit before it answers.
    try {
      store.set(keys[static_cast<std::size_t>(rank)], mine);
    } catch (const Error&) {
    }
    throw DistributedError(
        lockstep::detail::str_cat("MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
                                  " was given another cluster spec than the chief: \"", spec,
                                  "\" here, \"", *chiefs_spec, "\" on the chief"));
  }
  store.set(keys[static_cast<std::size_t>(rank)], mine);
  try {
    store.wait(keys, join_timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int w = 0; w < r.num_workers(); ++w) {
      try {
        store.wait({keys[static_cast<std::size_t>(w)]}, std::chrono::milliseconds(1));
      } catch (const TimeoutError&) {
        missing += (missing.empty() ? "" : ", ") + r.describe_worker(w);
      }
    }
    throw TimeoutError(lockstep::detail::str_cat(
        "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": ", missing,
        " did not join within ", join_timeout.count() / 1000.0, " s"));
  }
  for (int w = 0; w < r.num_workers(); ++w) {
    const std::vector<char> theirs = store.get(keys[static_cast<std::size_t>(w)]);
    LOCKSTEP_CHECK_AS(DistributedError, std::string(theirs.begin(), theirs.end()) == spec,
                      "MultiWorkerMirroredStrategy: ", r.describe_worker(w),
                      " was given another cluster spec than ", r.describe_worker(rank), ": \"",
                      std::string(theirs.begin(), theirs.end()), "\" vs \"", spec, "\"");
  }
}

CrossWorker join_workers(const MultiWorkerMirroredStrategyOptions& o, const ClusterResolver& r) {
  CrossWorker cw;
  cw.resolver = r;
  cw.num_workers = r.num_workers();
  cw.worker_index = r.worker_rank();
  // A ps job would be silently idle: its tasks hold nothing in sync training.
  LOCKSTEP_CHECK(r.cluster_spec().num_tasks("ps") == 0,
                 "MultiWorkerMirroredStrategy: TF_CONFIG: cluster.ps: the cluster has ",
                 r.cluster_spec().num_tasks("ps"),
                 " ps task(s), but synchronous training keeps every variable on every worker; "
                 "use ParameterServerStrategy for a cluster with parameter servers, or drop the "
                 "ps job");
  LOCKSTEP_CHECK(cw.worker_index >= 0, "MultiWorkerMirroredStrategy: this task is a ",
                 r.task_type(), "; only chief and worker tasks train in sync");
  if (cw.num_workers == 1) return cw;
  const bool mpi_launch = r.launcher() == Launcher::kMpi;
  CommunicationImplementation how = o.communication;
  if (how == CommunicationImplementation::kAuto)
    how = mpi_launch ? CommunicationImplementation::kMpi : CommunicationImplementation::kGloo;
  comm::ProcessGroupOptions po{
      .rank = cw.worker_index, .size = cw.num_workers, .timeout = o.timeout};
  if (how == CommunicationImplementation::kMpi) {
    LOCKSTEP_CHECK(mpi_launch,
                   "MultiWorkerMirroredStrategy: communication = MPI needs processes started by "
                   "mpirun or srun with an MPI plugin (--mpi=pmi2); this one's cluster came from ",
                   r.launcher() == Launcher::kSlurm ? "Slurm's node list" : "TF_CONFIG",
                   " (use Gloo)");
    cw.comm = comm::create_mpi_communicator(po);
    return cw;
  }
  LOCKSTEP_CHECK(!mpi_launch,
                 "MultiWorkerMirroredStrategy: communication = Gloo needs the workers' "
                 "addresses from TF_CONFIG; under mpirun use MPI (or Auto)");
  const TaskAddress chief = r.worker_address(0);
  comm::StoreOptions so;
  so.host = chief.host;
  so.port = chief.port;
  so.token = job_token(o, r);
  so.timeout = o.join_timeout;
  // A lost link is noticed well within the collective deadline.
  so.heartbeat_timeout =
      std::clamp(o.timeout / 2, std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
  so.heartbeat_interval = so.heartbeat_timeout / 8;
  if (cw.worker_index == 0) cw.store_server = comm::StoreServer::start(so);
  cw.store_client = comm::StoreClient::connect(so);
  cw.store_client->start_heartbeat(cw.worker_index);
  join_through_store(*cw.store_client, r, o.join_timeout);
  comm::StoreServer* server = cw.store_server.get();
  comm::StoreClient* client = cw.store_client.get();
  // After a failed collective: ask the chief whom it lost. A dead process's
  // heartbeat connection closes at once, but the collective may notice
  // first, so ask again for up to a heartbeat timeout.
  const auto patience = so.heartbeat_timeout + std::chrono::milliseconds(500);
  po.diagnose = [server, client, r, patience]() -> std::string {
    const auto until = Clock::now() + patience;
    for (;;) {
      std::vector<comm::LostWorker> lost;
      try {
        lost = server ? server->lost_workers() : client->lost_workers();
      } catch (const Error& e) {
        return "lost contact with the chief, " + r.describe_worker(0) + ": " + e.what();
      }
      if (!lost.empty() || Clock::now() >= until) return format_lost(lost, r);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  cw.comm = comm::create_gloo_communicator(*cw.store_client, r.worker_address(cw.worker_index).host,
                                           "lockstep/gloo/", po);
  cw.liveness = std::make_shared<LivenessWatcher>(
      [server, client] { return server ? server->lost_workers() : client->lost_workers(); },
      cw.comm.get(), r, so.heartbeat_interval);
  return cw;
}

}  // namespace

MultiWorkerMirroredStrategy::MultiWorkerMirroredStrategy(MultiWorkerMirroredStrategyOptions o) {
  LOCKSTEP_CHECK(o.local_replicas >= 1,
                 "MultiWorkerMirroredStrategy: local_replicas must be >= 1, got ",
                 o.local_replicas);
  const ClusterResolver resolver =
      o.cluster_resolver
          ? *o.cluster_resolver
          : ClusterResolver::from_environment().value_or(ClusterResolver::single_worker());
  CrossWorker workers = join_workers(o, resolver);
  // Workers started by hand on one host split its cores (as launch does),
  // before the devices are chosen from them.
  if (workers.comm) split_host_cores(*workers.comm, resolver);
  // Local replicas: the logical devices when there are enough, else replicas
  // sharing the host's cores; one replica uses every core of the process.
  std::vector<Device*> devices;
  int replicas_per_device = 1;
  const std::vector<Device*> logical = logical_devices();
  if (o.local_replicas > 1 && static_cast<int>(logical.size()) >= o.local_replicas) {
    devices.assign(logical.begin(), logical.begin() + o.local_replicas);
  } else {
    devices = {&host_device()};
    replicas_per_device = o.local_replicas;
  }
  auto impl = std::make_shared<StrategyImpl>(
      "MultiWorkerMirroredStrategy", std::move(devices), replicas_per_device,
      comm::InProcessGroup::Options{.timeout = o.timeout}, false,
      ReplicaOptions{
          .bytes_per_pack = o.bytes_per_pack,
          .shard_optimizer_update = o.shard_optimizer_update,
          .compress_gradients = o.gradient_compression == GradientCompression::kBfloat16},
      std::move(workers));
  static_cast<Strategy&>(*this) = Strategy(std::move(impl));
}

const ClusterResolver& MultiWorkerMirroredStrategy::cluster_resolver() const {
  return impl_->workers().resolver;
}

}  // namespace lockstep::distribute
