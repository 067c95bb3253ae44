// GPUs as a program sees them, on the emulated CUDA adapter with two GPUs
// (tests/support/emulated_cuda's library, loaded through
// LOCKSTEP_CUDA_LIBRARY with LOCKSTEP_EMULATED_GPUS=2: CI has no GPU, and
// the device machine has one): TensorFlow's device names, tf.config's lists,
// MirroredStrategy's default, copies between GPUs, and the seed MLP on two
// GPUs — which share no memory, so their gradients meet in NCCL (the
// emulated adapter's, threads as ranks) or through the host — trained as on
// two CPU replicas.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"
#include "support/log_texts.h"
#include "support/mlp_examples.h"
#include "support/weights.h"

namespace lockstep {
namespace {

using distribute::MirroredStrategy;

using testing_support::mlp_examples;

// The seed MLP built and compiled under `strategy` (Adam, from logits).
Model seed_mlp_under(const MirroredStrategy& strategy) {
  Model model;
  auto scope = strategy.scope();
  set_random_seed(7);
  model = zoo::seed_mlp();
  model.compile({.optimizer = optimizers::Adam({.learning_rate = 0.001}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return model;
}

class GpuDevices : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // NOLINTNEXTLINE(concurrency-mt-unsafe): before any thread or GPU list
    ::setenv("LOCKSTEP_CUDA_LIBRARY", LOCKSTEP_EMULATED_CUDA_LIBRARY, 1);
    ::setenv("LOCKSTEP_EMULATED_GPUS", "2", 1);  // NOLINT(concurrency-mt-unsafe)
    set_logical_cpu_device_count(2);
    ASSERT_EQ(gpu_devices().size(), 2u)
        << "the emulated adapter gave no two GPUs: " << gpu_unavailable_reason();
  }
};

TEST_F(GpuDevices, TensorFlowsNamesAndListsFindThem) {
  EXPECT_EQ(list_physical_devices("GPU"),
            (std::vector<std::string>{"/physical_device:GPU:0", "/physical_device:GPU:1"}));
  EXPECT_EQ(list_physical_devices().size(), 3u);  // the CPU and two GPUs
  Device& second = *gpu_devices()[1];
  EXPECT_EQ(second.name(), "/device:GPU:1");
  EXPECT_EQ(second.type(), DeviceType::kGPU);
  for (const char* name : {"/gpu:1", "GPU:1", "/device:GPU:1", "/GPU:1",
                           "/job:localhost/replica:0/task:0/device:GPU:1"})
    EXPECT_EQ(&device(name), &second) << name;
  EXPECT_EQ(gpu_unavailable_reason(), "");
  try {
    (void)device("/gpu:2");
    FAIL() << "a third GPU was found";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'/gpu:2'"), std::string::npos) << what;       // what was asked
    EXPECT_NE(what.find("2 GPU devices"), std::string::npos) << what;  // and what there is
  }
}

TEST_F(GpuDevices, MirroredStrategyTakesEveryGpu) {
  const MirroredStrategy strategy;
  EXPECT_EQ(strategy.num_replicas_in_sync(), 2);
  EXPECT_EQ(strategy.replica_devices(), gpu_devices());
  const MirroredStrategy named({.devices = {&device("/gpu:0"), &device("/gpu:1")}});
  EXPECT_EQ(named.replica_devices(), gpu_devices());
}

// Two GPUs share no memory: a copy between them is refused with the way
// round it, never a read of one GPU's pointer on the other.
TEST_F(GpuDevices, ACopyBetweenGpusGoesThroughTheHost) {
  Tensor on_first;
  {
    DeviceScope on(*gpu_devices()[0], {.pin_thread = false});
    on_first = Tensor::from_vector(std::vector<float>{1, 2, 3});
  }
  EXPECT_EQ(&on_first.device(), gpu_devices()[0]);
  try {
    (void)on_first.copy_to(*gpu_devices()[1]);
    FAIL() << "a tensor was copied between GPUs that share no memory";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find(".cpu()"), std::string::npos) << e.what();
  }
  const Tensor there = on_first.cpu().copy_to(*gpu_devices()[1]);
  EXPECT_EQ(there.cpu().to_vector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST_F(GpuDevices, SeedMlpOnTwoGpusTrainsAsOnTwoCpuReplicas) {
  const auto [x, y] = mlp_examples(256, 8);
  auto fit = [&](const std::vector<Device*>& devices) {
    Model model = seed_mlp_under(MirroredStrategy({.devices = devices}));
    model.fit(x, y, {.batch_size = 64, .epochs = 2, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);
  };
  const auto cpus = fit(logical_devices());
  const auto gpus = fit(gpu_devices());
  testing_support::expect_close(cpus, gpus, 1e-4, "2 GPUs vs 2 CPU replicas");
}

// Two GPUs share no memory: their replicas sum gradients with NCCL on their
// streams (TensorFlow's default on GPUs, NcclAllReduce), and through host
// memory when the strategy asks for ReductionToOneDevice — the same sums in
// the same rank order, so the same bits, on both replicas.
TEST_F(GpuDevices, TwoGpusSumGradientsWithNcclAsThroughTheHost) {
  const MirroredStrategy nccl({.devices = gpu_devices()});
  EXPECT_EQ(nccl.cross_device_reduction().rfind("NcclAllReduce: ", 0), 0u)
      << nccl.cross_device_reduction();
  const MirroredStrategy host(
      {.devices = gpu_devices(), .cross_device_ops = comm::Algorithm::kReductionToOneDevice});
  EXPECT_EQ(host.cross_device_reduction(), "ReductionToOneDevice: through host memory (/cpu:0)");
  // And elsewhere, for the record: CPU replicas and one GPU.
  EXPECT_EQ(MirroredStrategy({.devices = logical_devices()}).cross_device_reduction(),
            "ReduceScatterAllGather: host collectives, in rank order");
  EXPECT_EQ(distribute::OneDeviceStrategy(*gpu_devices()[0]).cross_device_reduction(),
            "none (one replica)");
  const auto [x, y] = mlp_examples(256, 8);
  auto fit = [&](const MirroredStrategy& strategy) {
    Model model = seed_mlp_under(strategy);
    model.fit(x, y, {.batch_size = 64, .epochs = 2, .verbose = 0, .shuffle = false});
    std::vector<std::vector<float>> second;  // replica 1's copies
    for (const Variable& v : model.impl()->weights())
      second.push_back(v.replica_value(1).to_vector<float>());
    testing_support::expect_bitwise(testing_support::weights(model), second,
                                    strategy.cross_device_reduction() + ": the two replicas");
    return second;
  };
  testing_support::expect_bitwise(fit(host), fit(nccl), "NCCL against the host's sums");
}

// fit records the steps of replicas on two GPUs summing with NCCL too: each
// replica's recording is cut around its NCCL sum, whose marks on the stream
// (what the watchdog polls) and the host's wait for it are done at each
// replay between the parts, only the sum itself recorded. 51 batches of 64
// (32 per GPU): 50 replays, then the last batch (3 and 2 rows) eagerly;
// the weights, loss and accuracy are the eager fit's bit for bit, the same
// on both replicas.
TEST_F(GpuDevices, FitReplaysTheStepsOfTwoGpusSummingWithNcclWithTheEagerStepsBits) {
  const auto [x, y] = mlp_examples(51 * 64 + 5, 10);
  testing_support::LogTexts logged;
  auto fit = [&, &x = x, &y = y](bool run_eagerly) {
    const MirroredStrategy strategy({.devices = gpu_devices()});
    EXPECT_EQ(strategy.cross_device_reduction().rfind("NcclAllReduce: ", 0), 0u);
    Model model;
    {
      const auto in = strategy.scope();
      set_random_seed(9);
      model = zoo::seed_mlp();
      model.compile({.optimizer = optimizers::Adam(
                         {.learning_rate = schedules::ExponentialDecay(1e-3, 8, 0.7)}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .metrics = {"accuracy"},
                     .run_eagerly = run_eagerly});
    }
    logged.clear();
    const History h =
        model.fit(x, y, {.batch_size = 64, .epochs = 1, .verbose = 0, .shuffle = false});
    std::vector<std::vector<float>> second;  // replica 1's copies
    for (const Variable& v : model.impl()->weights())
      second.push_back(v.replica_value(1).to_vector<float>());
    testing_support::expect_bitwise(testing_support::weights(model), second, "the two replicas");
    return std::pair{second, h};
  };
  const auto [eager, eager_history] = fit(true);
  const auto [replayed, replayed_history] = fit(false);
  testing_support::expect_each_replica_replayed(logged, gpu_devices(), 50);
  testing_support::expect_bitwise(eager, replayed, "NCCL's replicas: 50 replays against eager");
  for (const char* name : {"loss", "accuracy"})
    EXPECT_EQ(eager_history[name], replayed_history[name]) << name;
}

// A sum that stalls inside a replayed step (rank 1's never arrives, as a
// hung GPU's NCCL kernel) is aborted by the strategy's watchdog at the
// collective timeout, as an eager one: the replay marks the sum in flight
// before the part that holds it (begin_sum), so fit fails within seconds
// saying the sum was aborted — not after the emulated NCCL's minute (a GPU:
// never).
TEST_F(GpuDevices, AStalledNcclSumInAReplayedStepIsAbortedAtTheCollectiveTimeout) {
  const auto [x, y] = mlp_examples(20 * 64, 11);
  const MirroredStrategy strategy({.devices = gpu_devices(), .timeout = std::chrono::seconds(2)});
  Model model = seed_mlp_under(strategy);
  testing_support::LogTexts logged;
  auto stall_later = std::make_shared<LambdaCallback>(
      LambdaCallback::Functions{.on_train_batch_end = [](std::int64_t batch, const Logs&) {
        // NOLINTNEXTLINE(concurrency-mt-unsafe): between steps, the replicas idle
        if (batch == 4) ::setenv("LOCKSTEP_EMULATED_NCCL_STALL_RANK", "1", 1);
      }});
  const auto start = std::chrono::steady_clock::now();
  std::string what;
  try {
    model.fit(x, y,
              {.batch_size = 64,
               .epochs = 1,
               .verbose = 0,
               .callbacks = {stall_later},
               .shuffle = false});
  } catch (const Error& e) {
    what = e.what();
  }
  ::unsetenv("LOCKSTEP_EMULATED_NCCL_STALL_RANK");  // NOLINT(concurrency-mt-unsafe)
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(logged.has("fit: the step is recorded as a graph on /device:GPU:1")) << logged.all();
  EXPECT_NE(what.find("fit: epoch 1, batch 5"), std::string::npos) << what;
  EXPECT_NE(what.find("aborted"), std::string::npos) << what;
  EXPECT_TRUE(logged.has("MirroredStrategy: aborting the GPUs' NCCL sums")) << logged.all();
  EXPECT_LT(waited, std::chrono::seconds(30)) << "the stalled sum was not aborted";
}

// Where NCCL's communicators cannot be made, the strategy says why in a
// warning and sums through host memory — the same training, never a failed
// job or a silent change.
TEST_F(GpuDevices, WithoutNcclCommunicatorsTheGpusSumThroughTheHostAndSaySo) {
  std::string warned;
  const LogSink before = set_log_sink([&](LogLevel level, std::string_view text) {
    if (level == LogLevel::kWarning) warned += text;
  });
  ::setenv("LOCKSTEP_EMULATED_NCCL_INIT_FAIL", "1", 1);  // NOLINT(concurrency-mt-unsafe)
  const MirroredStrategy without({.devices = gpu_devices()});
  ::unsetenv("LOCKSTEP_EMULATED_NCCL_INIT_FAIL");  // NOLINT(concurrency-mt-unsafe)
  set_log_sink(before);
  EXPECT_EQ(without.cross_device_reduction(), "ReductionToOneDevice: through host memory (/cpu:0)");
  EXPECT_NE(warned.find("planted failure"), std::string::npos) << warned;
  EXPECT_NE(warned.find("summed through host memory"), std::string::npos) << warned;
  const auto [x, y] = mlp_examples(128, 4);
  auto fit = [&](const MirroredStrategy& strategy) {
    Model model = seed_mlp_under(strategy);
    model.fit(x, y, {.batch_size = 64, .epochs = 1, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);
  };
  testing_support::expect_bitwise(fit(MirroredStrategy({.devices = gpu_devices()})), fit(without),
                                  "NCCL against the fallback through the host");
}

// A replica that fails leaves none of the others waiting in NCCL for it:
// the strategy aborts the GPUs' collective with its host collectives, the
// run fails naming the replica, and the next run sums with NCCL again (a
// new collective: the aborted one cannot serve).
TEST_F(GpuDevices, AFailedReplicaAbortsTheNcclSumAndTheNextRunSumsAgain) {
  const MirroredStrategy strategy({.devices = gpu_devices()});
  Variable v;
  {
    auto scope = strategy.scope();
    v = Variable(Tensor::zeros({3}));
  }
  auto step = [&](bool fail) {
    return strategy.run([&] {
      distribute::ReplicaContext& ctx = *distribute::current_replica_context();
      if (fail && ctx.local_replica_id() == 1) throw ValueError("planted failure");
      const Tensor g = Tensor::full({3}, static_cast<float>(ctx.local_replica_id() + 1));
      return ctx.sum_gradients({g}, {v})[0].cpu();
    });
  };
  try {
    (void)step(true);
    FAIL() << "the failed replica went unseen";
  } catch (const ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("replica 1"), std::string::npos) << what;
    EXPECT_NE(what.find("planted failure"), std::string::npos) << what;
  }
  auto expect_summed = [&] {
    const auto sums = step(false);
    for (const Tensor& s : sums.values())
      EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 3, 3}));  // 1 + 2
  };
  expect_summed();
  // Replica 1 fails at its NCCL call, after the host's flags: replica 0 is
  // then in NCCL (waiting on its GPU for a peer that will not come) until
  // the strategy aborts it.
  ::setenv("LOCKSTEP_EMULATED_NCCL_FAIL_RANK", "1", 1);  // NOLINT(concurrency-mt-unsafe)
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)step(false);
    ::unsetenv("LOCKSTEP_EMULATED_NCCL_FAIL_RANK");  // NOLINT(concurrency-mt-unsafe)
    FAIL() << "the failed NCCL call went unseen";
  } catch (const DeviceError& e) {
    ::unsetenv("LOCKSTEP_EMULATED_NCCL_FAIL_RANK");  // NOLINT(concurrency-mt-unsafe)
    const std::string what = e.what();
    EXPECT_NE(what.find("replica 1"), std::string::npos) << what;
    EXPECT_NE(what.find("planted failure of rank 1"), std::string::npos) << what;
  }
  // Not a speed goal: released by the abort, replica 0 returns at once; not
  // released, it waits out the emulated NCCL's minute (a GPU: for ever).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30))
      << "replica 0 was not released from its NCCL wait";
  expect_summed();
}

// A sum whose peer never comes (rank 1's stalls, as a hung GPU's NCCL
// kernel would, after the host's flags) is aborted by the strategy's
// watchdog at its collective timeout: the run fails saying so, no replica
// waits out the emulated minute (a GPU: for ever), no partial sum reaches
// the weights, and the next run sums again.
TEST_F(GpuDevices, AStalledNcclSumIsAbortedAtTheCollectiveTimeoutAndTheNextRunSumsAgain) {
  const MirroredStrategy strategy({.devices = gpu_devices(), .timeout = std::chrono::seconds(2)});
  ASSERT_NE(strategy.cross_device_reduction().find("NcclAllReduce"), std::string::npos)
      << strategy.cross_device_reduction();
  Variable v;
  {
    auto scope = strategy.scope();
    v = Variable(Tensor::zeros({3}));
  }
  // Each replica's weights, on its GPU, moved by the sums it gets.
  std::vector<Tensor> w(2);
  auto step = [&] {
    return strategy.run([&] {
      distribute::ReplicaContext& ctx = *distribute::current_replica_context();
      const auto r = static_cast<std::size_t>(ctx.local_replica_id());
      if (!w[r].defined()) w[r] = Tensor::zeros({3});
      const Tensor g = Tensor::full({3}, static_cast<float>(r + 1));
      const Tensor sum = ctx.sum_gradients({g}, {v})[0];
      w[r] = add(w[r], sum);
      return sum.cpu();
    });
  };
  (void)step();  // w = 3 on both replicas
  std::string warned;
  std::mutex warned_mutex;  // the watchdog's thread logs
  const LogSink before = set_log_sink([&](LogLevel level, std::string_view text) {
    std::lock_guard lock(warned_mutex);
    if (level == LogLevel::kWarning) warned += text;
  });
  ::setenv("LOCKSTEP_EMULATED_NCCL_STALL_RANK", "1", 1);  // NOLINT(concurrency-mt-unsafe)
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)step();
    ::unsetenv("LOCKSTEP_EMULATED_NCCL_STALL_RANK");  // NOLINT(concurrency-mt-unsafe)
    FAIL() << "the stalled sum went unseen";
  } catch (const DistributedError& e) {
    ::unsetenv("LOCKSTEP_EMULATED_NCCL_STALL_RANK");  // NOLINT(concurrency-mt-unsafe)
    const std::string what = e.what();
    EXPECT_NE(what.find("NCCL all-reduce on /device:GPU:"), std::string::npos) << what;
    EXPECT_NE(what.find("did not complete within 2.0 s (the strategy's collective timeout)"),
              std::string::npos)
        << what;
  }
  const auto took = std::chrono::steady_clock::now() - start;
  set_log_sink(before);
  EXPECT_NE(warned.find("MirroredStrategy: aborting the GPUs' NCCL sums: the sum did not complete "
                        "within 2.0 s"),
            std::string::npos)
      << warned;
  EXPECT_GE(took, std::chrono::seconds(2)) << "aborted before the deadline";
  // Not a speed goal: not aborted, the emulated NCCL gives up after a minute.
  EXPECT_LT(took, std::chrono::seconds(30)) << "the watchdog did not abort the stalled sum";
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(&w[r].device(), gpu_devices()[r]);
    EXPECT_EQ(w[r].cpu().to_vector<float>(), (std::vector<float>{3, 3, 3}))
        << "a partial sum reached replica " << r << "'s weights";
  }
  const auto sums = step();
  for (const Tensor& s : sums.values())
    EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{3, 3, 3}));  // 1 + 2
  for (std::size_t r = 0; r < 2; ++r)
    EXPECT_EQ(w[r].cpu().to_vector<float>(), (std::vector<float>{6, 6, 6}));
}

