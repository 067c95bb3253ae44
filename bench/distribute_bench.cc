// MirroredStrategy benchmarks (issue #5), side by side in one run:
//
// 1. The seed MLP's training throughput (samples/s) with 1 replica on 1 core,
//    1 replica on 2 cores, and 2 replicas on 2 cores; scaling efficiency =
//    2-replica throughput / (2 × 1-replica-1-core throughput), goal >= 0.9.
// 2. The strategy's overhead per step: OneDeviceStrategy on the host device
//    against no strategy (goal < 3%).
// 3. The in-process all-reduce on 1–64 MiB between 2 replica threads, against
//    the bandwidth bound: the bytes the algorithm must move (4 × the buffer
//    for 2 ranks: each rank reads its half of both buffers and writes the sum
//    into both) at the aggregate memcpy rate of 2 threads on buffers of the
//    same size, measured in the same run (so cache-resident sizes get cache
//    bandwidth).
// 4. MobileNetV2 (alpha 0.35, 96 × 96, 1,000 classes; issue #19) at batch 64
//    per replica: 1 replica on 1 core; two independent replicas training at
//    once, one per core, with no synchronisation (what sharing the machine
//    costs); and MirroredStrategy's 2 replicas. Scaling efficiency = 2
//    replicas' samples/s / (2 × 1 replica's); the two ratios between the
//    three modes split its loss into contention and synchronisation.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "lockstep/lockstep.h"
#include "seed_mlp.h"

namespace ls = lockstep;
namespace ld = lockstep::data;
namespace dist = lockstep::distribute;
using Clock = std::chrono::steady_clock;

namespace {

using ls::bench::seed_mlp;

// mode 0: 1 replica on 1 core; 1: no strategy (2 cores); 2: 2 replicas on 2
// cores; 3: OneDeviceStrategy on the host device (2 cores); 4: 2 replicas on
// 2 cores, each running the whole optimizer update (unsharded).
void BM_Mirrored_SeedMlp(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const std::int64_t batch = state.range(1);
  const auto& devices = ls::logical_devices();
  dist::Strategy strategy;
  if (mode == 0) strategy = dist::OneDeviceStrategy(*devices[0]);
  if (mode == 2)
    strategy = dist::MirroredStrategy(
        {.devices = devices, .bytes_per_pack = static_cast<std::size_t>(state.range(2)) * 1024});
  if (mode == 3) strategy = dist::OneDeviceStrategy(ls::host_device());
  if (mode == 4)
    strategy = dist::MirroredStrategy({.devices = devices, .shard_optimizer_update = false});
  ls::Model model;
  {
    auto scope = strategy.scope();
    model = seed_mlp();
  }
  const auto ds = ls::bench::synthetic_batches(batch);
  const std::int64_t steps = batch == 64 ? 200 : 40;
  model.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = 10});  // warm up
  for (auto _ : state) {
    const auto t0 = Clock::now();
    model.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double samples =
      static_cast<double>(steps * batch) * static_cast<double>(state.iterations());
  state.counters["samples_per_s"] = benchmark::Counter(samples, benchmark::Counter::kIsRate);
  static const char* names[] = {"1 replica, 1 core", "no strategy, 2 cores", "2 replicas, 2 cores",
                                "OneDeviceStrategy(host), 2 cores",
                                "2 replicas, 2 cores, unsharded update"};
  state.SetLabel(names[mode]);
}

void mlp_args(benchmark::internal::Benchmark* b) {
  for (int batch : {64, 512}) {
    for (int mode : {0, 1, 3}) b->Args({mode, batch, 0});
    // 2 replicas: one bucket after backward, and buckets of 64 KiB–1 MiB
    // summed while backward runs.
    for (int kib : {0, 64, 256, 1024}) b->Args({2, batch, kib});
    b->Args({4, batch, 0});
  }
}
BENCHMARK(BM_Mirrored_SeedMlp)
    ->Apply(mlp_args)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(1.0);

// mode 0: 1 replica on 1 core (batch 64); 1: two such replicas, each its
// own model on its own core, trained at once by two threads with nothing
// shared; 2: MirroredStrategy over both cores (global batch 128).
ls::Model mobilenet_for_scaling() {
  ls::Model model = ls::applications::MobileNetV2(
      {.input_shape = ls::Shape{96, 96, 3}, .alpha = 0.35, .classifier_activation = ""});
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
  return model;
}

