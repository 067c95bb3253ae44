// Estimator checkpoints: layout "model/<variable name>" for the model's
// variables, "optimizer/<index among trainable>/<slot>" for the optimizer's
// slots; metadata "format" ("lockstep.estimator"), "format_version",
// "global_step", "optimizer" (its class) and "iterations". Under
// ParameterServerStrategy the values come from, and go back to, the
// parameter servers.
#include "estimator/model_dir.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>

#include "lockstep/core/error.h"
#include "lockstep/distribute/strategy_extended.h"
#include "lockstep/io/safetensors.h"

namespace lockstep::estimator::detail {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "lockstep.estimator";
constexpr int kFormatVersion = 1;
constexpr const char* kModel = "model/";
constexpr const char* kOptimizer = "optimizer/";
const std::string kHead = "model.ckpt-";
const std::string kTail = ".safetensors";

const std::string& metadata(const io::TensorFile& file, const std::string& key) {
  auto it = file.metadata.find(key);
  LOCKSTEP_CHECK_AS(IOError, it != file.metadata.end(), file.path,
                    ": not an Estimator checkpoint (metadata '", key, "' is missing)");
  return it->second;
}

// A metadata entry that holds a non-negative integer (std::stoll's
// exceptions escaped as "stoll" with no file named: issue #41).
std::int64_t integer_metadata(const io::TensorFile& file, const std::string& key) {
  const std::string& text = metadata(file, key);
  std::int64_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  LOCKSTEP_CHECK_AS(IOError, ec == std::errc() && end == text.data() + text.size() && value >= 0,
                    file.path, ": its metadata '", key, "' is '", text,
                    "', not an integer from 0 to 2^63 - 1");
  return value;
}

io::TensorFile read_checked(const std::string& path) {
  io::TensorFile file = io::read_safetensors(path);
  const std::string& format = metadata(file, "format");
  LOCKSTEP_CHECK_AS(IOError, format == kFormat, path,
                    ": not an Estimator checkpoint (its format is '", format, "', expected '",
                    kFormat, "'). Hint: model_dir holds files of something else; use another one");
  LOCKSTEP_CHECK_AS(IOError, integer_metadata(file, "format_version") <= kFormatVersion, path,
                    ": written by a newer Lockstep (format version ",
                    metadata(file, "format_version"), "); upgrade to restore it");
  // Checked here, before anything is compared or restored: a damaged file
  // is an IOError, which a resume skips for the checkpoint before it.
  (void)integer_metadata(file, "global_step");
  if (file.metadata.contains("iterations")) (void)integer_metadata(file, "iterations");
  return file;
}

}  // namespace

std::string checkpoint_path(const std::string& model_dir, std::int64_t global_step) {
  return (fs::path(model_dir) / (kHead + std::to_string(global_step) + kTail)).string();
}

