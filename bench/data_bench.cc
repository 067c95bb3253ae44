// Input-pipeline benchmarks (issue #4).
//
// 1. Fashion-MNIST shuffle(60000).batch(64).prefetch(AUTOTUNE): examples/s,
//    and the pipeline's byte rate as a fraction of this machine's memcpy
//    bandwidth measured in the same run (bandwidth_fraction).
// 1b. The same pipeline's own cost, on one thread, without prefetch: the
//    shuffle alone per element and shuffle + batch per batch — the CPU the
//    pipeline takes from training on a machine whose cores both train. Each
//    with the shuffle buffer of indices (shuffle straight over
//    from_tensor_slices) and of elements (behind an identity map), side by
//    side in one run; and the bytes of each one's iterator state.
// 2. Overlap: a map that costs about as much per batch as a training step.
//    Sequentially the epoch takes compute + input; with a parallel map and
//    prefetch it should take max(compute, input). Counter `over_max` is
//    total time / (steps * max(compute, input)) — 1.0 is perfect overlap, the
//    goal is <= 1.10; `over_sum` is the same against compute + input.
// 3. Images from a folder (issue #19): image_dataset_from_directory over a
//    folder of Fashion-MNIST JPEGs (96 x 96 or 224 x 224, resized to their
//    own size, batch 32, shuffled), one epoch per iteration, decoding with 1
//    or 2 map workers: images_per_s. The folders are IMAGE_FOLDER_96 and
//    IMAGE_FOLDER_224 (bench/images.sh makes them and times TensorFlow's
//    image_dataset_from_directory on the same ones), else made here under
//    /tmp. Below them, one image's decode and resize on one thread.
// 4. A CSV table (issue #38): read_csv_table of a table shaped like
//    `lockstep train --data`'s benchmark (50,000 rows, 20 numeric columns,
//    3 short text columns and a quoted free-text one, 9.9 MB) on 1 and 2
//    threads: MB_per_s and ns per field.
#include <benchmark/benchmark.h>
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
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

// Fashion-MNIST's 60,000 training images as float32 rows, and labels.
const ld::Element& fashion_mnist_rows() {
  static const ld::Element rows = [] {
    const auto data = ls::datasets::fashion_mnist::load_data();
    const ls::Tensor& x = data.first.first;
    return ld::Element{ls::reshape(ls::cast(x, ls::DType::kFloat32) / 255.0f, {x.dim(0), 784}),
                       data.first.second};
  }();
  return rows;
}

// args: batch (0: single elements); the pipeline: 0 from_tensor_slices →
// shuffle (a buffer of indices), 1 from_tensor_slices → map(identity) →
// shuffle (a buffer of elements), 2 and 3 the same without the shuffle.
void BM_FashionMnist_ShuffleCost(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  const int pipeline = static_cast<int>(state.range(1));
  const ld::Element& rows = fashion_mnist_rows();
  ld::Dataset ds = ld::Dataset::from_tensor_slices({rows[0], rows[1]});
  if (pipeline % 2 == 1) ds = ds.map([](const ld::Element& e) { return e; });
  if (pipeline < 2) ds = ds.shuffle(60000, {.seed = 1});
  if (batch > 0) ds = ds.batch(batch);
  std::int64_t items = 0;
  std::uint64_t epoch = 0;
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    ld::Iterator it = ds.make_iterator({.epoch = epoch++});
    while (auto e = it.next()) ++items;
    seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  }
  state.counters[batch > 0 ? "us_per_batch" : "ns_per_element"] =
      seconds / static_cast<double>(items) * (batch > 0 ? 1e6 : 1e9);
  // The iterator's saved state halfway through an epoch.
  ld::Iterator it = ds.make_iterator();
  for (std::int64_t i = 0; i < (batch > 0 ? 30000 / batch : 30000); ++i) it.next();
  double bytes = 0;
  for (const auto& [name, t] : it.save().tensors) bytes += static_cast<double>(t.nbytes());
  state.counters["state_MiB"] = bytes / (1 << 20);
  static const char* const labels[] = {"shuffle: buffer of indices",
                                       "map, shuffle: buffer of elements", "no shuffle",
                                       "map, no shuffle"};
  state.SetLabel(labels[pipeline]);
}
BENCHMARK(BM_FashionMnist_ShuffleCost)
    ->ArgsProduct({{0, 64}, {0, 1, 2, 3}})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

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

// CPU seconds of every thread of this process so far.
double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// The image folder of `size` pixels: $IMAGE_FOLDER_<size>, or made once
// under /tmp from the first 2,000 (96) or 1,000 (224) Fashion-MNIST images.
std::string image_folder(std::int64_t size) {
  const std::string var = "IMAGE_FOLDER_" + std::to_string(size);
  if (const char* dir = std::getenv(var.c_str())) return dir;
  const std::int64_t count = size <= 96 ? 2000 : 1000;
  const std::string dir =
      "/tmp/lockstep_bench_images_" + std::to_string(size) + "_" + std::to_string(count);
  if (!std::filesystem::exists(dir + "/other")) {
    ls::datasets::fashion_mnist::write_image_folder(dir, {.image_size = size, .count = count});
  }
  return dir;
}

