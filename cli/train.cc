// `lockstep train`: the guide's first example — the seed MLP on
// Fashion-MNIST under MirroredStrategy() (one replica per core), Keras
// progress lines with validation, then evaluate on the test set. The other
// built-in models (the small CNN, MobileNetV2) train on the same images,
// brought to their input shape by the pipeline.
#include "train.h"

#include <unistd.h>

#include <array>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "lockstep/core/dir_lock.h"
#include "lockstep/core/env.h"
#include "lockstep/core/file.h"
#include "lockstep/lockstep.h"
#include "run_settings.h"
#include "step_log.h"
#include "stop_signals.h"
#include "validators.h"

namespace lockstep::cli {
namespace {

namespace ld = lockstep::data;

// --local-replicas' bound: a replica is a pinned thread with cores of its
// own; a million of them was accepted (issue #41). The worker's own core
// count is checked when the strategy starts.
constexpr long long kMaxLocalReplicas = 1024;

bool is_keras_file(const std::string& path) {
  auto ends = [&](const std::string& suffix) {
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  // "m.KERAS" was read as a model JSON file and failed as bad JSON; Keras
  // itself takes the suffix as written, lower case.
  std::string lower = std::filesystem::path(path).extension().string();
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  LOCKSTEP_CHECK((lower != ".keras" && lower != ".h5") || ends(lower), "--model: '", path,
                 "' ends in '", std::filesystem::path(path).extension().string(),
                 "'; Keras's suffixes are lower case: rename it to end in '", lower, "'");
  return ends(".keras") || ends(".h5");
}

bool is_builtin(const std::string& model) {
  return model == "mlp" || model == "cnn" || model == "mobilenet_v2";
}

// --model mobilenet_v2: keras.applications.MobileNetV2(input_shape=(96, 96,
// 3), alpha=0.35, weights=None, classes=10, classifier_activation=None)
// behind Rescaling(2, offset=-1) — preprocess_input for the pipeline's
// pixels in [0, 1] — so that a saved model carries its preprocessing; its
// BatchNormalization layers' momentum set to 0.9 (Keras's `layer.momentum =
// 0.9`). Keras's 0.999 suits its long ImageNet runs: here, after 300
// steps, the moving statistics were still 74% their initial ones and
// validation and test accuracy (inference mode) 0.10 — chance — beside a
// training accuracy of 0.63.
Model mobilenet_v2() {
  auto inputs = Input({96, 96, 3});
  auto x = layers::Rescaling(2.0f, {.offset = -1.0f})(inputs);
  const Model base = applications::MobileNetV2({.input_shape = Shape{96, 96, 3},
                                                .alpha = 0.35,
                                                .include_top = true,
                                                .classes = 10,
                                                .classifier_activation = "linear"});
  for (const Layer& layer : base.layers()) {
    if (auto* bn = dynamic_cast<layers::BatchNormalizationImpl*>(layer.impl().get()))
      bn->set_momentum(0.9f);
  }
  return Model(inputs, base(x));
}

Model build_model(const std::string& which) {
  if (which == "mlp") return zoo::seed_mlp();
  if (which == "cnn") return zoo::small_cnn();
  if (which == "mobilenet_v2") return mobilenet_v2();
  if (is_keras_file(which)) return load_model(which);
  LOCKSTEP_CHECK_AS(IOError, !std::filesystem::is_directory(which), "--model: '", which,
                    "' is a directory; expected mlp, cnn, mobilenet_v2 or a model JSON file");
  std::ifstream in(which);
  LOCKSTEP_CHECK_AS(IOError, static_cast<bool>(in), "--model: '", which,
                    "' is neither mlp, cnn, mobilenet_v2 nor a readable model JSON file");
  std::stringstream text;
  text << in.rdbuf();
  return model_from_json(text.str(), which);
}

bool named_devices_form(const std::string& spec) {
  return spec.find_first_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") !=
         std::string::npos;
}

// --devices as accelerator names ("gpu", "/gpu:0,/gpu:1", "fake:0"); empty
// for the CPU forms (a count, core sets), which set_logical_cpu_devices takes.
std::vector<Device*> named_devices(const std::string& spec) {
  if (!named_devices_form(spec)) return {};
  if (spec == "gpu" || spec == "GPU") {
    const std::vector<Device*>& gpus = gpu_devices();
    LOCKSTEP_CHECK_AS(DeviceError, !gpus.empty(),
                      "--devices gpu: no GPU: ", gpu_unavailable_reason());
    return gpus;
  }
  std::vector<Device*> out;
  std::stringstream ss(spec);
  std::string name;
  while (std::getline(ss, name, ',')) {
    try {
      out.push_back(&device(name));
    } catch (const ValueError& e) {
      detail::throw_error<ValueError>("--devices ", spec,
                                      ": expected a device count >= 1, core sets (\"0,1;2-3\"), "
                                      "\"gpu\" or device names (\"/gpu:0,/gpu:1\"); ",
                                      e.what());
    } catch (const Error&) {
      detail::rethrow_with_prefix("--devices " + spec + ": ");
    }
  }
  return out;
}

}  // namespace

distribute::Strategy make_strategy(const TrainArgs& a) {
  const std::string& name = a.strategy;
  const std::vector<Device*> named = named_devices(a.devices);
  LOCKSTEP_CHECK(
      named.empty() || name == "mirrored" || name == "one-device" || name == "multi-worker",
      "--devices ", a.devices,
      ": accelerator devices serve --strategy mirrored, one-device or multi-worker "
      "(this run is ",
      name, ")");
  LOCKSTEP_CHECK(a.gradient_compression == "none" || name == "multi-worker",
                 "--gradient-compression ", a.gradient_compression,
                 " compresses the gradients sent between workers: it needs --strategy "
                 "multi-worker (this run is ",
                 name, ")");
  // A flag of another strategy would be accepted and do nothing (issue #41).
  LOCKSTEP_CHECK(a.max_shards == 1 || name == "parameter-server", "--max-shards ", a.max_shards,
                 " splits variables over the parameter servers: it needs --strategy "
                 "parameter-server (this run is ",
                 name, ")");
  LOCKSTEP_CHECK(a.local_replicas == 0 || name == "multi-worker", "--local-replicas ",
                 a.local_replicas,
                 " sets each worker's replicas under --strategy multi-worker (this run is ", name,
                 "; --devices picks the replicas of one process)");
  LOCKSTEP_CHECK(
      a.communication == "auto" || name == "multi-worker", "--communication ", a.communication,
      " picks how workers talk: it needs --strategy multi-worker (this run is ", name, ")");
  LOCKSTEP_CHECK(a.min_workers == 0 || name == "multi-worker", "--min-workers ", a.min_workers,
                 " lets a multi-worker job shrink on a restart: it needs --strategy multi-worker "
                 "(this run is ",
                 name, ")");
  if (name == "multi-worker") {
    distribute::MultiWorkerMirroredStrategyOptions o;
    o.devices = named;  // empty: every GPU of this worker, else the CPU
    o.min_workers = a.min_workers;
    o.rejoin_timeout =
        std::chrono::milliseconds(static_cast<long long>(a.rejoin_timeout_seconds * 1000));
    o.join_timeout =
        std::chrono::milliseconds(static_cast<long long>(a.join_timeout_seconds * 1000));
    o.local_replicas = a.local_replicas;
    if (o.local_replicas == 0) {
      const std::string given = env::local_replicas().value_or("1");
      std::size_t used = 0;
      try {
        o.local_replicas = std::stoi(given, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      LOCKSTEP_CHECK(
          used == given.size() && o.local_replicas >= 1 && o.local_replicas <= kMaxLocalReplicas,
          "LOCKSTEP_LOCAL_REPLICAS: expected a count from 1 to ", kMaxLocalReplicas, ", got '",
          given, "'");
    }
    if (a.communication == "gloo") o.communication = distribute::CommunicationImplementation::kGloo;
    if (a.communication == "mpi") o.communication = distribute::CommunicationImplementation::kMpi;
    if (a.gradient_compression == "bf16")
      o.gradient_compression = distribute::GradientCompression::kBfloat16;
    o.timeout = std::chrono::milliseconds(static_cast<long long>(a.timeout_seconds * 1000));
    return distribute::MultiWorkerMirroredStrategy(o);
  }
  if (name == "parameter-server") {
    distribute::ParameterServerStrategyOptions o;
    if (a.max_shards > 1)
      o.variable_partitioner = distribute::MinSizePartitioner({.max_shards = a.max_shards});
    o.function_timeout =
        std::chrono::milliseconds(static_cast<long long>(a.timeout_seconds * 1000));
    o.worker_timeout = o.function_timeout;  // a chief whose workers are all gone stops then
    return distribute::ParameterServerStrategy(o);
  }
  if (name == "mirrored") return distribute::MirroredStrategy({.devices = named});
  if (name == "one-device")
    return distribute::OneDeviceStrategy(named.empty() ? *logical_devices().at(0) : *named[0]);
  return distribute::Strategy();  // "default"
}

void choose_devices(const TrainArgs& a) {
  if (a.logical_gpus > 0) set_logical_gpu_devices(a.logical_gpus);
  if (!a.devices.empty() && named_devices_form(a.devices)) {
    // Accelerator names: make_strategy places the replicas.
  } else if (!a.devices.empty()) {
    const auto sets = parse_cpu_devices(a.devices, available_physical_cores(), "--devices");
    try {
      if (a.devices.find_first_of(",;-") == std::string::npos) {
        // A count: as LOCKSTEP_CPU_DEVICES=N, more devices than cores share them.
        set_logical_cpu_device_count(static_cast<int>(sets.size()));
      } else {
        set_logical_cpu_devices(sets);
      }
    } catch (const ValueError& e) {
      detail::throw_error<ValueError>("--devices ", a.devices, ": ", e.what());
    }
  }
}

namespace {

// A model saved compiled trains on with its own optimizer (a Keras file
// keeps its compile settings and optimizer state; `say` tells where it
// continues); another is compiled with `options`.
void compile_unless_compiled(Model& model, const TrainArgs& a, bool say,
                             const CompileOptions& options) {
  if (model.compiled()) {
    LOCKSTEP_CHECK(!a.learning_rate_given, "--learning-rate: the model in '", a.model,
                   "' was saved compiled and trains on with its own optimizer; drop "
                   "--learning-rate, or save it uncompiled");
    if (say)
      std::printf("Continuing the compiled model of %s at optimizer step %lld\n", a.model.c_str(),
                  static_cast<long long>(model.optimizer().iterations()));
  } else {
    model.compile(options);
  }
  if (a.run_eagerly) model.set_run_eagerly(true);
}

// --model, compiled as the main job trains it.
Model compiled_model(const TrainArgs& a, bool say) {
  Model model = build_model(a.model);
  compile_unless_compiled(model, a, say,
                          {.optimizer = optimizers::Adam({.learning_rate = a.learning_rate}),
                           .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                           .metrics = {metrics::SparseCategoricalAccuracy()}});
  return model;
}

// --data's model: a file (checked against the data) or one of ours built
// for it, compiled for its task; reads the data (after a file model, whose
// input sets the images' size).
Model own_data_model(const TrainArgs& a, std::optional<TrainingData>& data) {
  DataArgs d = a.data;
  d.seed = a.seed;
  Model model;
  std::optional<std::vector<std::int64_t>> input;
  DType input_dtype = DType::kFloat32;
  std::optional<ModelSides> sides;
  if (!is_builtin(a.model)) {
    model = build_model(a.model);
    if (model.inputs().size() == 1) {
      input = model.inputs()[0].sample_shape().to_vector();
      input_dtype = model.inputs()[0].dtype();
    }
    if (ModelSides s = ModelSides::of(model); s.several()) sides = std::move(s);
  }
  data = read_training_data(d, input, input_dtype, sides ? &*sides : nullptr);
  std::printf("Training on %lld examples, validating on %lld.\n",
              static_cast<long long>(data->train.count),
              static_cast<long long>(data->validation.count));
  std::fflush(stdout);
  const bool built_with_weights = is_builtin(a.model) && a.model == "mobilenet_v2";
  if (is_builtin(a.model)) model = model_for_data(a.model, data->spec, a.tuning);
  check_model_fits_data(model, data->spec, a.model);
  load_weights_and_freeze(model, a.model, a.tuning, built_with_weights);
  const CompileOptions options =
      compile_options_for(data->spec, model, a.data.loss, a.learning_rate);
  if (model.compiled() && a.tuning.changes_trainable()) {
    // Keras's fine-tuning recompiles after changing what trains: a fresh
    // optimizer at --learning-rate.
    std::printf("Recompiling %s for what now trains: a fresh Adam at learning rate %g.\n",
                a.model.c_str(), a.learning_rate);
    model.compile(options);
    if (a.run_eagerly) model.set_run_eagerly(true);
  } else {
    compile_unless_compiled(model, a, true, options);
  }
  return model;
}

// How the images reach the model: scaled to [0, 1], then reshaped to the
// model's input when it holds as many values as an image; an image input of
// another size ([h, w, 1 or 3], as MobileNetV2's 96 × 96 × 3) gets each
// batch resized (bilinear, tf.image.resize) and made RGB in the pipeline
// (`batched`): Fashion-MNIST's training set at 96 × 96 × 3 would take 6.6 GB.
std::int64_t values_per_example(const Tensor& images) {
  std::int64_t n = 1;
  for (int i = 1; i < images.rank(); ++i) n *= images.dim(i);
  return n;
}

bool resized_in_pipeline(const Tensor& images, const Shape& sample_shape) {
  const auto& d = sample_shape.dims();
  return images.rank() >= 3 && values_per_example(images) != sample_shape.numel() &&
         d.size() == 3 && (d[2] == 1 || d[2] == 3);
}

// The images scaled to [0, 1]: in the model's input shape, or [n, h, w, 1]
// when `batched` resizes them.
Tensor prepare(const Tensor& images, const Shape& sample_shape) {
  std::vector<std::int64_t> dims{images.dim(0)};
  if (resized_in_pipeline(images, sample_shape)) {
    dims.insert(dims.end(), {images.dim(1), images.dim(2), 1});
  } else {
    for (auto d : sample_shape.dims()) dims.push_back(d);
  }
  LOCKSTEP_CHECK_AS(ShapeError, Shape(dims).numel() == images.numel(), "train: the model takes ",
                    "examples of shape ", sample_shape, " but the images are ", images.shape(),
                    " (", values_per_example(images),
                    " values each). Hint: a model takes the images as they are (as many values), "
                    "or an image input [height, width, 1 or 3] that they are resized to");
  return reshape(cast(images, DType::kFloat32) / 255.0f, dims);
}

// rows.batch(batch_size); with `resize` (resized_in_pipeline), each batch
// of prepare's [n, h, w, 1] images resized to the model's input.
ld::Dataset batched(const ld::Dataset& rows, std::int64_t batch_size, const Shape& sample_shape,
                    bool resize) {
  const ld::Dataset batches = rows.batch(batch_size);
  if (!resize) return batches;
  const auto& d = sample_shape.dims();
  const std::array<std::int64_t, 2> size{d[0], d[1]};
  const std::int64_t channels = d[2];
  return batches.map(
      [size, channels](const ld::Element& e) {
        Tensor x = image::resize(e[0], size);
        if (channels == 3) x = broadcast_to(x, Shape{x.dim(0), size[0], size[1], 3});
        return ld::Element{x, e[1]};
      },
      {.num_parallel_calls = ld::kAutotune});
}

std::string hex(std::uint32_t value) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", value);
  return text;
}

// The training images of `data_dir` (empty: Debian's) and their labels, in
// `sample_shape`, without the validation images (the last sixth, at most
// 10,000): what the guide's get_dataset trains on.
std::pair<Tensor, Tensor> training_part(const std::string& data_dir, const Shape& sample_shape) {
  auto [train, test] = data_dir.empty() ? datasets::fashion_mnist::load_data()
                                        : datasets::fashion_mnist::load_data(data_dir);
  const Tensor x = prepare(train.first, sample_shape);
  const std::int64_t n = x.dim(0), n_val = std::min<std::int64_t>(10000, n / 6);
  return {x.view_rows(0, n - n_val), train.second.view_rows(0, n - n_val)};
}

constexpr char kTrainingData[] = "lockstep.cli.fashion_mnist";
constexpr char kOwnTrainingData[] = "lockstep.cli.own_data";

// The settings an exact resume depends on (run_settings.h).
RunSettings run_settings(const TrainArgs& a, const std::string& dataset) {
  RunSettings s{.model = a.model,
                .batch_size = a.batch_size,
                .learning_rate = a.learning_rate,
                .epochs = a.epochs,
                .seed = a.seed,
                .steps_per_epoch = a.steps_per_epoch,
                .dataset = ""};
  if (!is_builtin(a.model)) {  // a JSON or Keras file: its contents count
    std::stringstream text;
    text << std::ifstream(a.model).rdbuf();
    const std::string json = text.str();
    s.model += " (crc32c " + hex(crc32c(json.data(), json.size())) + ")";
  }
  s.dataset = dataset;
  return s;
}

// The main job's data for run_settings: its size and checksum.
std::string fashion_mnist_fingerprint(const std::pair<Tensor, Tensor>& train) {
  const std::uint32_t images = crc32c(train.first.raw_data(), train.first.nbytes());
  return std::to_string(train.first.dim(0)) + " examples, crc32c " +
         hex(crc32c(train.second.raw_data(), train.second.nbytes(), images));
}

}  // namespace

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  CLI::App* train = app.add_subcommand(
      "train",
      "train a model on Fashion-MNIST (default: the guide's MLP under MirroredStrategy), or on "
      "your own --data");
  train
      ->add_option("--model", a.model,
                   "mlp, cnn, mobilenet_v2 (MobileNetV2, alpha 0.35, on the images resized to "
                   "96x96 RGB), a model JSON file (Model::to_json), or a Keras file (.keras, .h5: "
                   "trained further with its own compile settings and optimizer state)")
      ->capture_default_str();
  train->add_option("--save", a.save,
                    "save the trained model here; the suffix picks the format (.keras for Keras, "
                    ".safetensors)");
  train->add_option("--devices", a.devices,
                    "the replicas' devices: a count of CPU devices (\"2\"), core sets "
                    "(\"0,1;2-3\"), \"gpu\" (every GPU) or device names (\"/gpu:0,/gpu:1\")");
  train
      ->add_option("--logical-gpus", a.logical_gpus,
                   "split each GPU into this many logical GPUs, each with its own stream "
                   "(tf.config.set_logical_device_configuration)")
      ->check(CLI::Range(1, 64));
  train
      ->add_option("--strategy", a.strategy,
                   "mirrored, multi-worker, parameter-server, one-device or default")
      ->check(
          CLI::IsMember({"mirrored", "multi-worker", "parameter-server", "one-device", "default"}))
      ->capture_default_str();
  train
      ->add_option("--max-shards", a.max_shards,
                   "parameter-server: split variables over 256 KiB into up to N shards over the "
                   "ps tasks (MinSizePartitioner: ceil(bytes / 256 KiB) shards, at most N)")
      ->check(at_least(1));
  train
      ->add_option("--local-replicas", a.local_replicas,
                   "multi-worker: replicas per worker (default: LOCKSTEP_LOCAL_REPLICAS or 1)")
      ->check(between(1, kMaxLocalReplicas, "a replica is a thread on cores of its own"));
  train
      ->add_option("--communication", a.communication,
                   "multi-worker: auto (MPI under mpirun, else Gloo), gloo or mpi")
      ->check(CLI::IsMember({"auto", "gloo", "mpi"}))
      ->capture_default_str();
  train
      ->add_option("--gradient-compression", a.gradient_compression,
                   "multi-worker: what the gradients' all-reduce sends between workers: none "
                   "(float32) or bf16 (bfloat16, half the bytes; sums in float32)")
      ->check(CLI::IsMember({"none", "bf16"}))
      ->capture_default_str();
  train
      ->add_option("--timeout", a.timeout_seconds,
                   "multi-worker: seconds before a collective is declared failed; "
                   "parameter-server: before a scheduled function is, and before the chief "
                   "gives up when no worker answers")
      ->check(positive())
      ->capture_default_str();
  train
      ->add_option("--join-timeout", a.join_timeout_seconds,
                   "multi-worker: seconds every worker waits at start-up for the others (and a "
                   "worker for the chief) before it gives up naming those missing")
      ->check(positive())
      ->capture_default_str();
  CLI::Option* min_workers =
      train
          ->add_option("--min-workers", a.min_workers,
                       "multi-worker: on a restart (launch or supervise), go on with the workers "
                       "that come back within --rejoin-timeout if they are at least this many, "
                       "the chief among them: the same global batch over fewer replicas "
                       "(default: every worker must come)")
          ->check(at_least(1));
  train
      ->add_option("--rejoin-timeout", a.rejoin_timeout_seconds,
                   "multi-worker with --min-workers: seconds the chief waits on a restart for "
                   "every worker before it goes on without those missing")
      ->check(positive())
      ->needs(min_workers)
      ->capture_default_str();
  train->add_option("--data-dir", a.data_dir,
                    "directory with the IDX files (default: /usr/share/datasets/fashion-mnist)");
  add_data_options(*train, a.data, /*training=*/true);
  train->add_option("--weights", a.tuning.weights,
                    "--data: Keras weights to start from (.weights.h5, .keras, .h5); with --model "
                    "mobilenet_v2 the base's (include_top=False), under a new head");
  train->add_option("--alpha", a.tuning.alpha, "--model mobilenet_v2: the width multiplier")
      ->check(positive())
      ->capture_default_str();
  train->add_flag("--freeze-base", a.tuning.freeze_base,
                  "--data: the model's base (its nested model) does not train (fine-tuning's "
                  "first stage)");
  train->add_option("--fine-tune-from", a.tuning.fine_tune_from,
                    "--data: the base trains from this layer on, the layers before it frozen "
                    "(fine-tuning's second stage, on a model file saved by the first)");
  train
      ->add_option("--learning-rate-schedule", a.tuning.schedule,
                   "per epoch, from --learning-rate: constant, rampup (the fine-tuning report's: "
                   "up from lr/5 over 5 epochs, then x0.8 a epoch), cosine or exponential (x0.9 "
                   "a epoch)")
      ->check(CLI::IsMember({"constant", "rampup", "cosine", "exponential"}))
      ->capture_default_str();
  train->add_option("--epochs", a.epochs)->check(at_least(1))->capture_default_str();
  train->add_option("--batch-size", a.batch_size, "global batch size")
      ->check(at_least(1))
      ->capture_default_str();
  train
      ->add_option_function<double>(
          "--learning-rate",
          [&a](double v) {
            a.learning_rate = v;
            a.learning_rate_given = true;
          },
          "Adam's learning rate (default 0.001; a compiled Keras --model keeps its own)")
      ->check(positive());
  train->add_option("--verbose", a.verbose, "0 silent, 1 progress bar (line on a pipe), 2 line")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  train->add_option("--seed", a.seed, "weights and shuffling")
      ->check(unsigned_64())
      ->capture_default_str();
  train->add_option("--steps-per-epoch", a.steps_per_epoch, "0: the whole training set")
      ->check(at_least(0));
  train
      ->add_option("--validation-steps", a.validation_steps,
                   "validation batches after each epoch, continuing through the held-out images "
                   "from epoch to epoch (0: all of them each time)")
      ->check(at_least(0));
  train->add_option("--test-steps", a.test_steps, "test batches evaluated at the end (0: all)")
      ->check(at_least(0));
  train
      ->add_option("--mixed-precision", a.mixed_precision,
                   "bfloat16: every layer computes in bfloat16 over float32 variables "
                   "(Keras's mixed_bfloat16 policy); float16: in float16, the loss scaled "
                   "(mixed_float16, with a LossScaleOptimizer; emulated on CPUs); none: float32")
      ->check(CLI::IsMember({"none", "bfloat16", "float16"}))
      ->capture_default_str();
  train->add_option("--checkpoint-dir", a.checkpoint_dir,
                    "keep backups in DIR/backup and resume from them when the same command runs "
                    "again; save the trained model as DIR/model.safetensors");
  train->add_option("--save-freq", a.save_freq, "back up every N batches (0: every epoch)")
      ->check(at_least(0))
      ->needs("--checkpoint-dir");
  train->add_option("--tensorboard", a.tensorboard,
                    "write TensorBoard event files under DIR (train/ and validation/, per epoch)");
  train->add_option("--csv-log", a.csv_log,
                    "append each epoch's logs to this CSV file (CSVLogger)");
  train->add_option("--step-log", a.step_log,
                    "append one line per training step to this CSV file: epoch, the optimizer's "
                    "step, the logged loss to 17 digits (the chief's; to compare runs step by "
                    "step)");
  train
      ->add_option("--early-stopping", a.early_stopping,
                   "stop after PATIENCE epochs without a lower val_loss, keeping the best "
                   "epoch's weights (EarlyStopping with restore_best_weights)")
      ->check(at_least(1));
  train->add_flag("--run-eagerly", a.run_eagerly,
                  "every step op by op (Keras's run_eagerly); on a GPU the step is otherwise "
                  "recorded once as a CUDA graph and replayed per batch");
  train
      ->add_flag("--allow-changed-batch-size", a.allow_changed_batch_size,
                 "resume a --checkpoint-dir run with another --batch-size (not an exact "
                 "continuation; other changed settings are always refused)")
      ->needs("--checkpoint-dir");
  return train;
}

namespace {

// Saves the trained model to --save's target. Checked writable before the
// first step, the target can still fail at the end (a full disk, a folder
// made read-only meanwhile): then the model goes to the temporary folder
// and the error names both places — a run's result is never lost.
void save_or_rescue(Model& model, const std::string& target) {
  try {
    model.save(target);
  } catch (const std::exception& e) {
    const std::string why = e.what();
    const std::filesystem::path rescue = std::filesystem::temp_directory_path() /
                                         ("lockstep-rescued-" + std::to_string(::getpid()) +
                                          std::filesystem::path(target).extension().string());
    try {
      model.save(rescue.string());
    } catch (const std::exception& again) {
      detail::throw_error<IOError>("--save: ", why, "; keeping the model in ", rescue.string(),
                                   " failed too (", again.what(), ")");
    }
    detail::throw_error<IOError>("--save: ", why, "; the trained model was saved to ",
                                 rescue.string(), " instead");
  }
}

// The evaluator task of a parameter-server job: a sidecar beside the
// cluster that evaluates each backup the chief writes in --checkpoint-dir,
// until the backup of the last epoch: on Fashion-MNIST's test set, or with
// --data on the validation examples the chief validates on (the same
// split of the same source, read the same way).
int evaluate_checkpoints(const TrainArgs& a) {
  LOCKSTEP_CHECK(!a.checkpoint_dir.empty(),
                 "the evaluator task evaluates the backups the chief writes: give "
                 "--checkpoint-dir (the chief's)");
  std::optional<TrainingData> own_data;
  Model model = a.data.source.empty() ? compiled_model(a, false) : own_data_model(a, own_data);
  ld::Dataset test_ds;
  if (own_data) {
    LOCKSTEP_CHECK(own_data->validation.count > 0, "--data ", a.data.source,
                   ": the evaluator task evaluates the validation examples, and this run has "
                   "none; give --validation-split or --validation-data");
    test_ds = own_data->validation.batches(a.batch_size, std::nullopt);
  } else {
    const Shape sample = model.inputs().at(0).sample_shape();
    auto [train, test] = a.data_dir.empty() ? datasets::fashion_mnist::load_data()
                                            : datasets::fashion_mnist::load_data(a.data_dir);
    test_ds = batched(ld::Dataset::from_tensor_slices({prepare(test.first, sample), test.second}),
                      a.batch_size, sample, resized_in_pipeline(test.first, sample));
  }
  std::printf("evaluator: waiting for the backups in %s\n",
              (std::filesystem::path(a.checkpoint_dir) / "backup").string().c_str());
  std::fflush(stdout);
  const std::string set = own_data ? "val" : "test";
  auto say = [&set](const std::string& what, const Logs& logs) {
    std::string accuracy;
    for (const auto& [name, value] : logs) {
      if (name.find("accuracy") != std::string::npos)
        accuracy = " - " + set + " accuracy: " + std::to_string(value).substr(0, 6);
    }
    std::printf("evaluator: %s: %s loss: %.4f%s\n", what.c_str(), set.c_str(), logs.at("loss"),
                accuracy.c_str());
    std::fflush(stdout);
  };
  // Until the chief's trained model appears (it then deletes its backups).
  const std::filesystem::path final_model =
      std::filesystem::path(a.checkpoint_dir) / "model.safetensors";
  SidecarEvaluator evaluator(
      model, test_ds,
      {.checkpoint_dir = (std::filesystem::path(a.checkpoint_dir) / "backup").string(),
       .prefix = "backup",
       .until_epoch = a.epochs,
       .done_file = final_model.string(),
       .timeout = std::chrono::milliseconds(static_cast<long long>(a.timeout_seconds * 1000))});
  const auto done = evaluator.start([&](const SidecarEvaluator::Evaluation& e) {
    say(std::filesystem::path(e.checkpoint).filename().string() + " (after epoch " +
            std::to_string(e.epoch) + ", step " + std::to_string(e.iterations) + ")",
        e.logs);
  });
  if (std::filesystem::exists(final_model) && (done.empty() || done.back().epoch < a.epochs)) {
    model.load_weights(final_model.string());
    say("the trained model (" + final_model.filename().string() + ")",
        model.evaluate(test_ds, {.verbose = 0}));
  }
  std::printf("evaluator: %zu checkpoint(s) evaluated\n", done.size());
  return 0;
}

// The job, step by step; `phase` says which step runs (for run_train's
// out-of-memory message).
int train_in_phases(const TrainArgs& a, std::string& phase) {
  phase = "starting up";
  take_stop_signals();  // before the strategy's and the pipeline's threads start
  phase = "choosing the devices";
  choose_devices(a);
  set_random_seed(a.seed);
  if (a.strategy == "parameter-server") {
    // Every task of the job runs this same command (lockstep launch --ps):
    // ps and worker tasks serve, the chief coordinates (TensorFlow's way).
    const auto resolver = distribute::ClusterResolver::from_environment();
    LOCKSTEP_CHECK(resolver.has_value() && resolver->launcher() == distribute::Launcher::kTfConfig,
                   "--strategy parameter-server: no TF_CONFIG; start the job with lockstep launch "
                   "--workers N --ps M, or give every task its TF_CONFIG (a chief, workers and "
                   "ps tasks)");
    if (resolver->task_type() == "ps" || resolver->task_type() == "worker") {
      phase = "serving";
      DataArgs data = a.data;
      data.seed = a.seed;
      return serve_task(*resolver, a.data_dir, a.data.source.empty() ? nullptr : &data);
    }
    if (resolver->task_type() == "evaluator") {
      phase = "evaluating checkpoints";
      return evaluate_checkpoints(a);
    }
    LOCKSTEP_CHECK(a.save_freq == 0,
                   "--save-freq: under --strategy parameter-server backups are taken at epoch "
                   "ends only (the batches run on the workers); drop --save-freq");
  }
  phase = "starting the strategy";
  const distribute::Strategy strategy = make_strategy(a);
  if (strategy.num_workers() > 1)
    std::printf("Worker %d of %d (%s)\n", strategy.worker_index(), strategy.num_workers(),
                strategy.is_chief() ? "chief" : "not the chief: writes no files");
  std::printf("Number of devices: %d\n", strategy.num_replicas_in_sync());
  if (!strategy.replica_devices().empty() &&
      !strategy.replica_devices().front()->host_accessible()) {
    std::string where;
    for (const Device* d : strategy.replica_devices())
      where += (where.empty() ? "" : ", ") + d->name();
    std::printf("Replicas on %s\n", where.c_str());
    if (strategy.num_local_replicas() > 1)
      std::printf("Gradients summed: %s\n", strategy.cross_device_reduction().c_str());
  }
  if (a.mixed_precision == "bfloat16") {
    mixed_precision::set_global_policy("mixed_bfloat16");
    std::printf("Mixed precision: mixed_bfloat16 (%s)\n", bfloat16_kernels().c_str());
  } else if (a.mixed_precision == "float16") {
    mixed_precision::set_global_policy("mixed_float16");
    std::printf(
        "Mixed precision: mixed_float16 (emulated: float32 kernels, each result rounded to "
        "float16; the loss scaled by a LossScaleOptimizer)\n");
  }
  std::fflush(stdout);
  // One run at a time in a checkpoint directory (the chief's: it alone writes).
  const std::filesystem::path dir = a.checkpoint_dir;
  std::optional<DirectoryLock> lock;
  if (!a.checkpoint_dir.empty() && strategy.is_chief()) {
    lock.emplace(a.checkpoint_dir, "--checkpoint-dir");
    remove_stale_temporaries((dir / "model.safetensors").string());
  }

  // --save is checked before training, not after it: its folder is made,
  // and a suffix save() would refuse is named now.
  if (!a.save.empty() && strategy.is_chief()) {
    const std::filesystem::path target(a.save);
    const std::string suffix = target.extension().string();
    LOCKSTEP_CHECK(suffix == ".keras" || suffix == ".safetensors", "--save: '", a.save,
                   "' ends in '", suffix,
                   "'; a model is saved as .keras (Keras's file) or .safetensors (Lockstep's)");
    if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path());
    check_writable(a.save);
  }

