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
#include "lockstep/core/env.h"
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
    s += (s.empty() ? "" : "; ") + r.describe_worker(l.rank) + (l.left ? ": " : " was lost: ") +
         l.reason;
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

// Elastic shrink on this start: the chief may go on without workers that
// do not come back within rejoin_timeout, down to min_workers.
struct Elastic {
  bool configured = false;  // min_workers below the cluster's workers
  bool active = false;      // configured, and this start is a restart
  int min_workers = 0;
  std::chrono::milliseconds rejoin_timeout{0};
};

Elastic elastic_of(const MultiWorkerMirroredStrategyOptions& o, const ClusterResolver& r) {
  LOCKSTEP_CHECK(o.min_workers >= 0 && o.min_workers <= r.num_workers(),
                 "MultiWorkerMirroredStrategy: min_workers must be from 0 to the cluster's ",
                 r.num_workers(), " workers, got ", o.min_workers);
  LOCKSTEP_CHECK(o.min_workers == 0 || o.rejoin_timeout.count() > 0,
                 "MultiWorkerMirroredStrategy: rejoin_timeout must be positive, got ",
                 o.rejoin_timeout.count(), " ms");
  // A start to take back workers left out waits for all, as a first start.
  const bool restarted = o.restarted.value_or(env::restart_count() > 0 && !env::rejoin());
  const bool configured = o.min_workers > 0 && o.min_workers < r.num_workers();
  return Elastic{.configured = configured,
                 .active = configured && restarted,
                 .min_workers = o.min_workers,
                 .rejoin_timeout = o.rejoin_timeout};
}

const char* const kMembersKey = "lockstep/members";
const char* const kWaitingKey = "lockstep/waiting/";  // + rank: left out, waiting to rejoin
const char* const kRejoinKey = "lockstep/rejoin";     // the chief calls them back
const char* const kNoShrinkWithoutChief =
    " (a job cannot shrink without its chief: the rendezvous store lives in it; restart the "
    "chief)";

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (int w : ranks) s += (s.empty() ? "" : ",") + std::to_string(w);
  return s;
}

std::vector<int> split_ranks(const std::string& s) {
  std::vector<int> ranks;
  std::size_t at = 0;
  while (at < s.size()) {
    std::size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    ranks.push_back(std::stoi(s.substr(at, end - at)));
    at = end + 1;
  }
  return ranks;
}

std::string describe_workers(const std::vector<int>& ranks, const ClusterResolver& r) {
  std::string s;
  for (int w : ranks) s += (s.empty() ? "" : ", ") + r.describe_worker(w);
  return s;
}

bool has_key(comm::StoreClient& store, const std::string& key) {
  try {
    store.wait({key}, std::chrono::milliseconds(1));
    return true;
  } catch (const TimeoutError&) {
    return false;
  }
}