// An aborted collective fails by name whether its rank was waiting for a
// peer (released) or comes after the abort (refused); never a hang.
TEST_F(GpuDevices, AnAbortedNcclSumFailsClearlyAndReleasesItsWaiter) {
  Device& first = *gpu_devices()[0];
  const auto members = first.kernels()->make_collective(gpu_devices());
  ASSERT_EQ(members.size(), 2u);
  std::string error;
  std::thread waiter([&] {
    DeviceScope on(first, {.pin_thread = false});
    Tensor buf = Tensor::ones({4});
    try {
      members[0]->all_reduce_sum(static_cast<float*>(detail::device_pointer(buf)), 4);
      members[0]->wait();
    } catch (const DistributedError& e) {
      error = e.what();
    }
  });
  // Most often rank 0 is waiting for rank 1 by now; if not, it is refused.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  members[1]->abort("a test's abort");
  waiter.join();
  EXPECT_NE(error.find("NCCL all-reduce on /device:GPU:0 was aborted: a test's abort"),
            std::string::npos)
      << error;
  EXPECT_FALSE(members[0]->waiting_since().has_value()) << "an aborted sum still counts as waiting";
}

// BatchNormalization's moving statistics, moved on each GPU by its
// replica's examples, are made the replicas' weighted mean after each step
// (through the host: two GPUs share no memory), as on two CPU replicas.
TEST_F(GpuDevices, BatchNormalizationStatisticsOnTwoGpusAreAsOnTwoCpuReplicas) {
  const auto [x, y] = mlp_examples(128, 5);
  auto fit = [&](const std::vector<Device*>& devices) {
    const MirroredStrategy strategy({.devices = devices});
    Model model;
    {
      auto scope = strategy.scope();
      set_random_seed(11);
      model = Sequential(
          {layers::Dense(32), layers::BatchNormalization(), layers::ReLU(), layers::Dense(10)},
          {.input_shape = Shape{784}});
      model.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    }
    model.fit(x, y, {.batch_size = 32, .epochs = 1, .verbose = 0, .shuffle = false});
    return testing_support::weights(model);  // the moving statistics among them
  };
  const auto cpus = fit(logical_devices());
  const auto gpus = fit(gpu_devices());
  testing_support::expect_close(cpus, gpus, 1e-4, "2 GPUs vs 2 CPU replicas");
}

