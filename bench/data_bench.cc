// Input-pipeline benchmarks (issue #4).
//
// 1. Fashion-MNIST shuffle(60000).batch(64).prefetch(AUTOTUNE): examples/s,
//    and the pipeline's byte rate as a fraction of this machine's memcpy
//    bandwidth measured in the same run (bandwidth_fraction).
// 2. Overlap: a map that costs about as much per batch as a training step.
//    Sequentially the epoch takes compute + input; with a parallel map and
//    prefetch it should take max(compute, input). Counter `over_max` is
//    total time / (steps * max(compute, input)) — 1.0 is perfect overlap, the
//    goal is <= 1.10; `over_sum` is the same against compute + input.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "lockstep/lockstep.h"

namespace ls = lockstep;
namespace ld = lockstep::data;
using Clock = std::chrono::steady_clock;

namespace {

double g_memcpy_bytes_per_s = 0;

// Registered with a manual timer so the rate is computable here.
void BM_Ceiling_Memcpy(benchmark::State& state) {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 2);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    benchmark::ClobberMemory();
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  g_memcpy_bytes_per_s = static_cast<double>(n) * static_cast<double>(state.iterations()) / seconds;
  state.counters["GB_per_s"] = g_memcpy_bytes_per_s * 1e-9;
}
BENCHMARK(BM_Ceiling_Memcpy)->Unit(benchmark::kMillisecond)->MinTime(0.5);

void BM_FashionMnist_ShuffleBatchPrefetch(benchmark::State& state) {
  static const auto data = ls::datasets::fashion_mnist::load_data();
  const ls::Tensor& x = data.first.first;
  const ls::Tensor& y = data.first.second;
  const bool as_float = state.range(0) != 0;
  const ls::Tensor xs =
      as_float ? ls::reshape(ls::cast(x, ls::DType::kFloat32) / 255.0f, {x.dim(0), 784}) : x;
  ld::Dataset ds = ld::Dataset::from_tensor_slices({xs, y})
                       .shuffle(60000, {.seed = 1})
                       .batch(64)
                       .prefetch(ld::kAutotune);
  std::int64_t examples = 0, bytes = 0;
  std::uint64_t epoch = 0;
  for (auto _ : state) {
    ld::Iterator it = ds.make_iterator({.epoch = epoch++});
    while (auto b = it.next()) {
      examples += (*b)[0].dim(0);
      bytes += static_cast<std::int64_t>(b->nbytes());
    }
  }
  state.counters["examples_per_s"] =
      benchmark::Counter(static_cast<double>(examples), benchmark::Counter::kIsRate);
  state.counters["batches_per_s"] =
      benchmark::Counter(static_cast<double>(examples) / 64.0, benchmark::Counter::kIsRate);
  state.counters["bytes_per_s"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
  state.SetLabel(as_float ? "float32 [784]" : "uint8 [28, 28]");
}
BENCHMARK(BM_FashionMnist_ShuffleBatchPrefetch)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0)
    ->UseRealTime();

void spin_for(double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
  }
}

// Per-batch input cost `input_s` (a map) and compute cost `compute_s` (the
// consumer), over `steps` batches.
void run_overlap(benchmark::State& state, double input_s, double compute_s, bool overlapped,
                 const std::function<void()>& compute) {
  const std::int64_t steps = 100;
  auto slow_input = [input_s](const ld::Element& e) {
    spin_for(input_s);
    return e;
  };
  ld::Dataset ds = overlapped ? ld::Dataset::range(steps)
                                    .map(slow_input, {.num_parallel_calls = ld::kAutotune})
                                    .prefetch(ld::kAutotune)
                              : ld::Dataset::range(steps).map(slow_input);
  double total = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    for (const ld::Element& e : ds) {
      benchmark::DoNotOptimize(e);
      compute();
    }
    total += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  const double epochs = static_cast<double>(state.iterations());
  const double per_epoch = total / epochs;
  state.counters["over_max"] = per_epoch / (steps * std::max(input_s, compute_s));
  state.counters["over_sum"] = per_epoch / (steps * (input_s + compute_s));
  state.counters["ms_per_step"] = per_epoch / steps * 1e3;
}

void BM_Overlap_Spin(benchmark::State& state) {
  const double cost = 1e-3;  // 1 ms of input and 1 ms of compute per batch
  run_overlap(state, cost, cost, state.range(0) != 0, [cost] { spin_for(cost); });
  state.SetLabel(state.range(0) ? "parallel map + prefetch" : "sequential");
}
BENCHMARK(BM_Overlap_Spin)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The real MLP training step (784-256-256-10, batch 64, Adam) on one core,
// with a map that costs as much as the step on the other core.
void BM_Overlap_MlpStep(benchmark::State& state) {
  omp_set_num_threads(1);
  ls::Model model = ls::zoo::seed_mlp();
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true})});
  const ls::Tensor x = ls::random::uniform({64, 784}, {.seed = 1});
  std::vector<std::int64_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  const ls::Tensor y = ls::Tensor::from_vector(labels);
  for (int i = 0; i < 5; ++i) model.train_step(x, y);
  const auto t0 = Clock::now();
  for (int i = 0; i < 50; ++i) model.train_step(x, y);
  const double step_s = std::chrono::duration<double>(Clock::now() - t0).count() / 50;
  run_overlap(state, step_s, step_s, state.range(0) != 0, [&] { model.train_step(x, y); });
  state.counters["step_ms"] = step_s * 1e3;
  state.SetLabel(state.range(0) ? "parallel map + prefetch" : "sequential");
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_Overlap_MlpStep)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  if (g_memcpy_bytes_per_s > 0) {
    std::printf("memcpy ceiling: %.2f GB/s (64 MiB, one thread)\n", g_memcpy_bytes_per_s * 1e-9);
  }
  benchmark::Shutdown();
  return 0;
}
