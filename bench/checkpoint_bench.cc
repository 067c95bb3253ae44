// Checkpoint benchmarks (issue #6), side by side in one run:
//
// 1. The disk's sequential write rate with fsync (64 MiB in 1 MiB writes, the
//    way AtomicFileWriter writes), in the directory the checkpoints go to.
// 2. Checkpoint save and restore of the seed MLP with Adam (3.2 MB: weights
//    and two slots per weight) in MB/s, against 1.
// 3. Training slowdown with BackupAndRestore(save_freq = 100) against none:
//    the seed MLP, 400 steps of batch 64 (goal < 5%).
// 4. Keras weights files (MobileNetV2's) read by libhdf5 in a child process
//    against the same reading in this one, and what the isolation costs
//    with nothing to read, by the memory the process holds (issue #41).
//
// LOCKSTEP_BENCH_DIR chooses the directory (default: the system temp dir).
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "lockstep/core/isolated.h"
#include "lockstep/io/hdf5.h"
#include "lockstep/lockstep.h"
#include "seed_mlp.h"

namespace ls = lockstep;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

using ls::bench::seed_mlp;

fs::path bench_dir() {
  const char* env = std::getenv("LOCKSTEP_BENCH_DIR");
  fs::path dir = env ? fs::path(env) : fs::temp_directory_path() / "lockstep_checkpoint_bench";
  fs::create_directories(dir);
  return dir;
}

void BM_Disk_SequentialWrite(benchmark::State& state) {
  const fs::path path = bench_dir() / "disk_probe.bin";
  const std::size_t total = 64u << 20, chunk = 1u << 20;
  std::vector<char> data(chunk, 7);
  for (auto _ : state) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (std::size_t done = 0; done < total; done += chunk) {
      if (::write(fd, data.data(), chunk) != static_cast<ssize_t>(chunk))
        state.SkipWithError("write");
    }
    ::fsync(fd);
    ::close(fd);
  }
  fs::remove(path);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total));
}
BENCHMARK(BM_Disk_SequentialWrite)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Checkpoint_Save(benchmark::State& state) {
  ls::Model m = seed_mlp();
  m.fit(ls::bench::synthetic_batches(64),
        {.epochs = 1, .verbose = 0, .steps_per_epoch = 2});  // creates the slots
  const std::string path = (bench_dir() / "save.safetensors").string();
  ls::Checkpoint ckpt(m);
  ckpt.save(path);
  const auto bytes = static_cast<std::int64_t>(fs::file_size(path));
  for (auto _ : state) ckpt.save(path);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["file_MB"] = static_cast<double>(bytes) * 1e-6;
}
BENCHMARK(BM_Checkpoint_Save)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Checkpoint_Restore(benchmark::State& state) {
  ls::Model m = seed_mlp();
  m.fit(ls::bench::synthetic_batches(64), {.epochs = 1, .verbose = 0, .steps_per_epoch = 2});
  const std::string path = (bench_dir() / "restore.safetensors").string();
  ls::Checkpoint(m).save(path);
  const auto bytes = static_cast<std::int64_t>(fs::file_size(path));
  ls::Model other = seed_mlp();
  other.fit(ls::bench::synthetic_batches(64), {.epochs = 1, .verbose = 0, .steps_per_epoch = 1});
  ls::Checkpoint ckpt(other);
  for (auto _ : state) ckpt.restore(path);
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_Checkpoint_Restore)->Unit(benchmark::kMillisecond)->UseRealTime();

// range(0): 0 no backups, 1 BackupAndRestore(save_freq = 100).
void BM_Checkpoint_FitWithBackups(benchmark::State& state) {
  const std::int64_t steps = 400;
  const auto ds = ls::bench::synthetic_batches(64);
  for (auto _ : state) {
    state.PauseTiming();
    ls::Model m = seed_mlp();
    std::vector<std::shared_ptr<ls::Callback>> callbacks;
    if (state.range(0) == 1) {
      callbacks.push_back(std::make_shared<ls::BackupAndRestore>(ls::BackupAndRestore::Options{
          .backup_dir = (bench_dir() / "backup").string(), .save_freq = 100}));
    }
    m.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = 5});  // warm up
    state.ResumeTiming();
    m.fit(ds, {.epochs = 1, .verbose = 0, .callbacks = callbacks, .steps_per_epoch = steps});
  }
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(steps * 64) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.SetLabel(state.range(0) ? "BackupAndRestore(save_freq=100)" : "no backups");
}
BENCHMARK(BM_Checkpoint_FitWithBackups)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Keras weights files read through the guard (issue #41): libhdf5 in a
// child process (io::read_h5) against the same reading in this process
// (io::read_h5_image_in_process, kept for this comparison only).
// range(0): MobileNetV2's alpha x 100 at 224 (its weights, saved here as
// Keras's .weights.h5); range(1): 0 in process, 1 isolated. The process
// also holds the model: fork copies the page tables of what it maps.
void BM_ReadH5(benchmark::State& state) {
  ls::clear_session();
  const ls::Model model =
      ls::applications::MobileNetV2({.input_shape = ls::Shape{224, 224, 3},
                                     .alpha = static_cast<double>(state.range(0)) / 100.0});
  const std::string path =
      (bench_dir() / ("mobilenet_v2_" + std::to_string(state.range(0)) + ".weights.h5")).string();
  model.save_weights(path);
  std::string bytes(fs::file_size(path), '\0');
  {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr || std::fread(bytes.data(), 1, bytes.size(), f) != bytes.size())
      state.SkipWithError("cannot read the weights file back");
    if (f != nullptr) std::fclose(f);
  }
  const bool isolated = state.range(1) == 1;
  for (auto _ : state) {
    const ls::io::H5Group tree = isolated ? ls::io::read_h5_image(bytes, path)
                                          : ls::io::read_h5_image_in_process(bytes, path);
    benchmark::DoNotOptimize(&tree);
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes.size()));
  state.counters["file_MB"] = static_cast<double>(bytes.size()) * 1e-6;
  state.SetLabel(isolated ? "isolated (child process)" : "in process");
}
BENCHMARK(BM_ReadH5)
    ->Args({35, 0})
    ->Args({35, 1})
    ->Args({100, 0})
    ->Args({100, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// What the isolation itself costs (core/isolated.h): a child that returns
// nothing, from a process that holds range(0) MiB of written memory. fork
// copies the page tables of what the process maps, and the child's exit
// tears them down; after it, the parent's first write to each of its pages
// faults once (copy-on-write, no copy: the child is gone), counted in
// touch_after_ms.
void BM_Isolated_EmptyWork(benchmark::State& state) {
  std::vector<char> held(static_cast<std::size_t>(state.range(0)) << 20, 1);
  double touch_ms = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(ls::run_isolated("bench", {}, [] { return std::string(); }));
    state.PauseTiming();
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < held.size(); i += 4096) held[i] = static_cast<char>(held[i] + 1);
    touch_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    state.ResumeTiming();
  }
  state.counters["touch_after_ms"] = touch_ms / static_cast<double>(state.iterations());
  benchmark::DoNotOptimize(held.data());
}
BENCHMARK(BM_Isolated_EmptyWork)
    ->Arg(0)
    ->Arg(512)
    ->Arg(2048)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