// What the guide's custom loop and its callbacks do with values that live
// on the GPUs, from host code: strategy.reduce (the per-replica losses),
// Model.save and a reload, EarlyStopping's best weights, predict. Each
// reached for GPU memory from the host before (a DeviceError): the
// emulated GPUs found them (tests/support/emulated_cuda).
TEST_F(GpuDevices, HostCodeGetsTheGpusValuesThroughTheHost) {
  const MirroredStrategy strategy;
  const distribute::PerReplica<Tensor> per_replica = strategy.run([] {
    return mul(Tensor::scalar(2.0f),
               Tensor::scalar(static_cast<float>(
                   distribute::current_replica_context()->local_replica_id() + 1)));
  });
  ASSERT_EQ(&per_replica.values()[1].device(), gpu_devices()[1]);
  const Tensor total = strategy.reduce(distribute::ReduceOp::kSum, per_replica, std::nullopt);
  EXPECT_TRUE(total.device().host_accessible());
  EXPECT_EQ(total.to_vector<float>(), std::vector<float>{6.0f});  // 2·1 + 2·2

  const auto [x, y] = mlp_examples(128, 3);
  Model model = seed_mlp_under(strategy);
  auto stop = std::make_shared<EarlyStopping>(
      EarlyStopping::Options{.monitor = "loss", .patience = 5, .restore_best_weights = true});
  model.fit(x, y, {.batch_size = 32, .epochs = 2, .verbose = 0, .callbacks = {stop}});
  const auto trained = testing_support::weights(model);
  const Tensor predicted = model.predict(x, {.batch_size = 64, .verbose = 0});
  EXPECT_TRUE(predicted.device().host_accessible());
  EXPECT_EQ(predicted.shape(), (Shape{128, 10}));

  const std::string path = ::testing::TempDir() + "gpu_devices_model.keras";
  model.save(path);
  const Model reloaded = load_model(path);
  testing_support::expect_bitwise(trained, testing_support::weights(reloaded),
                                  "the model saved from the GPUs, reloaded");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace lockstep
