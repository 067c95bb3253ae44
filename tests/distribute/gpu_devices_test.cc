// GPUs as a program sees them, on the emulated CUDA adapter with two GPUs
// (tests/support/emulated_cuda's library, loaded through
// LOCKSTEP_CUDA_LIBRARY with LOCKSTEP_EMULATED_GPUS=2: CI has no GPU, and
// the device machine has one): TensorFlow's device names, tf.config's lists,
// MirroredStrategy's default, copies between GPUs, and the seed MLP on two
// GPUs — which share no memory, so their gradients meet through the host —
// trained as on two CPU replicas.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "lockstep/lockstep.h"
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
