// Checkpoints: a model's weights, its optimizer's state and — taken during
// fit — where training is, in one safetensors file (tf.train.Checkpoint and
// CheckpointManager; the files BackupAndRestore keeps).
//
//   lockstep::Checkpoint ckpt(model);
//   lockstep::CheckpointManager manager(ckpt, {.directory = "ckpts", .max_to_keep = 3});
//   manager.save();                               // ckpts/ckpt-1.safetensors
//   if (auto latest = manager.latest_checkpoint()) ckpt.restore(*latest);
//
// File layout (docs/checkpoints.md): tensors "model/<weight>",
// "optimizer/<weight>/<slot>", "input/<name>"; metadata "format"
// ("lockstep.checkpoint"), "format_version", "model_config" (functional and
// Sequential models), "optimizer" (its config), "iterations", "replicas",
// "strategy", and with a training position "training" (epoch, batch,
// metric states, random state, the input's position as JSON). Every tensor
// and the header carry a CRC32C; writes are atomic (core/file.h).
//
// Topology-free: weights are saved once (replica 0's copy; all copies are
// identical) and restored into every copy; optimizer slots are restored
// into every replica now or when a replica creates them — so a checkpoint
// saved under N replicas restores under M, another strategy, or none.
#pragma once

#include <cstdint>
#include <future>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/io/safetensors.h"
#include "lockstep/train/model.h"

namespace lockstep {

inline constexpr int kCheckpointFormatVersion = 1;

// What a checkpoint file says about itself, validated (read()).
struct CheckpointInfo {
  std::string path{};
  int format_version = 0;
  std::int64_t iterations = 0;
  int replicas = 1;
  std::string strategy{};
  std::optional<TrainingSnapshot> position{};  // saved during fit
  io::TensorFile file{};
};

class Checkpoint {
 public:
  // The model and the optimizer it was compiled with (if any).
  explicit Checkpoint(Model model);

  // Writes the checkpoint atomically. Called during fit (from a callback),
  // it also records where training is (see Model::training_snapshot for
  // `full_input_state`).
  void save(const std::string& path, bool full_input_state = false) const;
  // Restores weights (every replica's copy), optimizer slots and iterations,
  // after checking that every name and shape matches this model; returns
  // the training position if the file has one. Nothing is changed when the
  // file is rejected.
  std::optional<TrainingSnapshot> restore(const std::string& path) const;
  // Reads and validates a checkpoint file (checksums, format, version).
  static CheckpointInfo read(const std::string& path);

  const Model& model() const { return model_; }

  // What save() writes, gathered (with `copy`, as copies, so it may be
  // written while training goes on), and the write itself.
  struct Contents {
    std::vector<std::pair<std::string, Tensor>> tensors{};
    std::map<std::string, std::string> metadata{};
  };
  Contents contents(bool full_input_state, bool copy) const;
  static void write(const std::string& path, const Contents& contents);

 private:
  Model model_;
};

struct CheckpointManagerOptions {
  std::string directory{};
  int max_to_keep = 5;   // the newest this many are kept (0: all)
  int keep_every_n = 0;  // > 0: checkpoint numbers divisible by n are kept as well
  std::string prefix = "ckpt";
};

// Numbered checkpoints in a directory: <prefix>-<n>.safetensors, n counting
// on from the highest number present (so it continues after a restart).
class CheckpointManager {
 public:
  CheckpointManager(Checkpoint checkpoint, CheckpointManagerOptions options);
  // Waits for a background save (its error is printed, not thrown).
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Saves the next checkpoint, then deletes the ones no longer kept.
  // Returns its path.
  std::string save(bool full_input_state = false);
  // The same, but only copying the state happens on this thread; the
  // write, fsync and pruning run in the background, one save at a time
  // (the next save, wait() or restore waits for it and rethrows its error).
  // A crash during the background write leaves the previous checkpoints,
  // as with save().
  std::string save_async(bool full_input_state = false);
  void wait();
  // The newest checkpoint's path (by number), if any.
  std::optional<std::string> latest_checkpoint() const;
  // Every checkpoint's path, oldest first.
  std::vector<std::string> checkpoints() const;
  // Restores the newest checkpoint that loads; one that is damaged or holds
  // another model is reported on `log` and the next older one is tried.
  // Returns the path and its training position; nullopt when there is none
  // (or none loads, which is said on `log` too).
  std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>> restore_latest(
      std::ostream& log);
  // Deletes every checkpoint of this manager.
  void remove_all();

  const std::string& directory() const { return options_.directory; }

 private:
  std::vector<std::pair<std::int64_t, std::string>> numbered() const;
  std::string next_path();
  void prune();

  Checkpoint checkpoint_;
  CheckpointManagerOptions options_;
  std::int64_t last_number_ = 0;
  std::future<void> in_flight_;
};

}  // namespace lockstep
