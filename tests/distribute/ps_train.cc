// One task of a ParameterServerStrategy test job (ps_test.cc starts every
// task as a real process, each with its TF_CONFIG): ps and worker tasks
// serve; the chief runs a scenario and prints what the test checks. Without
// TF_CONFIG it trains the same model on one device (the reference).
//
//   ps_train --mode custom|throw|count [--steps N] [--out FILE]
//            [--partition SHARDS] [--kill-at-call K] [--slow-ms MS]
//
//   custom  the seed-shaped MLP trained by a custom loop: schedule("step",
//           {iterator}) N times, join, the weights to --out
//   throw   "boom" N times, the 5th call of each worker throws a ValueError
//   count   "tick" N times (each sleeps --slow-ms), every result fetched
//   restore Checkpoint::restore(--restore) onto the parameter servers, then
//           Checkpoint::save(--out-checkpoint) from them, then --steps of fit
//           and a save to --out-checkpoint's name with "trained-" in front,
//           the weights to --out
//   estimator  a LinearRegressor (Ftrl, its default) given the strategy as
//           train_distribute and eval_distribute, trained to global step
//           --steps in model_dir --out (checkpoints every 10 steps), then
//           evaluated; workers and ps tasks serve() it. Prints the global
//           step, the weights and the evaluation; the weights to --weights.
//           Without TF_CONFIG: the same on one device. --kill-at-step K:
//           the chief kills itself (SIGKILL) after global step K;
//           --finite 1: the workers' input is 4 batches; --plain-server 1:
//           the workers run a plain Server instead of serve()
//   estimator-eval  the one-device evaluation of model_dir --out
//   fit     Model::fit(DatasetCreator("batches")) for --epochs of --steps
//           steps (compiled with --steps-per-execution), with --backup DIR a
//           BackupAndRestore there, --scale-weights S every weight times S
//           on the coordinator first, --lr-scheduler 1 a LearningRateScheduler
//           halving the rate each epoch; the weights to --out
//
// --batch-norm 1 puts a BatchNormalization after the hidden layer (every
// mode, every task).
//
// A worker given --kill-at-call K kills itself (SIGKILL) at the start of its
// K-th function call. Exit codes: 0 done, 1 a Lockstep error, 3 a
// DistributedError (4: UnavailableError).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "distribute/worker_programs.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/lockstep.h"