std::vector<std::pair<std::int64_t, std::string>> checkpoints_in(const std::string& model_dir) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(model_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= kHead.size() + kTail.size() || name.rfind(kHead, 0) != 0 ||
        name.compare(name.size() - kTail.size(), kTail.size(), kTail) != 0)
      continue;
    const std::string digits = name.substr(kHead.size(), name.size() - kHead.size() - kTail.size());
    if (digits.empty() || digits.size() > 18 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    out.emplace_back(std::stoll(digits), entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<std::string> newest_checkpoint(const std::string& model_dir) {
  auto all = checkpoints_in(model_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

std::string save_checkpoint(const std::string& model_dir, const ModelState& state,
                            std::int64_t global_step, int keep_max) {
  const distribute::StrategyExtended ext = state.strategy.extended();
  const bool remote = ext.uses_parameter_servers();
  if (remote) ext.pull_variables(state.variables);
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const Variable& v : state.variables)
    tensors.emplace_back(kModel + v.name(), v.replica_value(0));
  std::map<std::string, std::string> meta = {{"format", kFormat},
                                             {"format_version", std::to_string(kFormatVersion)},
                                             {"global_step", std::to_string(global_step)}};
  if (state.optimizer.defined()) {
    std::int64_t iterations = state.optimizer.iterations();
    if (remote) {
      distribute::StrategyExtended::OptimizerState held = ext.read_optimizer_state(state.trainable);
      for (auto& [name, t] : held.slots) tensors.emplace_back(kOptimizer + name, t);
      iterations = held.iterations;
    } else {
      for (auto& [name, t] : state.optimizer->slot_values(state.trainable))
        tensors.emplace_back(kOptimizer + name, t);
    }
    meta["optimizer"] = state.optimizer->class_name();
    meta["iterations"] = std::to_string(iterations);
  }
  const std::string path = checkpoint_path(model_dir, global_step);
  io::write_safetensors(path, tensors, meta);
  if (keep_max > 0) {
    auto all = checkpoints_in(model_dir);
    for (std::size_t i = 0; i + static_cast<std::size_t>(keep_max) < all.size(); ++i) {
      std::error_code ec;
      fs::remove(all[i].second, ec);
    }
  }
  return path;
}

CheckpointValues read_checkpoint(const std::string& path) {
  const io::TensorFile file = read_checked(path);
  CheckpointValues out;
  out.global_step = integer_metadata(file, "global_step");
  for (const auto& [name, t] : file.tensors) {
    if (name.starts_with(kModel)) out.variables.emplace_back(name.substr(6), t);
  }
  return out;
}

std::int64_t restore_checkpoint(const std::string& path, const ModelState& state) {
  const distribute::StrategyExtended ext = state.strategy.extended();
  const bool remote = ext.uses_parameter_servers();
  const io::TensorFile file = read_checked(path);
  std::map<std::string, Tensor> saved, slots;
  for (const auto& [name, t] : file.tensors) {
    if (name.starts_with(kModel)) saved.emplace(name.substr(6), t);
    if (name.starts_with(kOptimizer)) slots.emplace(name.substr(10), t);
  }
  auto listing = [&] {
    std::string s;
    for (const auto& [name, t] : saved) s += (s.empty() ? "'" : ", '") + name + "'";
    return s.empty() ? std::string("none") : s;
  };
  const char* hint =
      ". Hint: model_dir holds another model's checkpoints; give this model its own model_dir "
      "(or delete the old one)";
  for (const Variable& v : state.variables) {
    auto it = saved.find(v.name());
    LOCKSTEP_CHECK(it != saved.end(), path, ": the model's variable '", v.name(),
                   "' is not in this checkpoint (it holds ", listing(), ")", hint);
    LOCKSTEP_CHECK_AS(
        ShapeError, it->second.shape() == v.shape() && it->second.dtype() == v.dtype(), path,
        ": variable '", v.name(), "' is ", it->second.dtype(), " ", it->second.shape(),
        " in the checkpoint but ", v.dtype(), " ", v.shape(), " in the model", hint);
  }
  LOCKSTEP_CHECK(saved.size() == state.variables.size(), path, ": the checkpoint holds ",
                 saved.size(), " variables (", listing(), "), the model ", state.variables.size(),
                 hint);
  const std::int64_t step = integer_metadata(file, "global_step");
  const std::int64_t iterations =
      file.metadata.contains("iterations") ? integer_metadata(file, "iterations") : 0;
  if (state.optimizer.defined() && !slots.empty()) {
    const std::string& saved_class = metadata(file, "optimizer");
    LOCKSTEP_CHECK(saved_class == state.optimizer->class_name(), path,
                   ": the checkpoint's optimizer is ", saved_class, ", the model's ",
                   state.optimizer->class_name(), hint);
    // Checks every slot before it sets any (on parameter servers the slots
    // are checked there, when written below).
    if (!remote) state.optimizer->restore_slot_values(state.trainable, slots);
  }
  for (const Variable& v : state.variables) {
    Variable target = v;
    target.assign(saved.at(v.name()));
  }
  if (state.optimizer.defined()) state.optimizer->set_iterations(iterations);
  if (remote) {
    ext.push_variables(state.variables);
    if (state.optimizer.defined())
      ext.write_optimizer_state(state.trainable, {{slots.begin(), slots.end()}, iterations});
  }
  return step;
}

}  // namespace lockstep::estimator::detail