// After the chief's call back: waits (up to `patience`) until the chief
// has stopped — its store gone, or a new one without the call — so that a
// worker started again joins the chief's next store, not this one.
void wait_for_chief_to_stop(comm::StoreClient& store, std::chrono::milliseconds patience) {
  const auto deadline = Clock::now() + patience;
  while (Clock::now() < deadline) {
    try {
      if (!has_key(store, kRejoinKey)) return;
    } catch (const Error&) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void check_same_spec(comm::StoreClient& store, const ClusterResolver& r,
                     const std::vector<std::string>& keys, int w, const std::string& spec) {
  const std::vector<char> theirs = store.get(keys[static_cast<std::size_t>(w)]);
  LOCKSTEP_CHECK_AS(DistributedError, std::string(theirs.begin(), theirs.end()) == spec,
                    "MultiWorkerMirroredStrategy: ", r.describe_worker(w),
                    " was given another cluster spec than ", r.describe_worker(r.worker_rank()),
                    ": \"", std::string(theirs.begin(), theirs.end()), "\" vs \"", spec, "\"");
}

// A worker other than the chief, joined: waits for the chief's list of the
// workers that form the job, checking the specs of those that join
// meanwhile (a difference is said at once; the chief will publish no list).
// A worker left out by an elastic restart waits until the chief calls it
// back, at the job's next backup.
std::vector<int> members_from_chief(comm::StoreClient& store, const ClusterResolver& r,
                                    const std::vector<std::string>& keys, const std::string& spec,
                                    std::chrono::milliseconds join_timeout,
                                    const Elastic& elastic) {
  const int rank = r.worker_rank();
  const auto patience =
      join_timeout + (elastic.configured ? elastic.rejoin_timeout : std::chrono::milliseconds(0));
  const auto deadline = Clock::now() + patience;
  std::vector<bool> checked(keys.size(), false);
  for (;;) {
    try {
      store.wait({kMembersKey}, std::chrono::milliseconds(100));
      break;
    } catch (const TimeoutError&) {
    } catch (const Error& e) {
      // The chief gave up (it names those missing) or failed.
      throw DistributedError(
          lockstep::detail::str_cat("MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
                                    ": lost contact with the chief, ", r.describe_worker(0),
                                    ", before it said which workers form the job: ", e.what()));
    }
    std::vector<int> missing;
    for (int w = 0; w < r.num_workers(); ++w) {
      if (checked[static_cast<std::size_t>(w)]) continue;
      if (!has_key(store, keys[static_cast<std::size_t>(w)])) {
        missing.push_back(w);
        continue;
      }
      check_same_spec(store, r, keys, w, spec);
      checked[static_cast<std::size_t>(w)] = true;
    }
    if (Clock::now() < deadline) continue;
    throw TimeoutError(lockstep::detail::str_cat(
        "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": ",
        missing.empty() ? "the chief did not say which workers form the job"
                        : describe_workers(missing, r) + " did not join",
        " within ", patience.count() / 1000.0, " s"));
  }
  const std::vector<char> list = store.get(kMembersKey);
  const std::vector<int> members = split_ranks(std::string(list.begin(), list.end()));
  if (std::find(members.begin(), members.end(), rank) != members.end()) {
    for (int w : members) check_same_spec(store, r, keys, w, spec);
    return members;
  }
  log(LogLevel::kWarning,
      lockstep::detail::str_cat(
          "MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
          " came back after the chief's rejoin timeout: the job went on with ",
          describe_workers(members, r), "; this worker waits to rejoin it at its next backup\n"));
  const std::string waiting = kWaitingKey + std::to_string(rank);
  store.set(waiting, std::vector<char>{'1'});
  for (;;) {
    try {
      store.wait({kRejoinKey}, std::chrono::seconds(1));
      break;
    } catch (const TimeoutError&) {
    } catch (const Error& e) {
      throw DistributedError(lockstep::detail::str_cat(
          "MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
          ": the chief went away while this worker waited to rejoin the job (it ended, or "
          "its chief failed): ",
          e.what()));
    }
  }
  wait_for_chief_to_stop(store, join_timeout);
  throw RejoinError(lockstep::detail::str_cat(
      "MultiWorkerMirroredStrategy: ", r.describe_worker(rank),
      ": the job re-forms with this worker from its last backup: start it again"));
}

// Waits until every worker has joined through the store; names those that
// did not, and those given another cluster spec. Returns the workers that
// form the job (ranks in the full cluster): all of them, or, on an elastic
// restart, those that came back within the rejoin timeout — the chief
// decides and publishes the list; the others read it.
std::vector<int> join_through_store(comm::StoreClient& store, const ClusterResolver& r,
                                    std::chrono::milliseconds join_timeout,
                                    const Elastic& elastic) {
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
          r.describe_worker(0), ", did not join within ", join_timeout.count() / 1000.0, " s",
          elastic.configured ? kNoShrinkWithoutChief : ""));
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
  if (rank != 0) return members_from_chief(store, r, keys, spec, join_timeout, elastic);
  // The chief: every worker, or on an elastic restart those back in time.
  std::vector<int> members;
  try {
    store.wait(keys, elastic.active ? elastic.rejoin_timeout : join_timeout);
    for (int w = 0; w < r.num_workers(); ++w) members.push_back(w);
  } catch (const TimeoutError&) {
    std::vector<int> missing;
    for (int w = 0; w < r.num_workers(); ++w) {
      (has_key(store, keys[static_cast<std::size_t>(w)]) ? members : missing).push_back(w);
    }
    if (!elastic.active) {
      throw TimeoutError(
          lockstep::detail::str_cat("MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": ",
                                    describe_workers(missing, r), " did not join within ",
                                    join_timeout.count() / 1000.0, " s"));
    }
    LOCKSTEP_CHECK_AS(TimeoutError, static_cast<int>(members.size()) >= elastic.min_workers,
                      "MultiWorkerMirroredStrategy: ", r.describe_worker(rank), ": ",
                      describe_workers(missing, r), " did not rejoin within ",
                      elastic.rejoin_timeout.count() / 1000.0, " s, and the ", members.size(),
                      " worker(s) that did are fewer than min_workers (", elastic.min_workers, ")");
    log(LogLevel::kWarning,
        lockstep::detail::str_cat(
            "MultiWorkerMirroredStrategy: ", describe_workers(missing, r),
            " did not rejoin within ", elastic.rejoin_timeout.count() / 1000.0,
            " s; the job goes on with ", members.size(), " of ", r.num_workers(), " workers (",
            describe_workers(members, r), "; min_workers ", elastic.min_workers,
            "): the same global batch, split over fewer replicas\n"));
  }
  for (int w : members) check_same_spec(store, r, keys, w, spec);
  const std::string list = join_ranks(members);
  store.set(kMembersKey, std::vector<char>(list.begin(), list.end()));
  return members;
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
  LOCKSTEP_CHECK(o.min_workers == 0 || how != CommunicationImplementation::kMpi,
                 "MultiWorkerMirroredStrategy: min_workers (elastic shrink) needs Gloo and a "
                 "cluster from TF_CONFIG or Slurm: an MPI job keeps the size mpirun gave it");
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
  const Elastic elastic = elastic_of(o, r);
  if (cw.worker_index == 0) cw.store_server = comm::StoreServer::start(so);
  try {
    cw.store_client = comm::StoreClient::connect(so);
  } catch (const TimeoutError& e) {
    throw TimeoutError(lockstep::detail::str_cat(
        "MultiWorkerMirroredStrategy: ", r.describe_worker(r.worker_rank()), ": the chief, ",
        r.describe_worker(0), ", did not come up within ", o.join_timeout.count() / 1000.0, " s",
        elastic.configured ? kNoShrinkWithoutChief : "", ": ", e.what()));
  }
  cw.store_client->start_heartbeat(cw.worker_index);
  const std::vector<int> members = join_through_store(*cw.store_client, r, o.join_timeout, elastic);
  if (static_cast<int>(members.size()) < cw.num_workers) {
    // Re-formed without some workers: ranks are places among those kept.
    // The store keeps the full cluster's ranks (heartbeats), so the lost
    // workers below are still named from `r`.
    cw.resolver = r.with_workers(members);
    cw.num_workers = static_cast<int>(members.size());
    cw.worker_index = cw.resolver.worker_rank();
    po.rank = cw.worker_index;
    po.size = cw.num_workers;
    comm::StoreClient* store = cw.store_client.get();
    const bool chief = cw.worker_index == 0;
    cw.waiting_to_rejoin = [store, chief, members, r]() -> std::string {
      if (!chief) return {};
      std::vector<int> waiting;
      for (int w = 0; w < r.num_workers(); ++w) {
        if (std::find(members.begin(), members.end(), w) == members.end() &&
            has_key(*store, kWaitingKey + std::to_string(w)))
          waiting.push_back(w);
      }
      if (!waiting.empty()) store->set(kRejoinKey, std::vector<char>{'1'});
      return describe_workers(waiting, r);
    };
  }
  comm::StoreServer* server = cw.store_server.get();
  comm::StoreClient* client = cw.store_client.get();
  // Who the chief's store says is lost, among the workers of this job (one
  // left out by an elastic restart may come and go).
  auto lost_members = [server, client, members] {
    std::vector<comm::LostWorker> lost = server ? server->lost_workers() : client->lost_workers();
    std::erase_if(lost, [&](const comm::LostWorker& l) {
      return std::find(members.begin(), members.end(), l.rank) == members.end();
    });
    return lost;
  };
  // After a failed collective: ask the chief whom it lost. A dead process's
  // heartbeat connection closes at once, but the collective may notice
  // first, so ask again for up to a heartbeat timeout.
  const auto patience = so.heartbeat_timeout + std::chrono::milliseconds(500);
  po.diagnose = [lost_members, r, patience]() -> std::string {
    const auto until = Clock::now() + patience;
    for (;;) {
      std::vector<comm::LostWorker> lost;
      try {
        lost = lost_members();
      } catch (const Error& e) {
        return "lost contact with the chief, " + r.describe_worker(0) + ": " + e.what();
      }
      if (!lost.empty() || Clock::now() >= until) return format_lost(lost, r);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  cw.comm = comm::create_gloo_communicator(*cw.store_client, r.worker_address(r.worker_rank()).host,
                                           "lockstep/gloo/", po);
  // A worker that left (said goodbye) is no reason to abort: at a job's end
  // every worker leaves; mid-job its closed connections fail the
  // collective at once, and the diagnosis then names it.
  auto lost_not_left = [lost_members] {
    std::vector<comm::LostWorker> lost = lost_members();
    std::erase_if(lost, [](const comm::LostWorker& l) { return l.left; });
    return lost;
  };
  cw.liveness =
      std::make_shared<LivenessWatcher>(lost_not_left, cw.comm.get(), r, so.heartbeat_interval);
  // The same questions for the GPUs' collective watchdog (NCCL sums, which
  // the host communicator does not see waiting).
  cw.lost = [lost_not_left, r]() -> std::string {
    const std::vector<comm::LostWorker> gone = lost_not_left();
    return gone.empty() ? std::string() : format_lost(gone, r);
  };
  cw.diagnose = po.diagnose;
  cw.heartbeat_interval = so.heartbeat_interval;
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
  // A Slurm task's share of its node's GPUs, before anything lists them.
  if (!resolver.task_gpus().empty()) {
    set_visible_gpus(resolver.task_gpus());
    std::string ids;
    for (const std::string& id : resolver.task_gpus()) ids += (ids.empty() ? "" : ",") + id;
    log(LogLevel::kInfo,
        detail::str_cat("MultiWorkerMirroredStrategy: this task uses GPUs CUDA_VISIBLE_DEVICES=",
                        ids, " (Slurm: ", resolver.task_gpus_reason(),
                        "; LOCKSTEP_SLURM_AUTO_SET_GPU=0 to choose otherwise)\n"));
  }
  // Local replicas: the devices given; else every GPU (TensorFlow's rule);
  // else the logical devices when there are enough, else replicas sharing
  // the host's cores; one replica uses every core of the process.
  std::vector<Device*> devices = o.devices;
  int replicas_per_device = 1;
  if (devices.empty() && o.local_replicas == 1) devices = gpu_devices();
  LOCKSTEP_CHECK(devices.empty() || o.local_replicas == 1 ||
                     o.local_replicas == static_cast<int>(devices.size()),
                 "MultiWorkerMirroredStrategy: local_replicas = ", o.local_replicas,
                 " but devices names ", devices.size(),
                 " device(s): each device runs one replica (leave local_replicas at 1)");
  if (devices.empty()) {
    const std::vector<Device*> logical = logical_devices();
    if (o.local_replicas > 1 && static_cast<int>(logical.size()) >= o.local_replicas) {
      devices.assign(logical.begin(), logical.begin() + o.local_replicas);
    } else {
      devices = {&host_device()};
      replicas_per_device = o.local_replicas;
    }
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
