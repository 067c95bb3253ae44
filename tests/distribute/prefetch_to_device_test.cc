// Dataset::prefetch_to_device on the fake accelerator (whose memory host
// code may not touch, as a GPU's): elements arrive on the device with their
// values, in order; the producer reads ahead by the buffer and no further;
// a saved state keeps what was sent but not taken; errors arrive in order;
// fit and experimental_distribute_dataset take their batches through it
// when the replicas are on accelerators, and train as CPU replicas do.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"
#include "support/fake_devices.h"

namespace lockstep {
namespace {

using data::Dataset;
using data::Element;
using testing_support::two_fake_devices;

Dataset numbered(std::int64_t n) {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) x.push_back(static_cast<float>(i * 10 + j));
    y.push_back(i);
  }
  return Dataset::from_tensor_slices({Tensor::from_vector(x, Shape{n, 3}), Tensor::from_vector(y)},
                                     {"x", "y"});
}

TEST(PrefetchToDevice, ElementsArriveOnTheDeviceInOrderWithTheirValues) {
  Device& fake = *two_fake_devices()[0];
  const Dataset host = numbered(10).batch(4);
  std::vector<Element> want;
  for (const Element& e : host) want.push_back(e);
  std::vector<Element> got;
  for (const Element& e : host.prefetch_to_device(fake)) got.push_back(e);
  ASSERT_EQ(got.size(), 3u);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].names(), (std::vector<std::string>{"x", "y"}));
    for (std::size_t c = 0; c < 2; ++c) {
      EXPECT_EQ(&got[i][c].device(), &fake) << "element " << i << " component " << c;
      EXPECT_EQ(got[i][c].shape(), want[i][c].shape());
      EXPECT_EQ(got[i][c].dtype(), want[i][c].dtype());
    }
    EXPECT_EQ(got[i]["x"].to_vector<float>(), want[i]["x"].to_vector<float>());
    EXPECT_EQ(got[i]["y"].to_vector<std::int64_t>(), want[i]["y"].to_vector<std::int64_t>());
  }
  // By name, a second time over the same pipeline; a CPU device keeps the
  // elements in host memory.
  EXPECT_EQ(host.prefetch_to_device("/device:FAKE:0").cardinality(), 3);
  for (const Element& e : host.prefetch_to_device("/cpu:0", 2)) {
    EXPECT_TRUE(e[0].device().host_accessible());
  }
  EXPECT_THROW((void)host.prefetch_to_device(fake, {.buffer_size = 0}), ValueError);
}

TEST(PrefetchToDevice, TensorsAlreadyOnTheDevicePassAsTheyAre) {
  Device& fake = *two_fake_devices()[1];
  const Tensor on_device = Tensor::from_vector<float>({1, 2, 3}).copy_to(fake);
  const Tensor on_host = Tensor::from_vector<std::int32_t>({7, 8});
  const Dataset ds = Dataset::from_tensors(Element({on_device, on_host})).repeat(2);
  int n = 0;
  for (const Element& e : ds.prefetch_to_device(fake)) {
    EXPECT_EQ(detail::device_pointer(e[0]), detail::device_pointer(on_device));
    EXPECT_EQ(&e[1].device(), &fake);
    EXPECT_EQ(e[1].to_vector<std::int32_t>(), (std::vector<std::int32_t>{7, 8}));
    ++n;
  }
  EXPECT_EQ(n, 2);
}

// A generator that counts the elements read from it.
Dataset counted(std::atomic<int>& reads, int n, int fail_at = -1) {
  return Dataset::from_generator([&reads, n, fail_at]() -> data::Generator {
    auto i = std::make_shared<int>(0);
    return [&reads, n, fail_at, i]() -> std::optional<Element> {
      if (*i == n) return std::nullopt;
      if (*i == fail_at) throw ValueError("the reader failed at element " + std::to_string(*i));
      ++reads;
      return Element({Tensor::from_vector<float>({static_cast<float>((*i)++)})});
    };
  });
}