namespace {

using namespace lockstep;
namespace ld = lockstep::distribute;

struct Args {
  std::string mode = "custom";
  std::int64_t steps = 40;
  std::string out;
  int partition = 0;
  long kill_at_call = -1;
  int slow_ms = 0;
  int epochs = 2;
  std::int64_t steps_per_execution = 1;
  std::string backup;
  std::string restore, out_checkpoint;
  double scale_weights = 1.0;      // fit: every weight times this before fit
  bool lr_scheduler = false;       // fit: a LearningRateScheduler halving the rate each epoch
  std::string weights;             // estimator: the trained weights to this file
  std::int64_t kill_at_step = -1;  // estimator: the chief kills itself after this global step
  bool plain_server = false;       // estimator: workers run a plain Server, not serve()
  bool finite = false;             // estimator: the workers' input is 4 batches, not repeated
};

bool g_batch_norm = false;  // --batch-norm 1: a BatchNormalization after the hidden layer

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode")
      a.mode = v;
    else if (k == "--steps")
      a.steps = std::stoll(v);
    else if (k == "--out")
      a.out = v;
    else if (k == "--partition")
      a.partition = std::stoi(v);
    else if (k == "--kill-at-call")
      a.kill_at_call = std::stol(v);
    else if (k == "--slow-ms")
      a.slow_ms = std::stoi(v);
    else if (k == "--epochs")
      a.epochs = std::stoi(v);
    else if (k == "--steps-per-execution")
      a.steps_per_execution = std::stoll(v);
    else if (k == "--backup")
      a.backup = v;
    else if (k == "--restore")
      a.restore = v;
    else if (k == "--scale-weights")
      a.scale_weights = std::stod(v);
    else if (k == "--lr-scheduler")
      a.lr_scheduler = v == "1";
    else if (k == "--batch-norm")
      g_batch_norm = v == "1";
    else if (k == "--plain-server")
      a.plain_server = v == "1";
    else if (k == "--finite")
      a.finite = v == "1";
    else if (k == "--kill-at-step")
      a.kill_at_step = std::stoll(v);
    else if (k == "--weights")
      a.weights = v;
    else if (k == "--out-checkpoint")
      a.out_checkpoint = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

constexpr std::int64_t kExamples = 512, kBatch = 32;

Model mlp() {
  set_random_seed(7);
  auto in = Input({20});
  auto h = layers::Dense(32, {.activation = "relu"})(in);
  if (g_batch_norm) h = layers::BatchNormalization()(h);
  return Model(in, layers::Dense(4)(h));
}

data::Dataset batches(const ld::InputContext& ctx) {
  auto [x, y] = testing_support::four_sums(kExamples);
  return data::Dataset::from_tensor_slices({x, y})
      .shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
      .repeat()
      .batch(kBatch);
}

Optimizer adam() { return optimizers::Adam({.learning_rate = 0.01}); }

// One training step of the custom loop, on a model and optimizer.
Tensor step(Model& model, Optimizer& opt, const data::Element& batch) {
  const auto vars = model.impl()->trainable_weights();
  GradientTape tape;
  const Tensor logits = model(batch[0], {.training = true});
  const Tensor loss = mean(neg(sum(mul(log_softmax(logits), one_hot(batch[1], 4)), {.axes = {1}})));
  opt.apply_gradients(tape.gradient(loss, vars), vars);
  return loss;
}

struct WorkerModel {
  Model model;
  Optimizer opt;
};

std::atomic<long> g_calls{0};

void register_functions(const Args& a) {
  // --slow-ms: every batch takes that long to make (fit's steps run slowly).
  ld::register_dataset_function(
      "batches", [a](const ld::InputContext& ctx, const std::vector<Tensor>&) {
        if (a.slow_ms <= 0) return batches(ctx);
        return batches(ctx).map([a](const data::Element& e) {
          std::this_thread::sleep_for(std::chrono::milliseconds(a.slow_ms));
          return e;
        });
      });
  auto count_call = [a] {
    const long call = ++g_calls;
    if (call == a.kill_at_call) ::kill(::getpid(), SIGKILL);
    if (a.slow_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.slow_ms));
  };
  ld::register_worker_function("step", [count_call](ld::WorkerContext& ctx) {
    count_call();
    auto state = ctx.resource<WorkerModel>("model");
    if (!state) {
      state = std::make_shared<WorkerModel>(WorkerModel{mlp(), adam()});
      ctx.bind_variables(state->model.weights());
      ctx.set_resource("model", state);
    }
    const Tensor loss = step(state->model, state->opt, ctx.next(0));
    return std::vector<Tensor>{loss, Tensor::scalar(static_cast<float>(ctx.worker_index()))};
  });
  ld::register_worker_function("boom", [count_call](ld::WorkerContext& ctx) {
    count_call();
    LOCKSTEP_CHECK(g_calls != 5, "boom: the fifth call fails");
    return std::vector<Tensor>{Tensor::scalar(static_cast<float>(ctx.worker_index()))};
  });
  ld::register_worker_function("tick", [count_call](ld::WorkerContext& ctx) {
    count_call();
    return std::vector<Tensor>{Tensor::scalar(static_cast<float>(ctx.worker_index()))};
  });
}

void compile(Model& model, const Args& a) {
  model.compile({.optimizer = adam(),
                 .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
                 .metrics = {"accuracy"},
                 .steps_per_execution = a.steps_per_execution});
}

void print_history(const History& h) {
  for (const auto& [name, values] : h.history()) {
    std::printf("history %s", name.c_str());
    for (double v : values) std::printf(" %.6f", v);
    std::printf("\n");
  }
}

// --scale-weights: the model's weights changed on the coordinator (as
// load_weights would change them) before fit.
void scale_weights(Model& model, const Args& a) {
  if (a.scale_weights == 1.0) return;
  for (Variable& w : model.weights())
    w.assign(mul(w.value(), Tensor::scalar(static_cast<float>(a.scale_weights))));
}

// ---- estimator mode ----

// y = 2x + 1 over 40 examples, 4 batches of 10, repeated: a resumed run
// that stopped at a multiple of 4 steps sees the batches an uninterrupted
// one would.
data::Dataset estimator_input(bool repeat = true) {
  std::vector<float> x, y;
  for (int i = 0; i < 40; ++i) {
    x.push_back(static_cast<float>(i % 8) / 4.0f - 1.0f);
    y.push_back(2.0f * x.back() + 1.0f);
  }
  return data::Dataset::from_tensor_slices(
             {Tensor::from_vector<float>(x, {40, 1}), Tensor::from_vector<float>(y, {40, 1})},
             {"x", estimator::kLabels})
      .repeat(repeat ? -1 : 1)
      .batch(10);
}

estimator::LinearRegressor regressor(const Args& a, std::optional<ld::Strategy> strategy) {
  estimator::RunConfig config{
      .model_dir = a.out, .save_checkpoints_steps = 10, .log_step_count_steps = 10};
  config.train_distribute = strategy;
  config.eval_distribute = strategy;
  return estimator::LinearRegressor(
      {.feature_columns = {feature_column::numeric_column("x")}, .config = config});
}

