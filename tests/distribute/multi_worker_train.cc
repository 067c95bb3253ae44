// One worker of a multi-worker test job (multi_worker_test.cc starts several
// as real processes, with TF_CONFIG or under mpirun): trains a small MLP on
// deterministic synthetic data and writes its final weights and logs.
//
//   multi_worker_train --out FILE [--strategy mwms|none] [--epochs N]
//       [--batch B] [--local-replicas K] [--communication auto|gloo|mpi] [--compress 1]
//       [--timeout-ms T] [--backup DIR] [--hidden H] [--kill-at-step S] [--stop-at-step S]
//       [--print-cores 1]   (after the strategy: "cores of every thread: <list>")
//       [--mixed-precision 1]   (Keras's mixed_bfloat16 policy) [--optimizer adam|sgd]
//
// Exit codes: 0 done, 1 a Lockstep error (message on stderr), 3 a lost
// worker (DistributedError), 9 killed itself at --kill-at-step; at
// --stop-at-step it stops itself (SIGSTOP) and stays stopped.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "distribute/worker_programs.h"
#include "lockstep/lockstep.h"

namespace {

using namespace lockstep;

struct Args {
  std::string out;
  std::string strategy = "mwms";
  int epochs = 2;
  std::int64_t batch = 32;
  int local_replicas = 1;
  std::string communication = "auto";
  bool compress = false;  // --compress 1: gradients cross workers as bfloat16
  long timeout_ms = 20000;
  std::string backup;
  int hidden = 32;
  long kill_at_step = -1;
  long stop_at_step = -1;
  std::int64_t examples = 512;
  bool custom_loop = false;
  // The custom loop on distribute_datasets_from_function pipelines of uneven
  // length: worker 0's replicas get every batch of their shard, the others
  // two batches fewer (the loop must end on every worker, not hang).
  bool uneven = false;
  // Input from files (written by --write-files DIR): the pipeline
  // list_files -> interleave -> map -> batch with this auto-shard policy;
  // the ids of the examples this worker trained on go to --ids-out.
  std::string files;
  std::string policy = "auto";
  std::string ids_out;
  std::string write_files;
  std::size_t bytes_per_pack = 0;
  double learning_rate = 0.01;
  bool print_cores = false;
  bool mixed_precision = false;
  std::string optimizer = "adam";
  int fake_devices = 0;  // each worker's replicas on this many fake accelerator devices
  // Each worker's replica on this GPU of the machine (CUDA_VISIBLE_DEVICES;
  // the tests' emulated GPUs, LOCKSTEP_CUDA_LIBRARY given): -1, none.
  int gpu = -1;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--out")
      a.out = v;
    else if (k == "--strategy")
      a.strategy = v;
    else if (k == "--epochs")
      a.epochs = std::stoi(v);
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--local-replicas")
      a.local_replicas = std::stoi(v);
    else if (k == "--communication")
      a.communication = v;
    else if (k == "--compress")
      a.compress = v == "1";
    else if (k == "--timeout-ms")
      a.timeout_ms = std::stol(v);
    else if (k == "--backup")
      a.backup = v;
    else if (k == "--hidden")
      a.hidden = std::stoi(v);
    else if (k == "--kill-at-step")
      a.kill_at_step = std::stol(v);
    else if (k == "--stop-at-step")
      a.stop_at_step = std::stol(v);
    else if (k == "--examples")
      a.examples = std::stoll(v);
    else if (k == "--custom-loop")
      a.custom_loop = v == "1" || v == "uneven", a.uneven = v == "uneven";
    else if (k == "--files")
      a.files = v;
    else if (k == "--policy")
      a.policy = v;
    else if (k == "--ids-out")
      a.ids_out = v;
    else if (k == "--write-files")
      a.write_files = v;
    else if (k == "--bytes-per-pack")
      a.bytes_per_pack = std::stoull(v);
    else if (k == "--learning-rate")
      a.learning_rate = std::stod(v);
    else if (k == "--print-cores")
      a.print_cores = v == "1";
    else if (k == "--mixed-precision")
      a.mixed_precision = v == "1";
    else if (k == "--optimizer")
      a.optimizer = v;
    else if (k == "--fake-devices")
      a.fake_devices = std::stoi(v);
    else if (k == "--gpu")
      a.gpu = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

Model mlp(int hidden, double learning_rate, const std::string& optimizer) {
  set_random_seed(7);
  auto in = Input({20});
  auto h = layers::Dense(hidden, {.activation = "relu"})(in);
  Model m(in, layers::Dense(4)(h));
  m.compile({.optimizer = optimizer == "sgd"
                              ? Optimizer(optimizers::SGD({.learning_rate = learning_rate}))
                              : Optimizer(optimizers::Adam({.learning_rate = learning_rate})),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

// Kills this process (SIGKILL, like a crash) after the given training step.
// Or stops it (SIGSTOP: its threads, heartbeats included, freeze; its
// connections stay open), as a hung host would.
struct KillAt : Callback {
  long step;
  int signal;
  KillAt(long s, int sig) : step(s), signal(sig) {}
  void on_train_batch_end(std::int64_t, const Logs&) override {
    if (model()->optimizer()->iterations() == step) ::kill(::getpid(), signal);
  }
};

// `path` with "{rank}" replaced by this worker's index (0 without a strategy).
std::string with_rank(std::string path, const std::optional<distribute::Strategy>& strategy) {
  if (const auto at = path.find("{rank}"); at != std::string::npos)
    path.replace(at, 6, std::to_string(strategy ? strategy->worker_index() : 0));
  return path;
}

// The CPUs every thread of this process may run on ("mixed" when threads
// differ): what the kernel will schedule, whatever the library believes.
void print_cores() {
  std::string common;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    std::string line, list;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) list = line.substr(line.find_last_of('\t') + 1);
    }
    if (common.empty()) common = list;
    if (list != common) common = "mixed";
  }
  std::printf("cores of every thread: %s\n", common.c_str());
  std::fflush(stdout);
}

constexpr int kFiles = 8;

// The examples in kFiles files part-<k>.bin: per example its id (int64),
// 20 floats and its label (int64).
void write_files(const std::string& dir, const std::vector<float>& xs,
                 const std::vector<std::int64_t>& labels) {
  const auto n = static_cast<std::int64_t>(labels.size());
  for (int f = 0; f < kFiles; ++f) {
    std::ofstream out(dir + "/part-" + std::to_string(f) + ".bin", std::ios::binary);
    for (std::int64_t i = f * n / kFiles; i < (f + 1) * n / kFiles; ++i) {
      out.write(reinterpret_cast<const char*>(&i), sizeof i);
      out.write(reinterpret_cast<const char*>(&xs[static_cast<std::size_t>(i * 20)]), 20 * 4);
      out.write(reinterpret_cast<const char*>(&labels[static_cast<std::size_t>(i)]), 8);
    }
  }
}

// One file's examples as (id, x, y) slices.
data::Dataset read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::int64_t> ids, ys;
  std::vector<float> xs;
  std::int64_t id = 0, y = 0;
  float x[20];
  while (in.read(reinterpret_cast<char*>(&id), 8) && in.read(reinterpret_cast<char*>(x), 80) &&
         in.read(reinterpret_cast<char*>(&y), 8)) {
    ids.push_back(id);
    xs.insert(xs.end(), x, x + 20);
    ys.push_back(y);
  }
  const auto n = static_cast<std::int64_t>(ids.size());
  return data::Dataset::from_tensor_slices(
      {Tensor::from_vector(ids), Tensor::from_vector(xs, {n, 20}), Tensor::from_vector(ys)});
}

data::AutoShardPolicy policy_named(const std::string& name) {
  if (name == "file") return data::AutoShardPolicy::kFile;
  if (name == "data") return data::AutoShardPolicy::kData;
  if (name == "off") return data::AutoShardPolicy::kOff;
  return data::AutoShardPolicy::kAuto;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    auto [x, y] = testing_support::four_sums(a.examples);
    const std::vector<float> xs = x.to_vector<float>();
    const std::vector<std::int64_t> labels = y.to_vector<std::int64_t>();
    if (!a.write_files.empty()) {
      write_files(a.write_files, xs, labels);
      return 0;
    }

    std::optional<distribute::Strategy> strategy;
    if (a.strategy == "mwms") {
      distribute::MultiWorkerMirroredStrategyOptions o;
      o.local_replicas = a.local_replicas;
      o.bytes_per_pack = a.bytes_per_pack;
      o.timeout = std::chrono::milliseconds(a.timeout_ms);
      o.join_timeout = std::chrono::milliseconds(a.timeout_ms);
      if (a.communication == "gloo")
        o.communication = distribute::CommunicationImplementation::kGloo;
      if (a.communication == "mpi") o.communication = distribute::CommunicationImplementation::kMpi;
      if (a.compress) o.gradient_compression = distribute::GradientCompression::kBfloat16;
      if (a.fake_devices > 0) {
        set_fake_devices(a.fake_devices);
        o.devices = fake_devices();
      }
      if (a.gpu >= 0) {
        // Before the GPUs are first listed: this worker sees one of them.
        ::setenv("CUDA_VISIBLE_DEVICES", std::to_string(a.gpu).c_str(), 1);  // NOLINT
        o.devices = gpu_devices();
      }
      strategy = distribute::MultiWorkerMirroredStrategy(o);
      for (const Device* d : strategy->replica_devices())
        std::printf("a replica on %s\n", d->name().c_str());
      std::printf("gradients summed: %s\n", strategy->cross_device_reduction().c_str());
    }
    if (a.print_cores) print_cores();
    if (a.mixed_precision) mixed_precision::set_global_policy("mixed_bfloat16");
    Model model;
    {
      std::unique_ptr<distribute::Strategy::Scope> scope;
      if (strategy) scope = strategy->scope();
      model = mlp(a.hidden, a.learning_rate, a.optimizer);
    }
    std::vector<std::pair<std::string, double>> logs;
    // Input from files under the auto-shard policy: list_files ->
    // interleave -> map -> batch. The map runs on the thread that trains
    // (fit) or iterates (a custom loop): it sees exactly the examples this
    // worker reads.
    std::vector<std::int64_t> ids_seen;
    auto files_dataset = [&] {
      data::Options options;
      options.experimental_distribute.auto_shard_policy = policy_named(a.policy);
      return data::Dataset::list_files(a.files + "/part-*.bin")
          .interleave([](const data::Element& e) { return read_file(e.string(0)); },
                      {.cycle_length = 2})
          .map([&ids_seen](const data::Element& e) {
            ids_seen.push_back(e[0].item<std::int64_t>());
            return data::Element({e[1], e[2]});
          })
          .batch(a.batch)
          .with_options(options);
    };
    auto write_ids = [&] {
      if (a.ids_out.empty()) return;
      std::ofstream ids(with_rank(a.ids_out, strategy));
      for (std::int64_t id : ids_seen) ids << id << "\n";
    };
    if (a.custom_loop) {
      // The guide's custom loop: GradientTape in strategy.run, the loss
      // scaled by the global batch, per-replica losses reduced with SUM.
      const distribute::Strategy s = strategy ? *strategy : distribute::Strategy();
      Optimizer opt;
      {
        std::unique_ptr<distribute::Strategy::Scope> scope;
        if (strategy) scope = strategy->scope();
        opt = optimizers::SGD({.learning_rate = 0.1});
      }
      const auto dist =
          a.uneven
              ? distribute::distribute_datasets_from_function(
                    s,
                    [&](const distribute::InputContext& ctx) {
                      const std::int64_t per_replica = ctx.get_per_replica_batch_size(a.batch);
                      data::Dataset ds = data::Dataset::from_tensor_slices({x, y})
                                             .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
                                             .batch(per_replica, /*drop_remainder=*/true);
                      return s.worker_index() == 0 ? ds : ds.take(ds.cardinality() - 2);
                    })
              : distribute::experimental_distribute_dataset(
                    s, a.files.empty() ? data::Dataset::from_tensor_slices({x, y}).batch(a.batch)
                                       : files_dataset());
      double total = 0;
      std::int64_t steps = 0;
      for (int epoch = 0; epoch < a.epochs; ++epoch) {
        for (const auto& batch : dist) {
          ++steps;
          auto per_replica = s.run(
              [&](const data::Element& e) {
                GradientTape tape;
                const Tensor logits = model(e[0], {.training = true});
                const Tensor per_example =
                    neg(sum(mul(log_softmax(logits), one_hot(e[1], 4)), {.axes = {1}}));
                const Tensor loss = distribute::compute_average_loss(per_example, a.batch);
                const auto vars = model.impl()->trainable_weights();
                opt.apply_gradients(tape.gradient(loss, vars), vars);
                return loss;
              },
              batch);
          total += s.reduce(distribute::ReduceOp::kSum, per_replica).item<float>();
        }
      }
      logs.emplace_back("loss_sum", total);
      if (a.uneven) logs.emplace_back("steps", static_cast<double>(steps));
      write_ids();
      if (!a.out.empty()) {
        testing_support::write_weights(model.impl()->weights(), with_rank(a.out, strategy), logs);
      }
      return 0;
    }
    std::vector<std::shared_ptr<Callback>> callbacks;
    if (!a.backup.empty())
      callbacks.push_back(std::make_shared<BackupAndRestore>(
          BackupAndRestoreOptions{.backup_dir = a.backup, .save_freq = 3}));
    if (a.kill_at_step >= 0) callbacks.push_back(std::make_shared<KillAt>(a.kill_at_step, SIGKILL));
    if (a.stop_at_step >= 0) callbacks.push_back(std::make_shared<KillAt>(a.stop_at_step, SIGSTOP));
    const FitOptions fit_options{.batch_size = a.batch,
                                 .epochs = a.epochs,
                                 .verbose = 2,
                                 .callbacks = callbacks,
                                 .shuffle = true};
    History h;
    if (a.files.empty()) {
      h = model.fit(x, y, fit_options);
    } else {
      const data::Dataset ds = files_dataset();
      FitOptions o = fit_options;
      o.batch_size = 0;
      h = model.fit(ds, o);
    }
    write_ids();
    if (!a.out.empty()) {
      for (const auto& [k, values] : h.history()) logs.emplace_back(k, values.back());
      testing_support::write_weights(model.impl()->weights(), with_rank(a.out, strategy), logs);
    }
    if (strategy)
      std::printf("worker %d of %d done\n", strategy->worker_index(), strategy->num_workers());
    return 0;
  } catch (const DistributedError& e) {
    std::fprintf(stderr, "multi_worker_train: %s\n", e.what());
    return 3;
  } catch (const Error& e) {
    std::fprintf(stderr, "multi_worker_train: %s\n", e.what());
    return 1;
  }
}