void BM_Mirrored_MobileNetV2(benchmark::State& state) {
  const int mode = static_cast<int>(state.range(0));
  const std::int64_t per_replica = 64, replicas = mode == 2 ? 2 : 1;
  const std::int64_t batch = per_replica * replicas, steps = 6;
  const auto& devices = ls::logical_devices();
  const ls::Tensor x = ls::random::uniform({batch * 2, 96, 96, 3}, {.seed = 1});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch * 2));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 1000);
  const auto ds = ld::Dataset::from_tensor_slices({x, ls::Tensor::from_vector(labels)})
                      .batch(batch)
                      .cache()
                      .repeat();
  // One (strategy, model) per training thread: two in mode 1.
  std::vector<dist::Strategy> strategies;
  if (mode == 2) {
    strategies.push_back(dist::MirroredStrategy({.devices = devices}));
  } else {
    strategies.push_back(dist::OneDeviceStrategy(*devices[0]));
    if (mode == 1) strategies.push_back(dist::OneDeviceStrategy(*devices.at(1)));
  }
  std::vector<ls::Model> models;
  for (const dist::Strategy& strategy : strategies) {
    auto scope = strategy.scope();
    models.push_back(mobilenet_for_scaling());
  }
  // Each model's batch times (fit's batch callbacks), to see what lockstep
  // would cost two independent replicas: at every step the faster one
  // would wait for the slower, E[max(a, b)] − E[(a + b) / 2] = E|a − b| / 2.
  std::vector<std::vector<double>> batch_seconds(models.size());
  std::vector<Clock::time_point> batch_start(models.size());
  std::vector<std::vector<std::shared_ptr<ls::Callback>>> callbacks(models.size());
  for (std::size_t i = 0; i < models.size(); ++i) {
    callbacks[i].push_back(std::make_shared<ls::LambdaCallback>(ls::LambdaCallback::Functions{
        .on_train_batch_begin = [&, i](std::int64_t,
                                       const ls::Logs&) { batch_start[i] = Clock::now(); },
        .on_train_batch_end =
            [&, i](std::int64_t, const ls::Logs&) {
              batch_seconds[i].push_back(
                  std::chrono::duration<double>(Clock::now() - batch_start[i]).count());
            }}));
  }
  auto train = [&](std::int64_t n) {
    auto fit = [&](std::size_t i) {
      models[i].fit(ds, {.verbose = 0, .callbacks = callbacks[i], .steps_per_epoch = n});
    };
    std::vector<std::thread> threads;
    for (std::size_t i = 1; i < models.size(); ++i) threads.emplace_back(fit, i);
    fit(0);
    for (std::thread& t : threads) t.join();
  };
  train(2);  // build, warm up
  for (auto& b : batch_seconds) b.clear();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    train(steps);
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  double step_s = 0, wait_s = 0;
  const std::size_t n = batch_seconds[0].size();
  for (std::size_t k = 0; k < n; ++k) {
    step_s += batch_seconds[0][k];
    if (models.size() == 2) wait_s += std::fabs(batch_seconds[0][k] - batch_seconds[1][k]) / 2;
  }
  state.counters["step_ms"] = step_s / static_cast<double>(n) * 1e3;
  if (models.size() == 2)
    state.counters["wait_for_slower_ms"] = wait_s / static_cast<double>(n) * 1e3;
  // Every model trained `steps` batches of `batch` in each iteration.
  const double samples =
      static_cast<double>(steps * batch) * static_cast<double>(state.iterations() * models.size());
  state.counters["samples_per_s"] = benchmark::Counter(samples, benchmark::Counter::kIsRate);
  static const char* names[] = {"1 replica, 1 core", "2 independent replicas, 1 core each",
                                "MirroredStrategy, 2 replicas"};
  state.SetLabel(names[mode]);
}
BENCHMARK(BM_Mirrored_MobileNetV2)
    ->Arg(0)
    ->Arg(1)
    ->Arg(2)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// The optimizer update alone on 2 replicas (one per core): Adam over the
