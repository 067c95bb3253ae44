// ParameterServerStrategy with real processes (ps_train as every task, each
// with its TF_CONFIG, on loopback): a custom loop with one worker trains as
// one device, sharded variables read as one tensor, a throwing function
// surfaces once, a killed worker loses no function and rejoins, strangers
// leave the job unaffected.
#include <signal.h>

#include <sstream>

#include "distribute/multi_worker_support.h"
#include "distribute/worker_programs.h"
#include "lockstep/comm/rpc.h"
#include "support/weights.h"

namespace {

using namespace lockstep::testing_support;
using namespace std::chrono_literals;

// A job: ps tasks and workers serving, then the chief; all ps_train.
class PsJobTest : public MultiWorkerTest {
 protected:
  void TearDown() override {
    for (auto& p : servers_) {
      if (p.pid > 0 && ::kill(p.pid, 0) == 0) {
        ::kill(p.pid, SIGKILL);
        wait_exit(p, 10s);
      }
    }
    MultiWorkerTest::TearDown();
  }

  std::string tf_config(const std::string& type, int index) const {
    auto list = [](const std::vector<int>& ports) {
      std::string s;
      for (int p : ports)
        s += (s.empty() ? "\"" : ", \"") + std::string("127.0.0.1:") + std::to_string(p) + "\"";
      return s;
    };
    return "{\"cluster\": {\"chief\": [\"127.0.0.1:" + std::to_string(chief_port_) +
           "\"], \"worker\": [" + list(worker_ports_) + "], \"ps\": [" + list(ps_ports_) +
           "]}, \"task\": {\"type\": \"" + type + "\", \"index\": " + std::to_string(index) + "}}";
  }

  Process start_task(const std::string& type, int index, std::vector<std::string> args,
                     const std::string& tag) {
    std::vector<std::string> a = {PS_TRAIN_PATH};
    a.insert(a.end(), args.begin(), args.end());
    return spawn(a,
                 {{"TF_CONFIG", tf_config(type, index)},
                  {"LOCKSTEP_JOB_TOKEN", "ps-test-token-0123"},
                  {"OMP_NUM_THREADS", "1"}},
                 path(tag + "-" + type + std::to_string(index) + ".log"));
  }

  // Starts the servers; returns the chief.
  Process start_job(int workers, int ps, const std::vector<std::string>& args,
                    const std::string& tag,
                    std::map<int, std::vector<std::string>> worker_extra = {}) {
    chief_port_ = free_port();
    worker_ports_.clear();
    ps_ports_.clear();
    for (int i = 0; i < workers; ++i) worker_ports_.push_back(free_port());
    for (int i = 0; i < ps; ++i) ps_ports_.push_back(free_port());
    for (int i = 0; i < ps; ++i) servers_.push_back(start_task("ps", i, args, tag));
    for (int i = 0; i < workers; ++i) {
      std::vector<std::string> a = args;
      for (const auto& e : worker_extra[i]) a.push_back(e);
      servers_.push_back(start_task("worker", i, a, tag));
    }
    return start_task("chief", 0, args, tag);
  }

  // Every server exits 0 once the chief has ended the job.
  void expect_servers_exit() {
    for (auto& p : servers_) {
      EXPECT_EQ(wait_exit(p, 30s), 0) << slurp(p.log);
      p.pid = -1;
    }
  }

  // ps_train `args` as a job of 1 worker and 1 ps, and on one device; the
  // weights must agree within float rounding. Returns the chief's and the
  // reference's logs.
  std::pair<std::string, std::string> fit_beside_one_device(const std::vector<std::string>& args,
                                                            const std::string& what) {
    std::vector<std::string> ps_args = args;
    ps_args.insert(ps_args.end(), {"--out", path("ps.bin")});
    const Process chief = start_job(1, 1, ps_args, "fit");
    EXPECT_EQ(wait_exit(chief), 0) << slurp(chief.log);
    expect_servers_exit();
    std::vector<std::string> ref_args = {PS_TRAIN_PATH};
    ref_args.insert(ref_args.end(), args.begin(), args.end());
    ref_args.insert(ref_args.end(), {"--out", path("ref.bin")});
    const Process ref = spawn(ref_args, {{"OMP_NUM_THREADS", "1"}}, path("ref.log"));
    EXPECT_EQ(wait_exit(ref), 0) << slurp(ref.log);
    expect_close(read_weights(path("ps.bin")), read_weights(path("ref.bin")), 1e-5,
                 what + " vs one device");
    return {slurp(chief.log), slurp(ref.log)};
  }

