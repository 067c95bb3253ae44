// run.json in a --checkpoint-dir: the settings of the run whose backups the
// directory holds. A resume that changes the model, the batch size, the
// learning rate, the epochs, the training data, the seed or the steps per
// epoch would not continue that run (BackupAndRestore replays the input by
// position): it is refused with both values named.
#include "run_settings.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lockstep/core/checked.h"
#include "lockstep/core/error.h"
#include "lockstep/core/file.h"

namespace lockstep::cli {
namespace {

namespace fs = std::filesystem;

bool holds_a_backup(const fs::path& backup_dir) {
  std::error_code ec;
  if (!fs::is_directory(backup_dir, ec)) return false;
  for (const auto& entry : fs::directory_iterator(backup_dir, ec)) {
    if (entry.is_regular_file() && entry.path().filename().string()[0] != '.') return true;
  }
  return false;
}

nlohmann::json to_json(const RunSettings& s) {
  return {{"model", s.model},
          {"batch_size", s.batch_size},
          {"learning_rate", s.learning_rate},
          {"epochs", s.epochs},
          {"seed", s.seed},
          {"steps_per_epoch", s.steps_per_epoch},
          {"dataset", s.dataset}};
}

}  // namespace

void check_and_record_run_settings(const std::string& checkpoint_dir, const RunSettings& settings,
                                   const ResumeCheckOptions& options) {
  const fs::path dir(checkpoint_dir);
  const fs::path path = dir / "run.json";
  const nlohmann::json given = to_json(settings);
  if (holds_a_backup(dir / "backup") && fs::exists(path)) {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    check_json_nesting(text, path.string());
    nlohmann::json saved;
    try {
      saved = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      detail::throw_error<IOError>(path.string(), ": not the JSON this command writes (", e.what(),
                                   "); remove it to resume without the check");
    }
    struct Flag {
      const char* key;
      const char* flag;
    };
    for (const Flag f : {Flag{"model", "--model"}, Flag{"batch_size", "--batch-size"},
                         Flag{"learning_rate", "--learning-rate"}, Flag{"epochs", "--epochs"},
                         Flag{"dataset", "--data-dir"}, Flag{"seed", "--seed"},
                         Flag{"steps_per_epoch", "--steps-per-epoch"}}) {
      if (!saved.contains(f.key) || saved[f.key] == given[f.key]) continue;
      if (std::string(f.key) == "batch_size" && options.allow_changed_batch_size) continue;
      const std::string hint = std::string(f.key) == "batch_size"
                                   ? ", or --allow-changed-batch-size to resume with the new "
                                     "batch size (no longer an exact continuation)"
                                   : "";
      detail::throw_error<ValueError>(
          "--checkpoint-dir ", checkpoint_dir, " holds a backup of a run with ", f.flag, " ",
          saved[f.key].dump(), ", but this run has ", f.flag, " ", given[f.key].dump(),
          "; resuming would not continue that run. Run with the same ", f.flag,
          ", or use another --checkpoint-dir", hint);
    }
  }
  fs::create_directories(dir);
  atomic_write(path.string(), given.dump(2) + "\n");
}

}  // namespace lockstep::cli
