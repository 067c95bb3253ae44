// Lockstep's side of bench/compare.sh: the workloads of issue #8, written
// the way a user would write them (the seed guide's code), with the same
// flags and the same `RESULT {json}` line as the peers in bench/peers/.
//
//   workloads --workload mlp --batch 64 --epochs 2 [--mode mirrored|one-replica|single]
//   workloads --workload cnn --batch 64 --epochs 1 [--mode mirrored|one-replica|single]
//   (--mode per-core-unsharded: mirrored with every replica running the whole
//   optimizer update, the layout before the sharded update)
//   workloads --workload allreduce [--sizes-mib 1,4,16,64]   (2 replica threads)
//   workloads --workload input --batch 64
//   workloads --workload mobilenet --alpha 1.0 --size 224 --batch 32 [--steps 5 --warmup 2]
//   --mode gpu: OneDeviceStrategy("/gpu:0"); --mode gpu-logical2: MirroredStrategy
//   over two logical GPUs of GPU 0 (set_logical_gpu_devices(2)); --mode fake:
//   OneDeviceStrategy on the fake accelerator (scripts/gpu-check.sh)
//   [--data-dir D]: the Fashion-MNIST files (default: Debian's package's)
//   [--policy mixed_bfloat16]: Keras's global dtype policy for mlp, cnn and
//   mobilenet (default float32; bench/mixed_precision.sh compares them)
//   (MobileNetV2 with its top, 1000 classes, on random images; issue #19)
//   workloads --workload images --images-dir D [--images 2000] --alpha 1.0 --size 224
//   --batch 64 [--steps 20 --warmup 5]  (the seed report's input: JPEGs decoded
//   and resized on the host's cores, RandomFlip and RandomRotation in the
//   model, MobileNetV2 under them; reports the step's wait for its input;
//   issue #35)
//   --run-eagerly: compile's run_eagerly (on a GPU with one replica fit
//   otherwise records its step once and replays it; RESULT's step_mode says)
//   workloads --workload lstm|transformer --batch 64 [--steps 5 --warmup 2]
//   (token ids [batch, 80]: Embedding → LSTM(128), or one transformer
//   encoder block; issue #37)
//
// `mirrored` is the guide's `MirroredStrategy()` with its default devices
// (one replica per core, all-reduce every step); `one-replica` is
// MirroredStrategy on the host device (one replica, every core its intra-op
// thread); `single` is no strategy. samples_per_s counts the
// training examples of every epoch over the time `fit` took (no validation); test_accuracy is
// `evaluate` on the 10k test images afterwards.
#include <omp.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "lockstep/lockstep.h"
#include "lockstep/tensor/device_kernels.h"
#include "seed_mlp.h"

namespace ls = lockstep;
namespace dist = lockstep::distribute;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string workload, mode = "mirrored", sizes_mib = "1,4,16,64";
  std::int64_t batch = 64;
  int epochs = 2;
  std::uint64_t seed = 42;  // initialisation and shuffling
  double alpha = 1.0;       // mobilenet: width, input size, timed and untimed steps
  std::int64_t size = 224, steps = 5, warmup = 2;
  std::string policy = "float32";  // mixed_precision::set_global_policy
  std::string data_dir = ls::datasets::fashion_mnist::kDefaultDir;
  std::string images_dir = "/tmp/lockstep_workload_images";
  std::int64_t images = 2000;
  // mobilenet: the batch's images made on the replica's device once (as the
  // PyTorch peer keeps its batch on the GPU), not copied from host memory
  // at every step.
  bool input_on_device = false;
  // compile's run_eagerly: every step op by op (false: fit records its step
  // once on a GPU with one replica and replays it, train/step_graph.h).
  bool run_eagerly = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

// How the run's steps ran (set from --run-eagerly), in every RESULT.
const char* g_steps = "recorded and replayed where the device records one";

void report(nlohmann::json fields) {
  fields["system"] = "lockstep";
  fields["step_mode"] = g_steps;
  fields["peak_rss_mib"] = peak_rss_mib();
  std::printf("RESULT %s\n", fields.dump().c_str());
  std::fflush(stdout);
}

ls::Model make_model(const std::string& workload, bool run_eagerly) {
  ls::Model model = workload == "mlp" ? ls::zoo::seed_mlp() : ls::zoo::small_cnn();
  model.compile({.optimizer = ls::optimizers::Adam(),
                 .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {ls::metrics::SparseCategoricalAccuracy()},
                 .run_eagerly = run_eagerly});
  return model;
}

