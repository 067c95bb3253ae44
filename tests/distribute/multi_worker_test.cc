// MultiWorkerMirroredStrategy with real processes: workers started on their
// own with TF_CONFIG (Gloo) or by mpirun (MPI) train like one process; a
// worker that never joins, dies, or runs another model is named on the
// others, which exit in bounded time; a restarted job resumes bitwise; a
// stranger at the store's port changes nothing. (Killing workers:
// multi_worker_fault_test.cc.)
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <thread>

#include "distribute/multi_worker_support.h"
#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/tensor/device.h"

namespace {

using namespace lockstep::testing_support;
using namespace std::chrono_literals;

TEST_F(MultiWorkerTest, TwoAndThreeGlooWorkersTrainLikeOneProcess) {
  const Trained ref = reference({}, "ref");
  for (int n : {2, 3}) {
    const std::string tag = "gloo" + std::to_string(n);
    auto ps = start_workers(n, {"--out", path(tag + "-{rank}.bin")}, tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, tag + " vs one process");
    for (int i = 1; i < n; ++i)
      expect_bitwise(read_weights(path(tag + "-" + std::to_string(i) + ".bin")), w0,
                     tag + " worker " + std::to_string(i) + " vs worker 0");
    // Every worker reports the global metrics (merged across workers).
    EXPECT_EQ(read_weights(path(tag + "-1.bin")).logs, w0.logs);
    EXPECT_NE(slurp(ps[0].log).find("worker 0 of " + std::to_string(n) + " done"),
              std::string::npos);
  }
}

// distribute_datasets_from_function with pipelines of uneven length: worker
// 1's end two batches early. The workers vote at every step (issue #39), so
// the loop ends on both after worker 1's last batch: no worker waits in a
// step the other does not take, and both hold the same weights.
TEST_F(MultiWorkerTest, ACustomLoopOnUnevenPipelinesEndsOnEveryWorker) {
  auto ps = start_workers(
      2, {"--out", path("u-{rank}.bin"), "--custom-loop", "uneven", "--local-replicas", "2"}, "u");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const Trained w0 = read_weights(path("u-0.bin"));
  const Trained w1 = read_weights(path("u-1.bin"));
  expect_bitwise(w1, w0, "worker 1 vs worker 0");
  EXPECT_EQ(w0.logs, w1.logs) << "the same steps and losses on both";
  EXPECT_NE(w0.logs.find("steps="), std::string::npos) << w0.logs;
}

TEST_F(MultiWorkerTest, TheGuidesCustomLoopRunsAcrossWorkersLikeOneProcess) {
  const Trained ref = reference({"--custom-loop", "1"}, "ref");
  auto ps = start_workers(
      2, {"--out", path("c-{rank}.bin"), "--custom-loop", "1", "--local-replicas", "2"}, "c");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const Trained w0 = read_weights(path("c-0.bin"));
  expect_close(w0, ref, 1e-5, "custom loop, 2 workers x 2 replicas vs one process");
  expect_bitwise(read_weights(path("c-1.bin")), w0, "worker 1 vs worker 0");
  // strategy.reduce(SUM) of the per-replica losses: the global loss.
  const double ref_sum = std::stod(ref.logs.substr(ref.logs.find('=') + 1));
  const double sum = std::stod(w0.logs.substr(w0.logs.find('=') + 1));
  EXPECT_NEAR(sum, ref_sum, 1e-4 * std::abs(ref_sum));
}

std::vector<std::int64_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::int64_t> ids;
  for (std::int64_t id; in >> id;) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<std::int64_t> iota_ids(std::int64_t n) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

// The auto-shard tests: eight input files, and a 2-worker epoch over them
// under `policy` writing <policy>-<rank>.bin and <policy>-ids-<rank>.txt.
class AutoShardTest : public MultiWorkerTest {
 protected:
  void write_input_files() {
    const Process w =
        spawn({MULTI_WORKER_TRAIN_PATH, "--write-files", dir_.string()}, {}, path("write.log"));
    ASSERT_EQ(wait_exit(w), 0) << slurp(w.log);
  }
  void run_policy_job(const std::string& policy) {
    auto ps =
        start_workers(2,
                      {"--files", dir_.string(), "--policy", policy, "--epochs", "1", "--out",
                       path(policy + "-{rank}.bin"), "--ids-out", path(policy + "-ids-{rank}.txt")},
                      policy);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  }
};

TEST_F(AutoShardTest, FileAndAutoGiveEachWorkerItsOwnFiles) {
  ASSERT_NO_FATAL_FAILURE(write_input_files());
  for (const std::string policy : {"file", "auto"}) {
    ASSERT_NO_FATAL_FAILURE(run_policy_job(policy));
    expect_bitwise(read_weights(path(policy + "-1.bin")), read_weights(path(policy + "-0.bin")),
                   policy + ": worker 1 vs worker 0");
    // Disjoint halves (four of the eight files each) that make up the input.
    const auto ids0 = read_ids(path(policy + "-ids-0.txt"));
    const auto ids1 = read_ids(path(policy + "-ids-1.txt"));
    EXPECT_EQ(ids0.size(), 256u) << policy;
    EXPECT_EQ(ids1.size(), 256u) << policy;
    std::vector<std::int64_t> both = ids0;
    both.insert(both.end(), ids1.begin(), ids1.end());
    std::sort(both.begin(), both.end());
    EXPECT_EQ(both, iota_ids(512)) << policy;
  }
  // Three workers: shards of 3, 3 and 2 files. The short one ends the epoch
  // for all (agreed), nobody hangs, and the workers stay in sync.
  auto ps = start_workers(
      3, {"--files", dir_.string(), "--policy", "file", "--out", path("three-{rank}.bin")},
      "three");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  for (int i = 1; i < 3; ++i)
    expect_bitwise(read_weights(path("three-" + std::to_string(i) + ".bin")),
                   read_weights(path("three-0.bin")), "3 workers, FILE");
}

TEST_F(AutoShardTest, DataAndOffReadEverythingOnEveryWorker) {
  ASSERT_NO_FATAL_FAILURE(write_input_files());
  const Trained ref = reference({"--files", dir_.string(), "--epochs", "1"}, "ref");
  for (const std::string policy : {"data", "off"}) {
    ASSERT_NO_FATAL_FAILURE(run_policy_job(policy));
    const Trained w0 = read_weights(path(policy + "-0.bin"));
    expect_bitwise(read_weights(path(policy + "-1.bin")), w0, policy + ": worker 1 vs worker 0");
    EXPECT_EQ(read_ids(path(policy + "-ids-0.txt")), iota_ids(512)) << policy;
    EXPECT_EQ(read_ids(path(policy + "-ids-1.txt")), iota_ids(512)) << policy;
    // DATA: the global batches are one process's.
    if (policy == "data") expect_close(w0, ref, 1e-5, "DATA vs one process");
  }
}

// A custom loop's experimental_distribute_dataset takes the dataset's
// auto-shard policy as fit does (one rule, StrategyExtended::auto_shard;
// issue #39): FILE gives each worker its own files, OFF has each read
// everything and take its part of every batch. The workers stay bitwise
// in sync.
TEST_F(AutoShardTest, ACustomLoopShardsItsInputByThePolicyAsFitDoes) {
  ASSERT_NO_FATAL_FAILURE(write_input_files());
  for (const std::string policy : {"file", "off"}) {
    const std::string tag = "loop-" + policy;
    auto ps = start_workers(
        2,
        {"--files", dir_.string(), "--policy", policy, "--epochs", "1", "--custom-loop", "1",
         "--out", path(tag + "-{rank}.bin"), "--ids-out", path(tag + "-ids-{rank}.txt")},
        tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    expect_bitwise(read_weights(path(tag + "-1.bin")), read_weights(path(tag + "-0.bin")),
                   tag + ": worker 1 vs worker 0");
    const auto ids0 = read_ids(path(tag + "-ids-0.txt"));
    const auto ids1 = read_ids(path(tag + "-ids-1.txt"));
    if (policy == "file") {
      std::vector<std::int64_t> both = ids0;
      both.insert(both.end(), ids1.begin(), ids1.end());
      std::sort(both.begin(), both.end());
      EXPECT_EQ(ids0.size(), 256u);
      EXPECT_EQ(both, iota_ids(512)) << "FILE: disjoint halves that make up the input";
    } else {
      EXPECT_EQ(ids0, iota_ids(512)) << "OFF: every worker reads everything";
      EXPECT_EQ(ids1, iota_ids(512)) << "OFF: every worker reads everything";
    }
  }
}

TEST_F(MultiWorkerTest, LocalReplicasInEveryWorkerReduceHierarchically) {
  const Trained ref = reference({}, "ref");
  // One bucket, and 64-byte buckets (one per variable, several in flight
  // across workers while backward goes on).
  for (const std::string bytes : {"0", "64"}) {
    const std::string tag = "h" + bytes;
    auto ps = start_workers(
        2, {"--out", path(tag + "-{rank}.bin"), "--local-replicas", "2", "--bytes-per-pack", bytes},
        tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, "2 workers x 2 replicas vs one process, buckets " + bytes);
    expect_bitwise(read_weights(path(tag + "-1.bin")), w0, "worker 1 vs worker 0");
  }
}

// Replicas on accelerator devices (here the fake accelerator's: memory only
// device code and explicit copies reach, as a GPU's), one and two per
// worker: the gradients travel through host memory between workers (the
// hierarchical reduction of LocalReplicas…) and the job trains like one
// process on the CPU. The same path serves GPUs (each worker's, or a Slurm
// task's share of its node's: ClusterResolverTest.SlurmTasks…).
TEST_F(MultiWorkerTest, WorkersWithReplicasOnAcceleratorsTrainLikeOneProcess) {
  const Trained ref = reference({}, "ref");
  for (const std::string devices : {"1", "2"}) {
    const std::string tag = "fake" + devices;
    auto ps =
        start_workers(2, {"--out", path(tag + "-{rank}.bin"), "--fake-devices", devices}, tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    for (auto& p : ps) {
      EXPECT_NE(
          slurp(p.log).find("a replica on /device:FAKE:" + std::to_string(std::stoi(devices) - 1)),
          std::string::npos)
          << slurp(p.log);
    }
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, "2 workers x " + devices + " fake device(s) vs one process");
    expect_bitwise(read_weights(path(tag + "-1.bin")), w0, "worker 1 vs worker 0");
  }
}

// Workers on GPUs (the emulated adapter's: two GPUs on this machine, one
// visible to each worker) sum their gradients with NCCL across processes:
// the chief's unique id reaches the other through the workers'
// communicator, the ranks meet in NCCL on their streams, and the job trains
// like one process within float rounding, the workers bitwise equal. Both
// workers on the same GPU: NCCL refuses it ("one rank per GPU") in every
// worker, and they all sum through host memory, as warned.
TEST_F(MultiWorkerTest, WorkersOnGpusSumWithNcclAcrossProcesses) {
  const Trained ref = reference({}, "ref");
  const std::map<std::string, std::string> env = {
      {"LOCKSTEP_CUDA_LIBRARY", LOCKSTEP_EMULATED_CUDA_LIBRARY},
      {"LOCKSTEP_EMULATED_GPUS", "2"},
      {"LOCKSTEP_EMULATED_NCCL_DIR", path("")}};  // removed with the test's folder
  for (const bool same_gpu : {false, true}) {
    const std::string tag = same_gpu ? "nccl-same" : "nccl";
    auto ps = start_workers(2, {"--out", path(tag + "-{rank}.bin")}, tag,
                            {{0, {"--gpu", "0"}}, {1, {"--gpu", same_gpu ? "0" : "1"}}}, {}, env);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    for (auto& p : ps) {
      const std::string log = slurp(p.log);
      EXPECT_NE(log.find("a replica on /device:GPU:0"), std::string::npos) << log;
      if (same_gpu) {
        EXPECT_NE(log.find("gradients summed: across 2 workers: through host memory"),
                  std::string::npos)
            << log;
        EXPECT_NE(log.find("one rank per GPU"), std::string::npos) << log;
      } else {
        EXPECT_NE(log.find("gradients summed: NcclAllReduce: the emulated adapter's NCCL"),
                  std::string::npos)
            << log;
      }
    }
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, tag + ": 2 workers on GPUs vs one process");
    expect_bitwise(read_weights(path(tag + "-1.bin")), w0, tag + ": worker 1 vs worker 0");
  }
}

// mixed_bfloat16 across 2 Gloo workers of 2 replicas each: the workers stay
// bitwise identical and train like one process within bfloat16 rounding
// (each replica's gradient is rounded to bfloat16 before the float32 sums;
// mirrored_test.cc's MixedBFloat16 test has the argument).
TEST_F(MultiWorkerTest, MixedBFloat16WorkersTrainLikeOneProcessWithinBFloat16Rounding) {
  // SGD, whose update is linear in the gradient (Adam's normalised update
  // turns a bfloat16 rounding of a tiny gradient into up to ~lr).
  const std::vector<std::string> mixed = {"--mixed-precision", "1",   "--epochs",        "1",
                                          "--optimizer",       "sgd", "--learning-rate", "0.1"};
  const Trained ref = reference(mixed, "mixed-ref");
  std::vector<std::string> args = {"--out", path("mixed-{rank}.bin"), "--local-replicas", "2"};
  args.insert(args.end(), mixed.begin(), mixed.end());
  auto ps = start_workers(2, args, "mixed");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const Trained w0 = read_weights(path("mixed-0.bin"));
  // Measured: the largest difference lies between 3e-4 and 1e-3 after 16 steps.
  expect_close(w0, ref, 2e-3, "2 workers x 2 replicas vs one process, mixed_bfloat16");
  expect_bitwise(read_weights(path("mixed-1.bin")), w0, "worker 1 vs worker 0");
}

// Gradients compressed to bfloat16 between workers (Gloo, 1 and 2 local
// replicas; MPI): the workers stay bitwise identical, and they train like
// one process within the rounding of each worker's gradient to bfloat16
// before the sum — more than float32 rounding, which shows the
// compression acts. SGD, as in the mixed_bfloat16 test above.
TEST_F(MultiWorkerTest, BFloat16GradientCompressionTrainsLikeOneProcessWithinItsRounding) {
  const std::vector<std::string> sgd = {"--epochs",        "1",  "--optimizer", "sgd",
                                        "--learning-rate", "0.1"};
  const Trained ref = reference(sgd, "compress-ref");
  auto check = [&](const std::string& tag, int workers) {
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    // Measured: the largest difference is 1.1e-4 after 16 steps (Gloo, MPI).
    expect_close(w0, ref, 1e-3, tag + ": bfloat16 gradients vs one process");
    double largest = 0;
    for (std::size_t i = 0; i < w0.weights.size(); ++i)
      for (std::size_t j = 0; j < w0.weights[i].size(); ++j)
        largest = std::max(largest, std::abs(double(w0.weights[i][j]) - ref.weights[i][j]));
    EXPECT_GT(largest, 1e-5) << tag << ": no more than float32 rounding; is the compression on?";
    for (int i = 1; i < workers; ++i)
      expect_bitwise(read_weights(path(tag + "-" + std::to_string(i) + ".bin")), w0,
                     tag + " worker " + std::to_string(i) + " vs worker 0");
  };
  for (const std::string local : {"1", "2"}) {
    const std::string tag = "compress-gloo-" + local;
    std::vector<std::string> args = {"--out", path(tag + "-{rank}.bin"), "--compress",
                                     "1",     "--local-replicas",        local};
    args.insert(args.end(), sgd.begin(), sgd.end());
    auto ps = start_workers(2, args, tag);
    for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    check(tag, 2);
  }
  std::vector<std::string> mpi = {MPIEXEC_PATH,
                                  "-n",
                                  "2",
                                  "--oversubscribe",
                                  MULTI_WORKER_TRAIN_PATH,
                                  "--out",
                                  path("compress-mpi-{rank}.bin"),
                                  "--compress",
                                  "1"};
  mpi.insert(mpi.end(), sgd.begin(), sgd.end());
  const Process p = spawn(mpi,
                          {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                           {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                           {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
                           {"ASAN_OPTIONS", "detect_leaks=0"},
                           {"OMP_NUM_THREADS", "1"}},
                          path("compress-mpi.log"));
  ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  check("compress-mpi", 2);
}

TEST_F(MultiWorkerTest, MpirunWorkersTrainLikeOneProcess) {
  const Trained ref = reference({}, "ref");
  for (int n : {2, 3}) {
    const std::string tag = "mpi" + std::to_string(n);
    const Process p = spawn({MPIEXEC_PATH, "-n", std::to_string(n), "--oversubscribe",
                             MULTI_WORKER_TRAIN_PATH, "--out", path(tag + "-{rank}.bin")},
                            {{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                             {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"},
                             {"OMPI_MCA_btl_vader_single_copy_mechanism", "none"},
                             // OpenMPI's plugins (dlopen'd, unloaded at exit) keep
                             // allocations LeakSanitizer cannot attribute or suppress;
                             // the Gloo runs check the same Lockstep code for leaks.
                             {"ASAN_OPTIONS", "detect_leaks=0"},
                             {"OMP_NUM_THREADS", "1"}},
                            path(tag + ".log"));
    ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained w0 = read_weights(path(tag + "-0.bin"));
    expect_close(w0, ref, 1e-5, tag + " vs one process");
    for (int i = 1; i < n; ++i)
      expect_bitwise(read_weights(path(tag + "-" + std::to_string(i) + ".bin")), w0,
                     tag + " rank " + std::to_string(i) + " vs rank 0");
  }
}

TEST_F(MultiWorkerTest, AWorkerThatNeverJoinsIsNamedWithinTheJoinTimeout) {
  const std::vector<int> ports = {free_port(), free_port()};
  const auto start = Clock::now();
  auto ps = start_workers(1, {"--timeout-ms", "2000"}, "alone", {}, ports);
  EXPECT_EQ(wait_exit(ps[0]), 3);
  EXPECT_LT(Clock::now() - start, 15s);
  const std::string log = slurp(ps[0].log);
  EXPECT_NE(log.find("worker 1 (127.0.0.1:" + std::to_string(ports[1]) + ") did not join within 2"),
            std::string::npos)
      << log;
}

// Elastic shrink (issue #40), the rendezvous alone, workers on threads: on a
// restart the chief waits rejoin_timeout and goes on with the workers that
// came if they are at least min_workers; they take new places and their
// collectives span the job re-formed; a worker that comes later is told it
// was left out; fewer than min_workers, or a first start, is the join error.
TEST_F(MultiWorkerTest, OnAnElasticRestartTheChiefGoesOnWithTheWorkersBackInTime) {
  namespace ld = lockstep::distribute;
  // The workers share this process: they must not split its cores.
  ::setenv("LOCKSTEP_PIN_WORKERS", "0", 1);
  struct Unset {
    ~Unset() { ::unsetenv("LOCKSTEP_PIN_WORKERS"); }
  } unset;
  const std::vector<int> ports = {free_port(), free_port(), free_port()};
  auto options = [&](int index, int min_workers, bool restarted) {
    return ld::MultiWorkerMirroredStrategyOptions{
        .cluster_resolver = ld::ClusterResolver::from_tf_config(tf_config(ports, index)),
        .timeout = 20s,
        .join_timeout = 20s,
        .job_token = "elastic-join-test",
        .min_workers = min_workers,
        .rejoin_timeout = 1500ms,
        .restarted = restarted};
  };
  {
    std::optional<ld::MultiWorkerMirroredStrategy> chief, one;
    std::thread t([&] { one.emplace(options(2, 2, true)); });  // worker 2 of 3, back in time
    chief.emplace(options(0, 2, true));
    t.join();
    ASSERT_EQ(chief->num_workers(), 2);
    EXPECT_EQ(chief->worker_index(), 0);
    ASSERT_EQ(one->num_workers(), 2);
    EXPECT_EQ(one->worker_index(), 1);
    EXPECT_EQ(one->cluster_resolver().worker_address(1).port, ports[2]);
    std::vector<double> a{1.0}, b{2.0};
    std::thread s([&] { one->extended().sum_across_workers(b); });
    chief->extended().sum_across_workers(a);
    s.join();
    EXPECT_EQ(a[0], 3.0);
    EXPECT_EQ(b[0], 3.0);
    // Worker 1 comes late: it is told it was left out and waits; the chief
    // sees it at its next backup (a collective every worker calls), calls
    // it back, and stops; worker 1 then stops too, to be started again.
    std::string late_error;
    std::thread late([&] {
      try {
        ld::MultiWorkerMirroredStrategy s(options(1, 2, true));
        late_error = "joined a job that went on without it";
      } catch (const lockstep::RejoinError& e) {
        late_error = e.what();
      } catch (const std::exception& e) {
        late_error = std::string("not a RejoinError: ") + e.what();
      }
    });
    std::string waiting, heard;
    std::thread other;
    for (int i = 0; i < 200; ++i) {
      other = std::thread([&] { heard = one->extended().workers_waiting_to_rejoin(); });
      waiting = chief->extended().workers_waiting_to_rejoin();
      if (!waiting.empty()) break;
      other.join();
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(waiting, "worker 1 (127.0.0.1:" + std::to_string(ports[1]) + ")");
    if (other.joinable()) other.join();
    // The job stops (its workers part together), and the worker left out
    // with it.
    std::thread stop_one([&] { one.reset(); });
    chief.reset();
    stop_one.join();
    late.join();
    EXPECT_EQ(heard, "a worker left out");  // what the chief's list is, worker 2 cannot know
    EXPECT_NE(late_error.find("worker 1 (127.0.0.1:" + std::to_string(ports[1]) +
                              "): the job re-forms with this worker from its last backup"),
              std::string::npos)
        << late_error;
  }
  // Fewer than min_workers back: the chief names the missing.
  const std::vector<int> again = {free_port(), free_port(), free_port()};
  auto alone = options(0, 2, true);
  alone.cluster_resolver = ld::ClusterResolver::from_tf_config(tf_config(again, 0));
  try {
    ld::MultiWorkerMirroredStrategy chief(alone);
    ADD_FAILURE() << "the chief went on alone with min_workers 2";
  } catch (const lockstep::TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("did not rejoin within 1.5 s, and the 1 worker(s) that "
                                         "did are fewer than min_workers (2)"),
              std::string::npos)
        << e.what();
  }
  // A first start waits for every worker, whatever min_workers says.
  alone.restarted = false;
  alone.join_timeout = 1s;
  EXPECT_THROW(ld::MultiWorkerMirroredStrategy{alone}, lockstep::TimeoutError);
  alone.min_workers = 4;
  EXPECT_THROW(ld::MultiWorkerMirroredStrategy{alone}, lockstep::ValueError);
}

// Issue #23, item 11: a worker given a longer cluster list than the chief's
// hears at once that the lists differ (it waited for a worker that would
// never come until the join timeout), and the chief names it too.
TEST_F(MultiWorkerTest, AWorkerWithAnotherClusterListIsToldAtOnceOnBothSides) {
  const std::vector<int> ports = {free_port(), free_port(), free_port()};
  const std::vector<int> two(ports.begin(), ports.begin() + 2);
  const auto start = Clock::now();
  std::vector<Process> ps;
  for (int i = 0; i < 2; ++i) {
    ps.push_back(spawn({MULTI_WORKER_TRAIN_PATH, "--timeout-ms", "30000"},
                       {{"TF_CONFIG", tf_config(i == 0 ? two : ports, i)},
                        {"LOCKSTEP_JOB_TOKEN", "test-token-lists"}},
                       path("lists-worker" + std::to_string(i) + ".log")));
  }
  for (auto& p : ps) EXPECT_NE(wait_exit(p), 0) << slurp(p.log);
  EXPECT_LT(Clock::now() - start, 15s) << "the mismatch waited for the join timeout";
  const std::string worker1 = slurp(ps[1].log), chief = slurp(ps[0].log);
  EXPECT_NE(worker1.find("was given another cluster spec than the chief"), std::string::npos)
      << worker1;
  EXPECT_NE(worker1.find(std::to_string(ports[2])), std::string::npos) << worker1;
  EXPECT_NE(chief.find("was given another cluster spec than worker 0"), std::string::npos) << chief;
}

TEST_F(MultiWorkerTest, AWorkerWithAnotherModelIsRefusedAtStartUpOnEveryWorker) {
  auto ps = start_workers(2, {}, "mismatch", {{1, {"--hidden", "16"}}});
  for (auto& p : ps) {
    EXPECT_EQ(wait_exit(p), 3);
    const std::string log = slurp(p.log);
    EXPECT_NE(log.find("elements of type float32 on worker 1 (127.0.0.1:"), std::string::npos)
        << log;
    EXPECT_NE(log.find("every worker must build the same model"), std::string::npos) << log;
  }
}

TEST_F(MultiWorkerTest, AWorkerWithAnotherOptimizerIsRefusedWhenFitStarts) {
  // Same variables (their broadcast passes), another learning rate: the
  // hash all-gather at the start of fit names worker 1 on both workers.
  auto ps = start_workers(2, {}, "opt", {{1, {"--learning-rate", "0.02"}}});
  for (auto& p : ps) {
    EXPECT_EQ(wait_exit(p), 3);
    const std::string log = slurp(p.log);
    EXPECT_NE(log.find("fit: worker 1 has another optimizer config than the chief (worker 0)"),
              std::string::npos)
        << log;
  }
}

TEST_F(MultiWorkerTest, AStrangerAtTheStorePortChangesNothing) {
  const Trained ref = reference({}, "ref");
  std::atomic<bool> stop{false};
  std::atomic<int> connected{0};
  std::vector<int> ports = {free_port(), free_port()};
  std::thread stranger([&] {
    // Junk instead of an HMAC, again and again, while the job starts and trains.
    while (!stop) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<std::uint16_t>(ports[0]));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        const char junk[] = "\xff\xff\xff\x7fGET / HTTP/1.0\r\n\r\n padding to 32 bytes";
        (void)::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        ++connected;
      }
      ::close(fd);
      std::this_thread::sleep_for(2ms);
    }
  });
  auto ps = start_workers(2, {"--out", path("s-{rank}.bin")}, "s", {}, ports);
  for (auto& p : ps) EXPECT_EQ(wait_exit(p), 0) << slurp(p.log);
  stop = true;
  stranger.join();
  EXPECT_GT(connected.load(), 0);
  expect_close(read_weights(path("s-0.bin")), ref, 1e-5, "with a stranger knocking");
}

// Workers started by hand on one host (each its own TF_CONFIG, nothing
// pinned) split its cores as `lockstep launch` does: every thread of each
// worker runs on cores no other worker has, and each says so in one line.
// LOCKSTEP_PIN_WORKERS=0 or LOCKSTEP_CPU_DEVICES leave them on every core.
TEST_F(MultiWorkerTest, WorkersStartedByHandOnOneHostSplitItsCores) {
  auto cores_of = [](const std::string& log) {
    const auto at = log.find("cores of every thread: ");
    EXPECT_NE(at, std::string::npos) << log;
    if (at == std::string::npos) return std::string();
    const auto begin = at + std::strlen("cores of every thread: ");
    return log.substr(begin, log.find('\n', begin) - begin);
  };
  auto expand = [](const std::string& list) {  // "0-2,5" -> {0, 1, 2, 5}
    std::set<int> cores;
    std::stringstream ss(list);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto dash = item.find('-');
      const int lo = std::stoi(item.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(item.substr(dash + 1));
      for (int c = lo; c <= hi; ++c) cores.insert(c);
    }
    return cores;
  };
  const std::vector<std::string> args = {"--epochs", "1", "--print-cores", "1"};
  const std::size_t host_cores = lockstep::available_physical_cores().size();
  auto ps = start_workers(2, args, "split");
  for (auto& p : ps) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
  const std::string log0 = slurp(ps[0].log), log1 = slurp(ps[1].log);
  const std::string list0 = cores_of(log0), list1 = cores_of(log1);
  ASSERT_NE(list0, "mixed") << log0;
  ASSERT_NE(list1, "mixed") << log1;
  const std::set<int> c0 = expand(list0), c1 = expand(list1);
  EXPECT_FALSE(c0.empty());
  if (host_cores >= 2) {
    for (int c : c0) EXPECT_EQ(c1.count(c), 0u) << "core " << c << " is in both workers";
    EXPECT_EQ(c0.size() + c1.size(), host_cores);
  }
  EXPECT_NE(log0.find("worker 0 (127.0.0.1:" + std::to_string(ports_[0]) +
                      ") shares this host with 1 other worker; it runs on core"),
            std::string::npos)
      << log0;
  EXPECT_NE(log1.find("shares this host with 1 other worker"), std::string::npos) << log1;

  // The explicit choices win: both workers keep every core, and say nothing.
  for (const auto& [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"LOCKSTEP_PIN_WORKERS", "0"}, {"LOCKSTEP_CPU_DEVICES", "1"}}) {
    auto kept = start_workers(2, args, "kept-" + var, {}, {}, {{var, value}});
    for (auto& p : kept) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    for (auto& p : kept) {
      const std::string log = slurp(p.log);
      EXPECT_EQ(expand(cores_of(log)).size(), host_cores) << var << "=" << value << ": " << log;
      EXPECT_EQ(log.find("shares this host"), std::string::npos) << log;
    }
  }
}

}  // namespace
