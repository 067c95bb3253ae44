// Checkpoint and CheckpointManager.
#include "lockstep/train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <future>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "lockstep/core/checked.h"
#include "lockstep/core/log.h"
#include "lockstep/nn/initializers.h"
#include "train/keras_config.h"
#include "train/model_internal.h"
#include "train/saving.h"

namespace lockstep {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kFormat = "lockstep.checkpoint";
constexpr const char* kModel = "model/";
constexpr const char* kOptimizer = "optimizer/";
constexpr const char* kInput = "input/";

json position_json(const TrainingSnapshot& p) {
  json metrics = json::array();
  for (const auto& [name, state] : p.metrics) metrics.push_back({name, state});
  return {{"epoch", p.epoch},
          {"step", p.step},
          {"metrics", metrics},
          {"random", {p.random_seed, p.random_stream}},
          {"input", nlohmann::json::parse(p.input.json)}};
}

TrainingSnapshot position_from_json(const json& j, const io::TensorFile& file) {
  TrainingSnapshot p;
  p.epoch = j.at("epoch").get<int>();
  p.step = j.at("step").get<std::int64_t>();
  for (const auto& m : j.at("metrics"))
    p.metrics.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::vector<double>>());
  p.random_seed = j.at("random").at(0).get<std::uint64_t>();
  p.random_stream = j.at("random").at(1).get<std::uint64_t>();
  p.input.json = j.at("input").dump();
  for (const auto& [name, t] : file.tensors) {
    if (name.starts_with(kInput))
      p.input.tensors[name.substr(std::char_traits<char>::length(kInput))] = t;
  }
  return p;
}

}  // namespace

Checkpoint::Checkpoint(Model model) : model_(std::move(model)) {
  LOCKSTEP_CHECK(model_.defined(), "Checkpoint: the model is undefined");
}

Checkpoint::Contents Checkpoint::contents(bool full_input_state, bool copy) const {
  Contents c;
  // Under ParameterServerStrategy the trained values live on the parameter
  // servers: the model's weights and the optimizer's state come from there.
  const distribute::StrategyExtended ext = model_.distribute_strategy().extended();
  detail::pull_from_parameter_servers(model_);
  // In host memory: the writers read the bytes (replicas on GPUs hold theirs
  // in device memory).
  auto take = [&](const Tensor& t) { return copy ? t.copy_to(host_device()) : t.cpu(); };
  const auto named = detail::named_weights(*model_.impl());
  for (std::size_t i = 0; i < named.size(); ++i)
    c.tensors.emplace_back(kModel + std::to_string(i) + "/" + named[i].first,
                           take(named[i].second));
  c.metadata = {{"format", kFormat}, {"format_version", std::to_string(kCheckpointFormatVersion)}};
  try {
    c.metadata["model_config"] = keras::model_config(*model_.impl()).dump();
  } catch (const Error&) {
    // A subclassed model has no config; its weights are still restorable.
  }
  if (model_.compiled() && model_.optimizer().defined()) {
    const Optimizer& opt = model_.optimizer();
    const std::vector<Variable> trainable = model_.impl()->trainable_weights();
    std::int64_t iterations = opt.iterations();
    if (ext.uses_parameter_servers()) {
      distribute::StrategyExtended::OptimizerState state = ext.read_optimizer_state(trainable);
      for (auto& [name, t] : state.slots) c.tensors.emplace_back(kOptimizer + name, t);
      iterations = state.iterations;
    } else {
      for (auto& [name, t] : opt->slot_values(trainable))
        c.tensors.emplace_back(kOptimizer + name, take(t));
    }
    c.metadata["optimizer"] = opt->config_json();
    c.metadata["iterations"] = std::to_string(iterations);
  }
  c.metadata["replicas"] = std::to_string(model_.distribute_strategy().num_replicas_in_sync());
  c.metadata["strategy"] = model_.distribute_strategy().name();
  if (auto position = model_.training_snapshot(full_input_state)) {
    c.metadata["training"] = position_json(*position).dump();
    for (const auto& [name, t] : position->input.tensors)
      c.tensors.emplace_back(kInput + name, take(t));
  }
  return c;
}

void Checkpoint::write(const std::string& path, const Contents& contents) {
  io::write_safetensors(path, contents.tensors, contents.metadata);
}

void Checkpoint::save(const std::string& path, bool full_input_state) const {
  write(path, contents(full_input_state, /*copy=*/false));
}