  // ps_train's Estimator on 1 worker and 1 ps, trained to global step
  // `steps` in model_dir; its weights to ps.bin.
  Process start_estimator_job(const std::string& steps, const std::string& tag) {
    return start_job(1, 1,
                     {"--mode", "estimator", "--steps", steps, "--out", path("model_dir"),
                      "--weights", path("ps.bin")},
                     tag);
  }
  // The same Estimator on one device: its weights must be ps.bin's.
  void expect_estimator_as_one_device(const std::string& steps, const std::string& what) {
    const Process ref = spawn({PS_TRAIN_PATH, "--mode", "estimator", "--steps", steps, "--out",
                               path("ref_dir"), "--weights", path("ref.bin")},
                              {{"OMP_NUM_THREADS", "1"}}, path("ref.log"));
    ASSERT_EQ(wait_exit(ref), 0) << slurp(ref.log);
    expect_close(read_weights(path("ps.bin")), read_weights(path("ref.bin")), 1e-6, what);
  }

  int chief_port_ = 0;
  std::vector<int> worker_ports_, ps_ports_;
  std::vector<Process> servers_;
};

TEST_F(PsJobTest, OneWorkerAndOnePsTrainAsOneDeviceWithinFloatRounding) {
  const Process chief =
      start_job(1, 1, {"--mode", "custom", "--steps", "40", "--out", path("ps.bin")}, "one");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  EXPECT_NE(log.find("worker 0 ran 40 steps"), std::string::npos) << log;
  EXPECT_NE(log.find("iterations 40 updates 160 mean staleness 0.000"), std::string::npos) << log;
  const Process ref = spawn({PS_TRAIN_PATH, "--steps", "40", "--out", path("ref.bin")},
                            {{"OMP_NUM_THREADS", "1"}}, path("ref.log"));
  ASSERT_EQ(wait_exit(ref), 0) << slurp(ref.log);
  expect_close(read_weights(path("ps.bin")), read_weights(path("ref.bin")), 1e-5,
               "1 worker + 1 ps vs one device");
}

// "history <name> v1 v2 ..." of a log, by name.
std::map<std::string, std::vector<double>> history_of(const std::string& log) {
  std::map<std::string, std::vector<double>> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("history ", 0) != 0) continue;
    std::istringstream words(line.substr(8));
    std::string name;
    words >> name;
    double v = 0;
    while (words >> v) out[name].push_back(v);
  }
  return out;
}

TEST_F(PsJobTest, FitWithOneWorkerAndOnePsTrainsAndLogsAsOneDevice) {
  const std::vector<std::string> args = {
      "--mode", "fit", "--epochs", "2", "--steps", "20", "--steps-per-execution", "3"};
  const auto [chief_log, ref_log] = fit_beside_one_device(args, "fit: 1 worker + 1 ps");
  const auto got = history_of(chief_log), want = history_of(ref_log);
  for (const char* name : {"loss", "accuracy"}) {
    ASSERT_EQ(got.count(name), 1u) << chief_log;
    ASSERT_EQ(got.at(name).size(), 2u);
    for (std::size_t e = 0; e < 2; ++e)
      EXPECT_NEAR(got.at(name)[e], want.at(name)[e], 1e-5) << name << " epoch " << e;
  }
  // One worker: nothing lands between its read and its update.
  EXPECT_EQ(got.at("staleness"), (std::vector<double>{0, 0}));
  EXPECT_NE(chief_log.find("optimizer iterations 40"), std::string::npos);
}

// Weights changed on the coordinator before fit (as load_weights changes
// them) are what trains: fit hands them to the parameter servers first.
TEST_F(PsJobTest, WeightsChangedOnTheCoordinatorBeforeFitAreWhatTrains) {
  const std::vector<std::string> args = {"--mode",  "fit", "--epochs",        "1",
                                         "--steps", "6",   "--scale-weights", "0.5"};
  fit_beside_one_device(args, "fit from halved weights: 1 worker + 1 ps");
}

