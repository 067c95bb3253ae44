// Training steps per second of the Estimator compatibility layer
// (docs/benchmarks.md, "Estimator"): the guide's LinearRegressor (feature
// 1, label 1, batches of 10 per replica, SGD) and a DNNClassifier with the
// seed MLP's shape (784-256-256-10, Adagrad at Estimator's 0.05) on
// Fashion-MNIST (batches of 64 per replica), under 1 replica (no strategy)
// or MirroredStrategy with 2; and, for reference, the same DNN trained by
// Model::fit on the same global batches.
//
//   estimator_bench --model linear|dnn|fit-dnn [--replicas 1|2] [--steps N]
//   lockstep launch --workers W --ps 1 -- estimator_bench --model linear|dnn --strategy ps
//
// Prints "<model> replicas=<r> steps/s=<x> examples/s=<y>". Steps are
// timed between the first and the last step's end (the model's build, the
// restore and the final checkpoint are left out); 20 warm-up steps first.
// With --strategy ps (ParameterServerStrategy, every task running this
// program: the chief trains, workers and the ps task serve) the chief
// sees steps in runs, so the train() call is timed whole (its final
// checkpoint included) and "replicas" is the number of workers.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>

#include "lockstep/lockstep.h"

namespace {

using namespace lockstep;
namespace est = estimator;
namespace fc = feature_column;
using Clock = std::chrono::steady_clock;

struct StepTimes : est::SessionRunHook {
  Clock::time_point first{}, last{};
  std::int64_t steps = 0;
  void after_run(est::RunContext&, const est::SessionRunValues&) override {
    last = Clock::now();
    if (steps++ == 0) first = last;
  }
  double steps_per_second() const {
    return static_cast<double>(steps - 1) / std::chrono::duration<double>(last - first).count();
  }
};

std::optional<distribute::Strategy> strategy_for(int replicas) {
  if (replicas == 1) return std::nullopt;
  return distribute::MirroredStrategy(
      {.devices = {&host_device()}, .replicas_per_device = replicas});
}

std::pair<Tensor, Tensor> fashion_mnist() {
  auto [train, test] = datasets::fashion_mnist::load_data();
  (void)test;
  return {reshape(cast(train.first, DType::kFloat32) / 255.0f, {train.first.dim(0), 784}),
          train.second};
}

// Serving (a worker or ps task under --strategy ps): serves the chief's steps
// and returns -1.
double time_estimator(est::Estimator& e, const est::InputFn& input, std::int64_t steps,
                      bool serving, bool whole_call) {
  if (serving) {
    e.serve(input);
    return -1;
  }
  e.train(input, {.steps = 20});
  auto times = std::make_shared<StepTimes>();
  const auto t0 = Clock::now();
  e.train(input, {.steps = steps, .hooks = {times}});
  if (whole_call)
    return static_cast<double>(steps) / std::chrono::duration<double>(Clock::now() - t0).count();
  return times->steps_per_second();
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "linear";
  int replicas = 1;
  std::int64_t steps = 300;
  bool parameter_server = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model")
      model = v;
    else if (k == "--replicas")
      replicas = std::stoi(v);
    else if (k == "--steps")
      steps = std::stoll(v);
    else if (k == "--strategy")
      parameter_server = v == "ps";
  }
  const auto cluster = distribute::ClusterResolver::from_environment();
  const bool serving = parameter_server && cluster && cluster->task_type() != "chief";
  if (parameter_server && cluster) replicas = cluster->cluster_spec().num_tasks("worker");
  std::string dir = "/tmp/lockstep_estimator_bench_" + model + "_" + std::to_string(replicas);
  if (serving) dir += "_" + cluster->task_type() + std::to_string(cluster->task_id());
  std::filesystem::remove_all(dir);
  est::RunConfig config{.model_dir = dir, .save_checkpoints_secs = 1e9, .log_step_count_steps = 0};
  if (parameter_server && !serving) {
    config.train_distribute = distribute::ParameterServerStrategy();
  } else if (!parameter_server) {
    config.train_distribute = strategy_for(replicas);
  }
  double rate = 0;
  std::int64_t per_replica_batch = 0;
  if (model == "linear") {
    per_replica_batch = 10;
    est::LinearRegressor regressor(
        {.feature_columns = {fc::numeric_column("feats")}, .optimizer = "SGD", .config = config});
    rate = time_estimator(
        regressor,
        [] {
          return data::Dataset::from_tensors(
                     est::features_and_labels({{"feats", Tensor::from_vector<float>({1.f})}},
                                              Tensor::from_vector<float>({1.f})))
              .repeat()
              .batch(10);
        },
        steps, serving, parameter_server);
  } else {
    per_replica_batch = 64;
    const auto [x, y] = fashion_mnist();
    if (model == "dnn") {
      est::DNNClassifier classifier({.hidden_units = {256, 256},
                                     .feature_columns = {fc::numeric_column("x", {.shape = {784}})},
                                     .n_classes = 10,
                                     .config = config});
      rate = time_estimator(
          classifier,
          [x = x, y = y] {
            return data::Dataset::from_tensor_slices({x, y}, {"x", est::kLabels})
                .repeat()
                .batch(64);
          },
          steps, serving, parameter_server);
    } else {  // fit-dnn: Model::fit, the same network, optimizer and global batches
      Model m;
      std::optional<distribute::Strategy> s = strategy_for(replicas);
      {
        auto scope = s ? s->scope() : distribute::Strategy().scope();
        auto in = Input({784});
        auto h = layers::Dense(256, {.activation = "relu"})(in);
        h = layers::Dense(256, {.activation = "relu"})(h);
        m = Model(in, layers::Dense(10)(h));
        m.compile({.optimizer = optimizers::Adagrad({.learning_rate = 0.05}),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
      }
      auto ds = data::Dataset::from_tensor_slices({x, y}).repeat().batch(64 * replicas);
      m.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = 20});
      const auto t0 = Clock::now();
      m.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
      rate = static_cast<double>(steps) / std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  if (serving) return 0;
  // Under ParameterServerStrategy a global step is one worker's batch.
  const std::int64_t per_step = per_replica_batch * (parameter_server ? 1 : replicas);
  std::printf("%s%s replicas=%d steps/s=%.1f examples/s=%.0f\n", model.c_str(),
              parameter_server ? "-ps" : "", replicas, rate, rate * static_cast<double>(per_step));
  std::filesystem::remove_all(dir);
}
