// Tensor-layer benchmarks (issue #2).
//
// BM_Matmul_VsSgemm: our matmul against oneDNN's own dnnl_sgemm on the same
//   buffers, interleaved in every iteration so both see the same machine
//   state. Counters: GFLOP/s of each and ratio = sgemm time / our time
//   (goal >= 0.95: the wrapper adds nothing).
// BM_Matmul_BFloat16VsFloat32: our matmul on bfloat16 operands (oneDNN's
//   native bfloat16 kernel, float32 accumulation) against float32, on the
//   same values, interleaved: GFLOP/s of each and speedup = float32 time /
//   bfloat16 time. Skipped, saying why, where the CPU has no bfloat16
//   instructions (issue #36).
// BM_Op_AddTiny: per-op overhead on 16 floats (ns per op).
// BM_Elementwise_VsMemcpy: an op's GB/s against memcpy of the same bytes,
//   interleaved (goal >= 0.8 of memcpy at 4 MiB).
// BM_Softmax_ExactVsOneDnn: log_softmax (exact, float64 log-sum-exp; issue
//   #21) against oneDNN's logsoftmax primitive it replaced, interleaved, on
//   [rows, classes]; ratio = oneDNN's time / ours.
// BM_BatchNorm_TrainingVsMemcpy: training-mode batch normalisation forward
//   (the op, batch statistics) and backward (the adapter call its gradient
//   rule makes: dx, dgamma, dbeta) on NHWC activations, interleaved with a
//   memcpy of the same tensor — one pass over it at the memory bandwidth
//   this run sees (read + write). passes = (forward + backward) / memcpy;
//   the traffic floor is 4 passes (forward reads x for the statistics, then
//   reads x and writes y; backward reads x and dy for dgamma and dbeta,
//   then reads them again and writes dx), of_floor = 4 × memcpy / ours
//   (issue #19).
// BM_BatchNormRelu6_FusedVsSeparate: what a MobileNetV2 block runs in
//   training, batch norm with batch statistics then ReLU6, forward and
//   backward through a tape: batch_norm_relu_training (one op, our own
//   loops) against batch_norm_training then relu (oneDNN's batch norm, a
//   separate ReLU6), interleaved with a memcpy of the tensor. Both include
//   the tape's seed gradient (a tensor of ones). passes_* = time / memcpy;
//   speedup = separate / fused; dx_error_* = each dx's largest distance from
//   a float64 oracle, over the largest |dx| (8 channels).
// BM_BatchNormRelu6_BFloat16VsFloat32: the same fused op, forward and
//   backward through a tape, on bfloat16 activations (mixed precision: our
//   loops reading and writing bfloat16, tensor/ops/batch_norm_ops.cc)
//   against float32 ones, interleaved; speedup = float32 time / bfloat16 time, and the
//   largest |dbeta| difference over the largest |dbeta|.
//
// Results are validated before they are timed.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "lockstep/lockstep.h"
#include "tensor/backend/onednn/onednn.h"

namespace ls = lockstep;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// args: M, K, N, transpose_a, transpose_b
void BM_Matmul_VsSgemm(benchmark::State& state) {
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const ls::Tensor a = ls::random::uniform(ta ? ls::Shape{k, m} : ls::Shape{m, k}, {.seed = 1});
  const ls::Tensor b = ls::random::uniform(tb ? ls::Shape{n, k} : ls::Shape{k, n}, {.seed = 2});
  std::vector<float> c_ref(static_cast<std::size_t>(m * n));
  // Validate: our result equals sgemm's.
  const ls::Tensor c = ls::matmul(a, b, {.transpose_a = ta, .transpose_b = tb});
  ls::backend::onednn::reference_sgemm(ta, tb, m, n, k, a.data<float>(), b.data<float>(),
                                       c_ref.data());
  const float* pc = c.data<float>();
  for (std::size_t i = 0; i < c_ref.size(); ++i) {
    if (std::fabs(pc[i] - c_ref[i]) > 1e-3f * (1.0f + std::fabs(c_ref[i]))) {
      state.SkipWithError("matmul disagrees with dnnl_sgemm");
      return;
    }
  }
  double ours = 0, theirs = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    ls::Tensor out = ls::matmul(a, b, {.transpose_a = ta, .transpose_b = tb});
    benchmark::DoNotOptimize(out.raw_data());
    const double dt = seconds_since(t0);
    ours += dt;
    state.SetIterationTime(dt);
    t0 = Clock::now();
    ls::backend::onednn::reference_sgemm(ta, tb, m, n, k, a.data<float>(), b.data<float>(),
                                         c_ref.data());
    benchmark::ClobberMemory();
    theirs += seconds_since(t0);
  }
  const double flops =
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = flops / ours * 1e-9;
  state.counters["sgemm_GFLOPs"] = flops / theirs * 1e-9;
  state.counters["ratio"] = theirs / ours;
}

