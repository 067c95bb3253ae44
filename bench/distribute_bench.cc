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
#include <benchmark/benchmark.h>

#include <chrono>
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
