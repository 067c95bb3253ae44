// Keras's built-in callbacks (keras.callbacks.*), with Keras's names,
// arguments and messages.
//
//   model.fit(train, {.epochs = 10, .callbacks = {
//       std::make_shared<ls::BackupAndRestore>(ls::BackupAndRestore::Options{
//           .backup_dir = "/tmp/backup", .save_freq = 100}),
//       std::make_shared<ls::EarlyStopping>(ls::EarlyStopping::Options{.patience = 3}),
//   }});
#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/comm/communicator.h"
#include "lockstep/io/event_file.h"
#include "lockstep/train/callbacks.h"
#include "lockstep/train/checkpoint.h"

namespace lockstep {

// Keras's save_freq: "epoch", or every N batches (counted in optimizer
// steps, so the count continues across a resume).
class SaveFreq {
 public:
  SaveFreq(const char* epoch);     // NOLINT: "epoch" only
  SaveFreq(std::int64_t batches);  // NOLINT
  bool per_epoch() const { return batches_ == 0; }
  std::int64_t batches() const { return batches_; }

 private:
  std::int64_t batches_ = 0;
};

// Keras's mode for a monitored value: "auto" is "max" for names containing
// "acc", "auc", "precision" or "recall" (accuracy-like), else "min".
enum class MonitorMode { kAuto, kMin, kMax };

struct BackupAndRestoreOptions {
  std::string backup_dir{};
  SaveFreq save_freq = "epoch";
  bool delete_checkpoint = true;
  int max_to_keep = 2;  // the newest and one to fall back to
  // Save the input pipeline's whole state (shuffle buffers and all) rather
  // than the position to replay to (see Model::training_snapshot).
  bool save_input_state = false;
  std::ostream* log = nullptr;  // where resume / fallback messages go (stderr)
};

// Saves a backup of the whole training state (weights, optimizer, epoch,
// batch, input position, metric and random states) and, when fit starts
// again with the same callback, resumes exactly where the last backup was
// taken: the finished run's weights are bitwise those of an uninterrupted
// run (same seed and replica count). A damaged newest backup is reported
// and the previous one is used. On normal completion the backup is deleted
// (unless delete_checkpoint is false). Backups are written in the
// background (CheckpointManager::save_async): training pays for a copy of
// the state, not for the write and fsync. On a multi-worker job that went
// on without some of its workers (elastic shrink, min_workers), each backup
// is where those waiting to come back are taken in: every worker stops
// with a RejoinError once the backup is on disk, to be started again.
class BackupAndRestore : public Callback {
 public:
  using Options = BackupAndRestoreOptions;
  explicit BackupAndRestore(Options options);
  void on_train_begin(const Logs&) override;
  void on_train_batch_end(std::int64_t batch, const Logs&) override;
  void on_epoch_end(int epoch, const Logs&) override;
  void on_train_end(const Logs&) override;
  bool implements_train_batch_hooks() const override { return !options_.save_freq.per_epoch(); }

  // The backup fit resumed from in the last on_train_begin (empty: none).
  const std::string& resumed_from() const { return resumed_from_; }
  // Writes a backup of where fit is now and waits until it is on disk (the
  // chief's; nothing on other workers). For a program that stops early —
  // on SIGTERM, say — so that the rerun redoes nothing. Call it between
  // batches (from a callback).
  void backup_now();

 private:
  CheckpointManager& manager();
  void rejoin_waiting_workers();
  std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>> restore_from_chief(
      comm::Communicator& workers, std::ostream& log);
  Options options_;
  std::unique_ptr<CheckpointManager> manager_;
  std::string resumed_from_;
};

struct ModelCheckpointOptions {
  std::string filepath{};
  std::string monitor = "val_loss";
  int verbose = 0;
  bool save_best_only = false;
  bool save_weights_only = false;
  MonitorMode mode = MonitorMode::kAuto;
  SaveFreq save_freq = "epoch";
  std::optional<double> initial_value_threshold{};
};

// Saves the model (or its weights) at the end of every epoch or every N
// batches, to a path with {epoch} (1-based, as Keras), {batch} and any log
// value ({val_loss:.2f}, {epoch:02d}) filled in; with save_best_only, only
// when the monitored value improved. Under a multi-worker strategy only the
// chief writes.
class ModelCheckpoint : public Callback {
 public:
  using Options = ModelCheckpointOptions;
  explicit ModelCheckpoint(Options options);
  // Keras's ModelCheckpoint("ckpt/ckpt-{epoch}.keras"): the path, then the
  // other options (their filepath left empty).
  explicit ModelCheckpoint(std::string filepath, Options options = {});
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_begin(int epoch, const Logs&) override { epoch_ = epoch; }
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool implements_train_batch_hooks() const override { return !options_.save_freq.per_epoch(); }

  // The path template with the values filled in (exposed for tests).
  static std::string format_path(const std::string& pattern, int epoch, std::int64_t batch,
                                 const Logs& logs);

