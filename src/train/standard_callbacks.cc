// Keras's built-in callbacks.
#include "lockstep/train/standard_callbacks.h"

#include <unistd.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "lockstep/comm/communicator.h"
#include "lockstep/core/log.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/train/model.h"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// Under a multi-worker strategy only the chief writes checkpoints and logs
// (TensorFlow's rule); the other workers compute the same values and skip
// the files.
bool writes_files(const Model* m) { return m->distribute_strategy().is_chief(); }

// Python's "%.5f" (ModelCheckpoint's best value).
std::string fixed5(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.5f", v);
  return text;
}

// Python's str(float): the shortest digits that read back as the same
// double, in scientific notation when the decimal exponent is below -4 or
// at least 16 (1e-05, 1e+16), else positional (0.0001, 123.0) — not
// whichever is shorter, as std::to_chars picks.
std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string scientific(buf, end);  // "-1.5e-05"
  const std::size_t e = scientific.find('e');
  const int exponent = std::stoi(scientific.substr(e + 1));
  if (exponent < -4 || exponent >= 16) {
    char text[64];
    std::snprintf(text, sizeof text, "%se%+03d", scientific.substr(0, e).c_str(), exponent);
    return text;
  }
  end = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed).ptr;
  std::string s(buf, end);
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

bool maximizes(MonitorMode mode, const std::string& monitor) {
  if (mode != MonitorMode::kAuto) return mode == MonitorMode::kMax;
  for (const char* key : {"acc", "auc", "precision", "recall"}) {
    if (monitor.find(key) != std::string::npos) return true;
  }
  return false;
}

std::string available(const Logs& logs) {
  std::string out;
  for (const auto& [k, v] : logs) out += (out.empty() ? "" : ",") + k;
  return out;
}

// The worst value, which any first value improves on.
double worst(bool maximize) {
  return maximize ? -std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::infinity();
}

// The monitored value, or a warning naming what is there (Keras's wording).
std::optional<double> monitored(const Logs& logs, const std::string& monitor, const char* what) {
  auto v = logs.get(monitor);
  if (!v) {
    log(LogLevel::kWarning, detail::str_cat(what, " conditioned on metric `", monitor,
                                            "` which is not available. Available metrics are: ",
                                            available(logs), "\n"));
  }
  return v;
}

}  // namespace

SaveFreq::SaveFreq(const char* epoch) {
  LOCKSTEP_CHECK(epoch && std::string(epoch) == "epoch",
                 "save_freq: expected \"epoch\" or a number of batches, got \"", epoch ? epoch : "",
                 "\"");
}

SaveFreq::SaveFreq(std::int64_t batches) : batches_(batches) {
  LOCKSTEP_CHECK(batches > 0, "save_freq: expected \"epoch\" or a number of batches > 0, got ",
                 batches);
}

// ---- BackupAndRestore ----

BackupAndRestore::BackupAndRestore(Options options) : options_(std::move(options)) {
  LOCKSTEP_CHECK(!options_.backup_dir.empty(), "BackupAndRestore: backup_dir is empty");
  LOCKSTEP_CHECK(options_.max_to_keep >= 1, "BackupAndRestore: max_to_keep must be >= 1");
}

CheckpointManager& BackupAndRestore::manager() {
  if (!manager_) {
    manager_ = std::make_unique<CheckpointManager>(
        Checkpoint(*model()), CheckpointManagerOptions{.directory = options_.backup_dir,
                                                       .max_to_keep = options_.max_to_keep,
                                                       .prefix = "backup"});
  }
  return *manager_;
}

void BackupAndRestore::on_train_begin(const Logs&) {
  LogStream fallback(LogLevel::kInfo);
  std::ostream& log = options_.log ? *options_.log : fallback;
  manager_.reset();  // the model may differ from the last fit's
  resumed_from_.clear();
  std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>> restored;
  if (comm::Communicator* workers =
          model()->distribute_strategy().extended().cross_worker_communicator()) {
    restored = restore_from_chief(*workers, log);
  } else {
    restored = manager().restore_latest(log);
  }
  if (!restored) return;
  resumed_from_ = restored->first;
  if (!restored->second) {
    log << "BackupAndRestore: " << restored->first
        << " has no training position; resuming with its weights from the first epoch\n";
    return;
  }
  const TrainingSnapshot& p = *restored->second;
  log << "BackupAndRestore: resuming from " << restored->first << " at epoch " << p.epoch + 1
      << ", batch " << p.step << "\n";
  model()->resume_training_from(p);
}