bool eventually(const std::function<bool()>& condition) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(PrefetchToDevice, ReadsAheadByItsBufferWhileTheConsumerHoldsAnElement) {
  std::atomic<int> reads{0};
  data::Iterator it = counted(reads, 20)
                          .prefetch_to_device(*two_fake_devices()[0], {.buffer_size = 2})
                          .make_iterator();
  ASSERT_TRUE(it.next().has_value());
  // The element taken and two more sent ahead while the consumer holds it.
  EXPECT_TRUE(eventually([&] { return reads.load() == 3; })) << reads.load();
  // And no further: the producer waits for an area.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(reads.load(), 3);
  const std::optional<Element> second = it.next();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ((*second)[0].to_vector<float>(), std::vector<float>{1});
  EXPECT_TRUE(eventually([&] { return reads.load() == 4; })) << reads.load();
}

// The consumer's wait for an element not yet on its device is counted: an
// input that takes 20 ms an element leaves the first next() waiting at
// least that long (the producer starts inside it), and every element taken
// is counted once.
TEST(PrefetchToDevice, TheConsumersWaitForItsInputIsCounted) {
  const Dataset slow = numbered(4).map([](const Element& e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return e;
  });
  data::reset_device_prefetch_stats();
  std::int64_t taken = 0;
  for (const Element& e : slow.prefetch_to_device(*two_fake_devices()[0])) taken += e.size() > 0;
  const data::DevicePrefetchStats stats = data::device_prefetch_stats();
  EXPECT_EQ(taken, 4);
  EXPECT_EQ(stats.elements, 4);
  EXPECT_GE(stats.waits, 1);
  EXPECT_LE(stats.waits, 4);
  EXPECT_GE(stats.seconds_waited, 0.015);
  data::reset_device_prefetch_stats();
  EXPECT_EQ(data::device_prefetch_stats().elements, 0);
  EXPECT_EQ(data::device_prefetch_stats().seconds_waited, 0.0);
}

TEST(PrefetchToDevice, ASavedStateKeepsTheElementsSentButNotTaken) {
  const Dataset ds = numbered(9)
                         .shuffle(9, {.seed = 3})
                         .batch(2)
                         .prefetch_to_device(*two_fake_devices()[0], {.buffer_size = 3});
  data::Iterator it = ds.make_iterator();
  ASSERT_TRUE(it.next().has_value());
  ASSERT_TRUE(it.next().has_value());
  // The producer has sent up to three elements ahead by now, or is sending.
  const data::IteratorState state = it.save();
  std::vector<std::vector<std::int64_t>> rest, again;
  while (auto e = it.next()) rest.push_back((*e)["y"].to_vector<std::int64_t>());
  data::Iterator restored = ds.make_iterator();
  restored.restore(state);
  while (auto e = restored.next()) {
    EXPECT_EQ(&(*e)["y"].device(), two_fake_devices()[0]);
    again.push_back((*e)["y"].to_vector<std::int64_t>());
  }
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(again, rest);
  EXPECT_FALSE(restored.next().has_value());
}

TEST(PrefetchToDevice, AnInputErrorReachesTheConsumerAfterTheElementsBeforeItThenItEnds) {
  std::atomic<int> reads{0};
  data::Iterator it =
      counted(reads, 10, 3).prefetch_to_device(*two_fake_devices()[0]).make_iterator();
  for (int i = 0; i < 3; ++i) {
    const std::optional<Element> e = it.next();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ((*e)[0].to_vector<float>(), std::vector<float>{static_cast<float>(i)});
  }
  try {
    (void)it.next();
    FAIL() << "the reader's error did not arrive";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("failed at element 3"), std::string::npos) << e.what();
  }
  // As prefetch's: a failed input is not read again; the iterator ends.
  EXPECT_FALSE(it.next().has_value());
  EXPECT_EQ(reads.load(), 3);
}

std::vector<std::vector<float>> weights_of(const Model& m) {
  std::vector<std::vector<float>> out;
  for (const Variable& v : m.weights()) out.push_back(v.value().to_vector<float>());
  return out;
}

Model small_mlp() {
  auto in = Input({6});
  auto h = layers::Dense(8, {.activation = "relu"})(in);
  return Model(in, layers::Dense(3)(h));
}