void print_estimator(estimator::Estimator& est, const Args& a) {
  const estimator::EvalResults r = est.evaluate([] { return estimator_input().take(4); });
  std::printf("eval %s\n", estimator::format_results(r).c_str());
  std::vector<Variable> weights;
  for (const std::string& name : est.get_variable_names()) {
    const Tensor t = est.get_variable_value(name);
    if (name == "global_step") {
      std::printf("global_step %lld\n", static_cast<long long>(t.item<std::int64_t>()));
      continue;
    }
    std::printf("variable %s %.7g\n", name.c_str(), t.to_vector<float>().at(0));
    weights.push_back(Variable(t));
  }
  if (!a.weights.empty()) testing_support::write_weights(weights, a.weights);
}

int run_estimator(const Args& a, std::optional<ld::Strategy> strategy) {
  estimator::LinearRegressor est = regressor(a, strategy);
  // --kill-at-step: a crash (SIGKILL) right after that global step.
  struct KillAt : estimator::SessionRunHook {
    explicit KillAt(std::int64_t step) : step(step) {}
    void after_run(estimator::RunContext&, const estimator::SessionRunValues& v) override {
      if (v.global_step == step) ::kill(::getpid(), SIGKILL);
    }
    std::int64_t step;
  };
  std::vector<std::shared_ptr<estimator::SessionRunHook>> hooks;
  if (a.kill_at_step > 0) hooks.push_back(std::make_shared<KillAt>(a.kill_at_step));
  est.train([] { return estimator_input(); }, {.max_steps = a.steps, .hooks = hooks});
  print_estimator(est, a);
  return 0;
}

// The same steps on one device, in the order one worker takes them.
int reference(const Args& a) {
  if (a.mode == "estimator") return run_estimator(a, std::nullopt);
  if (a.mode == "estimator-eval") {
    estimator::LinearRegressor est = regressor(a, std::nullopt);
    print_estimator(est, a);
    return 0;
  }
  if (a.mode == "fit") {
    Model model = mlp();
    compile(model, a);
    scale_weights(model, a);
    const History h =
        model.fit(batches({}), {.epochs = a.epochs, .verbose = 0, .steps_per_epoch = a.steps});
    print_history(h);
    testing_support::write_weights(model.weights(), a.out);
    return 0;
  }
  Model model = mlp();
  Optimizer opt = adam();
  data::Iterator it = batches({}).make_iterator();
  for (std::int64_t s = 0; s < a.steps; ++s) step(model, opt, it.get_next());
  testing_support::write_weights(model.weights(), a.out);
  return 0;
}

