// An Estimator's checkpoints under its model_dir: model.ckpt-<global step>
// .safetensors files (Lockstep's checksummed safetensors, written
// atomically), the newest found by step, old ones pruned; what one holds is
// checked against the model before anything is restored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/optim/optimizers.h"

namespace lockstep::estimator::detail {

// What a checkpoint saves and restores.
struct ModelState {
  std::vector<Variable> variables{};  // every variable model_fn made, by name
  std::vector<Variable> trainable{};  // the optimizer's slots follow these by position
  Optimizer optimizer{};              // undefined before the first train()
  // The strategy the variables were made under. Under ParameterServerStrategy
  // their values and the optimizer's slots live on the parameter servers: a
  // save reads them from there, a restore writes them there too.
  distribute::Strategy strategy{};
};

// "<dir>/model.ckpt-<step>.safetensors".
std::string checkpoint_path(const std::string& model_dir, std::int64_t global_step);
// Every checkpoint in the directory, by step (oldest first).
std::vector<std::pair<std::int64_t, std::string>> checkpoints_in(const std::string& model_dir);
std::optional<std::string> newest_checkpoint(const std::string& model_dir);

// Writes the checkpoint of `global_step`, then deletes all but the newest
// `keep_max` (0: keeps all).
std::string save_checkpoint(const std::string& model_dir, const ModelState& state,
                            std::int64_t global_step, int keep_max);
// Checks that `path` holds exactly this model's variables (names, shapes)
// and, when the model has an optimizer with slots in the file, that they
// fit; then restores them (every replica's copy) and returns the global
// step. Nothing is changed when the file is rejected (a ValueError or
// ShapeError naming the file and the variable, an IOError for a damaged
// file).
std::int64_t restore_checkpoint(const std::string& path, const ModelState& state);

// The global step and the variables' values a checkpoint holds, by name.
struct CheckpointValues {
  std::int64_t global_step = 0;
  std::vector<std::pair<std::string, Tensor>> variables{};
};
CheckpointValues read_checkpoint(const std::string& path);

}  // namespace lockstep::estimator::detail