// The chief restores its latest good backup and sends the file to every
// worker, which restores the same bytes: all resume at the same step, and
// the backup directory need not be shared between hosts.
std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>>
BackupAndRestore::restore_from_chief(comm::Communicator& workers, std::ostream& log) {
  std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>> restored;
  std::vector<char> bytes;
  std::uint64_t size = 0;
  if (workers.rank() == 0) {
    restored = manager().restore_latest(log);
    if (restored) {
      std::ifstream in(restored->first, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      LOCKSTEP_CHECK_AS(IOError, in.good() || in.eof(), restored->first, ": cannot read it back");
      size = bytes.size();
    }
  }
  workers.broadcast(&size, sizeof size, 0);
  if (size == 0) return restored;
  bytes.resize(size);
  workers.broadcast(bytes.data(), bytes.size(), 0);
  if (workers.rank() == 0) return restored;
  // Another worker: restore the chief's bytes from a private file.
  const fs::path tmp = fs::temp_directory_path() /
                       ("lockstep-restore-" + std::to_string(::getpid()) + ".safetensors");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    LOCKSTEP_CHECK_AS(IOError, out.good(), tmp.string(), ": cannot write the chief's backup");
  }
  try {
    restored.emplace("the chief's backup", Checkpoint(*model()).restore(tmp.string()));
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  fs::remove(tmp);
  return restored;
}

void BackupAndRestore::on_train_batch_end(std::int64_t, const Logs&) {
  if (options_.save_freq.per_epoch()) return;
  if (model()->optimizer().iterations() % options_.save_freq.batches() != 0) return;
  if (writes_files(model())) manager().save_async(options_.save_input_state);
  rejoin_waiting_workers();
}

void BackupAndRestore::on_epoch_end(int, const Logs&) {
  if (!options_.save_freq.per_epoch()) return;
  if (writes_files(model())) manager().save_async(options_.save_input_state);
  rejoin_waiting_workers();
}

// Elastic shrink: a job that went on without some of its workers takes
// them back at a backup — every worker stops once it is on disk, and the
// job, started again, re-forms with them and resumes from it.
void BackupAndRestore::rejoin_waiting_workers() {
  const std::string waiting = model()->distribute_strategy().extended().workers_waiting_to_rejoin();
  if (waiting.empty()) return;
  if (writes_files(model())) manager().wait();
  throw RejoinError(detail::str_cat("BackupAndRestore: ", waiting,
                                    " waits to rejoin the job; every worker stops after the "
                                    "backup of step ",
                                    model()->optimizer().iterations(),
                                    ", and the job started again re-forms with it from there"));
}

void BackupAndRestore::backup_now() {
  if (!writes_files(model())) return;
  manager().save_async(options_.save_input_state);
  manager().wait();
}

void BackupAndRestore::on_train_end(const Logs&) {
  if (!writes_files(model())) return;
  manager().wait();  // a failed background write is an error of this fit
  if (options_.delete_checkpoint) manager().remove_all();
}

// ---- ModelCheckpoint ----

ModelCheckpoint::ModelCheckpoint(std::string filepath, Options options)
    : ModelCheckpoint([&] {
        LOCKSTEP_CHECK(options.filepath.empty() || options.filepath == filepath,
                       "ModelCheckpoint: two paths, '", filepath, "' and options.filepath '",
                       options.filepath, "'");
        options.filepath = std::move(filepath);
        return std::move(options);
      }()) {}

ModelCheckpoint::ModelCheckpoint(Options options)
    : options_(std::move(options)),
      maximize_(maximizes(options_.mode, options_.monitor)),
      best_(options_.initial_value_threshold.value_or(worst(maximize_))) {
  LOCKSTEP_CHECK(!options_.filepath.empty(), "ModelCheckpoint: filepath is empty");
}

std::string ModelCheckpoint::format_path(const std::string& pattern, int epoch, std::int64_t batch,
                                         const Logs& logs) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < pattern.size() && pattern[i + 1] == '{') {  // "{{" is a literal brace
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = pattern.find('}', i);
    LOCKSTEP_CHECK(close != std::string::npos, "ModelCheckpoint: unclosed '{' in filepath '",
                   pattern, "'");
    const std::string field = pattern.substr(i + 1, close - i - 1);
    const std::size_t colon = field.find(':');
    const std::string key = field.substr(0, colon);
    const std::string spec = colon == std::string::npos ? "" : field.substr(colon + 1);
    bool integer = false;
    double value = 0;
    if (key == "epoch") {
      value = epoch + 1, integer = true;
    } else if (key == "batch" && batch >= 0) {
      value = static_cast<double>(batch + 1), integer = true;
    } else if (auto v = logs.get(key)) {
      value = *v;
    } else {
      detail::throw_error<ValueError>("ModelCheckpoint: the filepath names {", key,
                                      "}, which is not a log value; available: epoch",
                                      batch >= 0 ? ",batch" : "",
                                      logs.empty() ? "" : "," + available(logs));
    }
    // Python's format spec, the common subset: [0][width][.precision][d|f|e|g].
    char buf[128];
    const char type = spec.empty() ? (integer ? 'd' : 's') : spec.back();
    std::string flags = spec;
    if (!flags.empty() && std::isalpha(static_cast<unsigned char>(flags.back()))) flags.pop_back();
    for (char f : flags)
      LOCKSTEP_CHECK(std::isdigit(static_cast<unsigned char>(f)) || f == '.',
                     "ModelCheckpoint: unsupported format spec '", spec, "' in filepath '", pattern,
                     "'");
    if (type == 'd') {
      std::snprintf(buf, sizeof(buf), ("%" + flags + "lld").c_str(),
                    static_cast<long long>(std::llround(value)));
      out += buf;
    } else if (type == 'f' || type == 'e' || type == 'g') {
      std::snprintf(buf, sizeof(buf), ("%" + flags + type).c_str(), value);
      out += buf;
    } else if (type == 's') {
      out += integer ? std::to_string(std::llround(value)) : python_float(value);
    } else {
      detail::throw_error<ValueError>("ModelCheckpoint: unsupported format spec '", spec,
                                      "' in filepath '", pattern, "'");
    }
    i = close;
  }
  return out;
}