  LOCKSTEP_CHECK(
      !a.data.source.empty() || (a.tuning.weights.empty() && !a.tuning.changes_trainable()),
      "--weights, --freeze-base and --fine-tune-from train on --data (the main job's "
      "models start fresh)");
  phase = "building the model";
  std::optional<TrainingData> own_data;  // --data's
  Model model;
  {
    auto scope = strategy.scope();
    model = a.data.source.empty() ? compiled_model(a, true) : own_data_model(a, own_data);
  }
  if (strategy.extended().uses_parameter_servers()) {
    const distribute::ParameterServerStrategy ps(strategy);
    for (const Variable& w : model.weights()) {
      const distribute::ShardedVariable v = ps.sharded_variable(w);
      if (v.num_shards() == 1) continue;
      std::string rows, tasks;
      for (auto r : v.shard_rows()) rows += (rows.empty() ? "" : ", ") + std::to_string(r);
      for (int t : v.ps_tasks()) tasks += (tasks.empty() ? "" : ", ") + std::to_string(t);
      std::printf("%s %s: %d shards of %s rows on ps %s\n", w.name().c_str(),
                  v.shape().to_string().c_str(), v.num_shards(), rows.c_str(), tasks.c_str());
    }
  }
  const std::vector<KerasTensor> inputs = model.inputs();
  LOCKSTEP_CHECK(inputs.size() == 1 || own_data, "train: the model must have one input, it has ",
                 inputs.size(), " (--data trains models with several, from a .npz)");
  const Shape sample = inputs.at(0).sample_shape();

