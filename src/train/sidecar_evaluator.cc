// SidecarEvaluator: polls a checkpoint directory and evaluates each new
// newest checkpoint in a model of its own.
#include "lockstep/train/sidecar_evaluator.h"

#include <filesystem>
#include <thread>

#include "lockstep/train/checkpoint.h"

namespace lockstep {

SidecarEvaluator::SidecarEvaluator(Model model, data::Dataset data, SidecarEvaluatorOptions o)
    : model_(std::move(model)), data_(std::move(data)), options_(std::move(o)) {
  LOCKSTEP_CHECK(model_.compiled(), "SidecarEvaluator: compile the model first (as the trainer's)");
  LOCKSTEP_CHECK(!options_.checkpoint_dir.empty(), "SidecarEvaluator: checkpoint_dir is empty");
  LOCKSTEP_CHECK(options_.max_evaluations >= 0 && options_.until_epoch >= 0,
                 "SidecarEvaluator: max_evaluations and until_epoch must be >= 0");
}

std::vector<SidecarEvaluator::Evaluation> SidecarEvaluator::start(
    const std::function<void(const Evaluation&)>& on_evaluation) {
  using Clock = std::chrono::steady_clock;
  // Never saves, so never prunes: the trainer's files are only read.
  CheckpointManager manager(Checkpoint(model_), {.directory = options_.checkpoint_dir,
                                                 .max_to_keep = 0,
                                                 .prefix = options_.prefix});
  std::vector<Evaluation> done;
  std::string last;
  auto last_new = Clock::now();
  // The done file's time when start() began (none: it did not exist).
  auto written = [&]() -> std::optional<std::filesystem::file_time_type> {
    std::error_code ec;
    if (options_.done_file.empty()) return std::nullopt;
    const auto t = std::filesystem::last_write_time(options_.done_file, ec);
    return ec ? std::nullopt : std::optional(t);
  };
  const auto done_before = written();
  for (;;) {
    const auto done_now = written();
    const bool ending = done_now && done_now != done_before;
    std::optional<std::string> latest;
    try {
      latest = manager.latest_checkpoint();
    } catch (const IOError&) {
      // The directory is not there yet (or went away): wait for it.
    }
    if (latest && *latest != last) {
      last = *latest;
      last_new = Clock::now();
      Evaluation e{.checkpoint = *latest, .epoch = 0, .iterations = 0, .logs = {}};
      try {
        const CheckpointInfo info = Checkpoint::read(*latest);
        Checkpoint(model_).restore(*latest);
        e.epoch = info.position ? info.position->epoch : 0;
        e.iterations = info.iterations;
      } catch (const IOError&) {
        continue;  // pruned or being replaced: the next poll sees the newer one
      }
      e.logs = model_.evaluate(data_, {.steps = options_.steps, .verbose = options_.verbose});
      if (on_evaluation) on_evaluation(e);
      done.push_back(e);
      if (options_.max_evaluations > 0 &&
          static_cast<int>(done.size()) >= options_.max_evaluations)
        break;
      if (options_.until_epoch > 0 && e.epoch >= options_.until_epoch) break;
    }
    if (ending || Clock::now() - last_new > options_.timeout) break;
    std::this_thread::sleep_for(options_.poll_interval);
  }
  return done;
}

}  // namespace lockstep