// seed MLP's 269k parameters, the gradients already summed. Sharded, each
// replica updates half and copies it into the other's weights, with one
// set of slots; unsharded, each runs the whole update on its own copy with
// its own slots. Arg: 1 sharded, 0 unsharded.
void BM_Optimizer_AdamUpdate2Replicas(benchmark::State& state) {
  const bool sharded = state.range(0) == 1;
  dist::Strategy strategy =
      dist::MirroredStrategy({.devices = ls::logical_devices(), .shard_optimizer_update = sharded});
  ls::Model model;
  {
    auto scope = strategy.scope();
    model = seed_mlp();
  }
  const std::vector<ls::Variable> vars = model.trainable_weights();
  std::vector<ls::Tensor> grads;
  for (const ls::Variable& v : vars)
    grads.push_back(ls::random::uniform(v.shape(), {.seed = 3}) * 1e-3f);
  ls::Optimizer opt = ls::optimizers::Adam();
  auto step = [&] {
    strategy.run([&] { opt.apply_gradients(grads, vars, {.skip_gradients_aggregation = true}); });
  };
  for (int i = 0; i < 10; ++i) step();  // slots made, caches warm
  for (auto _ : state) step();
  state.SetLabel(sharded ? "sharded" : "unsharded");
}
// The same update on one replica with both cores, over the seed MLP's six
// variables (arg 0) and over one variable of the same 269,322 elements
// (arg 1): what a flat parameter arena would change about the update.
void BM_Optimizer_AdamUpdateLayout(benchmark::State& state) {
  std::vector<ls::Variable> vars;
  if (state.range(0) == 0) {
    vars = seed_mlp().trainable_weights();
  } else {
    std::int64_t elements = 0;
    for (const ls::Variable& v : seed_mlp().trainable_weights()) elements += v.shape().numel();
    vars.push_back(ls::Variable(ls::Tensor::zeros({elements})));
  }
  std::vector<ls::Tensor> grads;
  for (const ls::Variable& v : vars)
    grads.push_back(ls::random::uniform(v.shape(), {.seed = 3}) * 1e-3f);
  ls::Optimizer opt = ls::optimizers::Adam();
  for (int i = 0; i < 10; ++i) opt.apply_gradients(grads, vars);
  for (auto _ : state) opt.apply_gradients(grads, vars);
  state.SetLabel(state.range(0) == 0 ? "6 variables" : "1 flat variable");
  // Bytes Adam moves: reads g, m, v, w; writes m, v, w.
  std::int64_t elements = 0;
  for (const ls::Variable& v : vars) elements += v.shape().numel();
  state.SetBytesProcessed(state.iterations() * elements * 7 *
                          static_cast<std::int64_t>(sizeof(float)));
}
BENCHMARK(BM_Optimizer_AdamUpdateLayout)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.5);

BENCHMARK(BM_Optimizer_AdamUpdate2Replicas)
    ->Arg(1)
    ->Arg(0)
    ->Unit(benchmark::kMicrosecond)
    ->MinTime(0.5);

// The ceiling at a given size: two threads, each copying its own buffer of
// that size, as the two ranks of an all-reduce do (bytes read + written / s).
double memcpy2_bytes_per_s(std::size_t n) {
  std::vector<char> a0(n, 1), b0(n), a1(n, 1), b1(n);
  double best = 0;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = Clock::now();
    std::thread t([&] { std::memcpy(b1.data(), a1.data(), n); });
    std::memcpy(b0.data(), a0.data(), n);
    t.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 4.0 * static_cast<double>(n) / s);
  }
  return best;
}

void BM_Comm_AllReduce2(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0)) << 20;
  const std::size_t count = bytes / sizeof(float);
  const auto algo = state.range(1) == 0 ? ls::comm::Algorithm::kReduceScatterAllGather
                                        : ls::comm::Algorithm::kReductionToOneDevice;
  auto group = ls::comm::InProcessGroup::create(2, {.algorithm = algo});
  std::vector<float> a(count, 1.0f), b(count, 2.0f);
  std::atomic<bool> stop{false};
  std::atomic<int> go{0}, done{0};
  // Rank 1 follows rank 0 round by round.
  std::thread peer([&] {
    ls::DeviceScope on(*ls::logical_devices().back());
    int seen = 0;
    while (true) {
      while (go.load() == seen && !stop.load()) {
      }
      if (stop.load()) return;
      seen = go.load();
      group->communicator(1).all_reduce(b.data(), count, ls::comm::ReduceOp::kSum);
      done.fetch_add(1);
    }
  });
  double seconds = 0;
  int rounds = 0;
  {
    ls::DeviceScope on(*ls::logical_devices().front());
    for (auto _ : state) {
      const auto t0 = Clock::now();
      go.fetch_add(1);
      group->communicator(0).all_reduce(a.data(), count, ls::comm::ReduceOp::kSum);
      while (done.load() <= rounds) {
      }
      ++rounds;
      seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  stop = true;
  peer.join();
  const double per = seconds / static_cast<double>(state.iterations());
  state.counters["algbw_GB_per_s"] = static_cast<double>(bytes) / per * 1e-9;
  // Both algorithms move 4 × the buffer on 2 ranks: the owner of each part
  // reads it from both buffers and writes the sum into both (reduction to
  // one device: rank 0 owns all of it).
  const double ceiling = memcpy2_bytes_per_s(bytes);
  const double moved = 4.0 * static_cast<double>(bytes);
  state.counters["memcpy2_GB_per_s"] = ceiling * 1e-9;
  state.counters["of_bound"] = (moved / ceiling) / per;
  state.SetLabel(state.range(1) == 0 ? "reduce-scatter + all-gather" : "reduction to one device");
}
BENCHMARK(BM_Comm_AllReduce2)
    ->ArgsProduct({{1, 4, 16, 64}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.5)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