// fit from a Dataset on two fake devices: the batches come copied ahead to
// the first device (both share its memory), and training is bit for bit
// that of two CPU replicas on the host batches.
TEST(PrefetchToDevice, FitFromADatasetOnTwoFakeDevicesTrainsAsTwoCpuReplicas) {
  const Tensor x = random::uniform({60, 6}, {.seed = 5});
  std::vector<std::int64_t> labels(60);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i * 5 % 3);
  const Dataset ds = Dataset::from_tensor_slices({x, Tensor::from_vector(labels)}).batch(12);
  auto fit = [&](std::vector<Device*> devices, int per_device) {
    distribute::MirroredStrategy strategy(
        {.devices = std::move(devices), .replicas_per_device = per_device});
    Model model;
    {
      auto scope = strategy.scope();
      set_random_seed(11);
      model = small_mlp();
      model.compile({.optimizer = optimizers::Adam(),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                     .metrics = {metrics::SparseCategoricalAccuracy()}});
    }
    const History h = model.fit(ds, {.epochs = 2, .verbose = 0});
    const Logs logs = model.evaluate(ds, {.verbose = 0});
    return std::make_tuple(weights_of(model), h["loss"], logs.at("sparse_categorical_accuracy"));
  };
  const auto on_cpus = fit({logical_devices()[0]}, 2);
  const auto on_fakes = fit(two_fake_devices(), 1);
  EXPECT_EQ(std::get<0>(on_cpus), std::get<0>(on_fakes));
  EXPECT_EQ(std::get<1>(on_cpus), std::get<1>(on_fakes));
  EXPECT_EQ(std::get<2>(on_cpus), std::get<2>(on_fakes));
}

TEST(PrefetchToDevice, ADistributedDatasetHandsOutBatchesAlreadyOnTheReplicasDevice) {
  const Dataset ds = numbered(8).batch(4);
  distribute::OneDeviceStrategy one(*two_fake_devices()[1]);
  int batches = 0;
  for (const auto& batch : distribute::experimental_distribute_dataset(one, ds)) {
    const Element& e = batch.values().at(0);
    EXPECT_EQ(&e[0].device(), two_fake_devices()[1]);
    EXPECT_EQ(&e[1].device(), two_fake_devices()[1]);
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  // Two replicas on devices that share memory: the global batch goes to the
  // first, and each replica's rows are views of it there.
  distribute::MirroredStrategy fakes({.devices = two_fake_devices()});
  batches = 0;
  for (const auto& batch : distribute::experimental_distribute_dataset(fakes, ds)) {
    ASSERT_EQ(batch.size(), 2);
    for (const Element& e : batch.values()) {
      EXPECT_EQ(&e[0].device(), two_fake_devices()[0]);
      EXPECT_EQ(e[0].shape(), (Shape{2, 3}));
    }
    EXPECT_EQ(batch[1]["y"].to_vector<std::int64_t>(),
              (std::vector<std::int64_t>{batches * 4 + 2, batches * 4 + 3}));
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  // One pipeline per replica: each sent to its replica's own device.
  const auto per_replica =
      distribute::distribute_datasets_from_function(fakes, [](const distribute::InputContext& c) {
        return numbered(8).shard(c.num_input_pipelines, c.input_pipeline_id).batch(2);
      });
  batches = 0;
  for (const auto& batch : per_replica) {
    for (int r = 0; r < 2; ++r) EXPECT_EQ(&batch[r][0].device(), two_fake_devices()[r]);
    EXPECT_EQ(batch[1]["y"].to_vector<std::int64_t>(),
              (std::vector<std::int64_t>{batches * 4 + 1, batches * 4 + 3}));
    ++batches;
  }
  EXPECT_EQ(batches, 2);
  // On CPU replicas the batches stay in host memory.
  distribute::MirroredStrategy cpus({.devices = {logical_devices()[0]}, .replicas_per_device = 2});
  for (const auto& batch : distribute::experimental_distribute_dataset(cpus, ds)) {
    EXPECT_TRUE(batch.values().at(1)[0].device().host_accessible());
  }
}

}  // namespace
}  // namespace lockstep