  // The data: --data's (read with the model), or the guide's get_dataset on
  // Fashion-MNIST (the last 10,000 training images for validation).
  phase = "loading and preparing the data";
  ld::Dataset train_ds;
  std::optional<ValidationData> validation;
  std::optional<ld::Dataset> test_ds;
  std::int64_t train_examples = 0;
  std::string fingerprint;
  if (own_data) {
    train_ds = own_data->train.batches(a.batch_size, a.seed);
    if (own_data->validation.count > 0) {
      // With --validation-steps, repeated: fit takes that many batches after
      // each epoch from one iterator that continues across epochs.
      const ld::Dataset v = own_data->validation.batches(a.batch_size, std::nullopt);
      validation = ValidationData(a.validation_steps > 0 ? v.repeat() : v);
    }
    train_examples = own_data->train.count;
    fingerprint = own_data->fingerprint;
  } else {
    auto [train, test] = a.data_dir.empty() ? datasets::fashion_mnist::load_data()
                                            : datasets::fashion_mnist::load_data(a.data_dir);
    const Tensor x = prepare(train.first, sample), x_test = prepare(test.first, sample);
    const std::int64_t n = x.dim(0), n_val = std::min<std::int64_t>(10000, n / 6);
    LOCKSTEP_CHECK(n_val >= 1 && x_test.dim(0) >= 1, "train: the data",
                   a.data_dir.empty() ? "" : " in " + a.data_dir, " has ", n, " training and ",
                   x_test.dim(0),
                   " test examples; lockstep train needs at least 6 training examples (it holds "
                   "out a sixth, at most 10,000, for validation) and 1 test example");
    const bool resize = resized_in_pipeline(x, sample);
    train_ds = batched(ld::Dataset::from_tensor_slices(
                           {x.view_rows(0, n - n_val), train.second.view_rows(0, n - n_val)})
                           .shuffle(n - n_val, {.seed = a.seed}),
                       a.batch_size, sample, resize)
                   .prefetch(ld::kAutotune);
    // With --validation-steps, repeated: fit takes that many batches after
    // each epoch from one iterator that continues across epochs (as Keras's
    // does).
    ld::Dataset val_rows = ld::Dataset::from_tensor_slices(
        {x.view_rows(n - n_val, n), train.second.view_rows(n - n_val, n)});
    if (a.validation_steps > 0) val_rows = val_rows.repeat();
    validation = ValidationData(batched(val_rows, a.batch_size, sample, resize));
    test_ds = batched(ld::Dataset::from_tensor_slices({x_test, test.second}), a.batch_size, sample,
                      resize);
    train_examples = n - n_val;
    fingerprint = fashion_mnist_fingerprint(train);
  }

