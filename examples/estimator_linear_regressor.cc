// The distribution guide's Estimator example (TensorFlow 1.13 era), ported
// line for line: a LinearRegressor under MirroredStrategy, trained 10 steps
// and evaluated 10 steps on the feature 1 with the label 1, printing the
// dictionary evaluate() returns.
//
//   estimator_linear_regressor            # tf.estimator (v2): SUM_OVER_BATCH_SIZE
//   estimator_linear_regressor --compat-v1  # tf.compat.v1.estimator: SUM, what TF 1.13 ran
//   lockstep launch --workers 2 --ps 1 -- estimator_linear_regressor --parameter-server
//       # the guide's ParameterServerStrategy: every task runs this program;
//       # the chief trains and evaluates, workers and the ps task serve
//
// docs/estimator.md shows both dictionaries and where their numbers come from.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <cstring>
#include <optional>

namespace ls = lockstep;

int main(int argc, char** argv) {
  bool compat_v1 = false, parameter_server = false;
  for (int i = 1; i < argc; ++i) {
    compat_v1 = compat_v1 || std::strcmp(argv[i], "--compat-v1") == 0;
    parameter_server = parameter_server || std::strcmp(argv[i], "--parameter-server") == 0;
  }
  // The task TF_CONFIG names (none: this process alone).
  const auto cluster = ls::distribute::ClusterResolver::from_environment();
  const bool serves = parameter_server && cluster && cluster->task_type() != "chief";

  std::optional<ls::distribute::Strategy> strategy;
  if (!parameter_server) {
    strategy = ls::distribute::MirroredStrategy();
  } else if (!serves) {
    strategy = ls::distribute::ParameterServerStrategy();
  }
  ls::estimator::RunConfig config{.train_distribute = strategy, .eval_distribute = strategy};
  ls::estimator::LinearRegressorOptions options{
      .feature_columns = {ls::feature_column::numeric_column("feats")},
      .optimizer = "SGD",
      .config = config};
  ls::estimator::LinearRegressor regressor =
      compat_v1 ? ls::compat::v1::estimator::LinearRegressor(options)
                : ls::estimator::LinearRegressor(options);
  auto input_fn = [] {
    return ls::data::Dataset::from_tensors(ls::estimator::features_and_labels(
                                               {{"feats", ls::Tensor::from_vector<float>({1.f})}},
                                               ls::Tensor::from_vector<float>({1.f})))
        .repeat(10000)
        .batch(10);
  };
  if (serves) {
    regressor.serve(input_fn);  // until the chief ends the job
    return 0;
  }
  regressor.train(input_fn, {.steps = 10});
  auto results = regressor.evaluate(input_fn, {.steps = 10});
  std::printf("%s\n", ls::estimator::format_results(results).c_str());
}