void BM_Images_FromDirectory(benchmark::State& state) {
  omp_set_num_threads(1);
  const std::int64_t size = state.range(0), threads = state.range(1);
  const std::string dir = image_folder(size);
  std::ostringstream quiet;
  const ld::ImageDataset ds = ld::image_dataset_from_directory(
      dir, {.image_size = {size, size}, .seed = 1, .out = &quiet, .num_parallel_calls = threads});
  std::int64_t images = 0;
  std::uint64_t epoch = 0;
  const double cpu0 = process_cpu_seconds();
  for (auto _ : state) {
    ld::Iterator it = ds.make_iterator({.epoch = epoch++});
    while (auto b = it.next()) images += (*b)[0].dim(0);
  }
  // All threads' CPU per image: what the pipeline costs, whatever else the
  // machine's cores are doing (the wall-clock rate depends on that).
  state.counters["cpu_ms_per_image"] =
      (process_cpu_seconds() - cpu0) * 1e3 / static_cast<double>(std::max<std::int64_t>(images, 1));
  state.counters["images_per_s"] =
      benchmark::Counter(static_cast<double>(images), benchmark::Counter::kIsRate);
  state.SetLabel(std::to_string(ds.file_paths().size()) + " JPEGs " + std::to_string(size) + "x" +
                 std::to_string(size) + ", " + std::to_string(threads) + " map thread(s)");
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_Images_FromDirectory)
    ->Args({96, 1})
    ->Args({96, 2})
    ->Args({224, 1})
    ->Args({224, 2})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();

// One file's parts on one thread: read + decode, and the resize.
void BM_Images_DecodeOne(benchmark::State& state) {
  omp_set_num_threads(1);
  const std::int64_t size = state.range(0);
  const std::string dir = image_folder(size);
  std::string path;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/other")) {
    path = e.path().string();
    break;
  }
  for (auto _ : state) benchmark::DoNotOptimize(ld::read_image(path, 3));
  state.counters["images_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_Images_DecodeOne)->Arg(96)->Arg(224)->Unit(benchmark::kMicrosecond);

void BM_Images_ResizeOne(benchmark::State& state) {
  omp_set_num_threads(1);
  const std::int64_t size = state.range(0);
  const ls::Tensor img =
      ls::cast(ls::random::uniform({size, size, 3}, {.maxval = 255.0f}), ls::DType::kUInt8);
  for (auto _ : state) benchmark::DoNotOptimize(ls::image::resize(img, {size, size}));
  state.counters["images_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_Images_ResizeOne)->Arg(96)->Arg(224)->Unit(benchmark::kMicrosecond);

// The table of section 4, written once under /tmp.
std::string csv_table_file() {
  const std::string path = "/tmp/lockstep_bench_table.csv";
  if (std::filesystem::exists(path)) return path;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  const char* colours[] = {"amber", "blue", "green", "red"};
  const char* sizes[] = {"S", "M", "L"};
  const char* labels[] = {"low", "mid", "high"};
  std::ofstream out(path + ".part");
  for (int c = 0; c < 20; ++c) out << "n" << c << ",";
  out << "colour,size,label,note\n";
  char number[32];
  for (int r = 0; r < 50000; ++r) {
    for (int c = 0; c < 20; ++c) {
      std::snprintf(number, sizeof number, "%g", normal(rng) * (c % 4 == 3 ? 1000 : 1 + 10 * c));
      out << number << ",";
    }
    out << colours[rng() % 4] << "," << sizes[rng() % 3] << "," << labels[rng() % 3] << ",\"row "
        << r << ", free text\"\n";
  }
  out.close();
  std::filesystem::rename(path + ".part", path);
  return path;
}

void BM_ReadCsvTable(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  const std::string path = csv_table_file();
  std::int64_t fields = 0;
  for (auto _ : state) {
    const ld::CsvTable t = ld::read_csv_table(path);
    fields += t.rows * static_cast<std::int64_t>(t.columns.size());
    benchmark::DoNotOptimize(t.columns.data());
  }
  const double bytes = static_cast<double>(std::filesystem::file_size(path));
  state.counters["MB_per_s"] = benchmark::Counter(
      bytes * static_cast<double>(state.iterations()) / 1e6, benchmark::Counter::kIsRate);
  state.counters["ns_per_field"] =
      benchmark::Counter(static_cast<double>(fields) * 1e-9,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.SetLabel(std::to_string(state.range(0)) + " thread(s)");
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_ReadCsvTable)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// dictionary_encode of a 50,000-row text column of 4 values (the table's
// 'colour'), on 1 and 2 threads.
void BM_DictionaryEncode(benchmark::State& state) {
  omp_set_num_threads(static_cast<int>(state.range(0)));
  const char* colours[] = {"amber", "blue", "green", "red"};
  std::mt19937 rng(7);
  std::vector<std::string_view> column(50000);
  for (std::string_view& v : column) v = colours[rng() % 4];
  for (auto _ : state) {
    const ld::Dictionary d = ld::dictionary_encode(column);
    benchmark::DoNotOptimize(d.codes.data());
  }
  state.counters["ns_per_row"] = benchmark::Counter(
      static_cast<double>(column.size()) * 1e-9,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(std::to_string(state.range(0)) + " thread(s)");
  omp_set_num_threads(omp_get_num_procs());
}
BENCHMARK(BM_DictionaryEncode)->Arg(1)->Arg(2)->Unit(benchmark::kMicrosecond)->UseRealTime();

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
