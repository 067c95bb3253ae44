// Model-level benchmarks (issue #3): one training step (forward, loss,
// backward, Adam update, metrics) of the seed MLP, the small CNN and
// MobileNetV2 (issue #19), next to the machine's sgemm ceiling and each
// model's oneDNN primitives alone, measured in the same run.
//
// Counters: samples/s, achieved GFLOP/s (model FLOPs per step / step time),
// and floor_fraction = (FLOPs per step / sgemm GFLOP/s) / step time — the
// share of the step that the FLOP floor explains (1.0: as fast as the matmul
// ceiling allows).
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/lockstep.h"
#include "seed_mlp.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/ops/batch_norm_relu.h"

namespace ls = lockstep;

namespace {

double g_sgemm_gflops = 0.0;

// The ceiling: oneDNN's sgemm at 2048^3 with the default (all-core) threads.
void BM_Ceiling_Sgemm2048(benchmark::State& state) {
  const std::int64_t n = 2048;
  std::vector<float> a(static_cast<std::size_t>(n * n), 1.0f), b(a), c(a);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    ls::backend::onednn::reference_sgemm(false, false, n, n, n, a.data(), b.data(), c.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  g_sgemm_gflops = 2.0 * n * n * n * static_cast<double>(state.iterations()) / seconds * 1e-9;
  state.counters["GFLOPs"] = g_sgemm_gflops;
}
BENCHMARK(BM_Ceiling_Sgemm2048)->Unit(benchmark::kMillisecond)->MinTime(1.0);

// The floor of a seed-MLP training step as issue #8 defines it: the 8 GEMMs
// of one step (3 forward x·W; backward dW = xᵀ·g for 3 layers and dX = g·Wᵀ
// for the 2 upper ones) called back to back through oneDNN's sgemm with the
// default threads, nothing else. Measured in the same run as the step.
double g_mlp_gemm_floor_us[2] = {0, 0};  // batch 64, 512

// The 8 GEMMs' operands for a batch of m, and one call of all 8.
struct SeedMlpGemms {
  static constexpr std::int64_t widths[4] = {784, 256, 256, 10};
  std::int64_t m;
  std::vector<std::vector<float>> x{4}, w{3}, g{4}, dw{3};

  explicit SeedMlpGemms(std::int64_t batch) : m(batch) {
    for (int l = 0; l < 4; ++l) {
      x[l].assign(static_cast<std::size_t>(m * widths[l]), 0.5f);
      g[l].assign(x[l].size(), 0.25f);
    }
    for (int l = 0; l < 3; ++l) {
      w[l].assign(static_cast<std::size_t>(widths[l] * widths[l + 1]), 0.01f);
      dw[l].assign(w[l].size(), 0.0f);
    }
  }
  void run() {
    namespace dnn = ls::backend::onednn;
    for (int l = 0; l < 3; ++l)  // forward
      dnn::reference_sgemm(false, false, m, widths[l + 1], widths[l], x[l].data(), w[l].data(),
                           x[l + 1].data());
    for (int l = 2; l >= 0; --l) {  // backward
      dnn::reference_sgemm(true, false, widths[l], widths[l + 1], m, x[l].data(), g[l + 1].data(),
                           dw[l].data());
      if (l > 0)
        dnn::reference_sgemm(false, true, m, widths[l], widths[l + 1], g[l + 1].data(), w[l].data(),
                             g[l].data());
    }
  }
};

void BM_Floor_SeedMlpGemms(benchmark::State& state) {
  SeedMlpGemms gemms(state.range(0));
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    gemms.run();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const double us = seconds / static_cast<double>(state.iterations()) * 1e6;
  g_mlp_gemm_floor_us[gemms.m == 64 ? 0 : 1] = us;
  state.counters["floor_us"] = us;
}
BENCHMARK(BM_Floor_SeedMlpGemms)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond)->MinTime(1.0);

// The same floor for the small CNN at batch 64 (issue #8: "the convolution
// ceiling"): its FLOP-carrying primitives alone, called back to back through
// the oneDNN adapter — both convolutions forward and backward-weights, the
// second's backward-data (the first's input gets no gradient), and the two
// Dense layers' GEMMs (forward, dW, and dX of the upper one) — no pooling,
// activations, loss or optimizer.
double g_cnn_floor_us = 0;

void BM_Floor_SmallCnnPrimitives(benchmark::State& state) {
  namespace dnn = ls::backend::onednn;
  const std::int64_t n = state.range(0);
  auto conv = [&](std::int64_t hw, std::int64_t c, std::int64_t oc) {
    dnn::ConvShape s;
    s.n = n, s.h = hw, s.w = hw, s.c = c, s.kh = 3, s.kw = 3, s.oc = oc;
    s.oh = hw - 2, s.ow = hw - 2;
    return s;
  };
  const dnn::ConvShape c1 = conv(28, 1, 32), c2 = conv(13, 32, 64);
  auto buffer = [](std::int64_t count) {
    return std::vector<float>(static_cast<std::size_t>(count), 0.1f);
  };
  auto x1 = buffer(n * 28 * 28), w1 = buffer(9 * 32), b1 = buffer(32),
       y1 = buffer(n * 26 * 26 * 32);
  auto x2 = buffer(n * 13 * 13 * 32), w2 = buffer(9 * 32 * 64), b2 = buffer(64),
       y2 = buffer(n * 11 * 11 * 64), dx2 = buffer(n * 13 * 13 * 32);
  auto dw1 = buffer(9 * 32), db1 = buffer(32), dw2 = buffer(9 * 32 * 64), db2 = buffer(64);
  auto h0 = buffer(n * 1600), wd1 = buffer(1600 * 128), h1 = buffer(n * 128),
       wd2 = buffer(128 * 10), out = buffer(n * 10), dwd1 = buffer(1600 * 128),
       dwd2 = buffer(128 * 10), dh1 = buffer(n * 128);
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    dnn::conv2d_forward(c1, x1.data(), w1.data(), b1.data(), y1.data());
    dnn::conv2d_forward(c2, x2.data(), w2.data(), b2.data(), y2.data());
    dnn::reference_sgemm(false, false, n, 128, 1600, h0.data(), wd1.data(), h1.data());
    dnn::reference_sgemm(false, false, n, 10, 128, h1.data(), wd2.data(), out.data());
    dnn::reference_sgemm(true, false, 128, 10, n, h1.data(), out.data(), dwd2.data());
    dnn::reference_sgemm(false, true, n, 128, 10, out.data(), wd2.data(), dh1.data());
    dnn::reference_sgemm(true, false, 1600, 128, n, h0.data(), dh1.data(), dwd1.data());
    dnn::conv2d_backward_weights(c2, x2.data(), y2.data(), dw2.data(), db2.data());
    dnn::conv2d_backward_data(c2, y2.data(), w2.data(), dx2.data());
    dnn::conv2d_backward_weights(c1, x1.data(), y1.data(), dw1.data(), db1.data());
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  g_cnn_floor_us = seconds / static_cast<double>(state.iterations()) * 1e6;
  state.counters["floor_us"] = g_cnn_floor_us;
}
BENCHMARK(BM_Floor_SmallCnnPrimitives)->Arg(64)->Unit(benchmark::kMicrosecond)->MinTime(1.0);

// A batch of `example`-shaped uniform inputs with labels i % 10, and
// `model` compiled as the benchmarks train it (Adam, sparse cross-entropy
// from logits, accuracy) and stepped 3 times (built, caches warm).
struct Batch {
  ls::Tensor x, y;
};
Batch compile_and_warm(ls::Model& model, const ls::Shape& example, std::int64_t batch) {
  ls::Shape shape{batch};
  for (std::int64_t d : example.dims()) shape.push_back(d);
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = i % 10;
  Batch b{ls::random::uniform(shape, {.seed = 1}), ls::Tensor::from_vector(labels)};
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  for (int i = 0; i < 3; ++i) model.train_step(b.x, b.y);
  return b;
}

// Trains on synthetic data of the model's input shape; `forward_flops` is
// the forward-pass FLOPs per example. Backward is counted as twice the
// forward less `skipped_flops`: the first layer's input gradient, which no
// one needs and the tape does not compute.
void run_training(benchmark::State& state, ls::Model model, const ls::Shape& example,
                  double forward_flops, double skipped_flops) {
  const std::int64_t batch = state.range(0);
  const auto [x, y] = compile_and_warm(model, example, batch);
  for (auto _ : state) {
    benchmark::DoNotOptimize(model.train_step(x, y));
  }
  const double steps = static_cast<double>(state.iterations());
  const double step_flops = (3.0 * forward_flops - skipped_flops) * static_cast<double>(batch);
  state.counters["samples_per_s"] =
      benchmark::Counter(steps * static_cast<double>(batch), benchmark::Counter::kIsRate);
  state.counters["GFLOPs"] =
      benchmark::Counter(steps * step_flops * 1e-9, benchmark::Counter::kIsRate);
  // The step against its primitives-alone floor measured above (MLP: the
  // 8 GEMMs; CNN at batch 64: convolutions and GEMMs): step / floor, and
  // its inverse, the fraction of the ceiling the whole step reaches.
  const bool mlp = forward_flops < 1e6;
  const double floor_us =
      mlp ? g_mlp_gemm_floor_us[batch == 64 ? 0 : 1] : (batch == 64 ? g_cnn_floor_us : 0.0);
  if (floor_us > 0) {
    state.counters["step_over_floor"] = benchmark::Counter(
        steps * floor_us * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["of_ceiling"] =
        benchmark::Counter(steps * floor_us * 1e-6, benchmark::Counter::kIsRate);
  }
  if (g_sgemm_gflops > 0) {
    state.counters["floor_fraction"] = benchmark::Counter(
        steps * step_flops / (g_sgemm_gflops * 1e9), benchmark::Counter::kIsRate);
  }
}

void BM_Train_SeedMlp(benchmark::State& state) {
  run_training(state, ls::zoo::seed_mlp(), ls::Shape{784}, 2.0 * (784 * 256 + 256 * 256 + 256 * 10),
               2.0 * 784 * 256);
}
BENCHMARK(BM_Train_SeedMlp)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond)->MinTime(2.0);

// Where the seed MLP's step goes (issue #21, item 3), with the floor and
// the step alternated in one loop, so that the machine's drift (the same
// GEMMs vary by ±15% between runs a minute apart here) cancels out of the
// ratios. Each iteration times, in turn: the 8 GEMMs alone; Model::
// train_step; and the same step spelled out with the public API, part by
// part — forward and loss under a tape, the tape's backward, Adam's update
// of all 269,322 variables, and the loss and accuracy trackers. Each runs
// twice in a row and only the second run is timed, so each is measured
// with the caches its own loop leaves (warm), not those of the one before.
// Counters are microseconds per step, and each over the floor.
void BM_Breakdown_SeedMlp(benchmark::State& state) {
  const std::int64_t batch = state.range(0);
  SeedMlpGemms gemms(batch);
  ls::Model model = ls::zoo::seed_mlp();
  const auto [x, y] = compile_and_warm(model, ls::Shape{784}, batch);
  const std::vector<ls::Variable> vars = model.trainable_weights();
  ls::Optimizer adam = ls::optimizers::Adam();
  ls::metrics::Mean loss_tracker;
  ls::metrics::SparseCategoricalAccuracy accuracy;
  enum { kFloor, kStep, kForward, kBackward, kAdam, kMetrics, kParts };
  double seconds[kParts] = {};
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto add = [&](int part, auto t0) {
    const auto t1 = now();
    seconds[part] += std::chrono::duration<double>(t1 - t0).count();
    return t1;
  };
  // One manual step; its parts are timed when `timed`.
  auto manual_step = [&](bool timed) {
    auto t = now();
    auto mark = [&](int part) {
      if (timed) t = add(part, t);
    };
    ls::Tensor logits, loss;
    std::vector<ls::Tensor> grads;
    {
      ls::GradientTape tape;
      logits = model(x, {.training = true});
      loss = model.compute_loss(y, logits);
      mark(kForward);
      grads = tape.gradient(loss, vars);
      mark(kBackward);
    }
    adam.apply_gradients(grads, vars);
    mark(kAdam);
    ls::NoGradGuard no_grad;
    loss_tracker.update_state(loss);
    accuracy.update_state(y, logits);
    mark(kMetrics);
  };
  // Each thing runs twice in a row and the second run is timed: each is
  // measured warm, as in its own loop, whatever ran before it.
  for (auto _ : state) {
    gemms.run();
    auto t = now();
    gemms.run();
    add(kFloor, t);
    benchmark::DoNotOptimize(model.train_step(x, y));
    t = now();
    benchmark::DoNotOptimize(model.train_step(x, y));
    add(kStep, t);
    manual_step(false);
    manual_step(true);
  }
  static const char* const names[kParts] = {"floor",    "step", "forward",
                                            "backward", "adam", "metrics"};
  const double n = static_cast<double>(state.iterations());
  for (int p = 0; p < kParts; ++p) {
    state.counters[std::string(names[p]) + "_us"] = seconds[p] / n * 1e6;
    if (p != kFloor)
      state.counters[std::string(names[p]) + "_over_floor"] = seconds[p] / seconds[kFloor];
  }
}
BENCHMARK(BM_Breakdown_SeedMlp)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond)->MinTime(3.0);