 private:
  void save(int epoch, std::int64_t batch, const Logs& logs);
  Options options_;
  bool maximize_ = false;
  double best_;
  int epoch_ = 0;
};

struct EarlyStoppingOptions {
  std::string monitor = "val_loss";
  double min_delta = 0.0;
  int patience = 0;
  int verbose = 0;
  MonitorMode mode = MonitorMode::kAuto;
  std::optional<double> baseline{};
  bool restore_best_weights = false;
  int start_from_epoch = 0;
};

// Stops training when the monitored value has not improved by min_delta
// for `patience` epochs (counted from start_from_epoch); optionally puts back
// the best epoch's weights.
class EarlyStopping : public Callback {
 public:
  using Options = EarlyStoppingOptions;
  explicit EarlyStopping(Options options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;
  bool implements_train_batch_hooks() const override { return false; }
  // The epoch training stopped at (0: it did not stop early).
  int stopped_epoch() const { return stopped_epoch_; }
  int best_epoch() const { return best_epoch_; }

 private:
  Options options_;
  bool maximize_ = false;
  double best_ = 0;
  int wait_ = 0, stopped_epoch_ = 0, best_epoch_ = 0;
  std::vector<Tensor> best_weights_;
};

// Sets the learning rate at the start of every epoch to schedule(epoch, lr).
class LearningRateScheduler : public Callback {
 public:
  using Schedule = std::function<double(int epoch, double lr)>;
  explicit LearningRateScheduler(Schedule schedule, int verbose = 0);
  void on_epoch_begin(int epoch, const Logs&) override;
  bool implements_train_batch_hooks() const override { return false; }

 private:
  Schedule schedule_;
  int verbose_;
};

struct ReduceLROnPlateauOptions {
  std::string monitor = "val_loss";
  double factor = 0.1;
  int patience = 10;
  int verbose = 0;
  MonitorMode mode = MonitorMode::kAuto;
  double min_delta = 1e-4;
  int cooldown = 0;
  double min_lr = 0.0;
};

// Multiplies the learning rate by `factor` when the monitored value has not
// improved for `patience` epochs (then waits `cooldown` epochs).
class ReduceLROnPlateau : public Callback {
 public:
  using Options = ReduceLROnPlateauOptions;
  explicit ReduceLROnPlateau(Options options = {});
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  bool implements_train_batch_hooks() const override { return false; }

 private:
  Options options_;
  bool maximize_ = false;
  double best_ = 0;
  int wait_ = 0, cooldown_counter_ = 0;
};

// One row per epoch: "epoch" then every log value, keys sorted (Keras).
class CSVLogger : public Callback {
 public:
  explicit CSVLogger(std::string filename, char separator = ',', bool append = false);
  void on_train_begin(const Logs&) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;
  bool implements_train_batch_hooks() const override { return false; }

 private:
  std::string filename_;
  char separator_;
  bool append_;
  std::ofstream out_;
  std::vector<std::string> keys_;
};

// Writes TensorBoard event files, as Keras 3: log_dir/train gets
// "epoch_<metric>" (and "epoch_learning_rate") at every epoch's end,
// log_dir/validation the val_ metrics under the same names; with
// update_freq = N, "batch_<metric>" every N batches (step: optimizer steps).
class TensorBoard : public Callback {
 public:
  explicit TensorBoard(std::string log_dir = "logs", SaveFreq update_freq = "epoch");
  void on_train_begin(const Logs&) override;
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  void on_train_end(const Logs&) override;
  bool implements_train_batch_hooks() const override { return !update_freq_.per_epoch(); }

 private:
  std::string log_dir_;
  SaveFreq update_freq_;
  std::unique_ptr<io::EventFileWriter> train_, validation_;
};

// Stops training at the first batch whose loss is NaN or infinite.
class TerminateOnNaN : public Callback {
 public:
  void on_train_batch_end(std::int64_t batch, const Logs& logs) override;
};

// A callback from plain functions (keras.callbacks.LambdaCallback).
class LambdaCallback : public Callback {
 public:
  struct Functions {
    std::function<void(int, const Logs&)> on_epoch_begin{}, on_epoch_end{};
    std::function<void(std::int64_t, const Logs&)> on_train_batch_begin{}, on_train_batch_end{};
    std::function<void(const Logs&)> on_train_begin{}, on_train_end{};
  };
  explicit LambdaCallback(Functions f) : f_(std::move(f)) {}
  void on_epoch_begin(int e, const Logs& l) override {
    if (f_.on_epoch_begin) f_.on_epoch_begin(e, l);
  }
  void on_epoch_end(int e, const Logs& l) override {
    if (f_.on_epoch_end) f_.on_epoch_end(e, l);
  }
  void on_train_batch_begin(std::int64_t b, const Logs& l) override {
    if (f_.on_train_batch_begin) f_.on_train_batch_begin(b, l);
  }
  void on_train_batch_end(std::int64_t b, const Logs& l) override {
    if (f_.on_train_batch_end) f_.on_train_batch_end(b, l);
  }
  void on_train_begin(const Logs& l) override {
    if (f_.on_train_begin) f_.on_train_begin(l);
  }
  void on_train_end(const Logs& l) override {
    if (f_.on_train_end) f_.on_train_end(l);
  }
  bool implements_train_batch_hooks() const override {
    return f_.on_train_batch_begin || f_.on_train_batch_end;
  }

 private:
  Functions f_;
};

}  // namespace lockstep