ls::Tensor prepare(const ls::Tensor& images, const std::string& workload) {
  const ls::Tensor scaled = ls::cast(images, ls::DType::kFloat32) / 255.0f;
  return workload == "cnn" ? ls::reshape(scaled, {images.dim(0), 28, 28, 1})
                           : ls::reshape(scaled, {images.dim(0), 784});
}

dist::Strategy make_strategy(const std::string& mode) {
  if (mode == "mirrored") return dist::MirroredStrategy();
  if (mode == "one-replica") return dist::MirroredStrategy({.devices = {&ls::host_device()}});
  if (mode == "per-core-unsharded")  // every replica runs the whole update
    return dist::MirroredStrategy({.shard_optimizer_update = false});
  if (mode == "gpu") return dist::OneDeviceStrategy(ls::device("/gpu:0"));
  if (mode == "gpu-logical2") {
    ls::set_logical_gpu_devices(2);
    return dist::MirroredStrategy({.devices = ls::gpu_devices()});
  }
  if (mode == "fake") {
    ls::set_fake_devices(1);
    return dist::OneDeviceStrategy(ls::device("/device:FAKE:0"));
  }
  return {};
}

std::string mode_name(const std::string& mode, const dist::Strategy& strategy) {
  if (mode == "single")  // oneDNN and our loops run on the OpenMP team (OMP_NUM_THREADS)
    return "no strategy (" + std::to_string(omp_get_max_threads()) + " threads)";
  if (mode == "gpu" || mode == "fake")
    return "OneDeviceStrategy(" + strategy.replica_devices()[0]->name() + ")";
  if (mode == "gpu-logical2")
    return "MirroredStrategy(" + std::to_string(strategy.num_replicas_in_sync()) +
           " logical GPUs of GPU 0)";
  return std::string(mode == "one-replica"          ? "MirroredStrategy(host device): "
                     : mode == "per-core-unsharded" ? "MirroredStrategy(), unsharded: "
                                                    : "MirroredStrategy(): ") +
         std::to_string(strategy.num_replicas_in_sync()) + " replica(s) x " +
         std::to_string(strategy.replica_devices()[0]->num_threads()) + " thread(s)";
}

void train(const Args& args) {
  auto [train_set, test_set] = ls::datasets::fashion_mnist::load_data(args.data_dir);
  // The MLP holds out the last 10k training images, as the guide does.
  const std::int64_t n = args.workload == "mlp" ? 50000 : 60000;
  const ls::Tensor x = prepare(train_set.first, args.workload).view_rows(0, n);
  const ls::Tensor y = train_set.second.view_rows(0, n);
  using ls::data::Dataset;
  const Dataset train = Dataset::from_tensor_slices({x, y})
                            .shuffle(n, {.seed = args.seed})
                            .batch(args.batch)
                            .prefetch(ls::data::kAutotune);
  const Dataset test =
      Dataset::from_tensor_slices({prepare(test_set.first, args.workload), test_set.second})
          .batch(512);

  const dist::Strategy strategy = make_strategy(args.mode);
  ls::Model model;
  {
    auto scope = strategy.scope();
    ls::set_random_seed(args.seed);
    model = make_model(args.workload, args.run_eagerly);
  }
  const auto t0 = Clock::now();
  model.fit(train, {.epochs = args.epochs, .verbose = 2});
  const double seconds = seconds_since(t0);
  const ls::Logs results = model.evaluate(test, {.verbose = 0});
  const double examples = static_cast<double>(n) * args.epochs;
  report({{"workload", args.workload},
          {"mode", mode_name(args.mode, strategy)},
          {"batch", args.batch},
          {"epochs", args.epochs},
          {"seconds", seconds},
          {"examples", examples},
          {"samples_per_s", examples / seconds},
          {"policy", args.policy},
          {"seed", args.seed},
          {"device", strategy.replica_devices()[0]->description()},
          {"test_accuracy", results.at("sparse_categorical_accuracy")}});
}

// `warmup` untimed then `steps` timed training steps of `model` on the
// repeated `data`: the seconds of the timed ones. LOCKSTEP_PROFILE_TIMED_STEPS=1
// marks the timed steps for a profiler that starts with profiling off
// (scripts/gpu-check.sh: ncu --profile-from-start off), past start-up and
// cuDNN's autotuning.
double timed_fit(ls::Model& model, const ls::data::Dataset& data, const Args& args,
                 const dist::Strategy& strategy) {
  model.fit(data, {.epochs = 1, .verbose = 0, .steps_per_epoch = args.warmup});
  const char* profile =
      std::getenv("LOCKSTEP_PROFILE_TIMED_STEPS");  // NOLINT(concurrency-mt-unsafe)
  ls::detail::DeviceKernels* kernels = profile != nullptr && std::string(profile) == "1"
                                           ? strategy.replica_devices()[0]->kernels()
                                           : nullptr;
  if (kernels) kernels->set_profiling(true);
  const auto t0 = Clock::now();
  model.fit(data, {.epochs = 1, .verbose = 0, .steps_per_epoch = args.steps});
  const double seconds = seconds_since(t0);
  if (kernels) kernels->set_profiling(false);
  return seconds;
}