void matmul_shapes(benchmark::internal::Benchmark* b) {
  // The seed MLP's GEMMs: forward x·W, backward dX = g·Wᵀ and dW = xᵀ·g.
  for (std::int64_t m : {32, 64, 512}) {
    for (auto [k, n] : {std::pair<std::int64_t, std::int64_t>{784, 256}, {256, 256}, {256, 10}}) {
      b->Args({m, k, n, 0, 0});  // forward
      b->Args({m, n, k, 0, 1});  // dX: [m, n]·[k, n]ᵀ
      b->Args({k, m, n, 1, 0});  // dW: [m, k]ᵀ·[m, n]
    }
  }
  b->Args({2048, 2048, 2048, 0, 0});
  b->ArgNames({"M", "K", "N", "ta", "tb"});
}
BENCHMARK(BM_Matmul_VsSgemm)->Apply(matmul_shapes)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_Matmul_BFloat16VsFloat32(benchmark::State& state) {
  if (!ls::native_bfloat16()) {
    state.SkipWithError(("no native bfloat16 here: " + ls::bfloat16_kernels()).c_str());
    return;
  }
  const auto m = state.range(0), k = state.range(1), n = state.range(2);
  const bool ta = state.range(3) != 0, tb = state.range(4) != 0;
  const ls::MatmulOptions o{.transpose_a = ta, .transpose_b = tb};
  const ls::Tensor a16 =
      ls::cast(ls::random::uniform(ta ? ls::Shape{k, m} : ls::Shape{m, k}, {.seed = 1}),
               ls::DType::kBFloat16);
  const ls::Tensor b16 =
      ls::cast(ls::random::uniform(tb ? ls::Shape{n, k} : ls::Shape{k, n}, {.seed = 2}),
               ls::DType::kBFloat16);
  const ls::Tensor a = ls::cast(a16, ls::DType::kFloat32), b = ls::cast(b16, ls::DType::kFloat32);
  {  // Validate: within bfloat16 rounding of the float32 product of the same values.
    const std::vector<float> want = ls::matmul(a, b, o).to_vector<float>();
    const std::vector<float> got =
        ls::cast(ls::matmul(a16, b16, o), ls::DType::kFloat32).to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::fabs(got[i] - want[i]) > 0x1p-8f * std::fabs(want[i]) + 1e-3f) {
        state.SkipWithError("the bfloat16 product is off the float32 one");
        return;
      }
    }
  }
  double f32_s = 0, bf16_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(ls::matmul(a16, b16, o));
    const double dt = seconds_since(t0);
    bf16_s += dt;
    t0 = Clock::now();
    benchmark::DoNotOptimize(ls::matmul(a, b, o));
    f32_s += seconds_since(t0);
    state.SetIterationTime(dt);
  }
  const double flops =
      2.0 * static_cast<double>(m * k * n) * static_cast<double>(state.iterations());
  state.counters["gflops_bf16"] = flops / bf16_s / 1e9;
  state.counters["gflops_f32"] = flops / f32_s / 1e9;
  state.counters["speedup"] = f32_s / bf16_s;
}
BENCHMARK(BM_Matmul_BFloat16VsFloat32)
    ->Apply(matmul_shapes)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_Op_AddTiny(benchmark::State& state) {
  const ls::Tensor a = ls::random::uniform({16}, {.seed = 1});
  const ls::Tensor b = ls::random::uniform({16}, {.seed = 2});
  for (auto _ : state) {
    ls::Tensor c = ls::add(a, b);
    benchmark::DoNotOptimize(c.raw_data());
  }
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_Op_AddTiny);