int coordinate(const Args& a) {
  ld::ParameterServerStrategyOptions o;
  if (a.partition > 0) o.variable_partitioner = ld::FixedShardsPartitioner(a.partition);
  ld::ParameterServerStrategy strategy(o);
  Model model;
  {
    auto scope = strategy.scope();
    model = mlp();
  }
  if (a.mode == "restore") {
    {
      auto scope = strategy.scope();
      compile(model, a);
    }
    Checkpoint(model).restore(a.restore);
    Checkpoint(model).save(a.out_checkpoint);
    model.fit(ld::DatasetCreator{"batches"},
              {.epochs = 1, .verbose = 0, .steps_per_epoch = a.steps});
    const std::filesystem::path out(a.out_checkpoint);
    Checkpoint(model).save((out.parent_path() / ("trained-" + out.filename().string())).string());
    testing_support::write_weights(model.weights(), a.out);
    return 0;
  }
  if (a.mode == "estimator") return run_estimator(a, strategy);
  if (a.mode == "fit") {
    {
      auto scope = strategy.scope();
      compile(model, a);
    }
    scale_weights(model, a);
    std::vector<std::shared_ptr<Callback>> callbacks;
    if (a.lr_scheduler)
      callbacks.push_back(
          std::make_shared<LearningRateScheduler>([](int, double lr) { return lr / 2; }));
    if (!a.backup.empty())
      callbacks.push_back(std::make_shared<BackupAndRestore>(
          BackupAndRestoreOptions{.backup_dir = a.backup, .delete_checkpoint = false}));
    const History h = model.fit(
        ld::DatasetCreator{"batches"},
        {.epochs = a.epochs, .verbose = 2, .callbacks = callbacks, .steps_per_epoch = a.steps});
    print_history(h);
    if (!a.out.empty()) testing_support::write_weights(model.weights(), a.out);
    std::printf("optimizer iterations %lld\n",
                static_cast<long long>(model.optimizer().iterations()));
    return 0;
  }
  ld::ClusterCoordinator coordinator(strategy);
  if (a.mode == "custom") {
    auto it = coordinator.create_per_worker_dataset("batches").iter();
    std::vector<ld::RemoteValue> values;
    for (std::int64_t s = 0; s < a.steps; ++s) values.push_back(coordinator.schedule("step", {it}));
    coordinator.join();
    std::map<int, int> by_worker;
    for (const auto& v : values) ++by_worker[static_cast<int>(v.fetch().at(1).item<float>())];
    for (const auto& [w, n] : by_worker) std::printf("worker %d ran %d steps\n", w, n);
    strategy.extended().pull_variables(model.weights());
    if (!a.out.empty()) testing_support::write_weights(model.weights(), a.out);
    const ld::ParameterServerStats stats = strategy.stats();
    std::printf("iterations %lld updates %lld mean staleness %.3f\n",
                static_cast<long long>(stats.iterations), static_cast<long long>(stats.updates),
                stats.mean_staleness);
    const ld::CoordinatorStats c = coordinator.stats();
    std::printf("scheduled %lld completed %lld rerun %lld rejoins %lld\n",
                static_cast<long long>(c.scheduled), static_cast<long long>(c.completed),
                static_cast<long long>(c.rerun), static_cast<long long>(c.worker_rejoins));
    if (a.partition > 0) {
      // The first kernel, sharded, reads as one tensor equal to the pulled copy.
      const ld::ShardedVariable kernel = strategy.sharded_variable(model.weights()[0]);
      std::string rows;
      for (auto r : kernel.shard_rows()) rows += (rows.empty() ? "" : " ") + std::to_string(r);
      std::string tasks;
      for (int t : kernel.ps_tasks()) tasks += (tasks.empty() ? "" : " ") + std::to_string(t);
      const Tensor whole = kernel.read_value();
      const bool same =
          whole.shape() == model.weights()[0].shape() &&
          whole.to_vector<float>() == model.weights()[0].replica_value(0).to_vector<float>();
      std::printf("sharded kernel: rows %s on ps %s reads as one tensor %s\n", rows.c_str(),
                  tasks.c_str(), same ? "equal to the pulled copy" : "DIFFERENT");
    }
    return 0;
  }
  const std::string fn = a.mode == "throw" ? "boom" : "tick";
  std::vector<ld::RemoteValue> values;
  int raised = 0;
  std::string message;
  for (std::int64_t s = 0; s < a.steps; ++s) {
    try {
      values.push_back(coordinator.schedule(fn));
    } catch (const ValueError& e) {
      ++raised;
      message = e.what();
    }
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      coordinator.join();
    } catch (const ValueError& e) {
      ++raised;
      message = e.what();
    }
  }
  int ok = 0, failed = 0, cancelled = 0;
  for (const auto& v : values) {
    try {
      v.fetch();
      ++ok;
    } catch (const CancelledError&) {
      ++cancelled;
    } catch (const Error&) {
      ++failed;
    }
  }
  std::printf("raised %d: %s\n", raised, message.c_str());
  std::printf("fetched ok %d failed %d cancelled %d of %zu\n", ok, failed, cancelled,
              values.size());
  const ld::CoordinatorStats c = coordinator.stats();
  std::printf("scheduled %lld completed %lld rerun %lld rejoins %lld\n",
              static_cast<long long>(c.scheduled), static_cast<long long>(c.completed),
              static_cast<long long>(c.rerun), static_cast<long long>(c.worker_rejoins));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    register_functions(a);
    const auto resolver = ld::ClusterResolver::from_environment();
    if (!resolver) return reference(a);
    if (a.mode == "estimator" && resolver->task_type() != "chief" && !a.plain_server) {
      regressor(a, std::nullopt).serve([a] { return estimator_input(!a.finite); });
      return 0;
    }
    // --plain-server: the Estimator made, but a plain Server run (serve() forgotten).
    std::optional<estimator::LinearRegressor> unserved;
    if (a.mode == "estimator") unserved.emplace(regressor(a, std::nullopt));
    if (resolver->task_type() == "ps" || resolver->task_type() == "worker") {
      ld::Server server(*resolver);
      std::printf("%s serving at port %d\n", resolver->task_type().c_str(), server.port());
      std::fflush(stdout);
      server.join();
      return 0;
    }
    return coordinate(a);
  } catch (const UnavailableError& e) {
    std::fprintf(stderr, "ps_train: %s\n", e.what());
    return 4;
  } catch (const DistributedError& e) {
    std::fprintf(stderr, "ps_train: %s\n", e.what());
    return 3;
  } catch (const Error& e) {
    std::fprintf(stderr, "ps_train: %s\n", e.what());
    return 1;
  }
}
