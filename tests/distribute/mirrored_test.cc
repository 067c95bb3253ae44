// MirroredStrategy: N replicas train like one, replicas stay bitwise
// identical, uneven batches, failures and bad input.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/lockstep.h"
#include "support/fake_devices.h"
#include "support/weights.h"

namespace lockstep {
namespace {

using testing_support::expect_bitwise;
using testing_support::expect_close;
using testing_support::weights;

using distribute::MirroredStrategy;
using distribute::Strategy;

std::pair<Tensor, Tensor> data(std::int64_t n, const Shape& example, std::uint64_t seed) {
  Shape shape{n};
  for (auto d : example.dims()) shape.push_back(d);
  Tensor x = random::uniform(shape, {.seed = seed});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    labels[static_cast<std::size_t>(i)] = (i * 7 + static_cast<std::int64_t>(seed)) % 10;
  return {x, Tensor::from_vector(labels)};
}

Model mlp() {
  set_random_seed(7);
  auto in = Input({20});
  auto h = layers::Dense(32, {.activation = "relu"})(in);
  h = layers::Dense(32, {.activation = "relu"})(h);
  Model m(in, layers::Dense(10)(h));
  m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

Model cnn() {
  set_random_seed(7);
  auto in = Input({8, 8, 1});
  auto h = layers::Conv2D(4, {3, 3}, {.activation = "relu"})(in);
  h = layers::MaxPooling2D()(h);
  h = layers::Flatten()(h);
  Model m(in, layers::Dense(10)(h));
  m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

// Checks after every batch that all replicas hold bitwise-identical weights.
struct ReplicasIdentical : Callback {
  int checked = 0;
  void on_train_batch_end(std::int64_t batch, const Logs&) override {
    for (const Variable& v : model()->impl()->weights()) {
      for (int r = 1; r < v.num_replicas(); ++r) {
        ASSERT_EQ(std::memcmp(v.replica_value(0).raw_data(), v.replica_value(r).raw_data(),
                              v.replica_value(0).nbytes()),
                  0)
            << v.name() << " replica " << r << " after batch " << batch;
      }
    }
    ++checked;
  }
};

// MirroredStrategy() mirrors over every logical device, one per physical
// core (DESIGN.md; the guide's "Number of devices: 2" on a 2-core machine);
// ctest sets no LOCKSTEP_CPU_DEVICES for this binary.
TEST(MirroredStrategy, DefaultMirrorsOverEveryLogicalDeviceOnePerCore) {
  ASSERT_FALSE(logical_devices_configured()) << "this test expects no LOCKSTEP_CPU_DEVICES";
  MirroredStrategy strategy;
  const std::size_t cores = available_physical_cores().size();
  ASSERT_EQ(strategy.num_replicas_in_sync(), static_cast<int>(cores));
  ASSERT_EQ(strategy.replica_devices(), logical_devices());
  for (std::size_t r = 0; r < cores; ++r) {
    EXPECT_EQ(strategy.replica_devices()[r]->cores().size(), 1u);
    EXPECT_EQ(strategy.replica_devices()[r]->num_threads(), 1);
  }
  // One replica with every core is the host device.
  MirroredStrategy one({.devices = {&host_device()}});
  EXPECT_EQ(one.num_replicas_in_sync(), 1);
  EXPECT_EQ(one.replica_devices()[0]->num_threads(), static_cast<int>(cores));
}

// More logical devices than cores (LOCKSTEP_CPU_DEVICES=3 on 2 cores) are
// allowed everywhere, as TensorFlow's: their replicas share the cores.
TEST(MirroredStrategy, DevicesThatShareCoresTrainTogether) {
  const std::vector<std::vector<int>> sets = parse_cpu_devices(
      std::to_string(available_physical_cores().size() + 1), available_physical_cores());
  // Devices outlive every tensor made on them, as the registry's do.
  static std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> devices;
  for (std::size_t d = 0; d < sets.size(); ++d) {
    owned.push_back(std::make_unique<Device>(static_cast<int>(d), sets[d], 1));
    devices.push_back(owned.back().get());
  }
  MirroredStrategy strategy({.devices = devices});
  EXPECT_EQ(strategy.num_replicas_in_sync(), static_cast<int>(sets.size()));
  auto [x, y] = data(60, {20}, 5);
  Model model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  const History h = model.fit(x, y, {.batch_size = 12, .epochs = 1, .verbose = 0});
  EXPECT_EQ(h["loss"].size(), 1u);
}

Strategy with_replicas(int n, std::size_t bytes_per_pack = 0) {
  return MirroredStrategy(
      {.devices = {&host_device()}, .replicas_per_device = n, .bytes_per_pack = bytes_per_pack});
}

// One epoch in batches of 24 under `strategy`, checking after every batch
// that the replicas hold bitwise-identical weights.
Model fit_checking_replicas(const Strategy& strategy, const std::function<Model()>& make,
                            const Tensor& x, const Tensor& y) {
  Model model;
  {
    auto scope = strategy.scope();
    model = make();
  }
  auto check = std::make_shared<ReplicasIdentical>();
  model.fit(x, y,
            {.batch_size = 24, .epochs = 1, .verbose = 0, .callbacks = {check}, .shuffle = false});
  EXPECT_EQ(check->checked, x.dim(0) / 24);
  EXPECT_EQ(model.optimizer().iterations(), x.dim(0) / 24);
  return model;
}

void check_equivalence_on(const std::function<Model()>& make, const Tensor& x, const Tensor& y) {
  Model single = make();
  single.fit(x, y, {.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false});
  const auto want = weights(single);
  // One bucket after backward (automatic), and buckets so small that every
  // variable's gradient is summed on its own while backward goes on.
  for (auto [n, bytes_per_pack] :
       std::vector<std::pair<int, std::size_t>>{{1, 0}, {2, 0}, {3, 0}, {4, 0}, {2, 64}, {3, 64}}) {
    const std::string what =
        std::to_string(n) + " replicas, bytes_per_pack " + std::to_string(bytes_per_pack);
    Model model = fit_checking_replicas(with_replicas(n, bytes_per_pack), make, x, y);
    expect_close(want, weights(model), 1e-5, what);
  }
}

void check_equivalence(const std::function<Model()>& make, const Shape& example) {
  auto [x, y] = data(20 * 24, example, 3);
  check_equivalence_on(make, x, y);
}

// Two devices of the fake accelerator (the GPU's rules on host memory):
// the MLP trains there bit for bit as on two CPU replicas.
TEST(FakeDevice, MlpOnTwoFakeDevicesTrainsLikeTwoCpuReplicas) {
  const Tensor x = random::uniform({8 * 24, 20}, {.seed = 4});
  std::vector<std::int64_t> labels(8 * 24);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i * 7 % 10);
  const Tensor y = Tensor::from_vector(labels);
  auto fit = [&](std::vector<Device*> devices, int per_device) {
    MirroredStrategy strategy({.devices = std::move(devices), .replicas_per_device = per_device});
    Model model;
    {
      auto scope = strategy.scope();
      model = mlp();
    }
    const History h =
        model.fit(x, y, {.batch_size = 24, .epochs = 2, .verbose = 0, .shuffle = false});
    std::vector<double> losses;
    for (const auto& [name, values] : h.history()) {
      if (name == "loss") losses = values;
    }
    return std::make_pair(weights(model), losses);
  };
  const auto on_cpus = fit({logical_devices()[0]}, 2);
  const auto on_fakes = fit(testing_support::two_fake_devices(), 1);
  ASSERT_EQ(on_fakes.second.size(), 2u);
  expect_bitwise(on_cpus.first, on_fakes.first, "2 fake devices vs 2 CPU replicas");
  EXPECT_EQ(on_cpus.second, on_fakes.second);
}

TEST(MirroredStrategy, MlpOnNReplicasTrainsLikeOneDevice) { check_equivalence(mlp, {20}); }

// Under a LossScaleOptimizer the replicas check the summed gradients, so
// they skip and rescale together: 3 replicas train as 1, and while no step
// overflows both train bit for bit as without loss scaling.
TEST(MirroredStrategy, ALossScaleOptimizerOnNReplicasTrainsAsOneReplica) {
  auto [x, y] = data(10 * 24, {20}, 3);
  auto make = [](double initial_scale) {
    return [initial_scale] {
      Model m = mlp();
      m.compile({.optimizer = optimizers::LossScaleOptimizer(
                     optimizers::Adam({.learning_rate = 0.01}),
                     {.initial_scale = initial_scale, .dynamic_growth_steps = 4}),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
      return m;
    };
  };
  Model plain = mlp();
  plain.fit(x, y, {.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false});
  Model one = make(1024)();
  one.fit(x, y, {.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false});
  expect_bitwise(weights(plain), weights(one), "loss scaling 2^10 vs none");
  EXPECT_EQ(one.optimizer()->dynamic_scale(), 1024 * 4);  // grown after steps 4 and 8
  // Inputs and a scale so large that the first steps overflow: skipped on
  // every replica alike.
  const Tensor x_big = mul(x, Tensor::scalar(256.0f));
  Model big = make(0x1p127)();
  big.fit(x_big, y, {.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false});
  ASSERT_LT(big.optimizer().iterations(), 10);
  ASSERT_GT(big.optimizer().iterations(), 0);
  ASSERT_LT(big.optimizer()->dynamic_scale(), 0x1p127);
  for (const int n : {2, 3}) {
    const Strategy strategy = with_replicas(n);
    Model model;
    {
      auto scope = strategy.scope();
      model = make(0x1p127)();
    }
    auto check = std::make_shared<ReplicasIdentical>();
    model.fit(
        x_big, y,
        {.batch_size = 24, .epochs = 1, .verbose = 0, .callbacks = {check}, .shuffle = false});
    EXPECT_EQ(check->checked, 10);
    const std::string what = std::to_string(n) + " replicas, overflowing steps";
    EXPECT_EQ(model.optimizer().iterations(), big.optimizer().iterations()) << what;
    EXPECT_EQ(model.optimizer()->dynamic_scale(), big.optimizer()->dynamic_scale()) << what;
    expect_close(weights(big), weights(model), 1e-5, what);
  }
}

TEST(MirroredStrategy, CnnOnNReplicasTrainsLikeOneDevice) { check_equivalence(cnn, {8, 8, 1}); }

// The recurrent and attention layers (issue #37): sequences [6, 3] through
// an LSTM and a Bidirectional GRU (Adam); [5, 4] through self-attention and
// layer normalisation (SGD: the key projection's bias has a gradient of
// exactly zero — the softmax over the keys ignores what it adds to every
// score — so it gets only rounding noise, which Adam would scale up to steps
// of its own and make differ with the order of the replicas' sums).
TEST(MirroredStrategy, SequenceModelsOnNReplicasTrainLikeOneDevice) {
  auto compiled = [](const KerasTensor& in, const KerasTensor& out, Optimizer optimizer) {
    Model m(in, out);
    m.compile({.optimizer = std::move(optimizer),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    return m;
  };
  check_equivalence(
      [&] {
        set_random_seed(7);
        auto in = Input({6, 3});
        auto h = layers::LSTM(5, {.return_sequences = true})(in);
        h = layers::Bidirectional(layers::GRU(3))(h);
        return compiled(in, layers::Dense(10)(h), optimizers::Adam({.learning_rate = 0.01}));
      },
      {6, 3});
  check_equivalence(
      [&] {
        set_random_seed(7);
        auto in = Input({5, 4});
        auto a = layers::MultiHeadAttention(2, 3)({in, in});
        auto h = layers::LayerNormalization()(layers::Add()({in, a}));
        return compiled(in, layers::Dense(10)(layers::GlobalAveragePooling1D()(h)),
                        optimizers::SGD({.learning_rate = 0.1}));
      },
      {5, 4});
}

// Keras masks under replicas (the replicas run one model from their own
// threads, each with its share's masks): token sequences padded with 0
// through Embedding(mask_zero=True), an LSTM and a Bidirectional GRU that
// skip the padding, and self-attention that ignores it, pooled over the
// real steps.
TEST(MirroredStrategy, MaskedSequenceModelsOnNReplicasTrainLikeOneDevice) {
  const std::int64_t n = 20 * 24, steps = 6;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * steps));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t length = 2 + i % 5;  // 2..6 real steps, then padding
    for (std::int64_t t = 0; t < steps; ++t)
      ids[static_cast<std::size_t>(i * steps + t)] =
          t < length ? static_cast<std::int32_t>(1 + (i * 13 + t * 7) % 29) : 0;
    labels[static_cast<std::size_t>(i)] = (i * 7) % 10;
  }
  const Tensor x = Tensor::from_vector(ids, {n, steps}), y = Tensor::from_vector(labels);
  auto compiled = [](const KerasTensor& in, const KerasTensor& out, Optimizer optimizer) {
    Model m(in, out);
    m.compile({.optimizer = std::move(optimizer),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    return m;
  };
  check_equivalence_on(
      [&] {
        set_random_seed(7);
        auto in = Input({steps}, DType::kInt32);
        auto h = layers::Embedding(30, 4, {.mask_zero = true})(in);
        h = layers::LSTM(5, {.return_sequences = true})(h);
        h = layers::Bidirectional(layers::GRU(3))(h);
        return compiled(in, layers::Dense(10)(h), optimizers::Adam({.learning_rate = 0.01}));
      },
      x, y);
  check_equivalence_on(
      [&] {
        set_random_seed(7);
        auto in = Input({steps}, DType::kInt32);
        auto e = layers::Embedding(30, 4, {.mask_zero = true})(in);
        auto a = layers::MultiHeadAttention(2, 3)({e, e});
        auto h = layers::LayerNormalization()(layers::Add()({e, a}));
        return compiled(in, layers::Dense(10)(layers::GlobalAveragePooling1D()(h)),
                        optimizers::SGD({.learning_rate = 0.1}));
      },
      x, y);
}

// An output that carries a mask (a sequence tagger: Keras weights the loss
// and metrics by it). Each replica's share has its own count of real steps;
// the loss divides by the global batch's, so N replicas train like one, and
// the loss and accuracy they report (per epoch, and evaluate) are the one
// device's too. The last batch (3 examples) leaves a replica of four with
// none: it still takes part in counting the real steps.
TEST(MirroredStrategy, MaskedOutputsOnNReplicasTrainAndReportLikeOneDevice) {
  const std::int64_t n = 8 * 24 + 3, steps = 6;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n * steps));
  std::vector<std::int64_t> labels(ids.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t length = 1 + (i * 5) % 6;  // 1..6 real steps, then padding
    for (std::int64_t t = 0; t < steps; ++t) {
      const auto at = static_cast<std::size_t>(i * steps + t);
      ids[at] = t < length ? static_cast<std::int32_t>(1 + (i * 13 + t * 7) % 29) : 0;
      labels[at] = (i * 7 + t * 3) % 4;
    }
  }
  const Tensor x = Tensor::from_vector(ids, {n, steps}),
               y = Tensor::from_vector(labels, {n, steps});
  auto make = [&] {
    set_random_seed(7);
    auto in = Input({steps}, DType::kInt32);
    auto h = layers::Embedding(30, 4, {.mask_zero = true})(in);
    h = layers::LSTM(5, {.return_sequences = true})(h);
    Model m(in, layers::Dense(4)(h));
    m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
               .metrics = {metrics::SparseCategoricalAccuracy()}});
    return m;
  };
  auto run = [&](const Strategy* strategy) {
    Model m;
    if (strategy) {
      auto scope = strategy->scope();
      m = make();
    } else {
      m = make();
    }
    const History h = m.fit(x, y, {.batch_size = 24, .epochs = 2, .verbose = 0, .shuffle = false});
    const Logs e = m.evaluate(x, y, {.batch_size = 24, .verbose = 0});
    std::vector<double> reported;
    for (const auto& [name, values] : h.history())
      reported.insert(reported.end(), values.begin(), values.end());
    reported.push_back(e.at("loss"));
    reported.push_back(e.at("sparse_categorical_accuracy"));
    return std::make_pair(weights(m), reported);
  };
  const auto [want, want_reported] = run(nullptr);
  for (int replicas : {1, 2, 3, 4}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    const Strategy strategy = with_replicas(replicas);
    const auto [got, got_reported] = run(&strategy);
    expect_close(want, got, 1e-5, "weights");
    ASSERT_EQ(got_reported.size(), want_reported.size());
    for (std::size_t i = 0; i < want_reported.size(); ++i)
      EXPECT_NEAR(got_reported[i], want_reported[i], 1e-5) << "reported value " << i;
  }
}

// Stateful recurrent layers under MirroredStrategy: each replica keeps the
// states of its own rows of the batch (the same rows every batch), so N
// replicas train like one and evaluate like one, with states carried
// across batches and reset between epochs.
TEST(MirroredStrategy, StatefulLayersOnNReplicasTrainLikeOneDevice) {
  const std::int64_t n = 48, steps = 5, batch = 12;
  const Tensor x = random::normal({n, steps, 3}, {.seed = 5});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) labels[static_cast<std::size_t>(i)] = (i * 7) % 3;
  const Tensor y = Tensor::from_vector(labels, {n});
  auto make = [&](bool stateful) {
    set_random_seed(11);
    auto in = Input({steps, 3}, DType::kFloat32, "", batch);
    auto h = layers::LSTM(4, {.return_sequences = true, .stateful = stateful})(in);
    h = layers::GRU(3, {.stateful = stateful})(h);
    Model m(in, layers::Dense(3)(h));
    m.compile({.optimizer = optimizers::Adam({.learning_rate = 0.01}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    return m;
  };
  auto run = [&](const Strategy* strategy, bool stateful = true) {
    Model m;
    if (strategy) {
      auto scope = strategy->scope();
      m = make(stateful);
    } else {
      m = make(stateful);
    }
    std::vector<double> reported;
    for (int epoch = 0; epoch < 2; ++epoch) {
      m.reset_states();
      const History h =
          m.fit(x, y, {.batch_size = batch, .epochs = 1, .verbose = 0, .shuffle = false});
      reported.push_back(h["loss"].at(0));
    }
    reported.push_back(m.evaluate(x, y, {.batch_size = batch, .verbose = 0}).at("loss"));
    return std::make_pair(weights(m), reported);
  };
  const auto [want, want_reported] = run(nullptr);
  // The states matter: without them the model trains to other weights.
  const auto stateless = run(nullptr, false).first;
  double moved = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    for (std::size_t j = 0; j < want[i].size(); ++j)
      moved = std::max(moved, static_cast<double>(std::abs(want[i][j] - stateless[i][j])));
  EXPECT_GT(moved, 1e-3);
  for (int replicas : {1, 2, 3, 4}) {
    SCOPED_TRACE(std::to_string(replicas) + " replicas");
    const Strategy strategy = with_replicas(replicas);
    const auto [got, got_reported] = run(&strategy);
    expect_close(want, got, 1e-5, "weights");
    for (std::size_t i = 0; i < want_reported.size(); ++i)
      EXPECT_NEAR(got_reported[i], want_reported[i], 1e-5) << "reported loss " << i;
  }
}

// Mixed precision under MirroredStrategy: replicas stay bitwise identical
// after every batch, and N replicas train like one within bfloat16
// rounding. Each replica's bfloat16 gradient is its share of the batch
// rounded to bfloat16 before the float32 sum across replicas, where one
// replica rounds the whole batch's once; with SGD every weight then
// differs by a few bfloat16 roundings of lr·|g| per step (2^-8 · 0.1 · |g|).
TEST(MirroredStrategy, MixedBFloat16TrainsLikeOneReplicaWithinBFloat16Rounding) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  struct Restore {
    ~Restore() { mixed_precision::set_global_policy("float32"); }
  } restore;
  auto make = [] {
    set_random_seed(7);
    auto in = Input({20});
    auto h = layers::Dense(32, {.activation = "relu"})(in);
    Model m(in, layers::Dense(10)(h));
    m.compile({.optimizer = optimizers::SGD({.learning_rate = 0.1}),
               .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    return m;
  };
  auto [x, y] = data(5 * 24, {20}, 3);
  Model single = make();
  single.fit(x, y, {.batch_size = 24, .epochs = 1, .verbose = 0, .shuffle = false});
  const auto want = weights(single);
  for (int n : {2, 3}) {
    Model model = fit_checking_replicas(with_replicas(n), make, x, y);
    // Measured: at most 3.4e-5 (2 replicas) and 4.0e-5 (3) after 5 steps.
    expect_close(want, weights(model), 2e-4, std::to_string(n) + " replicas, mixed_bfloat16");
  }
}

// The sharded optimizer update (the default: each replica updates its share
// of the elements in every copy, with one set of slots) against every
// replica updating all of its own copy: bitwise the same weights and slots
// for each update rule, with decoupled weight decay and global-norm
// clipping, on 2 and 3 replicas — and the slots are held once, not per
// replica.
TEST(MirroredStrategy, ShardedOptimizerUpdateIsBitwiseTheUnshardedOneWithOneSetOfSlots) {
  auto [x, y] = data(10 * 24, {20}, 5);
  const std::vector<std::pair<std::string, std::function<Optimizer()>>> rules = {
      {"AdamW",
       [] { return optimizers::AdamW({.weight_decay = 0.05, .clip = {.global_clipnorm = 0.5}}); }},
      {"SGD",
       [] { return optimizers::SGD({.learning_rate = 0.05, .momentum = 0.9, .nesterov = true}); }},
      {"RMSprop",
       [] {
         return optimizers::RMSprop(
             {.momentum = 0.5, .centered = true, .clip = {.clipvalue = 0.1}});
       }},
  };
  for (const auto& [rule, make_optimizer] : rules) {
    for (int n : {2, 3}) {
      const std::string what = rule + " on " + std::to_string(n) + " replicas";
      std::vector<std::vector<float>> trained[2];
      std::vector<std::pair<std::string, Tensor>> slots[2];
      std::size_t in_use[2];
      for (int shard = 0; shard < 2; ++shard) {
        const auto before = host_device().allocator().stats().bytes_in_use;
        Strategy strategy = MirroredStrategy({.devices = {&host_device()},
                                              .replicas_per_device = n,
                                              .shard_optimizer_update = shard == 1});
        Model model;
        {
          auto scope = strategy.scope();
          set_random_seed(7);
          auto in = Input({20});
          auto h = layers::Dense(32, {.activation = "relu"})(in);
          model = Model(in, layers::Dense(10)(h));
          model.compile({.optimizer = make_optimizer(),
                         .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
        }
        auto check = std::make_shared<ReplicasIdentical>();
        model.fit(x, y, {.batch_size = 24, .verbose = 0, .callbacks = {check}, .shuffle = false});
        EXPECT_EQ(check->checked, 10) << what;
        trained[shard] = weights(model);
        slots[shard] = model.optimizer()->slot_values(model.trainable_weights());
        in_use[shard] = host_device().allocator().stats().bytes_in_use - before;
      }
      expect_bitwise(trained[0], trained[1], what);
      ASSERT_EQ(slots[0].size(), slots[1].size()) << what;
      ASSERT_FALSE(slots[0].empty()) << what;
      std::size_t slot_bytes = 0;
      for (std::size_t i = 0; i < slots[0].size(); ++i) {
        const Tensor& a = slots[0][i].second;
        const Tensor& b = slots[1][i].second;
        EXPECT_EQ(slots[0][i].first, slots[1][i].first);
        ASSERT_EQ(a.nbytes(), b.nbytes());
        EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0)
            << what << ", slot " << slots[0][i].first;
        slot_bytes += CachingAllocator::round_size(a.nbytes());
      }
      // Unsharded, each of the n replicas keeps its own slots.
      EXPECT_GE(in_use[0], in_use[1] + static_cast<std::size_t>(n - 1) * slot_bytes) << what;
    }
  }
}

TEST(MirroredStrategy, OnTheLogicalDevicesAndWithReductionToOneDevice) {
  auto [x, y] = data(240, {20}, 5);
  Model single = mlp();
  single.fit(x, y, {.batch_size = 24, .verbose = 0, .shuffle = false});
  for (auto algo :
       {comm::Algorithm::kReduceScatterAllGather, comm::Algorithm::kReductionToOneDevice}) {
    MirroredStrategy strategy({.devices = logical_devices(), .cross_device_ops = algo});
    EXPECT_EQ(strategy.num_replicas_in_sync(), static_cast<int>(logical_devices().size()));
    Model model;
    {
      auto scope = strategy.scope();
      model = mlp();
    }
    model.fit(x, y, {.batch_size = 24, .verbose = 0, .shuffle = false});
    expect_close(weights(single), weights(model), 1e-5, "logical devices");
  }
}

TEST(MirroredStrategy, UnevenLastBatchUsesEveryExampleOnceWithTrueWeights) {
  auto [x, y] = data(1003, {20}, 9);
  Model single = mlp();
  const History hs = single.fit(x, y, {.batch_size = 64, .verbose = 0, .shuffle = false});
  Strategy strategy = with_replicas(3);
  Model model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  const History hm = model.fit(x, y, {.batch_size = 64, .verbose = 0, .shuffle = false});
  EXPECT_NEAR(hs["loss"][0], hm["loss"][0], 1e-6);
  EXPECT_NEAR(hs["accuracy"][0], hm["accuracy"][0], 1e-6);
  // The loss tracker's weight is the number of examples it saw: all 1003, once.
  EXPECT_EQ(model.metrics()[0].impl()->state().at(1), 1003.0);
  expect_close(weights(single), weights(model), 1e-5, "uneven");
  // The same through evaluate and predict (1003 = 3 × 334 + 1).
  const Logs es = single.evaluate(x, y, {.batch_size = 64, .verbose = 0});
  const Logs em = model.evaluate(x, y, {.batch_size = 64, .verbose = 0});
  EXPECT_NEAR(es.at("loss"), em.at("loss"), 1e-5);
  EXPECT_NEAR(es.at("accuracy"), em.at("accuracy"), 1e-9);
  const Tensor ps = single.predict(x, {.batch_size = 64}),
               pm = model.predict(x, {.batch_size = 64});
  ASSERT_EQ(pm.shape(), ps.shape());
  const auto a = ps.to_vector<float>(), b = pm.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
}

TEST(MirroredStrategy, AFinalBatchSmallerThanTheReplicasGivesSomeReplicasNothing) {
  auto [x, y] = data(26, {20}, 11);  // batches of 24 and 2 over 3 replicas
  Model single = mlp();
  single.fit(x, y, {.batch_size = 24, .verbose = 0, .shuffle = false});
  Strategy strategy = with_replicas(3);
  Model model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  model.fit(x, y, {.batch_size = 24, .verbose = 0, .shuffle = false});
  expect_close(weights(single), weights(model), 1e-5, "tiny last batch");
}

class Bomb : public SingleInputLayerImpl {
 public:
  Bomb() : SingleInputLayerImpl("Bomb") {}
  Tensor call(const Tensor& x, const CallContext&) override {
    if (distribute::get_replica_context().replica_id_in_sync_group() == 1 && ++calls_ >= 3)
      throw ValueError("sensor glitch in replica");
    return x;
  }

 private:
  int calls_ = 0;
};

TEST(MirroredStrategy, AReplicaThatThrowsStopsFitPromptlyWithItsId) {
  auto [x, y] = data(240, {20}, 13);
  Strategy strategy = with_replicas(3);
  Model model;
  {
    auto scope = strategy.scope();
    set_random_seed(1);
    auto in = Input({20});
    auto h = make_layer<Bomb>()(layers::Dense(8)(in));
    model = Model(in, layers::Dense(10)(h));
    model.compile({.optimizer = optimizers::SGD(),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    model.fit(x, y, {.batch_size = 24, .verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("replica 1: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("sensor glitch in replica"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fit: epoch 1, batch 2"), std::string::npos) << msg;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // The strategy is usable again afterwards.
  std::vector<int> seen(3, 0);
  strategy.extended().run_replicas([&](distribute::ReplicaContext& ctx) {
    seen[static_cast<std::size_t>(ctx.local_replica_id())] = 1;
  });
  EXPECT_EQ(seen, (std::vector<int>{1, 1, 1}));
}

TEST(MirroredStrategy, BadInputIsAClearError) {
  auto [x, y] = data(48, {20}, 17);
  Strategy strategy = with_replicas(4);
  Model model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  try {
    model.fit(x, y, {.batch_size = 3, .verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("global batch of 3 examples is smaller than the 4 replicas"),
        std::string::npos)
        << e.what();
  }
  // A model built outside the scope but compiled inside it.
  Model outside = mlp();
  {
    auto scope = strategy.scope();
    outside.compile({.optimizer = optimizers::SGD(),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  }
  try {
    outside.fit(x, y, {.batch_size = 8, .verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("was created outside the scope"), std::string::npos)
        << e.what();
  }
  // Created inside the scope and compiled outside it: the model keeps the
  // strategy it was created under (Keras's model.distribute_strategy).
  Model inside;
  {
    auto scope = strategy.scope();
    inside = mlp();
  }
  inside.compile({.optimizer = optimizers::SGD(),
                  .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  inside.fit(x, y, {.batch_size = 8, .verbose = 0});
  EXPECT_EQ(inside.optimizer().iterations(), 6);
  // Layers built under a scope, wrapped in a model outside any: a clear error.
  Layer dense = layers::Dense(10);
  {
    auto scope = strategy.scope();
    dense.impl()->ensure_built({Shape{1, 20}});
  }
  auto in = Input({20});
  Model loose(in, dense(in));
  loose.compile({.optimizer = optimizers::SGD(),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  try {
    loose.fit(x, y, {.batch_size = 8, .verbose = 0});
    ADD_FAILURE() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("created and compiled outside that strategy's scope"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(MirroredStrategy({.devices = {&host_device(), &host_device()}}), ValueError);
}

TEST(MirroredStrategy, CustomLoopWithRunAndReduce) {
  // The guide's custom training loop: per-replica loss scaled by the global
  // batch, gradients through the optimizer, losses reduced with SUM.
  auto [x, y] = data(96, {20}, 19);
  auto step_loss = [](Model& m, const Tensor& xb, const Tensor& yb, Optimizer& opt,
                      std::int64_t global) {
    GradientTape tape;
    const Tensor logits = m(xb, {.training = true});
    const Tensor per_example = neg(sum(mul(log_softmax(logits), one_hot(yb, 10)), {.axes = {1}}));
    const Tensor loss = distribute::compute_average_loss(per_example, global);
    const auto vars = m.impl()->trainable_weights();
    opt.apply_gradients(tape.gradient(loss, vars), vars);
    return loss;
  };
  Model single = mlp();
  Optimizer opt1 = optimizers::SGD({.learning_rate = 0.1});
  double single_total = 0;
  for (int b = 0; b < 4; ++b)
    single_total += step_loss(single, x.view_rows(b * 24, b * 24 + 24),
                              y.view_rows(b * 24, b * 24 + 24), opt1, 24)
                        .item<float>();

  Strategy strategy = with_replicas(3);
  Model model;
  Optimizer opt;
  {
    auto scope = strategy.scope();
    model = mlp();
    opt = optimizers::SGD({.learning_rate = 0.1});
  }
  double total = 0;
  for (int b = 0; b < 4; ++b) {
    const auto sizes = strategy.extended().split_sizes(24);
    auto per_replica = strategy.run([&] {
      const int r = distribute::get_replica_context().replica_id_in_sync_group();
      std::int64_t begin = b * 24;
      for (int k = 0; k < r; ++k) begin += sizes[static_cast<std::size_t>(k)];
      const std::int64_t end = begin + sizes[static_cast<std::size_t>(r)];
      return step_loss(model, x.view_rows(begin, end), y.view_rows(begin, end), opt, 24);
    });
    total += strategy.reduce(distribute::ReduceOp::kSum, per_replica).item<float>();
  }
  EXPECT_NEAR(total, single_total, 1e-5);
  expect_close(weights(single), weights(model), 1e-5, "custom loop");
  // Replica context all_reduce: bitwise the same on every replica.
  auto sums = strategy.run([] {
    const int r = distribute::get_replica_context().replica_id_in_sync_group();
    return distribute::get_replica_context().all_reduce(
        distribute::ReduceOp::kSum, Tensor::from_vector<float>({float(r), 1.0f}));
  });
  for (int r = 0; r < 3; ++r)
    EXPECT_EQ(sums[r].to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
}

// Under a strategy every replica's thread calls the one Dropout layer at
// once. Each replica draws masks of its own, distinct from the others',
// replica 0 the masks the layer draws alone, and the same run after run
// whatever order the threads come in (one counter shared by the threads was
// a data race: the masks depended on which thread drew first).
TEST(MirroredStrategy, DropoutDrawsEachReplicasOwnMasksTheSameRunAfterRun) {
  Strategy strategy = with_replicas(3);
  const Tensor ones = Tensor::ones({4, 16});
  auto masks = [&] {
    set_random_seed(11);
    Layer dropout = layers::Dropout(0.5);
    std::vector<std::vector<float>> out;
    for (int call = 0; call < 3; ++call) {
      auto per_replica = strategy.run([&] { return dropout(ones, {.training = true}); });
      for (int r = 0; r < 3; ++r) out.push_back(per_replica[r].to_vector<float>());
    }
    return out;
  };
  const auto first = masks(), second = masks();
  EXPECT_EQ(first, second) << "the same masks run after run";
  set_random_seed(11);
  Layer alone = layers::Dropout(0.5);
  for (std::size_t call = 0; call < 3; ++call) {
    EXPECT_NE(first[call * 3], first[call * 3 + 1]) << "call " << call;
    EXPECT_NE(first[call * 3], first[call * 3 + 2]) << "call " << call;
    EXPECT_NE(first[call * 3 + 1], first[call * 3 + 2]) << "call " << call;
    EXPECT_EQ(alone(ones, {.training = true}).to_vector<float>(), first[call * 3])
        << "replica 0 draws what the layer draws alone, call " << call;
  }
}

// strategy.run(step, args=(x, y, scale)): PerReplica arguments give each
// replica its own value, others are shared, results come back per replica.
TEST(MirroredStrategy, RunTakesSeveralArgumentsPerReplicaOrShared) {
  Strategy strategy = with_replicas(3);
  const distribute::PerReplica<Tensor> xs({Tensor::from_vector<float>({1, 2}),
                                           Tensor::from_vector<float>({3}),
                                           Tensor::from_vector<float>({4, 5, 6})});
  const distribute::PerReplica<std::int64_t> ids({10, 20, 30});
  const float scale = 2.0f;
  auto results = strategy.run(
      [](const Tensor& x, std::int64_t id, float s) {
        const int r = distribute::get_replica_context().replica_id_in_sync_group();
        return static_cast<double>(sum(x).item<float>()) * s + static_cast<double>(id) + r * 1000;
      },
      xs, ids, scale);
  ASSERT_EQ(results.size(), 3);
  EXPECT_EQ(results[0], 3 * 2 + 10 + 0);
  EXPECT_EQ(results[1], 3 * 2 + 20 + 1000);
  EXPECT_EQ(results[2], 15 * 2 + 30 + 2000);
  // A PerReplica of another size is named, not indexed out of range.
  const distribute::PerReplica<int> two({1, 2});
  EXPECT_THROW(strategy.run([](int) {}, two), ValueError);
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

TEST(MirroredStrategy, ALazilyBuiltModelGetsMirroredVariablesAtItsFirstBatch) {
  auto [x, y] = data(96, {20}, 23);
  distribute::Strategy strategy =
      distribute::MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = 2});
  Model model;
  {
    auto scope = strategy.scope();
    set_random_seed(3);
    model = Sequential({layers::Dense(16, {.activation = "relu"}), layers::Dense(10)});
    model.compile({.optimizer = optimizers::Adam(),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  }
  EXPECT_FALSE(model.impl()->built());
  model.fit(x, y, {.batch_size = 24, .verbose = 0});  // built outside the scope block
  ASSERT_EQ(model.impl()->weights().size(), 4u);
  for (const Variable& v : model.impl()->weights()) {
    EXPECT_TRUE(v.is_mirrored()) << v.name();
    EXPECT_EQ(std::memcmp(v.replica_value(0).raw_data(), v.replica_value(1).raw_data(),
                          v.replica_value(0).nbytes()),
              0)
        << v.name();
  }
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// A model with BatchNormalization whose moving statistics move fast
// (momentum 0.5), so that a replica that kept its own would show.
Model bn_mlp() {
  set_random_seed(11);
  auto in = Input({8});
  auto h = layers::Dense(8)(in);
  h = layers::BatchNormalization({.momentum = 0.5f})(h);
  return Model(in, layers::Dense(10)(h));
}

const layers::BatchNormalizationImpl& bn_of(const Model& m) {
  for (const Layer& l : m.layers()) {
    if (const auto* bn = dynamic_cast<const layers::BatchNormalizationImpl*>(l.impl().get()))
      return *bn;
  }
  throw std::logic_error("bn_mlp has a BatchNormalization layer");
}

std::vector<std::vector<float>> values(const Tensor& t) { return {t.to_vector<float>()}; }

// The guide's custom loop (strategy.run with GradientTape) on a model with
// BatchNormalization: TF keeps the moving statistics per replica and
// averages them on read (ON_READ / MEAN); here every replica's copy becomes
// that mean after each step (issue #39). After one step the moving mean is
// one replica's on the global batch, and the moving variance the mean of
// the replicas' (each normalises by its own batch, as Keras's BN with
// synchronized=False). Replicas never drift apart.
TEST(MirroredStrategy, CustomLoopKeepsBatchNormStatisticsInSyncAcrossReplicas) {
  auto [x, y] = data(72, {8}, 5);
  auto step = [](Model& m, Optimizer& opt, const Tensor& xb, const Tensor& yb) {
    GradientTape tape;
    const Tensor logits = m(xb, {.training = true});
    const Tensor per_example = neg(sum(mul(log_softmax(logits), one_hot(yb, 10)), {.axes = {1}}));
    const Tensor loss = distribute::compute_average_loss(per_example, 24);
    const auto vars = m.impl()->trainable_weights();
    opt.apply_gradients(tape.gradient(loss, vars), vars);
    return loss;
  };
  // One replica on the first global batch, and one on each half of it.
  auto one_step = [&](std::int64_t begin, std::int64_t end) {
    Model m = bn_mlp();
    Optimizer opt = optimizers::SGD({.learning_rate = 0.1});
    step(m, opt, x.view_rows(begin, end), y.view_rows(begin, end));
    return std::pair{bn_of(m).moving_mean().value().copy(),
                     bn_of(m).moving_variance().value().copy()};
  };
  const auto [global_mean, global_variance] = one_step(0, 24);
  const auto [first_mean, first_variance] = one_step(0, 12);
  const auto [second_mean, second_variance] = one_step(12, 24);

  Strategy strategy = with_replicas(2);
  Model model;
  Optimizer opt;
  {
    auto scope = strategy.scope();
    model = bn_mlp();
    opt = optimizers::SGD({.learning_rate = 0.1});
  }
  const layers::BatchNormalizationImpl& bn = bn_of(model);
  for (int b = 0; b < 3; ++b) {
    const distribute::PerReplica<Tensor> xs(
        {x.view_rows(b * 24, b * 24 + 12), x.view_rows(b * 24 + 12, b * 24 + 24)});
    const distribute::PerReplica<Tensor> ys(
        {y.view_rows(b * 24, b * 24 + 12), y.view_rows(b * 24 + 12, b * 24 + 24)});
    strategy.run([&](const Tensor& xb, const Tensor& yb) { return step(model, opt, xb, yb); }, xs,
                 ys);
    for (const Variable* v : {&bn.moving_mean(), &bn.moving_variance()}) {
      ASSERT_EQ(v->num_replicas(), 2);
      ASSERT_EQ(std::memcmp(v->replica_value(0).raw_data(), v->replica_value(1).raw_data(),
                            v->replica_value(0).nbytes()),
                0)
          << v->name() << ": the replicas' copies differ after step " << b + 1;
    }
    if (b == 0) {
      expect_close(values(global_mean), values(bn.moving_mean().replica_value(0)), 1e-6,
                   "moving mean: one replica's on the global batch");
      expect_close(values(mul(add(first_variance, second_variance), Tensor::scalar(0.5f))),
                   values(bn.moving_variance().replica_value(0)), 1e-6,
                   "moving variance: the mean of the replicas'");
      EXPECT_GT(max(abs(sub(first_mean, second_mean))).item<float>(), 1e-2f)
          << "the halves' statistics differ, so a replica that kept its own would show";
    }
  }
}

}  // namespace
}  // namespace lockstep
