// One process of an Estimator test job (estimator_process_test.cc starts
// it): a LinearRegressor on deterministic data, trained to --max-steps with
// a checkpoint every --save-steps, then its variables (from the newest
// checkpoint, sorted by name) and the global step written to --out in
// multi_worker_support.h's format.
//
//   estimator_worker --model-dir DIR --out FILE [--strategy none|mirrored|multi-worker]
//       [--batch B] [--shard 1] [--max-steps N] [--save-steps N] [--step-delay-ms T]
//       [--reduction sum|sum_over_batch_size]
//
// Under --strategy multi-worker the cluster comes from TF_CONFIG; with
// --shard 1 each worker's input_fn keeps its shard of the examples
// (InputContext's input_pipeline_id), so two workers with batches of 10
// take the 20 examples one process takes with a batch of 20.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "lockstep/lockstep.h"
#include "support/estimator_inputs.h"

namespace {

using namespace lockstep;
namespace est = estimator;
namespace fc = feature_column;

struct Args {
  std::string model_dir, out, strategy = "none", reduction = "sum_over_batch_size";
  std::int64_t batch = 20, max_steps = 100, save_steps = 100;
  bool shard = false;
  long step_delay_ms = 0;
};

// Slows training down so that the test can kill it in the middle.
struct Delay : est::SessionRunHook {
  explicit Delay(long ms) : ms_(ms) {}
  void after_run(est::RunContext&, const est::SessionRunValues&) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms_));
  }
  long ms_;
};

int run(const Args& a) {
  est::RunConfig config{.model_dir = a.model_dir,
                        .save_checkpoints_steps = a.save_steps,
                        .keep_checkpoint_max = 3,
                        .log_step_count_steps = 100};
  if (a.strategy == "mirrored") {
    config.train_distribute =
        distribute::MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = 2});
  } else if (a.strategy == "multi-worker") {
    config.train_distribute = distribute::MultiWorkerMirroredStrategy();
  }
  est::LinearRegressorOptions options{
      .feature_columns = {fc::numeric_column("x"),
                          fc::bucketized_column(fc::numeric_column("x"), {-0.5f, 0.0f, 0.5f}),
                          fc::categorical_column_with_identity("k", 4)},
      .config = config,
      .loss_reduction =
          a.reduction == "sum" ? est::LossReduction::kSum : est::LossReduction::kSumOverBatchSize};
  est::LinearRegressor regressor(options);
  const std::int64_t batch = a.batch;
  const bool shard = a.shard;
  est::TrainOptions train{.max_steps = a.max_steps};
  if (a.step_delay_ms > 0) train.hooks.push_back(std::make_shared<Delay>(a.step_delay_ms));
  regressor.train(
      [batch, shard](const distribute::InputContext& ctx) {
        data::Dataset ds = testing_support::regression_examples();
        if (shard) ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id);
        return ds.repeat().batch(batch);
      },
      train);
  std::ofstream out(a.out, std::ios::binary);
  for (const std::string& name : regressor.get_variable_names()) {
    if (name == "global_step") continue;
    const std::vector<float> v = regressor.get_variable_value(name).to_vector<float>();
    const std::uint64_t n = v.size();
    out.write(reinterpret_cast<const char*>(&n), sizeof n);
    out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(n * 4));
  }
  const std::uint64_t end = 0;
  out.write(reinterpret_cast<const char*>(&end), sizeof end);
  out << "global_step=" << regressor.get_variable_value("global_step").item<std::int64_t>();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model-dir")
      a.model_dir = v;
    else if (k == "--out")
      a.out = v;
    else if (k == "--strategy")
      a.strategy = v;
    else if (k == "--reduction")
      a.reduction = v;
    else if (k == "--batch")
      a.batch = std::stoll(v);
    else if (k == "--max-steps")
      a.max_steps = std::stoll(v);
    else if (k == "--save-steps")
      a.save_steps = std::stoll(v);
    else if (k == "--step-delay-ms")
      a.step_delay_ms = std::stol(v);
    else if (k == "--shard")
      a.shard = v == "1";
    else {
      std::fprintf(stderr, "estimator_worker: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  try {
    return run(a);
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "estimator_worker: %s\n", e.what());
    return 1;
  }
}
