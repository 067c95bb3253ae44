// RunConfig: where an Estimator keeps its checkpoints, how often it saves
// and logs, and the strategies it trains and evaluates under
// (tf.estimator.RunConfig).
//
//   ls::distribute::MirroredStrategy strategy;
//   ls::estimator::RunConfig config{.train_distribute = strategy, .eval_distribute = strategy};
//
// A value type; the strategies are handles (copies share the strategy).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/distribute/strategy.h"

namespace lockstep::estimator {

// The fields TensorFlow's RunConfig has that Lockstep implements, in
// TensorFlow's order, with its defaults.
struct RunConfig {
  // Checkpoints and the model's files; empty: the Estimator's model_dir, or a
  // new temporary directory (said on the log, as TensorFlow does).
  std::string model_dir{};
  // Seeds the initial values of the variables (and dropout): the same seed
  // gives the same start. None: Lockstep's fixed default sequence.
  std::optional<std::uint64_t> tf_random_seed{};
  // Save every this many global steps, or every this many seconds; at most
  // one of the two. Neither: every 600 s (TensorFlow's default). A
  // checkpoint is also written when train() ends.
  std::optional<std::int64_t> save_checkpoints_steps{};
  std::optional<double> save_checkpoints_secs{};
  // The newest this many checkpoints are kept (0: all).
  int keep_checkpoint_max = 5;
  // Every this many steps the chief logs the loss and the steps per second
  // (0: never).
  std::int64_t log_step_count_steps = 100;
  // Strategies for train() and for evaluate()/predict(); none: one replica
  // on the calling thread. Under a strategy each worker calls input_fn
  // once and each replica takes its own batches from it (see estimator.h).
  std::optional<distribute::Strategy> train_distribute{};
  std::optional<distribute::Strategy> eval_distribute{};
};

}  // namespace lockstep::estimator