  std::vector<std::shared_ptr<Callback>> callbacks;
  // First: a step's line is written before a backup (and a stop after it).
  if (!a.step_log.empty() && strategy.is_chief()) callbacks.push_back(step_log(a.step_log));
  std::shared_ptr<BackupAndRestore> backup;
  if (!a.checkpoint_dir.empty() && strategy.is_chief()) {
    check_and_record_run_settings(a.checkpoint_dir, run_settings(a, fingerprint),
                                  {.allow_changed_batch_size = a.allow_changed_batch_size});
  }
  if (!a.checkpoint_dir.empty()) {
    // The backups stay until the model is saved and evaluated: a crash before
    // then resumes from the last one instead of training again.
    backup = std::make_shared<BackupAndRestore>(BackupAndRestore::Options{
        .backup_dir = (dir / "backup").string(),
        .save_freq = a.save_freq > 0 ? SaveFreq(a.save_freq) : SaveFreq("epoch"),
        .delete_checkpoint = false});
    callbacks.push_back(backup);
  }
  if (a.tuning.schedule != "constant") {
    callbacks.push_back(std::make_shared<LearningRateScheduler>(
        [tuning = a.tuning, lr = a.learning_rate, epochs = a.epochs](int epoch, double) {
          return scheduled_learning_rate(tuning, lr, epoch, epochs);
        },
        /*verbose=*/a.verbose > 0 ? 1 : 0));
  }
  if (!a.tensorboard.empty() && strategy.is_chief())
    callbacks.push_back(std::make_shared<TensorBoard>(a.tensorboard));
  if (!a.csv_log.empty() && strategy.is_chief())
    callbacks.push_back(std::make_shared<CSVLogger>(a.csv_log, ',', /*append=*/true));
  if (a.early_stopping > 0) {
    LOCKSTEP_CHECK(validation.has_value(),
                   "--early-stopping watches val_loss: this run has no "
                   "validation data (--validation-split 0 without --validation-data)");
    callbacks.push_back(std::make_shared<EarlyStopping>(EarlyStoppingOptions{
        .patience = a.early_stopping, .verbose = 1, .restore_best_weights = true}));
  }
  const bool on_parameter_servers = strategy.extended().uses_parameter_servers();
  if (!on_parameter_servers) callbacks.push_back(stop_on_signal(backup));
  phase = "training";
  catch_stop_signals(on_parameter_servers
                         ? (a.checkpoint_dir.empty()
                                ? "stopping the parameter-server job's chief now (no "
                                  "--checkpoint-dir: nothing was kept)"
                                : "stopping the parameter-server job's chief now; the rerun "
                                  "resumes from the backup of the last whole epoch")
                         : nullptr);
  if (on_parameter_servers) {
    // Each worker builds its own shuffled, repeated share of the training
    // images (register_training_data); an epoch is a pass's worth of steps.
    const std::int64_t per_epoch = a.steps_per_epoch > 0
                                       ? a.steps_per_epoch
                                       : (train_examples + a.batch_size - 1) / a.batch_size;
    std::vector<Tensor> call = {Tensor::from_vector(std::vector<std::int64_t>{
                                    a.batch_size, static_cast<std::int64_t>(a.seed)}),
                                Tensor::from_vector(sample.to_vector())};
    // A model with several inputs or outputs: the workers read the named
    // arrays the chief's spec says.
    if (own_data && own_data->spec.named())
      call.push_back(ld::Element::string_tensor(own_data->spec.to_json()));
    model.fit(distribute::DatasetCreator{own_data ? kOwnTrainingData : kTrainingData, call},
              {.epochs = a.epochs,
               .verbose = a.verbose,
               .callbacks = callbacks,
               .validation_data = validation,
               .steps_per_epoch = per_epoch,
               .validation_steps = a.validation_steps});
    const distribute::ParameterServerStats stats =
        distribute::ParameterServerStrategy(strategy).stats();
    std::printf(
        "parameter servers: %lld optimizer steps, %lld variable updates, mean staleness "
        "%.2f (max %lld)\n",
        static_cast<long long>(stats.iterations), static_cast<long long>(stats.updates),
        stats.mean_staleness, static_cast<long long>(stats.max_staleness));
  } else {
    model.fit(train_ds, {.epochs = a.epochs,
                         .verbose = a.verbose,
                         .callbacks = callbacks,
                         .validation_data = validation,
                         .steps_per_epoch = a.steps_per_epoch,
                         .validation_steps = a.validation_steps});
  }
  restore_default_signals();  // from here on a signal ends the run at once, as before
  if (const int sig = stop_signal()) {
    const auto at = model.optimizer().iterations();
    std::fprintf(
        stderr, "lockstep: stopped by %s after step %lld%s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
        static_cast<long long>(at),
        backup && strategy.is_chief()
            ? "; a backup of that step is in --checkpoint-dir: the same command resumes"
            : (a.checkpoint_dir.empty() ? " (no --checkpoint-dir: nothing was kept)" : ""));
    return 128 + sig;
  }
  if (!a.checkpoint_dir.empty() && strategy.is_chief()) {
    const std::string path = (dir / "model.safetensors").string();
    model.save(path);
    if (own_data) save_spec_beside(path, own_data->spec);
    std::printf("saved the model to %s\n", path.c_str());
  }
  if (!a.save.empty() && strategy.is_chief()) {
    phase = "saving the model";
    save_or_rescue(model, a.save);
    // What evaluate and predict need to read new data as this run read its
    // own: the classes, the columns and their encoding.
    if (own_data) save_spec_beside(a.save, own_data->spec);
    std::printf("saved the model to %s%s\n", a.save.c_str(),
                own_data ? (" (and how it reads its data: " + a.save + ".data.json)").c_str() : "");
  }
  if (!test_ds) {  // --data: no test set; the validation lines said how it does
    if (lock) std::filesystem::remove_all(dir / "backup");
    return 0;
  }
  phase = "evaluating";
  const Logs results = model.evaluate(*test_ds, {.steps = a.test_steps, .verbose = a.verbose});
  // The accuracy under the name compile gave it ("accuracy" in a Keras file).
  double accuracy = -1;
  for (const auto& [name, value] : results) {
    if (accuracy < 0 && name.find("accuracy") != std::string::npos) accuracy = value;
  }
  if (accuracy >= 0) {
    std::printf("test loss: %.4f - test accuracy: %.4f\n", results.at("loss"), accuracy);
  } else {
    std::printf("test loss: %.4f\n", results.at("loss"));
  }
  // The run is complete: the next one in this directory starts afresh.
  if (lock) std::filesystem::remove_all(dir / "backup");
  return 0;
}

}  // namespace

int run_train(const TrainArgs& args) {
  TrainArgs a = args;
  if (!a.data.source.empty() && is_idx_folder(a.data.source)) {
    // --data of an IDX folder is --data-dir: the main job on those files.
    a.data_dir = a.data.source;
    a.data.source.clear();
  }
  std::string phase;
  try {
    return train_in_phases(a, phase);
  } catch (const std::bad_alloc&) {
    // Tensor buffers say their size themselves (tensor/allocator.cc); this
    // is every other allocation.
    const bool batches = phase == "training" || phase == "evaluating";
    detail::throw_error<Error>("out of memory while ", phase,
                               ": this run needs more memory than the machine (or ulimit -v) "
                               "allows",
                               batches ? "; try a smaller --batch-size" : "");
  } catch (const std::system_error& e) {
    if (e.code() != std::errc::resource_unavailable_try_again) throw;
    detail::throw_error<Error>("cannot start a thread while ", phase, " (", e.what(),
                               "): too many processes or threads for ulimit -u, or too little "
                               "memory for their stacks (ulimit -v)");
  }
}

bool is_idx_folder(const std::string& source) {
  namespace fs = std::filesystem;
  return fs::is_directory(source) && (fs::exists(fs::path(source) / "train-images-idx3-ubyte") ||
                                      fs::exists(fs::path(source) / "train-images-idx3-ubyte.gz"));
}

void register_training_data(const std::string& data_dir, const DataArgs* data) {
  if (data) {
    // --data: each worker reads the source (the same command line on every
    // task), its shard of the training split, shuffled and repeated.
    // Arguments: the batch size and the seed, then the model's input shape.
    distribute::register_dataset_function(
        kOwnTrainingData,
        [args = *data](const distribute::InputContext& ctx, const std::vector<Tensor>& call) {
          LOCKSTEP_CHECK(call.size() == 2 || call.size() == 3, kOwnTrainingData,
                         ": expected 2 or 3 arguments, got ", call.size());
          const std::vector<std::int64_t> settings = call[0].to_vector<std::int64_t>();
          Examples e;
          if (call.size() == 3) {
            // Named arrays: the chief's spec, its training rows.
            const DataSpec spec = DataSpec::from_json(
                ld::Element({call[2]}).string(0), std::string(kOwnTrainingData) + " (the spec)");
            e = training_rows(args, read_examples(args.source, spec, true));
          } else {
            e = read_training_data(args, call[1].to_vector<std::int64_t>()).train;
          }
          ld::Dataset rows =
              e.files.defined()   ? e.files
              : !e.arrays.empty() ? ld::Dataset::from_tensor_slices(e.arrays, e.names)
              : e.y.defined()     ? ld::Dataset::from_tensor_slices({e.x, e.y})
                                  : ld::Dataset::from_tensor_slices(std::vector<Tensor>{e.x});
          return rows.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
              .shuffle(std::min<std::int64_t>(e.count, 10000),
                       {.seed = static_cast<std::uint64_t>(settings.at(1)) +
                                static_cast<std::uint64_t>(ctx.input_pipeline_id)})
              .repeat()
              .batch(settings.at(0))
              .prefetch(ld::kAutotune);
        });
  }
  // Arguments: the batch size and the seed, then the model's input shape.
  distribute::register_dataset_function(kTrainingData, [data_dir](
                                                           const distribute::InputContext& ctx,
                                                           const std::vector<Tensor>& args) {
    LOCKSTEP_CHECK(args.size() == 2, kTrainingData, ": expected 2 arguments, got ", args.size());
    const std::vector<std::int64_t> settings = args[0].to_vector<std::int64_t>();
    const Shape sample(args[1].to_vector<std::int64_t>());
    const auto [x, y] = training_part(data_dir, sample);
    const ld::Dataset rows =
        ld::Dataset::from_tensor_slices({x, y})
            .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            .shuffle(x.dim(0), {.seed = static_cast<std::uint64_t>(settings.at(1)) +
                                        static_cast<std::uint64_t>(ctx.input_pipeline_id)})
            .repeat();
    return batched(rows, settings.at(0), sample, resized_in_pipeline(x, sample))
        .prefetch(ld::kAutotune);
  });
}

int serve_task(const distribute::ClusterResolver& resolver, const std::string& data_dir,
               const DataArgs* data) {
  register_training_data(data_dir, data);
  distribute::Server server(resolver);
  std::printf("%s serving at %s\n",
              resolver.describe_task(resolver.task_type(), resolver.task_id()).c_str(),
              resolver.cluster_spec()
                  .task_address(resolver.task_type(), resolver.task_id())
                  .to_string()
                  .c_str());
  std::fflush(stdout);
  server.join();
  std::printf("the coordinator ended the job\n");
  return 0;
}

}  // namespace lockstep::cli