// BatchNormalization's moving statistics, which a step assigns rather than
// trains, reach the parameter servers after each step: with one worker the
// pulled statistics are the one-device run's (they are among the weights
// compared).
TEST_F(PsJobTest, MovingStatisticsAWorkerAssignsReachTheParameterServers) {
  fit_beside_one_device({"--mode", "fit", "--epochs", "1", "--steps", "6", "--batch-norm", "1"},
                        "fit with BatchNormalization: 1 worker + 1 ps");
}

// A callback that changes the optimizer's settings during fit would change
// the coordinator's optimizer alone: a clear error, not a silent no-op.
TEST_F(PsJobTest, ALearningRateSchedulerCallbackIsRefusedWithAHint) {
  const Process chief = start_job(
      1, 1, {"--mode", "fit", "--epochs", "2", "--steps", "4", "--lr-scheduler", "1"}, "fit");
  EXPECT_EQ(wait_exit(chief), 1) << slurp(chief.log);
  const std::string log = slurp(chief.log);
  EXPECT_NE(log.find("epoch 1: a callback changed the optimizer's settings"), std::string::npos)
      << log;
  EXPECT_NE(log.find("call fit once per setting"), std::string::npos) << log;
  expect_servers_exit();
}

// RunConfig(train_distribute=ParameterServerStrategy): the chief schedules
// the Estimator's steps on a worker that serve()s it; with one worker they
// run in order, so the weights, the global step and the evaluation are
// one device's (ps_train's LinearRegressor, Ftrl's slots on the ps task).
TEST_F(PsJobTest, AnEstimatorTrainsOnOneWorkerAsOnOneDevice) {
  const Process chief = start_estimator_job("40", "estimator");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  EXPECT_NE(log.find("global_step 40\n"), std::string::npos) << log;
  EXPECT_NE(log.find("Saving checkpoints for 40 into"), std::string::npos) << log;
  EXPECT_NE(slurp(servers_[1].log).find("this worker ran 40 of its training steps"),
            std::string::npos)
      << slurp(servers_[1].log);
  expect_estimator_as_one_device("40", "Estimator on 1 worker + 1 ps vs one device");
}