CheckpointInfo Checkpoint::read(const std::string& path) {
  CheckpointInfo info;
  info.path = path;
  info.file = io::read_safetensors(path);
  const auto& meta = info.file.metadata;
  auto get = [&](const std::string& key) -> const std::string* {
    auto it = meta.find(key);
    return it == meta.end() ? nullptr : &it->second;
  };
  const std::string* format = get("format");
  LOCKSTEP_CHECK_AS(IOError, format && *format == kFormat, path,
                    ": not a Lockstep checkpoint (metadata 'format' is ",
                    format ? "'" + *format + "'" : std::string("missing"), ", expected '", kFormat,
                    "')");
  LOCKSTEP_CHECK_AS(IOError, info.file.header_checked, path,
                    ": byte 8: the header has no Lockstep checksum (damaged, or not written by "
                    "Lockstep)");
  try {
    info.format_version = std::stoi(*get("format_version"));
    LOCKSTEP_CHECK_AS(IOError, info.format_version <= kCheckpointFormatVersion, path,
                      ": checkpoint format version ", info.format_version,
                      " is newer than this Lockstep reads (", kCheckpointFormatVersion,
                      "); upgrade Lockstep to restore it");
    if (const std::string* it = get("iterations")) info.iterations = std::stoll(*it);
    if (const std::string* r = get("replicas")) info.replicas = std::stoi(*r);
    if (const std::string* s = get("strategy")) info.strategy = *s;
    if (const std::string* t = get("training")) {
      check_json_nesting(*t, info.file.path + ": training");
      info.position = position_from_json(json::parse(*t), info.file);
    }
  } catch (const IOError&) {
    throw;
  } catch (const std::exception& e) {
    detail::throw_error<IOError>(path, ": bad checkpoint metadata (", e.what(), ")");
  }
  return info;
}

std::optional<TrainingSnapshot> Checkpoint::restore(const std::string& path) const {
  CheckpointInfo info = read(path);
  // Everything is checked before anything is assigned. Weights match by
  // position ("model/<i>/<name>"), as TensorFlow's object-based checkpoints:
  // automatic layer names differ between processes, the structure does not.
  std::vector<std::pair<std::string, Tensor>> saved;  // (name, value) by position
  std::map<std::string, Tensor> slots;
  for (const auto& [name, t] : info.file.tensors) {
    if (name.starts_with(kModel)) {
      const std::string rest = name.substr(std::char_traits<char>::length(kModel));
      const std::size_t slash = rest.find('/');
      std::size_t index = 0;
      try {
        index = std::stoul(rest.substr(0, slash));
      } catch (const std::exception&) {
        detail::throw_error<IOError>(path, ": tensor '", name, "' has no position");
      }
      if (saved.size() <= index) saved.resize(index + 1);
      saved[index] = {slash == std::string::npos ? rest : rest.substr(slash + 1), t};
    } else if (name.starts_with(kOptimizer)) {
      slots[name.substr(std::char_traits<char>::length(kOptimizer))] = t;
    }
  }
  const std::vector<Variable> vars = model_.impl()->weights();
  LOCKSTEP_CHECK(!vars.empty() || saved.empty(), path,
                 ": the model has no weights yet (build it first: call it once, or give "
                 "Sequential an input_shape)");
  for (std::size_t i = 0; i < std::min(vars.size(), saved.size()); ++i) {
    LOCKSTEP_CHECK_AS(IOError, saved[i].second.defined(), path, ": weight ", i, " is missing");
    LOCKSTEP_CHECK_AS(
        ShapeError,
        saved[i].second.shape() == vars[i].shape() && saved[i].second.dtype() == vars[i].dtype(),
        path, ": weight ", i, " is '", saved[i].first, "' of shape ", saved[i].second.shape(), " (",
        saved[i].second.dtype(), ") in the checkpoint but '", vars[i].name(), "' of shape ",
        vars[i].shape(), " (", vars[i].dtype(), ") in the model (another architecture?)");
  }
  LOCKSTEP_CHECK_AS(ValueError, saved.size() == vars.size(), path, ": the checkpoint holds ",
                    saved.size(), " weights, the model ", vars.size(), " (another architecture?)");
  auto assign_all = [&](const std::vector<std::pair<std::string, Tensor>>& values) {
    for (std::size_t i = 0; i < vars.size(); ++i) {
      Variable v = vars[i];
      v.assign(values[i].second);
    }
  };
  const bool has_optimizer = model_.compiled() && model_.optimizer().defined();
  LOCKSTEP_CHECK(slots.empty() || has_optimizer, path,
                 ": the checkpoint holds optimizer state but the model is not compiled");
  // restore_slot_values checks everything before it sets anything; if it
  // rejects the optimizer's state, the weights assigned just before are put back.
  std::vector<std::pair<std::string, Tensor>> before;
  for (const Variable& v : vars)
    before.emplace_back(v.name(), v.replica_value(0).copy_to(host_device()));
  assign_all(saved);
  if (has_optimizer) {
    const Optimizer& opt = model_.optimizer();
    try {
      opt->restore_slot_values(model_.impl()->trainable_weights(), slots);
    } catch (const Error&) {
      assign_all(before);
      detail::rethrow_with_prefix(path + ": ");
    }
    opt->set_iterations(info.iterations);
  }
  // ... and under ParameterServerStrategy they go on to the parameter servers.
  const distribute::StrategyExtended ext = model_.distribute_strategy().extended();
  if (ext.uses_parameter_servers()) {
    ext.push_variables(vars);
    if (has_optimizer)
      ext.write_optimizer_state(model_.impl()->trainable_weights(),
                                {{slots.begin(), slots.end()}, info.iterations});
  }
  if (info.position)
    detail::set_global_random_state(info.position->random_seed, info.position->random_stream);
  return info.position;
}

