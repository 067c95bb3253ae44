// SidecarEvaluator: evaluates each new checkpoint a training job writes, from
// outside the job (keras.utils.SidecarEvaluator) — the evaluator task of a
// ParameterServerStrategy cluster, which sits beside the cluster rather than
// in it.
//
//   ls::SidecarEvaluator evaluator(model, test_data,
//                                  {.checkpoint_dir = "ckpt/backup", .prefix = "backup",
//                                   .until_epoch = 10});
//   evaluator.start([](const auto& e) { std::printf("%s: %f\n", e.checkpoint.c_str(),
//                                                   e.logs.at("loss")); });
//
// The model is this process's own (built and compiled as the trainer's);
// every evaluation restores a checkpoint into it first. Checkpoints are only
// read, never deleted; one that vanishes or is damaged between the listing
// and the read is skipped (the next poll sees the newer one).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/train/model.h"

namespace lockstep {

struct SidecarEvaluatorOptions {
  // A CheckpointManager's directory and its files' prefix (BackupAndRestore
  // writes "<backup_dir>/backup-<n>.safetensors").
  std::string checkpoint_dir{};
  std::string prefix = "ckpt";
  std::int64_t steps = 0;  // batches per evaluation; 0: the whole data
  int verbose = 0;
  // Stop after this many evaluations (0: no limit), or after evaluating a
  // checkpoint taken at the end of this epoch or later (0: none), or when
  // no new checkpoint has come for `timeout`.
  int max_evaluations = 0;
  int until_epoch = 0;
  // Or once this file is written after start() began (the trainer's end:
  // its final model, say).
  std::string done_file{};
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds poll_interval{500};
};

class SidecarEvaluator {
 public:
  struct Evaluation {
    std::string checkpoint{};
    int epoch = 0;                // epochs the checkpoint's training had finished
    std::int64_t iterations = 0;  // its optimizer steps
    Logs logs{};
  };

  SidecarEvaluator(Model model, data::Dataset data, SidecarEvaluatorOptions options);
    // Evaluates the newest checkpoint whenever a new one appears, calling
  // `on_evaluation` after each, until a stop condition; returns them all.
  std::vector<Evaluation> start(const std::function<void(const Evaluation&)>& on_evaluation = {});

 private:
  Model model_;
  data::Dataset data_;
  SidecarEvaluatorOptions options_;
};

}  // namespace lockstep