// The fields of a MobileNetV2 run's RESULT: `steps` timed steps of a global
// batch of args.batch (split among the replicas) in `seconds`.
nlohmann::json image_step_fields(const char* workload, const Args& args,
                                 const dist::Strategy& strategy, double seconds) {
  const double examples = static_cast<double>(args.batch * args.steps);
  return {{"workload", workload},
          {"mode", mode_name(args.mode, strategy)},
          {"batch", args.batch},
          {"alpha", args.alpha},
          {"size", args.size},
          {"steps", args.steps},
          {"seconds", seconds},
          {"examples", examples},
          {"samples_per_s", examples / seconds},
          {"policy", args.policy},
          {"step_ms", 1e3 * seconds / static_cast<double>(args.steps)}};
}

// MobileNetV2 as keras.applications builds it with weights=None (logits),
// `warmup` untimed then `steps` timed training steps of one random batch,
// repeated, through fit — the peers' workload.
void mobilenet(const Args& args) {
  const ls::Tensor x =
      ls::random::uniform({args.batch, args.size, args.size, 3}, {.minval = -1, .seed = args.seed});
  std::vector<std::int64_t> labels(static_cast<std::size_t>(args.batch));
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int64_t>(i * 37 % 1000);
  const dist::Strategy strategy = make_strategy(args.mode);
  const ls::Tensor images = args.input_on_device ? x.copy_to(*strategy.replica_devices().at(0)) : x;
  const auto data =
      ls::data::Dataset::from_tensors({images, ls::Tensor::from_vector(labels)}).repeat();
  ls::Model model;
  {
    auto scope = strategy.scope();
    ls::set_random_seed(args.seed);
    model = ls::applications::MobileNetV2({.input_shape = ls::Shape{args.size, args.size, 3},
                                           .alpha = args.alpha,
                                           .classifier_activation = ""});
    model.compile({.optimizer = ls::optimizers::Adam(),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {ls::metrics::SparseCategoricalAccuracy()},
                   .run_eagerly = args.run_eagerly});
  }
  const double seconds = timed_fit(model, data, args, strategy);
  nlohmann::json fields = image_step_fields("mobilenet", args, strategy, seconds);
  fields["input"] = args.input_on_device
                        ? "on the device"
                        : "sent from host memory each step, ahead of it (prefetch_to_device)";
  report(fields);
}

// The seed report's input and augmentation before MobileNetV2 (issue #35):
// a folder of 2-class JPEGs (Fashion-MNIST's, upscaled to `size`) read by
// image_dataset_from_directory — decoded and resized on the host's cores —
// shuffled, repeated, batched, scaled to [-1, 1] and prefetched; in the
// model RandomFlip and RandomRotation(0.1) (on the replica's device), then
// MobileNetV2 without its top, global pooling and Dense(2). `warmup`
// untimed then `steps` timed steps through fit; input_wait_ms is the
// steps' mean wait for a batch not yet on the device
// (data::device_prefetch_stats), the time the device stood idle for input.
void images(const Args& args) {
  namespace fs = std::filesystem;
  if (!fs::exists(args.images_dir) || fs::is_empty(args.images_dir)) {
    ls::datasets::fashion_mnist::write_image_folder(
        args.images_dir,
        {.image_size = args.size, .count = args.images, .source_dir = args.data_dir});
  }
  const dist::Strategy strategy = make_strategy(args.mode);
  const ls::data::ImageDataset folder = ls::data::image_dataset_from_directory(
      args.images_dir,
      {.batch_size = std::nullopt, .image_size = {args.size, args.size}, .seed = args.seed});
  const auto data = folder.shuffle(1024, {.seed = args.seed})
                        .repeat()
                        .batch(args.batch)
                        .map([](const ls::data::Element& e) -> ls::data::Element {
                          return {ls::applications::mobilenet_v2::preprocess_input(e[0]), e[1]};
                        })
                        .prefetch(ls::data::kAutotune);
  ls::Model model;
  {
    auto scope = strategy.scope();
    ls::set_random_seed(args.seed);
    ls::Model base =
        ls::applications::MobileNetV2({.input_shape = ls::Shape{args.size, args.size, 3},
                                       .alpha = args.alpha,
                                       .include_top = false});
    model = ls::Sequential({ls::layers::RandomFlip("horizontal", {.seed = args.seed}),
                            ls::layers::RandomRotation(0.1, {.seed = args.seed + 1}), base,
                            ls::layers::GlobalAveragePooling2D(), ls::layers::Dense(2)},
                           {.input_shape = ls::Shape{args.size, args.size, 3}});
    model.compile({.optimizer = ls::optimizers::Adam(),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {ls::metrics::SparseCategoricalAccuracy()},
                   .run_eagerly = args.run_eagerly});
  }
  model.fit(data, {.epochs = 1, .verbose = 0, .steps_per_epoch = args.warmup});
  ls::data::reset_device_prefetch_stats();
  const auto t0 = Clock::now();
  model.fit(data, {.epochs = 1, .verbose = 0, .steps_per_epoch = args.steps});
  const double seconds = seconds_since(t0);
  const ls::data::DevicePrefetchStats waited = ls::data::device_prefetch_stats();
  nlohmann::json fields = image_step_fields("images", args, strategy, seconds);
  fields.update(
      {{"input", "JPEG folder, decoded on the host, augmented on the replica's device"},
       {"batches_waited_for", waited.waits},
       // Replicas on the host take host batches: no wait is measured there.
       {"input_wait_ms", waited.elements == 0 ? nlohmann::json()
                                              : nlohmann::json(1e3 * waited.seconds_waited /
                                                               static_cast<double>(args.steps))}});
  report(fields);
}