// arg 0: which op (add, mul, relu, exp); arg 1: bytes per tensor; arg 2:
// threads for the op (memcpy is always one thread).
void BM_Elementwise_VsMemcpy(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0));
  const std::int64_t n = state.range(1) / 4;
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(static_cast<int>(state.range(2)));
  const ls::Tensor a = ls::random::uniform({n}, {.minval = 0.5f, .maxval = 1.5f, .seed = 1});
  const ls::Tensor b = ls::random::uniform({n}, {.minval = 0.5f, .maxval = 1.5f, .seed = 2});
  std::vector<float> dst(static_cast<std::size_t>(n));
  auto run = [&]() -> ls::Tensor {
    switch (which) {
      case 0:
        return ls::add(a, b);
      case 1:
        return ls::mul(a, b);
      case 2:
        return ls::relu(a);
      default:
        return ls::exp(a);
    }
  };
  // Validate one element of each op.
  const float got = run().data<float>()[n / 2];
  const float x = a.data<float>()[n / 2], y = b.data<float>()[n / 2];
  const float want = which == 0 ? x + y : which == 1 ? x * y : which == 2 ? x : std::exp(x);
  if (std::fabs(got - want) > 1e-5f * std::fabs(want)) {
    state.SkipWithError("elementwise result is wrong");
    omp_set_num_threads(saved_threads);
    return;
  }
  const double op_bytes = static_cast<double>(n) * 4.0 * (which <= 1 ? 3.0 : 2.0);  // reads + write
  const double copy_bytes = static_cast<double>(n) * 4.0 * 2.0;
  double ours = 0, copy = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    ls::Tensor out = run();
    benchmark::DoNotOptimize(out.raw_data());
    const double dt = seconds_since(t0);
    ours += dt;
    state.SetIterationTime(dt);
    t0 = Clock::now();
    std::memcpy(dst.data(), a.raw_data(), static_cast<std::size_t>(n) * 4);
    benchmark::ClobberMemory();
    copy += seconds_since(t0);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GBps"] = op_bytes * iters / ours * 1e-9;
  state.counters["memcpy_GBps"] = copy_bytes * iters / copy * 1e-9;
  state.counters["ratio"] = (op_bytes / ours) / (copy_bytes / copy);
  omp_set_num_threads(saved_threads);
}
BENCHMARK(BM_Elementwise_VsMemcpy)
    ->ArgsProduct({{0, 1, 2, 3}, {4 << 20, 64 << 20}, {1, 2}})
    ->ArgNames({"op", "bytes", "threads"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: rows, classes
void BM_Softmax_ExactVsOneDnn(benchmark::State& state) {
  const std::int64_t rows = state.range(0), classes = state.range(1);
  const ls::Tensor x = ls::random::normal({rows, classes}, {.stddev = 3.0f, .seed = 1});
  ls::Tensor theirs = ls::Tensor::empty(x.shape());
  double ours_s = 0, theirs_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(ls::log_softmax(x, -1));
    ours_s += seconds_since(t0);
    t0 = Clock::now();
    ls::backend::onednn::softmax(x.data<float>(), theirs.data<float>(), rows, classes, 1, true);
    theirs_s += seconds_since(t0);
    state.SetIterationTime(seconds_since(t0) + 0.0);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["ours_us"] = ours_s / n * 1e6;
  state.counters["onednn_us"] = theirs_s / n * 1e6;
  state.counters["ratio"] = theirs_s / ours_s;
}
BENCHMARK(BM_Softmax_ExactVsOneDnn)
    ->ArgsProduct({{64, 512, 4096}, {10, 1000}})
    ->ArgNames({"rows", "classes"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: batch, height, width, channels
void BM_BatchNorm_TrainingVsMemcpy(benchmark::State& state) {
  const ls::Shape shape{state.range(0), state.range(1), state.range(2), state.range(3)};
  const std::int64_t c = shape[3], rows = shape.numel() / c;
  const ls::Tensor x = ls::random::normal(shape, {.mean = 0.5f, .stddev = 2.0f, .seed = 1});
  const ls::Tensor dy = ls::random::normal(shape, {.seed = 2});
  const ls::Tensor gamma = ls::random::uniform({c}, {.minval = 0.5f, .maxval = 1.5f, .seed = 3});
  const ls::Tensor beta = ls::random::uniform({c}, {.seed = 4});
  ls::Tensor dx = ls::Tensor::empty(shape), dgamma = ls::Tensor::empty({c}),
             dbeta = ls::Tensor::empty({c});
  std::vector<float> copy(static_cast<std::size_t>(shape.numel()));
  const ls::backend::onednn::BatchNormShape s{
      .examples = shape[0], .rows = rows, .channels = c, .epsilon = 1e-3f};
  auto backward = [&](const ls::BatchNormResult& r) {
    ls::backend::onednn::batchnorm_backward(
        s, true, x.data<float>(), dy.data<float>(), gamma.data<float>(), beta.data<float>(),
        r.mean.data<float>(), r.variance.data<float>(), dx.data<float>(), dgamma.data<float>(),
        dbeta.data<float>());
  };
  {  // Validate channel 0's statistics and dbeta against float64 sums.
    const ls::BatchNormResult r = ls::batch_norm_training(x, gamma, beta, 1e-3f);
    backward(r);
    double m = 0, v = 0, db = 0;
    const float* px = x.data<float>();
    const float* pg = dy.data<float>();
    for (std::int64_t i = 0; i < rows; ++i) m += px[i * c], db += pg[i * c];
    m /= static_cast<double>(rows);
    for (std::int64_t i = 0; i < rows; ++i) v += (px[i * c] - m) * (px[i * c] - m);
    v /= static_cast<double>(rows);
    if (std::fabs(r.mean.data<float>()[0] - m) > 1e-3 ||
        std::fabs(r.variance.data<float>()[0] - v) > 1e-3 * v ||
        std::fabs(dbeta.data<float>()[0] - db) > 1e-3 * (1 + std::fabs(db))) {
      state.SkipWithError("batch norm statistics or dbeta disagree with float64 sums");
      return;
    }
  }
  double forward_s = 0, backward_s = 0, copy_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    const ls::BatchNormResult r = ls::batch_norm_training(x, gamma, beta, 1e-3f);
    const double f = seconds_since(t0);
    t0 = Clock::now();
    backward(r);
    const double b = seconds_since(t0);
    forward_s += f, backward_s += b;
    state.SetIterationTime(f + b);
    t0 = Clock::now();
    std::memcpy(copy.data(), x.raw_data(), copy.size() * sizeof(float));
    benchmark::ClobberMemory();
    copy_s += seconds_since(t0);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["forward_ms"] = forward_s / n * 1e3;
  state.counters["backward_ms"] = backward_s / n * 1e3;
  state.counters["memcpy_ms"] = copy_s / n * 1e3;
  state.counters["memcpy_GBps"] = 2.0 * static_cast<double>(copy.size()) * 4.0 * n / copy_s * 1e-9;
  state.counters["passes"] = (forward_s + backward_s) / copy_s;
  state.counters["of_floor"] = 4.0 * copy_s / (forward_s + backward_s);
}
BENCHMARK(BM_BatchNorm_TrainingVsMemcpy)
    ->Args({32, 112, 112, 96})
    ->Args({64, 48, 48, 96})
    ->ArgNames({"n", "h", "w", "c"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// args: batch, height, width, channels
void BM_BatchNormRelu6_FusedVsSeparate(benchmark::State& state) {
  const ls::Shape shape{state.range(0), state.range(1), state.range(2), state.range(3)};
  const std::int64_t c = shape[3];
  const ls::Tensor x = ls::random::normal(shape, {.mean = 0.5f, .stddev = 2.0f, .seed = 1});
  const ls::Tensor gamma = ls::random::uniform({c}, {.minval = 0.5f, .maxval = 4.0f, .seed = 3});
  const ls::Tensor beta = ls::random::uniform({c}, {.seed = 4});
  std::vector<float> copy(static_cast<std::size_t>(shape.numel()));
  // The output and the three gradients of one variant.
  auto run = [&](bool fused) {
    ls::GradientTape tape;
    for (const ls::Tensor* t : {&x, &gamma, &beta}) tape.watch(*t);
    const ls::Tensor z =
        fused ? ls::batch_norm_relu_training(x, gamma, beta, 1e-3f, 6.0f).y
              : ls::relu(ls::batch_norm_training(x, gamma, beta, 1e-3f).y, {.max_value = 6.0f});
    std::vector<ls::Tensor> out = tape.gradient(z, {x, gamma, beta});
    out.insert(out.begin(), z);
    return out;
  };
  {  // Validate: the two agree on the output and on dbeta.
    const auto a = run(true), b = run(false);
    const float* za = a[0].data<float>();
    const float* zb = b[0].data<float>();
    for (std::int64_t i = 0; i < x.numel(); i += 4099) {
      if (std::fabs(za[i] - zb[i]) > 1e-5f) {
        state.SkipWithError("the fused and separate outputs disagree");
        return;
      }
    }
    const float db_a = a[3].data<float>()[0], db_b = b[3].data<float>()[0];
    if (std::fabs(db_a - db_b) > 1e-3f * (1.0f + std::fabs(db_b))) {
      state.SkipWithError("the fused and separate dbeta disagree");
      return;
    }
    // Each dx against a float64 oracle over the first 8 channels (the
    // tape's seed makes dz all ones): the largest error, over the largest
    // |dx|. Positions within 1e-4 of a clip bound are left out (float32 may
    // put them on either side).
    const std::int64_t rows = x.numel() / c;
    const float *px = x.data<float>(), *pg = gamma.data<float>(), *pb = beta.data<float>();
    double worst_a = 0, worst_b = 0, largest = 0;
    for (std::int64_t j = 0; j < std::min<std::int64_t>(c, 8); ++j) {
      double m = 0, v = 0, sum = 0, moment = 0;
      for (std::int64_t r = 0; r < rows; ++r) m += px[r * c + j];
      m /= static_cast<double>(rows);
      for (std::int64_t r = 0; r < rows; ++r) v += (px[r * c + j] - m) * (px[r * c + j] - m);
      v /= static_cast<double>(rows);
      const double inv = 1.0 / std::sqrt(v + 1e-3);
      auto y = [&](std::int64_t r) { return pg[j] * (px[r * c + j] - m) * inv + pb[j]; };
      for (std::int64_t r = 0; r < rows; ++r) {
        const double dy = y(r) > 0 && y(r) < 6 ? 1.0 : 0.0;
        sum += dy, moment += dy * (px[r * c + j] - m);
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        if (std::fabs(y(r)) < 1e-4 || std::fabs(y(r) - 6) < 1e-4) continue;
        const double dy = y(r) > 0 && y(r) < 6 ? 1.0 : 0.0, n = static_cast<double>(rows);
        const double dx =
            pg[j] * inv * (dy - sum / n - (px[r * c + j] - m) * inv * inv * moment / n);
        largest = std::max(largest, std::fabs(dx));
        worst_a = std::max(worst_a, std::fabs(a[1].data<float>()[r * c + j] - dx));
        worst_b = std::max(worst_b, std::fabs(b[1].data<float>()[r * c + j] - dx));
      }
    }
    state.counters["dx_error_fused"] = worst_a / largest;
    state.counters["dx_error_separate"] = worst_b / largest;
  }
  double fused_s = 0, separate_s = 0, copy_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(run(true));
    const double f = seconds_since(t0);
    t0 = Clock::now();
    benchmark::DoNotOptimize(run(false));
    const double s = seconds_since(t0);
    fused_s += f, separate_s += s;
    state.SetIterationTime(f);
    t0 = Clock::now();
    std::memcpy(copy.data(), x.raw_data(), copy.size() * sizeof(float));
    benchmark::ClobberMemory();
    copy_s += seconds_since(t0);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["fused_ms"] = fused_s / n * 1e3;
  state.counters["separate_ms"] = separate_s / n * 1e3;
  state.counters["memcpy_ms"] = copy_s / n * 1e3;
  state.counters["passes_fused"] = fused_s / copy_s;
  state.counters["passes_separate"] = separate_s / copy_s;
  state.counters["speedup"] = separate_s / fused_s;
}
// MobileNetV2's batch-norm shapes (batch, height, width, channels), timed by hand.
void mobilenet_bn_shapes(benchmark::internal::Benchmark* b) {
  b->Args({32, 112, 112, 96})
      ->Args({32, 56, 56, 144})
      ->Args({64, 48, 48, 48})
      ->Args({32, 14, 14, 384})
      ->ArgNames({"n", "h", "w", "c"})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
}
BENCHMARK(BM_BatchNormRelu6_FusedVsSeparate)->Apply(mobilenet_bn_shapes);

// args: batch, height, width, channels
void BM_BatchNormRelu6_BFloat16VsFloat32(benchmark::State& state) {
  const ls::Shape shape{state.range(0), state.range(1), state.range(2), state.range(3)};
  const std::int64_t c = shape[3];
  const ls::Tensor x = ls::random::normal(shape, {.mean = 0.5f, .stddev = 2.0f, .seed = 1});
  const ls::Tensor x16 = ls::cast(x, ls::DType::kBFloat16);
  const ls::Tensor gamma = ls::random::uniform({c}, {.minval = 0.5f, .maxval = 4.0f, .seed = 3});
  const ls::Tensor beta = ls::random::uniform({c}, {.seed = 4});
  auto run = [&](const ls::Tensor& input) {
    ls::GradientTape tape;
    for (const ls::Tensor* t : {&input, &gamma, &beta}) tape.watch(*t);
    const ls::Tensor z = ls::batch_norm_relu_training(input, gamma, beta, 1e-3f, 6.0f).y;
    return tape.gradient(z, {input, gamma, beta});
  };
  {  // Validate: dbeta (the count of unclipped positions) agrees within bf16 rounding.
    const auto a = run(x), b = run(x16);
    const float* da = a[2].data<float>();
    const float* db = b[2].data<float>();
    double worst = 0, largest = 0;
    for (std::int64_t j = 0; j < c; ++j) {
      worst = std::max(worst, static_cast<double>(std::fabs(da[j] - db[j])));
      largest = std::max(largest, static_cast<double>(std::fabs(da[j])));
    }
    state.counters["dbeta_difference"] = worst / std::max(largest, 1.0);
    if (worst > 0.05 * std::max(largest, 1.0)) {
      state.SkipWithError("the bfloat16 and float32 dbeta disagree");
      return;
    }
  }
  double f32_s = 0, bf16_s = 0;
  for (auto _ : state) {
    auto t0 = Clock::now();
    benchmark::DoNotOptimize(run(x16));
    const double b = seconds_since(t0);
    t0 = Clock::now();
    benchmark::DoNotOptimize(run(x));
    f32_s += seconds_since(t0), bf16_s += b;
    state.SetIterationTime(b);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["bfloat16_ms"] = bf16_s / n * 1e3;
  state.counters["float32_ms"] = f32_s / n * 1e3;
  state.counters["speedup"] = f32_s / bf16_s;
}
BENCHMARK(BM_BatchNormRelu6_BFloat16VsFloat32)->Apply(mobilenet_bn_shapes);

}  // namespace

BENCHMARK_MAIN();