// What the ReLU activations cost a step (issue #21's "bias and activation
// fused into the GEMM"): the seed MLP (arg 0) or the small CNN (arg 1) at
// batch 64, alternated in every iteration with the same model without
// activations; each step run twice, the second timed. relu_us is the
// difference: forward and backward of the ReLUs, all that fusing them into
// the GEMMs or convolutions could save.
void BM_ReluCost(benchmark::State& state) {
  const bool cnn = state.range(0) != 0;
  ls::Model with_relu = cnn ? ls::zoo::small_cnn() : ls::zoo::seed_mlp();
  ls::Model linear;
  if (cnn) {
    auto in = ls::Input({28, 28, 1});
    auto h = ls::layers::MaxPooling2D()(ls::layers::Conv2D(32, {3, 3})(in));
    h = ls::layers::Flatten()(ls::layers::MaxPooling2D()(ls::layers::Conv2D(64, {3, 3})(h)));
    linear = ls::Model(in, ls::layers::Dense(10)(ls::layers::Dense(128)(h)));
  } else {
    auto in = ls::Input({784});
    auto h = ls::layers::Dense(256)(ls::layers::Dense(256)(in));
    linear = ls::Model(in, ls::layers::Dense(10)(h));
  }
  const ls::Shape example = cnn ? ls::Shape{28, 28, 1} : ls::Shape{784};
  const auto [x, y] = compile_and_warm(with_relu, example, 64);
  compile_and_warm(linear, example, 64);
  double seconds[2] = {};
  auto timed_step = [&](ls::Model& m, double& total) {
    m.train_step(x, y);
    const auto t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(m.train_step(x, y));
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : state) {
    timed_step(with_relu, seconds[0]);
    timed_step(linear, seconds[1]);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["step_us"] = seconds[0] / n * 1e6;
  state.counters["linear_step_us"] = seconds[1] / n * 1e6;
  state.counters["relu_us"] = (seconds[0] - seconds[1]) / n * 1e6;
  state.counters["relu_share"] = (seconds[0] - seconds[1]) / seconds[0];
  state.SetLabel(cnn ? "small CNN, batch 64" : "seed MLP, batch 64");
}
BENCHMARK(BM_ReluCost)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MinTime(4.0);

void BM_Train_SmallCnn(benchmark::State& state) {
  const double conv1 = 2.0 * 26 * 26 * 32 * 9 * 1, conv2 = 2.0 * 11 * 11 * 64 * 9 * 32;
  const double dense = 2.0 * (1600 * 128 + 128 * 10);
  run_training(state, ls::zoo::small_cnn(), ls::Shape{28, 28, 1}, conv1 + conv2 + dense, conv1);
}
BENCHMARK(BM_Train_SmallCnn)->Arg(32)->Arg(64)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// ---- MobileNetV2 (issue #19) -------------------------------------------------------

// args: alpha × 100, input size, batch.
ls::Model mobilenet(const benchmark::State& state) {
  ls::clear_session();
  const std::int64_t size = state.range(1);
  return ls::applications::MobileNetV2({.input_shape = ls::Shape{size, size, 3},
                                        .alpha = static_cast<double>(state.range(0)) / 100.0,
                                        .classifier_activation = ""});
}

// Every kernel one training step of `model` runs on its tensors, with its
// shapes, read off the graph: each convolution (depthwise too) forward,
// backward-data (not the first: the images get no gradient) and
// backward-weights; each BatchNormalization forward and backward (training
// mode) — oneDNN's, or, where the graph folded its ReLU6 into it, our own
// batch_norm_relu pair, whose forward includes its batch statistics; the
// classifier's three GEMMs. Called back to back they are the floor a step
// could reach with everything else (the residual adds, the statistics of
// the unfolded batch norms, the optimizer, the tape) free.
struct Primitives {
  struct Conv {
    ls::backend::onednn::ConvShape shape;
    bool first = false;
    bool depthwise = false;
  };
  std::vector<Conv> convs;
  struct Norm {
    ls::backend::onednn::BatchNormShape shape;
    // A ReLU folded into it (FunctionalImpl::fold_relu): our own
    // batch_norm_relu kernels run instead of oneDNN's, with this cap.
    std::optional<float> relu_top{};
  };
  std::vector<Norm> norms;
  std::int64_t batch = 0, features = 0, classes = 0;
};

std::int64_t same_padding(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t& out) {
  out = (in + stride - 1) / stride;
  return std::max<std::int64_t>((out - 1) * stride + k - in, 0);
}

Primitives primitives_of(const ls::Model& model, std::int64_t batch) {
  namespace dnn = ls::backend::onednn;
  Primitives p;
  p.batch = batch;
  const auto* graph = dynamic_cast<const ls::FunctionalImpl*>(model.impl().get());
  for (const auto& step : graph->steps()) {
    const ls::LayerImpl& layer = *step.node->layer;
    const ls::Shape in = step.node->inputs.at(0).sample_shape();
    const ls::Shape out = step.output.sample_shape();
    if (layer.class_name() == "Conv2D" || layer.class_name() == "DepthwiseConv2D") {
      const ls::LayerConfig c = layer.get_config();
      const auto k = c.get<std::vector<std::int64_t>>("kernel_size");
      const auto stride = c.get<std::vector<std::int64_t>>("strides");
      const bool depthwise = layer.class_name() == "DepthwiseConv2D";
      dnn::ConvShape s;
      s.n = batch, s.h = in[0], s.w = in[1], s.c = in[2];
      s.kh = k[0], s.kw = k[1], s.oc = out[2], s.groups = depthwise ? in[2] : 1;
      s.sh = stride[0], s.sw = stride[1];
      if (c.get<std::string>("padding") == "same") {
        const std::int64_t ph = same_padding(s.h, s.kh, s.sh, s.oh),
                           pw = same_padding(s.w, s.kw, s.sw, s.ow);
        s.pad_t = ph / 2, s.pad_b = ph - ph / 2, s.pad_l = pw / 2, s.pad_r = pw - pw / 2;
      } else {
        s.oh = out[0], s.ow = out[1];
      }
      p.convs.push_back({s, p.convs.empty(), depthwise});
    } else if (layer.class_name() == "BatchNormalization") {
      const std::int64_t positions = in[0] * in[1];
      std::optional<float> top;
      if (step.relu) top = step.relu->max_value.value_or(std::numeric_limits<float>::infinity());
      p.norms.push_back(
          {{.examples = batch, .rows = batch * positions, .channels = in[2], .epsilon = 1e-3f},
           top});
    } else if (layer.class_name() == "Dense") {
      p.features = in[0], p.classes = out[0];
    }
  }
  return p;
}

// The floor, by kind of primitive: seconds per step of each, and the sum.
std::map<std::string, double> g_mobilenet_floor_s;

void BM_Floor_MobileNetV2Primitives(benchmark::State& state) {
  namespace dnn = ls::backend::onednn;
  const std::int64_t batch = state.range(2);
  const Primitives p = primitives_of(mobilenet(state), batch);
  auto buffer = [](std::int64_t count) {
    return std::vector<float>(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)), 0.1f);
  };
  // One input, output and weights buffer each, as large as the largest use.
  std::int64_t most = 0, most_w = 0;
  for (const auto& c : p.convs) {
    most = std::max({most, c.shape.n * c.shape.h * c.shape.w * c.shape.c,
                     c.shape.n * c.shape.oh * c.shape.ow * c.shape.oc});
    most_w = std::max(most_w, c.shape.kh * c.shape.kw * c.shape.c / c.shape.groups * c.shape.oc);
  }
  auto x = buffer(most), y = buffer(most), dy = buffer(most), dx = buffer(most), w = buffer(most_w),
       dw = buffer(most_w), stats = buffer(4 * 1280 * 2), head_w = buffer(p.features * p.classes),
       head_dw = buffer(p.features * p.classes), logits = buffer(batch * p.classes);
  for (float& v : stats) v = 1.0f;  // positive variances
  std::map<std::string, double> seconds;
  auto timed = [&](const char* kind, auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    seconds[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : state) {
    for (const auto& c : p.convs) {
      const std::string kind = c.depthwise ? "depthwise" : "conv";
      timed((kind + " forward").c_str(),
            [&] { dnn::conv2d_forward(c.shape, x.data(), w.data(), nullptr, y.data()); });
      if (!c.first)
        timed((kind + " backward data").c_str(),
              [&] { dnn::conv2d_backward_data(c.shape, y.data(), w.data(), dx.data()); });
      timed((kind + " backward weights").c_str(),
            [&] { dnn::conv2d_backward_weights(c.shape, x.data(), y.data(), dw.data(), nullptr); });
    }
    float* gamma = stats.data();
    float* beta = gamma + 1280 * 2;
    float* mean = beta + 1280 * 2;
    float* var = mean + 1280 * 2;
    for (const auto& [n, top] : p.norms) {
      if (top) {  // statistics, normalisation and ReLU; its gradient
        timed("batchnorm+relu forward", [&] {
          ls::detail::batch_norm_relu_forward(n, x.data(), gamma, beta, *top, y.data(), mean, var);
        });
        timed("batchnorm+relu backward", [&] {
          ls::detail::batch_norm_relu_backward(n, *top, x.data(), y.data(), dy.data(), gamma, mean,
                                               var, dx.data(), dw.data(), dw.data() + 1280 * 2);
        });
        continue;
      }
      timed("batchnorm forward",
            [&] { dnn::batchnorm_forward(n, x.data(), gamma, beta, mean, var, y.data()); });
      timed("batchnorm backward", [&] {
        dnn::batchnorm_backward(n, true, x.data(), y.data(), gamma, beta, mean, var, dx.data(),
                                dw.data(), dw.data() + 1280 * 2);
      });
    }
    if (p.classes > 0) {
      timed("dense (3 GEMMs)", [&] {
        dnn::reference_sgemm(false, false, batch, p.classes, p.features, x.data(), head_w.data(),
                             logits.data());
        dnn::reference_sgemm(true, false, p.features, p.classes, batch, x.data(), logits.data(),
                             head_dw.data());
        dnn::reference_sgemm(false, true, batch, p.features, p.classes, logits.data(),
                             head_w.data(), dx.data());
      });
    }
  }
  const double steps = static_cast<double>(state.iterations());
  double total = 0;
  for (auto& [kind, s] : seconds) {
    s /= steps;
    total += s;
    state.counters[kind + " ms"] = s * 1e3;
  }
  seconds["total"] = total;
  state.counters["floor_ms"] = total * 1e3;
  g_mobilenet_floor_s = seconds;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
}

