// The Estimator with real processes (estimator_worker): the same
// LinearRegressor gives the same weights on one device, under
// MirroredStrategy with 2 replicas and as 2 worker processes
// (MultiWorkerMirroredStrategy from TF_CONFIG), per-replica batches chosen
// so every global step takes the same 20 examples; and a run killed with
// SIGKILL in the middle of train(max_steps=1000), checkpointing every 100
// steps, reaches global step 1000 when run again, with the weights of a run
// never interrupted.
#include <signal.h>

#include "distribute/multi_worker_support.h"

namespace {

using namespace lockstep::testing_support;
using namespace std::chrono_literals;

class EstimatorProcessTest : public MultiWorkerTest {
 protected:
  Process worker(const std::vector<std::string>& args, const std::string& tag,
                 const std::map<std::string, std::string>& env = {}) {
    std::vector<std::string> a = {ESTIMATOR_WORKER_PATH};
    a.insert(a.end(), args.begin(), args.end());
    std::map<std::string, std::string> e = env;
    e.emplace("OMP_NUM_THREADS", "1");
    return spawn(a, e, path(tag + ".log"));
  }
  Trained run_to_end(const std::vector<std::string>& args, const std::string& tag) {
    const Process p = worker(args, tag);
    EXPECT_EQ(wait_exit(p), 0) << slurp(p.log);
    return read_weights(path(tag + ".bin"));
  }
};

TEST_F(EstimatorProcessTest, OneDeviceTwoReplicasAndTwoWorkersTrainTheSameWeights) {
  for (const std::string reduction : {"sum_over_batch_size", "sum"}) {
    const std::vector<std::string> common = {"--max-steps", "40", "--reduction", reduction};
    auto args = [&](const std::string& tag, std::vector<std::string> more) {
      more.insert(more.end(), common.begin(), common.end());
      more.insert(more.end(), {"--model-dir", path(tag + "-dir"), "--out", path(tag + ".bin")});
      return more;
    };
    const Trained one = run_to_end(args(reduction + "-one", {"--batch", "20"}), reduction + "-one");
    const Trained mirrored =
        run_to_end(args(reduction + "-mirrored", {"--strategy", "mirrored", "--batch", "10"}),
                   reduction + "-mirrored");
    // Two workers: one model_dir (the chief writes it), each worker's input
    // its shard of the examples.
    auto ws = start_workers(
        2,
        {"--strategy", "multi-worker", "--batch", "10", "--shard", "1", "--max-steps", "40",
         "--reduction", reduction, "--model-dir", path(reduction + "-workers-dir")},
        reduction + "-workers",
        {{0, {"--out", path(reduction + "-workers-0.bin")}},
         {1, {"--out", path(reduction + "-workers-1.bin")}}});
    for (auto& p : ws) ASSERT_EQ(wait_exit(p), 0) << slurp(p.log);
    const Trained workers = read_weights(path(reduction + "-workers-0.bin"));
    ASSERT_EQ(one.weights.size(), 4u);
    expect_close(mirrored, one, 1e-5, reduction + ": MirroredStrategy(2) vs one device");
    expect_close(workers, one, 1e-5, reduction + ": 2 workers vs one device");
    EXPECT_EQ(workers.logs, "global_step=40");
    EXPECT_EQ(read_weights(path(reduction + "-workers-1.bin")).logs, "global_step=40");
  }
}

TEST_F(EstimatorProcessTest, KilledDuringTrainingItResumesToTheWeightsOfAnUninterruptedRun) {
  const std::vector<std::string> common = {"--max-steps", "1000", "--save-steps", "100"};
  auto args = [&](const std::string& dir, const std::string& out, std::vector<std::string> more) {
    more.insert(more.end(), common.begin(), common.end());
    more.insert(more.end(), {"--model-dir", path(dir), "--out", path(out)});
    return more;
  };
  const Trained uninterrupted = run_to_end(args("whole", "whole.bin", {}), "whole");
  EXPECT_EQ(uninterrupted.logs, "global_step=1000");

  // Slowed to ~3 ms a step; killed once a checkpoint of step 300 or later
  // exists, well before step 1000.
  const Process victim = worker(args("killed", "never.bin", {"--step-delay-ms", "3"}), "victim");
  const auto deadline = Clock::now() + 60s;
  auto newest = [&] {
    std::int64_t best = -1;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path("killed"), ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("model.ckpt-", 0) == 0 && n.size() > 23)
        best = std::max<std::int64_t>(best, std::stoll(n.substr(11, n.size() - 23)));
    }
    return best;
  };
  while (newest() < 300 && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
  ASSERT_GE(newest(), 300) << slurp(victim.log);
  ::kill(victim.pid, SIGKILL);
  ASSERT_EQ(wait_exit(victim), 128 + SIGKILL);
  const std::int64_t at_kill = newest();
  ASSERT_LT(at_kill, 1000) << "the run ended before it was killed";

  const Trained resumed = run_to_end(args("killed", "resumed.bin", {}), "resumed");
  EXPECT_EQ(resumed.logs, "global_step=1000");
  EXPECT_NE(slurp(path("resumed.log")).find("Restoring parameters from"), std::string::npos);
  // The input restarts with the new run (as TensorFlow's input_fn does),
  // and repeats every 2 steps: from a checkpoint at a multiple of 100 the
  // steps see what the uninterrupted run's saw, so every bit agrees.
  expect_bitwise(resumed, uninterrupted, "resumed from step " + std::to_string(at_kill));
}

}  // namespace
