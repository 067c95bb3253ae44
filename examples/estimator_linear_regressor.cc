// The distribution guide's Estimator example (TensorFlow 1.13 era), ported
// line for line: a LinearRegressor under MirroredStrategy, trained 10 steps
// and evaluated 10 steps on the feature 1 with the label 1, printing the
// dictionary evaluate() returns.
//
//   estimator_linear_regressor            # tf.estimator (v2): SUM_OVER_BATCH_SIZE
//   estimator_linear_regressor --compat-v1  # tf.compat.v1.estimator: SUM, what TF 1.13 ran
//
// docs/estimator.md shows both dictionaries and where their numbers come from.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <cstring>

namespace ls = lockstep;

int main(int argc, char** argv) {
  const bool compat_v1 = argc > 1 && std::strcmp(argv[1], "--compat-v1") == 0;

  ls::distribute::MirroredStrategy strategy;
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
  regressor.train(input_fn, {.steps = 10});
  auto results = regressor.evaluate(input_fn, {.steps = 10});
  std::printf("%s\n", ls::estimator::format_results(results).c_str());
}