// The sequence models Keras users have (issue #37), on one random batch of
// token ids [batch, 80] (ids < 10,000, 2 classes), repeated: `warmup`
// untimed then `steps` timed training steps through fit. lstm: Embedding(64)
// → LSTM(128) → Dense(2); transformer: Embedding(64) → one encoder block
// (MultiHeadAttention 4 heads × 16, Add, LayerNormalization, Dense(128,
// relu) → Dense(64), Add, LayerNormalization) → GlobalAveragePooling1D →
// Dense(2). bench/peers/tf_workloads.py builds the same in Keras.
ls::Model sequence_model(const std::string& workload, std::int64_t steps) {
  const ls::KerasTensor tokens = ls::Input({steps}, ls::DType::kInt32);
  ls::KerasTensor x = ls::layers::Embedding(10000, 64)(tokens);
  if (workload == "lstm") {
    x = ls::layers::LSTM(128)(x);
  } else {
    const ls::KerasTensor a = ls::layers::MultiHeadAttention(4, 16)({x, x});
    x = ls::layers::LayerNormalization()(ls::layers::Add()({x, a}));
    ls::KerasTensor h = ls::layers::Dense(128, {.activation = "relu"})(x);
    h = ls::layers::Dense(64)(h);
    x = ls::layers::LayerNormalization()(ls::layers::Add()({x, h}));
    x = ls::layers::GlobalAveragePooling1D()(x);
  }
  return ls::Model(tokens, ls::layers::Dense(2)(x));
}

void sequences(const Args& args) {
  const std::int64_t steps = 80;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(args.batch * steps));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(args.batch));
  std::uint64_t state = args.seed;
  for (auto& id : ids) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    id = static_cast<std::int32_t>((state >> 33) % 10000);
  }
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int64_t>(i % 2);
  const auto data =
      ls::data::Dataset::from_tensors({ls::Tensor::from_vector(ids, ls::Shape{args.batch, steps}),
                                       ls::Tensor::from_vector(labels)})
          .repeat();
  const dist::Strategy strategy = make_strategy(args.mode);
  ls::Model model;
  {
    auto scope = strategy.scope();
    ls::set_random_seed(args.seed);
    model = sequence_model(args.workload, steps);
    model.compile({.optimizer = ls::optimizers::Adam(),
                   .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
                   .metrics = {ls::metrics::SparseCategoricalAccuracy()},
                   .run_eagerly = args.run_eagerly});
  }
  const double seconds = timed_fit(model, data, args, strategy);
  const double examples = static_cast<double>(args.batch * args.steps);
  report({{"workload", args.workload},
          {"mode", mode_name(args.mode, strategy)},
          {"batch", args.batch},
          {"sequence", steps},
          {"steps", args.steps},
          {"seconds", seconds},
          {"examples", examples},
          {"samples_per_s", examples / seconds},
          {"policy", args.policy},
          {"step_ms", 1e3 * seconds / static_cast<double>(args.steps)}});
}