void ModelCheckpoint::save(int epoch, std::int64_t batch, const Logs& logs) {
  const std::string path = format_path(options_.filepath, epoch, batch, logs);
  if (options_.save_best_only) {
    const auto current = logs.get(options_.monitor);
    if (!current) {
      log(LogLevel::kWarning, detail::str_cat("Can save best model only with ", options_.monitor,
                                              " available, skipping.\n"));
      return;
    }
    const bool improved = maximize_ ? *current > best_ : *current < best_;
    if (!improved) {
      if (options_.verbose > 0) {
        log(LogLevel::kOutput, detail::str_cat("\nEpoch ", epoch + 1, ": ", options_.monitor,
                                               " did not improve from ", fixed5(best_), "\n"));
      }
      return;
    }
    if (options_.verbose > 0) {
      log(LogLevel::kOutput, detail::str_cat("\nEpoch ", epoch + 1, ": ", options_.monitor,
                                             " improved from ", fixed5(best_), " to ",
                                             fixed5(*current), ", saving model to ", path, "\n"));
    }
    best_ = *current;
  } else if (options_.verbose > 0) {
    log(LogLevel::kOutput,
        detail::str_cat("\nEpoch ", epoch + 1, ": saving model to ", path, "\n"));
  }
  if (!writes_files(model())) return;
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  if (options_.save_weights_only) {
    model()->save_weights(path);
  } else {
    model()->save(path);
  }
}

void ModelCheckpoint::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  if (options_.save_freq.per_epoch()) return;
  if (model()->optimizer().iterations() % options_.save_freq.batches() == 0)
    save(epoch_, batch, logs);
}

void ModelCheckpoint::on_epoch_end(int epoch, const Logs& logs) {
  if (options_.save_freq.per_epoch()) save(epoch, -1, logs);
}

// ---- EarlyStopping ----