// The chief killed (SIGKILL) after global step 25 of 40, checkpoints every
// 10: a new job on the same model_dir restores the variables and Ftrl's
// slots of step 20 onto its parameter servers and ends where an
// uninterrupted run does.
TEST_F(PsJobTest, AnEstimatorResumesOnParameterServersAfterTheChiefIsKilled) {
  const Process chief = start_job(
      1, 1,
      {"--mode", "estimator", "--steps", "40", "--out", path("model_dir"), "--kill-at-step", "25"},
      "estimator-killed");
  ASSERT_EQ(wait_exit(chief), 128 + SIGKILL) << slurp(chief.log);
  EXPECT_NE(slurp(chief.log).find("Saving checkpoints for 20 into"), std::string::npos)
      << slurp(chief.log);
  for (Process& p : servers_) {  // the job's tasks are restarted with it
    ::kill(p.pid, SIGKILL);
    wait_exit(p, 10s);
    p.pid = -1;
  }
  servers_.clear();
  const Process again = start_estimator_job("40", "estimator-40");
  ASSERT_EQ(wait_exit(again), 0) << slurp(again.log);
  expect_servers_exit();
  const std::string log = slurp(again.log);
  EXPECT_NE(log.find("Restoring parameters from " + path("model_dir") + "/model.ckpt-20"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("global_step 40\n"), std::string::npos) << log;
  expect_estimator_as_one_device("40",
                                 "resumed at 20 on parameter servers vs 40 steps on one device");
}

// Two workers step asynchronously; the chief counts 60 global steps, and
// its checkpoint restores on one device to the same evaluation. Each
// worker reports the steps it ran and together they ran the 60; how they
// share them is the scheduler's (on a loaded machine one worker can take
// all 60 before the other's first: seen once in a fresh-root run), so no
// share is asserted.
TEST_F(PsJobTest, AnEstimatorTrainsOnTwoWorkersAndRestoresOnOneDevice) {
  const Process chief = start_job(
      2, 2, {"--mode", "estimator", "--steps", "60", "--out", path("model_dir")}, "estimator2");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  EXPECT_NE(log.find("global_step 60\n"), std::string::npos) << log;
  std::int64_t total = 0;
  for (std::size_t w = 2; w < 4; ++w) {  // servers_: ps 0, ps 1, worker 0, worker 1
    const std::string wlog = slurp(servers_[w].log);
    const std::string key = "this worker ran ";
    const std::size_t at = wlog.find(key);
    ASSERT_NE(at, std::string::npos) << wlog;
    total += std::stoll(wlog.substr(at + key.size()));
  }
  EXPECT_EQ(total, 60);
  const std::size_t eval_at = log.find("eval {");
  ASSERT_NE(eval_at, std::string::npos) << log;
  const std::string eval = log.substr(eval_at, log.find('\n', eval_at) - eval_at);
  const Process one = spawn({PS_TRAIN_PATH, "--mode", "estimator-eval", "--out", path("model_dir")},
                            {{"OMP_NUM_THREADS", "1"}}, path("one.log"));
  ASSERT_EQ(wait_exit(one), 0) << slurp(one.log);
  EXPECT_NE(slurp(one.log).find(eval + "\n"), std::string::npos) << eval << "\n" << slurp(one.log);
}

// A worker's input that ends ends training at that global step, as one
// device's does; a worker that serves no Estimator is an error naming it.
TEST_F(PsJobTest, AnEstimatorStopsAtTheEndOfAWorkersInputAndNamesAWorkerThatDoesNotServeIt) {
  const Process chief = start_job(
      1, 1, {"--mode", "estimator", "--steps", "40", "--out", path("model_dir"), "--finite", "1"},
      "estimator-finite");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  std::string log = slurp(chief.log);
  EXPECT_NE(log.find("input_fn's dataset ended on a worker at global step 4."), std::string::npos)
      << log;
  EXPECT_NE(log.find("global_step 4\n"), std::string::npos) << log;
  servers_.clear();
  const Process plain = start_job(
      1, 1,
      {"--mode", "estimator", "--steps", "40", "--out", path("plain_dir"), "--plain-server", "1"},
      "estimator-plain");
  EXPECT_EQ(wait_exit(plain), 1) << slurp(plain.log);
  log = slurp(plain.log);
  EXPECT_NE(log.find("Estimator.train: "), std::string::npos) << log;
  // The worker is named once, then the function it could not run.
  const std::string worker = "worker 0 (127.0.0.1:" + std::to_string(worker_ports_[0]) + ")";
  const std::size_t at = log.find("this worker serves no Estimator");
  ASSERT_NE(at, std::string::npos) << log;
  const std::string line = log.substr(log.rfind('\n', at) + 1, at - log.rfind('\n', at) - 1);
  EXPECT_NE(line.find(worker + ": lockstep.estimator."), std::string::npos) << line;
  EXPECT_EQ(line.find(worker), line.rfind(worker)) << line;
  expect_servers_exit();
}

TEST_F(PsJobTest, TwoWorkersTrainAShardedKernelThatReadsAsOneTensor) {
  const Process chief = start_job(
      2, 2, {"--mode", "custom", "--steps", "60", "--partition", "3", "--out", path("ps.bin")},
      "sharded");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  // 20 rows over 3 shards: 7, 7, 6, placed round-robin over the 2 ps tasks.
  EXPECT_NE(log.find("sharded kernel: rows 7 7 6 on ps 0 1 0 reads as one tensor equal to the "
                     "pulled copy"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("iterations 60 "), std::string::npos) << log;
  EXPECT_NE(log.find("scheduled 60 completed 60 rerun 0"), std::string::npos) << log;
}

TEST_F(PsJobTest, AFunctionThatThrowsSurfacesOnceWithTheWorkersNameAndTheRestAreCancelled) {
  const Process chief = start_job(1, 1, {"--mode", "throw", "--steps", "200"}, "throw");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  EXPECT_NE(
      log.find("raised 1: worker 0 (127.0.0.1:" + std::to_string(worker_ports_[0]) + "): boom: "),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("boom: the fifth call fails"), std::string::npos) << log;
  // Four ran, one failed, the rest never ran.
  EXPECT_NE(log.find("fetched ok 4 failed 1 cancelled "), std::string::npos) << log;
}

TEST_F(PsJobTest, AKilledWorkerLosesNoFunctionAndRejoinsWhenRestarted) {
  const std::vector<std::string> args = {"--mode", "custom", "--steps", "300", "--slow-ms", "10"};
  const Process chief = start_job(2, 1, args, "kill", {{1, {"--kill-at-call", "20"}}});
  // Worker 1 dies (SIGKILL) at the start of its 20th function.
  Process& victim = servers_[2];
  ASSERT_EQ(wait_exit(victim, 60s), 128 + SIGKILL) << slurp(victim.log);
  victim = start_task("worker", 1, args, "kill-again");
  ASSERT_EQ(wait_exit(chief, 120s), 0) << slurp(chief.log);
  expect_servers_exit();
  const std::string log = slurp(chief.log);
  // Every function ran (at least once): none lost.
  EXPECT_NE(log.find("scheduled 300 completed 300 rerun 1 rejoins 1"), std::string::npos) << log;
  EXPECT_NE(log.find("iterations 300 "), std::string::npos) << log;
  EXPECT_NE(log.find("was lost"), std::string::npos) << log;
  EXPECT_NE(log.find("rejoined"), std::string::npos) << log;
  // The restarted worker took functions again (its own log counts them).
  EXPECT_NE(slurp(victim.log).find("serving"), std::string::npos);
  EXPECT_NE(log.find("worker 1 ran"), std::string::npos) << log;
}

TEST_F(PsJobTest, StrangersAndJunkAreRefusedAndTheJobGoesOn) {
  const Process chief = start_job(
      1, 1, {"--mode", "custom", "--steps", "200", "--slow-ms", "5", "--out", path("ps.bin")},
      "strangers");
  // While the job trains: junk bytes and calls under a wrong token at the
  // ps task and the worker.
  std::this_thread::sleep_for(500ms);
  for (int port : {ps_ports_[0], worker_ports_[0]}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const std::string junk(4096, '\x5a');
      (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    }
    ::close(fd);
    auto stranger =
        lockstep::comm::rpc::Channel::open({.address = "127.0.0.1:" + std::to_string(port),
                                            .token = "wrong",
                                            .peer = "target",
                                            .timeout = 5s});
    try {
      if (port == ps_ports_[0]) {
        stranger->read({0}, true);
      } else {
        stranger->run_function("step", {}, 5s);
      }
      ADD_FAILURE() << "a stranger's call was served";
    } catch (const lockstep::comm::rpc::RpcError& e) {
      EXPECT_EQ(e.code(), lockstep::comm::rpc::RpcCode::kUnauthenticated) << e.what();
    }
    try {
      stranger->shutdown();
      ADD_FAILURE() << "a stranger shut a task down";
    } catch (const lockstep::comm::rpc::RpcError& e) {
      EXPECT_EQ(e.code(), lockstep::comm::rpc::RpcCode::kUnauthenticated) << e.what();
    }
  }
  ASSERT_EQ(wait_exit(chief, 120s), 0) << slurp(chief.log);
  expect_servers_exit();
  EXPECT_NE(slurp(chief.log).find("scheduled 200 completed 200 rerun 0"), std::string::npos)
      << slurp(chief.log);
}

TEST_F(PsJobTest, AKilledPsIsAnErrorNamingItAndARerunResumesFromTheLastBackup) {
  const std::string backup = path("backup");
  const std::vector<std::string> args = {"--mode",   "fit",  "--epochs",  "8",
                                         "--steps",  "20",   "--slow-ms", "15",
                                         "--backup", backup, "--out",     path("ps.bin")};
  const Process chief = start_job(1, 2, args, "pskill");
  // Once the backup of epoch 2 is on disk, ps 1 dies.
  const auto started = Clock::now();
  while (!fs::exists(fs::path(backup) / "backup-2.safetensors")) {
    ASSERT_LT(Clock::now() - started, 120s) << slurp(chief.log);
    std::this_thread::sleep_for(20ms);
  }
  Process& ps1 = servers_[1];
  ::kill(ps1.pid, SIGKILL);
  const auto killed = Clock::now();
  ASSERT_EQ(wait_exit(ps1), 128 + SIGKILL);
  ps1.pid = -1;
  // The chief raises the distinct error (exit 4: UnavailableError) naming
  // the task, in bounded time: its connection closed, the next read fails.
  EXPECT_EQ(wait_exit(chief, 60s), 4) << slurp(chief.log);
  EXPECT_LT(Clock::now() - killed, 20s);
  const std::string log = slurp(chief.log);
  EXPECT_NE(log.find("ps 1 (127.0.0.1:" + std::to_string(ps_ports_[1]) + ")"), std::string::npos)
      << log;
  EXPECT_NE(log.find("is lost: restart the job"), std::string::npos) << log;
  // The chief's end told the others: they exit.
  servers_.erase(servers_.begin() + 1);
  expect_servers_exit();
  servers_.clear();
  // The whole job again: it resumes from the last backup and finishes.
  const Process again = start_job(1, 2, args, "pskill-again");
  ASSERT_EQ(wait_exit(again, 120s), 0) << slurp(again.log);
  expect_servers_exit();
  const std::string rerun = slurp(again.log);
  EXPECT_NE(rerun.find("BackupAndRestore: resuming from"), std::string::npos) << rerun;
  EXPECT_NE(rerun.find("optimizer iterations 160"), std::string::npos) << rerun;
}

// A checkpoint's tensors by name.
std::map<std::string, std::vector<float>> tensors_of(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : lockstep::io::read_safetensors(path).tensors) {
    if (t.dtype() == lockstep::DType::kFloat32) out[name] = t.to_vector<float>();
  }
  return out;
}

TEST_F(PsJobTest, CheckpointsHoldTheLogicalVariablesSoMirroredAndPsRestoreEachOthers) {
  using namespace lockstep;
  // Trained under MirroredStrategy (2 replicas): weights, Adam's slots, step.
  auto mirrored_model = [] {
    set_random_seed(7);
    auto in = Input({20});
    auto h = layers::Dense(32, {.activation = "relu"})(in);
    Model m(in, layers::Dense(4)(h));
    m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .metrics = {"accuracy"}});
    return m;
  };
  distribute::MirroredStrategy mirrored({.devices = {&host_device()}, .replicas_per_device = 2});
  Model trained;
  {
    auto scope = mirrored.scope();
    trained = mirrored_model();
  }
  const auto [x, y] = testing_support::four_sums(256);
  trained.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0});
  Checkpoint(trained).save(path("mirrored.safetensors"));
  // Onto a job whose first kernel is in 3 shards over 2 ps tasks, and back.
  const Process chief = start_job(1, 2,
                                  {"--mode", "restore", "--partition", "3", "--steps", "10",
                                   "--restore", path("mirrored.safetensors"), "--out-checkpoint",
                                   path("ps.safetensors"), "--out", path("ps.bin")},
                                  "roundtrip");
  ASSERT_EQ(wait_exit(chief), 0) << slurp(chief.log);
  expect_servers_exit();
  const auto before = tensors_of(path("mirrored.safetensors"));
  const auto after = tensors_of(path("ps.safetensors"));
  ASSERT_EQ(before.size(), after.size());
  std::size_t slots = 0;
  for (const auto& [name, values] : before) {
    ASSERT_EQ(after.count(name), 1u) << name;
    EXPECT_EQ(after.at(name), values) << name << " changed on its way through the ps tasks";
    slots += name.rfind("optimizer/", 0) == 0;
  }
  EXPECT_EQ(slots, 8u);  // momentum and velocity of 4 variables
  EXPECT_EQ(Checkpoint::read(path("ps.safetensors")).iterations,
            Checkpoint::read(path("mirrored.safetensors")).iterations);
  // Trained on by the ps job, it restores under MirroredStrategy: the same
  // weights, 10 steps further.
  Model back;
  {
    auto scope = mirrored.scope();
    back = mirrored_model();
  }
  Checkpoint(back).restore(path("trained-ps.safetensors"));
  EXPECT_EQ(back.optimizer().iterations(), trained.optimizer().iterations() + 10);
  expect_bitwise({testing_support::weights(back), ""}, read_weights(path("ps.bin")),
                 "restored under MirroredStrategy");
}

}  // namespace
