// What a --checkpoint-dir run was started with, so that a resume with other
// settings is refused instead of silently continuing another run (see
// run_settings.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep::cli {

// The settings an exact resume depends on.
struct RunSettings {
  std::string model;  // --model, and for a JSON file the CRC32C of its text
  std::int64_t batch_size = 0;
  double learning_rate = 0;
  int epochs = 0;
  std::uint64_t seed = 0;
  std::int64_t steps_per_epoch = 0;
  std::string dataset;  // "<examples> examples, crc32c <hex>" of the training data
};

struct ResumeCheckOptions {
  bool allow_changed_batch_size = false;
};

// In `checkpoint_dir`: when it holds a backup, refuses (ValueError) any
// setting that differs from the run that wrote it, naming the saved and the
// given value — unless allowed — and otherwise (re)writes run.json with
// these settings, atomically. The chief alone calls it.
void check_and_record_run_settings(const std::string& checkpoint_dir, const RunSettings& settings,
                                   const ResumeCheckOptions& options);

}  // namespace lockstep::cli