EarlyStopping::EarlyStopping(Options options)
    : options_(std::move(options)), maximize_(maximizes(options_.mode, options_.monitor)) {
  LOCKSTEP_CHECK(options_.patience >= 0 && options_.min_delta >= 0,
                 "EarlyStopping: patience and min_delta must be >= 0");
}

void EarlyStopping::on_train_begin(const Logs&) {
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_ = worst(maximize_);
  best_weights_.clear();
}

void EarlyStopping::on_epoch_end(int epoch, const Logs& logs) {
  const auto current = monitored(logs, options_.monitor, "Early stopping");
  if (!current) return;
  if (epoch < options_.start_from_epoch) return;
  auto weights = [&] {
    std::vector<Tensor> w;
    for (const Variable& v : model()->impl()->weights())
      w.push_back(v.replica_value(0).copy_to(host_device()));
    return w;
  };
  auto improves = [&](double value, double reference) {
    return maximize_ ? value - options_.min_delta > reference
                     : value + options_.min_delta < reference;
  };
  if (options_.restore_best_weights && best_weights_.empty()) {
    best_weights_ = weights();
    best_epoch_ = epoch;
  }
  ++wait_;
  if (improves(*current, best_)) {
    best_ = *current;
    best_epoch_ = epoch;
    if (options_.restore_best_weights) best_weights_ = weights();
    if (!options_.baseline || improves(*current, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    model()->stop_training();
  }
}

void EarlyStopping::on_train_end(const Logs&) {
  if (stopped_epoch_ > 0 && options_.verbose > 0)
    log(LogLevel::kOutput, detail::str_cat("Epoch ", stopped_epoch_ + 1, ": early stopping\n"));
  if (options_.restore_best_weights && !best_weights_.empty()) {
    if (options_.verbose > 0)
      log(LogLevel::kOutput,
          detail::str_cat(
              "Restoring model weights from the end of the best epoch: ", best_epoch_ + 1, ".\n"));
    const auto vars = model()->impl()->weights();
    for (std::size_t i = 0; i < vars.size(); ++i) {
      Variable v = vars[i];
      v.assign(best_weights_[i]);
    }
  }
}

// ---- LearningRateScheduler ----

LearningRateScheduler::LearningRateScheduler(Schedule schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  LOCKSTEP_CHECK(static_cast<bool>(schedule_), "LearningRateScheduler: the schedule is empty");
}

void LearningRateScheduler::on_epoch_begin(int epoch, const Logs&) {
  const Optimizer& opt = model()->optimizer();
  const double lr = schedule_(epoch, opt.learning_rate());
  LOCKSTEP_CHECK(std::isfinite(lr), "LearningRateScheduler: the schedule returned ", lr,
                 " for epoch ", epoch);
  opt->set_learning_rate(lr);
  if (verbose_ > 0)
    log(LogLevel::kOutput,
        detail::str_cat("\nEpoch ", epoch + 1, ": LearningRateScheduler setting learning rate to ",
                        python_float(lr), ".\n"));
}

// ---- ReduceLROnPlateau ----

ReduceLROnPlateau::ReduceLROnPlateau(Options options)
    : options_(std::move(options)), maximize_(maximizes(options_.mode, options_.monitor)) {
  LOCKSTEP_CHECK(options_.factor < 1.0 && options_.factor >= 0,
                 "ReduceLROnPlateau does not support a factor >= 1.0, got ", options_.factor);
}

void ReduceLROnPlateau::on_train_begin(const Logs&) {
  best_ = worst(maximize_);
  wait_ = 0;
  cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_epoch_end(int epoch, const Logs& logs) {
  const auto current = monitored(logs, options_.monitor, "Learning rate reduction is");
  if (!current) return;
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  const bool better =
      maximize_ ? *current > best_ + options_.min_delta : *current < best_ - options_.min_delta;
  if (better) {
    best_ = *current;
    wait_ = 0;
  } else if (cooldown_counter_ <= 0 && ++wait_ >= options_.patience) {
    const Optimizer& opt = model()->optimizer();
    const double old_lr = opt.learning_rate();
    if (old_lr > static_cast<float>(options_.min_lr)) {
      const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      opt->set_learning_rate(new_lr);
      if (options_.verbose > 0)
        log(LogLevel::kOutput,
            detail::str_cat("\nEpoch ", epoch + 1, ": ReduceLROnPlateau reducing learning rate to ",
                            python_float(new_lr), ".\n"));
      cooldown_counter_ = options_.cooldown;
      wait_ = 0;
    }
  }
}

// ---- CSVLogger ----

CSVLogger::CSVLogger(std::string filename, char separator, bool append)
    : filename_(std::move(filename)), separator_(separator), append_(append) {}

void CSVLogger::on_train_begin(const Logs&) {
  keys_.clear();
  if (!writes_files(model())) return;
  std::error_code ec;
  const bool has_rows = append_ && fs::exists(filename_, ec) && fs::file_size(filename_, ec) > 0;
  out_.open(filename_, append_ ? std::ios::app : std::ios::trunc);
  LOCKSTEP_CHECK_AS(IOError, out_.good(), filename_, ": cannot open for writing");
  if (has_rows) keys_.push_back("");  // a header is there already: write none
}

void CSVLogger::on_epoch_end(int epoch, const Logs& logs) {
  if (!out_.is_open()) return;  // not the chief
  std::vector<std::pair<std::string, double>> sorted(logs.begin(), logs.end());
  std::sort(sorted.begin(), sorted.end());
  const bool header_written = !keys_.empty();
  if (keys_.empty() || keys_ == std::vector<std::string>{""}) {
    keys_.clear();
    for (const auto& [k, v] : sorted) keys_.push_back(k);
    if (!header_written) {
      out_ << "epoch";
      for (const auto& k : keys_) out_ << separator_ << k;
      out_ << "\r\n";  // Python's csv module (Keras) ends rows with CRLF
    }
  }
  out_ << epoch;
  for (const auto& k : keys_) {
    const auto v = logs.get(k);
    out_ << separator_ << (v ? python_float(*v) : "NA");
  }
  out_ << "\r\n";
  out_.flush();
  LOCKSTEP_CHECK_AS(IOError, out_.good(), filename_, ": write failed");
}

void CSVLogger::on_train_end(const Logs&) { out_.close(); }

// ---- TensorBoard ----

TensorBoard::TensorBoard(std::string log_dir, SaveFreq update_freq)
    : log_dir_(std::move(log_dir)), update_freq_(update_freq) {}

void TensorBoard::on_train_begin(const Logs&) {
  train_.reset();
  validation_.reset();
  if (!writes_files(model())) return;
  train_ = std::make_unique<io::EventFileWriter>((fs::path(log_dir_) / "train").string());
  validation_.reset();
}

void TensorBoard::on_train_batch_end(std::int64_t, const Logs& logs) {
  if (update_freq_.per_epoch() || !train_) return;
  const std::int64_t step = model()->optimizer().iterations();
  if (step % update_freq_.batches() != 0) return;
  for (const auto& [k, v] : logs) train_->add_scalar("batch_" + k, v, step);
  train_->flush();
}

void TensorBoard::on_epoch_end(int epoch, const Logs& logs) {
  if (!train_) return;
  bool any_validation = false;
  for (const auto& [k, v] : logs) {
    if (k.rfind("val_", 0) == 0) {
      if (!validation_) {
        validation_ =
            std::make_unique<io::EventFileWriter>((fs::path(log_dir_) / "validation").string());
      }
      validation_->add_scalar("epoch_" + k.substr(4), v, epoch);
      any_validation = true;
    } else {
      train_->add_scalar("epoch_" + k, v, epoch);
    }
  }
  train_->add_scalar("epoch_learning_rate", model()->optimizer().learning_rate(), epoch);
  train_->flush();
  if (any_validation) validation_->flush();
}

void TensorBoard::on_train_end(const Logs&) {
  if (train_) train_->flush();
  if (validation_) validation_->flush();
}

// ---- TerminateOnNaN ----

void TerminateOnNaN::on_train_batch_end(std::int64_t batch, const Logs& logs) {
  const auto loss = logs.get("loss");
  if (loss && !std::isfinite(*loss)) {
    log(LogLevel::kOutput,
        detail::str_cat("Batch ", batch, ": Invalid loss, terminating training\n"));
    model()->stop_training();
  }
}

}  // namespace lockstep