// The in-process all-reduce MirroredStrategy uses, between 2 replica threads
// each on its own core.
void all_reduce(const Args& args) {
  nlohmann::json result;
  std::stringstream sizes(args.sizes_mib);
  for (std::string item; std::getline(sizes, item, ',');) {
    const std::size_t mib = std::stoul(item), count = (mib << 20) / sizeof(float);
    auto group = ls::comm::InProcessGroup::create(2);
    std::vector<float> a(count, 1.0f), b(count, 2.0f);
    const int reps = std::max<int>(5, 256 / static_cast<int>(mib));
    double seconds = 0;
    auto rank = [&](int r, std::vector<float>& buf) {
      ls::DeviceScope on(*ls::logical_devices()[static_cast<std::size_t>(r)]);
      auto& c = group->communicator(r);
      for (int i = 0; i < 3; ++i) c.all_reduce(buf.data(), count, ls::comm::ReduceOp::kSum);
      c.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) c.all_reduce(buf.data(), count, ls::comm::ReduceOp::kSum);
      if (r == 0) seconds = seconds_since(t0) / reps;
    };
    std::thread peer(rank, 1, std::ref(b));
    rank(0, a);
    peer.join();
    result[item] = static_cast<double>(mib << 20) / seconds * 1e-6;
  }
  report({{"workload", "allreduce"},
          {"mode", "in-process, 2 replica threads"},
          {"allreduce_MBps", result}});
}

// The guide's input pipeline alone: from_tensor_slices → shuffle → batch →
// prefetch over the 60k pre-scaled images, one epoch.
void input_pipeline(const Args& args) {
  auto [train_set, test_set] = ls::datasets::fashion_mnist::load_data(args.data_dir);
  const ls::Tensor x = prepare(train_set.first, "mlp");
  const auto ds = ls::data::Dataset::from_tensor_slices({x, train_set.second})
                      .shuffle(60000, {.seed = 42})
                      .batch(args.batch)
                      .prefetch(ls::data::kAutotune);
  const auto t0 = Clock::now();
  std::int64_t examples = 0;
  for (const auto& element : ds) examples += element[0].dim(0);
  const double seconds = seconds_since(t0);
  report({{"workload", "input"},
          {"mode", "Dataset"},
          {"batch", args.batch},
          {"seconds", seconds},
          {"examples", examples},
          {"samples_per_s", static_cast<double>(examples) / seconds}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Lockstep's side of bench/compare.sh"};
  Args args;
  app.add_option("--workload", args.workload)
      ->required()
      ->check(CLI::IsMember(
          {"mlp", "cnn", "allreduce", "input", "mobilenet", "images", "lstm", "transformer"}));
  app.add_option("--batch", args.batch);
  app.add_option("--epochs", args.epochs);
  app.add_option("--mode", args.mode)
      ->check(CLI::IsMember({"mirrored", "one-replica", "per-core-unsharded", "single", "gpu",
                             "gpu-logical2", "fake"}));
  app.add_option("--data-dir", args.data_dir, "the Fashion-MNIST files");
  app.add_option("--sizes-mib", args.sizes_mib);
  app.add_option("--seed", args.seed, "initialisation and shuffling");
  app.add_option("--alpha", args.alpha, "mobilenet: width multiplier");
  app.add_option("--size", args.size, "mobilenet: input height and width");
  app.add_flag("--input-on-device", args.input_on_device,
               "mobilenet: the images made on the device once, as the PyTorch peer's");
  app.add_option("--images-dir", args.images_dir,
                 "images: the image folder (written from Fashion-MNIST when it holds none)");
  app.add_option("--images", args.images, "images: how many to write when writing the folder");
  app.add_option("--steps", args.steps, "mobilenet: timed training steps");
  app.add_option("--warmup", args.warmup, "mobilenet: untimed steps before them");
  app.add_flag("--run-eagerly", args.run_eagerly,
               "compile's run_eagerly: no recorded step on a GPU (each step op by op)");
  app.add_option("--policy", args.policy, "Keras's global dtype policy")
      ->check(CLI::IsMember({"float32", "mixed_bfloat16", "mixed_float16"}));
  CLI11_PARSE(app, argc, argv);
  if (args.run_eagerly) g_steps = "eager (run_eagerly)";
  try {
    ls::mixed_precision::set_global_policy(args.policy);
    if (args.workload == "allreduce") {
      all_reduce(args);
    } else if (args.workload == "input") {
      input_pipeline(args);
    } else if (args.workload == "mobilenet") {
      mobilenet(args);
    } else if (args.workload == "images") {
      images(args);
    } else if (args.workload == "lstm" || args.workload == "transformer") {
      sequences(args);
    } else {
      train(args);
    }
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "workloads: %s\n", e.what());
    return 1;
  }
  return 0;
}
