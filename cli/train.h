// `lockstep train`: the main job (see train.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "data_source.h"
#include "lockstep/distribute/cluster_resolver.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep::cli {

struct TrainArgs {
  // mlp | cnn | mobilenet_v2 | a model JSON file (Model::to_json) | a Keras
  // file (.keras, .h5)
  std::string model = "mlp";
  // LOCKSTEP_CPU_DEVICES syntax, "gpu" (every logical GPU) or device names
  // ("/gpu:0,/gpu:1"); empty: the default devices.
  std::string devices;
  int logical_gpus = 0;  // logical GPUs per GPU; 0: LOCKSTEP_LOGICAL_GPUS or 1
  // mirrored | multi-worker | parameter-server | one-device | default
  std::string strategy = "mirrored";
  // parameter-server: variables of at least 512 KiB split into up to this
  // many shards (MinSizePartitioner, 256 KiB shards at least); 1: none.
  int max_shards = 1;
  // multi-worker: replicas per worker (default: LOCKSTEP_LOCAL_REPLICAS, else
  // 1), how the workers talk, the collective deadline in seconds.
  int local_replicas = 0;
  std::string communication = "auto";
  std::string gradient_compression = "none";  // multi-worker: none | bf16
  double timeout_seconds = 300;
  // multi-worker elastic shrink: on a restart, go on with the workers back
  // within rejoin_timeout_seconds if they are at least min_workers (0: all).
  int min_workers = 0;
  double rejoin_timeout_seconds = 30;
  double join_timeout_seconds = 60;  // multi-worker: every worker's arrival at start-up
  std::string data_dir;              // empty: Debian's dataset-fashion-mnist directory
  // --data SOURCE and its settings (data_source.h); empty: Fashion-MNIST.
  DataArgs data;
  // --weights, --alpha, --freeze-base, --fine-tune-from,
  // --learning-rate-schedule (with --data).
  FineTuning tuning;
  int epochs = 2;
  std::int64_t batch_size = 64;  // global
  double learning_rate = 1e-3;
  bool learning_rate_given = false;  // --learning-rate on the command line
  // Every step op by op (Keras's run_eagerly); on a GPU fit otherwise
  // records its step once and replays it.
  bool run_eagerly = false;
  int verbose = 1;
  std::uint64_t seed = 1337;
  std::int64_t steps_per_epoch = 0;  // 0: the whole training set
  // Validation batches per epoch (Keras's validation_steps) and test batches
  // evaluated at the end; 0: all.
  std::int64_t validation_steps = 0;
  std::int64_t test_steps = 0;
  // Fault tolerance: backups in <dir>/backup (resumed from automatically),
  // the trained model saved as <dir>/model.safetensors.
  std::string checkpoint_dir;
  std::int64_t save_freq = 0;  // backups every N batches; 0: every epoch
  // Where to save the trained model (its suffix picks the format: .keras,
  // .safetensors); empty: nowhere (besides --checkpoint-dir's).
  std::string save;
  // none | bfloat16 (Keras's "mixed_bfloat16" policy for every layer).
  std::string mixed_precision = "none";
  // Resume with another --batch-size (cli/run_settings.h refuses it otherwise).
  bool allow_changed_batch_size = false;
  // Keras's callbacks people expect of a training command: TensorBoard
  // event files, a CSV of the epochs' logs, early stopping on val_loss
  // (restoring the best weights) after this many epochs without
  // improvement (0: none).
  std::string tensorboard;
  std::string csv_log;
  std::string step_log;  // --step-log: one line per step (step_log.h)
  int early_stopping = 0;
};

CLI::App* add_train_command(CLI::App& app, TrainArgs& args);
// --devices and --logical-gpus made the process's devices, then the
// strategy --strategy names over them (train, evaluate and predict alike).
void choose_devices(const TrainArgs& args);
distribute::Strategy make_strategy(const TrainArgs& args);
int run_train(const TrainArgs& args);

// The training data of a parameter-server job's workers: the registered
// dataset functions the coordinator's fit names (every serving process
// registers them; `data_dir` empty: Debian's dataset; `data`: --data's
// source, when the task was started by the same `lockstep train --data`).
void register_training_data(const std::string& data_dir, const DataArgs* data = nullptr);
// Serves this ps or worker task until the coordinator ends the job.
int serve_task(const distribute::ClusterResolver& resolver, const std::string& data_dir,
               const DataArgs* data = nullptr);
// Whether `source` is a folder of Fashion-MNIST's IDX files (the main job's
// data, --data-dir's).
bool is_idx_folder(const std::string& source);

}  // namespace lockstep::cli