CheckpointManager::CheckpointManager(Checkpoint checkpoint, CheckpointManagerOptions options)
    : checkpoint_(std::move(checkpoint)), options_(std::move(options)) {
  LOCKSTEP_CHECK(!options_.directory.empty(), "CheckpointManager: the directory is empty");
  LOCKSTEP_CHECK(options_.max_to_keep >= 0 && options_.keep_every_n >= 0,
                 "CheckpointManager: max_to_keep and keep_every_n must be >= 0");
  std::error_code ec;
  fs::create_directories(options_.directory, ec);
  LOCKSTEP_CHECK_AS(IOError, !ec, options_.directory,
                    ": cannot create the directory: ", ec.message());
}

std::vector<std::pair<std::int64_t, std::string>> CheckpointManager::numbered() const {
  std::vector<std::pair<std::int64_t, std::string>> out;
  const std::string head = options_.prefix + "-", tail = ".safetensors";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= head.size() + tail.size() || name.rfind(head, 0) != 0 ||
        name.compare(name.size() - tail.size(), tail.size(), tail) != 0)
      continue;
    const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
        digits.size() > 18)
      continue;
    out.emplace_back(std::stoll(digits), entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string CheckpointManager::next_path() {
  auto existing = numbered();
  std::int64_t n =
      std::max<std::int64_t>(existing.empty() ? 0 : existing.back().first, last_number_);
  last_number_ = ++n;
  return (fs::path(options_.directory) /
          (options_.prefix + "-" + std::to_string(n) + ".safetensors"))
      .string();
}

void CheckpointManager::prune() {
  auto existing = numbered();
  if (options_.max_to_keep <= 0 || static_cast<int>(existing.size()) <= options_.max_to_keep)
    return;
  const std::size_t drop = existing.size() - static_cast<std::size_t>(options_.max_to_keep);
  for (std::size_t i = 0; i < drop; ++i) {
    const auto& [k, p] = existing[i];
    if (options_.keep_every_n > 0 && k % options_.keep_every_n == 0) continue;
    std::error_code ec;
    fs::remove(p, ec);
  }
}

std::string CheckpointManager::save(bool full_input_state) {
  wait();
  const std::string path = next_path();
  remove_stale_temporaries(path);
  checkpoint_.save(path, full_input_state);
  prune();
  return path;
}

std::string CheckpointManager::save_async(bool full_input_state) {
  wait();
  const std::string path = next_path();
  // The copy is what the training thread pays; the write, fsync and pruning
  // run beside training.
  auto contents =
      std::make_shared<Checkpoint::Contents>(checkpoint_.contents(full_input_state, /*copy=*/true));
  in_flight_ = std::async(std::launch::async, [this, path, contents] {
    remove_stale_temporaries(path);
    Checkpoint::write(path, *contents);
    prune();
  });
  return path;
}

void CheckpointManager::wait() {
  if (!in_flight_.valid()) return;
  auto done = std::move(in_flight_);
  done.get();  // rethrows the write's error
}

CheckpointManager::~CheckpointManager() {
  try {
    wait();
  } catch (const std::exception& e) {
    log(LogLevel::kError, detail::str_cat("CheckpointManager: a checkpoint written in the "
                                          "background failed: ",
                                          e.what(), "\n"));
  }
}

std::optional<std::string> CheckpointManager::latest_checkpoint() const {
  auto all = numbered();
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::vector<std::string> CheckpointManager::checkpoints() const {
  std::vector<std::string> out;
  for (auto& [n, p] : numbered()) out.push_back(p);
  return out;
}

std::optional<std::pair<std::string, std::optional<TrainingSnapshot>>>
CheckpointManager::restore_latest(std::ostream& log) {
  wait();
  auto all = numbered();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const char* then = std::next(it) != all.rend() ? "; falling back to the previous one\n" : "\n";
    try {
      auto position = checkpoint_.restore(it->second);
      return std::pair{it->second, std::move(position)};
    } catch (const IOError& e) {
      log << "CheckpointManager: skipping a damaged checkpoint: " << e.what() << then;
    } catch (const ValueError& e) {  // ShapeError too: a file of another model
      log << "CheckpointManager: skipping a checkpoint of another model: " << e.what() << then;
    }
  }
  if (!all.empty()) {
    log << "CheckpointManager: none of the " << all.size() << " checkpoints in "
        << options_.directory << " could be restored; starting from the beginning\n";
  }
  return std::nullopt;
}

void CheckpointManager::remove_all() {
  wait();
  for (auto& [n, p] : numbered()) {
    std::error_code ec;
    fs::remove(p, ec);
  }
}

}  // namespace lockstep