// One training step (forward, loss, backward, Adam, metrics) of
// MobileNetV2 with its top (1000 classes, as keras.applications builds it
// with weights=None) on random images and labels, no strategy: the
// calling thread's cores as oneDNN's threads. step_over_floor is the step
// against the primitives above; peak_rss_MiB is the process's (run one
// benchmark per process for a figure of its own: bench/compare.sh does).
void BM_Train_MobileNetV2(benchmark::State& state) {
  const std::int64_t size = state.range(1), batch = state.range(2);
  ls::Model model = mobilenet(state);
  const ls::Tensor x = ls::random::uniform({batch, size, size, 3}, {.minval = -1, .seed = 1});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) labels[static_cast<std::size_t>(i)] = (i * 37) % 1000;
  const ls::Tensor y = ls::Tensor::from_vector(labels);
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"}});
  model.train_step(x, y);  // build, warm the primitive caches
  model.train_step(x, y);  // and the allocator's: the first step's frees fill it
  ls::Allocator& allocator = x.device().allocator();
  const ls::CachingAllocator::Stats before = allocator.stats();
  for (auto _ : state) benchmark::DoNotOptimize(model.train_step(x, y));
  const double steps = static_cast<double>(state.iterations());
  const ls::CachingAllocator::Stats after = allocator.stats();
  // Buffers a steady-state step still takes from the system (fresh pages:
  // the kernel zeroes them on first touch) and gives back.
  state.counters["system_allocs_per_step"] =
      static_cast<double>(after.system_allocations - before.system_allocations) / steps;
  state.counters["system_frees_per_step"] =
      static_cast<double>(after.system_frees - before.system_frees) / steps;
  state.counters["samples_per_s"] =
      benchmark::Counter(steps * static_cast<double>(batch), benchmark::Counter::kIsRate);
  if (const auto it = g_mobilenet_floor_s.find("total"); it != g_mobilenet_floor_s.end()) {
    state.counters["floor_ms"] = it->second * 1e3;
    state.counters["step_over_floor"] = benchmark::Counter(
        steps * it->second, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  }
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

// alpha 1.0 at 224 × 224, batch 32; alpha 0.35 at 96 × 96, batch 64. Each
// floor runs just before its step, so the step finds its own. Rates in
// wall time (UseRealTime: oneDNN's threads are not the benchmark's).
BENCHMARK(BM_Floor_MobileNetV2Primitives)
    ->Args({100, 224, 32})
    ->ArgNames({"alpha100", "size", "batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_Train_MobileNetV2)
    ->Args({100, 224, 32})
    ->ArgNames({"alpha100", "size", "batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(3);
BENCHMARK(BM_Floor_MobileNetV2Primitives)
    ->Args({35, 96, 64})
    ->ArgNames({"alpha100", "size", "batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);
BENCHMARK(BM_Train_MobileNetV2)
    ->Args({35, 96, 64})
    ->ArgNames({"alpha100", "size", "batch"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
