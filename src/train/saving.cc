// Saving and loading models, by the file's suffix: `.keras` and
// `.weights.h5` / `.h5` are Keras's files (train/keras_files.cc);
// `.safetensors` is Lockstep's own (the architecture as Keras's JSON config
// in the metadata, the weights by name). This file also reads the model
// config of format version 1 (Lockstep's own layout before Keras's).
#include "train/saving.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/core/checked.h"
#include "lockstep/io/hdf5.h"
#include "lockstep/io/safetensors.h"
#include "lockstep/io/zip.h"
#include "lockstep/nn/functional.h"
#include "lockstep/train/model.h"
#include "train/keras_config.h"
#include "train/keras_files.h"
#include "train/model_internal.h"

namespace lockstep {
namespace {

using json = nlohmann::json;

// 2: the model config is Keras's (keras::model_config); 1: Lockstep's own.
constexpr int kFormatVersion = 2;
constexpr const char* kFormat = "lockstep.model";

// Lockstep's own config of format version 1 (read only).
LayerConfig config_from_json(const json& j, const std::string& where) {
  LOCKSTEP_CHECK_AS(IOError, j.is_object(), where, ": a layer config is not a JSON object");
  LayerConfig c;
  for (const auto& [k, v] : j.items()) {
    if (v.is_boolean()) {
      c.set(k, v.get<bool>());
    } else if (v.is_number_integer()) {
      c.set(k, v.get<std::int64_t>());
    } else if (v.is_number_float()) {
      c.set(k, v.get<double>());
    } else if (v.is_string()) {
      c.set(k, v.get<std::string>());
    } else if (v.is_array()) {
      std::vector<std::int64_t> values;
      for (const auto& e : v) {
        LOCKSTEP_CHECK_AS(IOError, e.is_number_integer(), where, ": config key '", k,
                          "' holds a non-integer list");
        values.push_back(e.get<std::int64_t>());
      }
      c.set(k, values);
    } else {
      detail::throw_error<IOError>(where, ": config key '", k, "' has an unsupported type");
    }
  }
  return c;
}

}  // namespace

namespace detail {

Model model_from_lockstep_v1_config_checked(const json& j, const std::string& path);

Model model_from_lockstep_v1_config(const json& j, const std::string& path) {
  try {
    return model_from_lockstep_v1_config_checked(j, path);
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(path, ": model_config: not one Lockstep reads (", e.what(), ")");
  } catch (const Error&) {  // a layer's or the graph's own check: it names no file
    detail::rethrow_naming(path + ": model_config");
  }
}

Model model_from_lockstep_v1_config_checked(const json& j, const std::string& path) {
  const std::string where = path + ": model_config";
  LOCKSTEP_CHECK_AS(IOError, j.is_object() && j.contains("class_name"), where,
                    ": missing class_name");
  const std::string cls = j["class_name"].get<std::string>();
  auto make_layer = [&](const json& lj) {
    LOCKSTEP_CHECK_AS(IOError, lj.contains("class_name") && lj.contains("config"), where,
                      ": a layer entry lacks class_name or config");
    return layer_from_config(lj["class_name"].get<std::string>(),
                             config_from_json(lj["config"], where));
  };
  if (cls == "Sequential") {
    std::vector<Layer> layers;
    for (const auto& lj : j.at("layers")) layers.push_back(make_layer(lj));
    Sequential seq({}, {.name = j.at("name").get<std::string>()});
    auto* impl = static_cast<SequentialImpl*>(seq.impl().get());
    impl->set_input_shape(Shape(j.at("input_shape").get<std::vector<std::int64_t>>()),
                          dtype_from_name(j.value("input_dtype", std::string("float32"))));
    for (const Layer& l : layers) seq.add(l);
    return seq;
  }
  LOCKSTEP_CHECK_AS(IOError, cls == "Functional", where, ": unknown model class '", cls, "'");
  std::map<std::string, std::vector<KerasTensor>> outputs_of;  // layer name -> output per call
  std::map<std::string, Layer> layers;
  std::vector<KerasTensor> inputs;
  for (const auto& in : j.at("inputs")) {
    const std::string name = in.at("name").get<std::string>();
    KerasTensor t = Input(Shape(in.at("shape").get<std::vector<std::int64_t>>()),
                          dtype_from_name(in.at("dtype").get<std::string>()), name);
    outputs_of[name].push_back(t);
    inputs.push_back(t);
  }
  for (const auto& lj : j.at("layers")) {
    Layer l = make_layer(lj);
    layers.emplace(l.name(), l);
  }
  auto resolve = [&](const json& r) {
    const std::string name = r.at(0).get<std::string>();
    const auto node = r.at(1).get<std::size_t>();
    auto it = outputs_of.find(name);
    LOCKSTEP_CHECK_AS(IOError, it != outputs_of.end() && node < it->second.size(), where,
                      ": a node refers to '", name, "'[", node,
                      "], which comes later or does not exist");
    return it->second[node];
  };
  for (const auto& node : j.at("nodes")) {
    const std::string name = node.at("layer").get<std::string>();
    auto it = layers.find(name);
    LOCKSTEP_CHECK_AS(IOError, it != layers.end(), where, ": a node calls unknown layer '", name,
                      "'");
    std::vector<KerasTensor> args;
    for (const auto& r : node.at("inputs")) args.push_back(resolve(r));
    outputs_of[name].push_back(it->second(args));
  }
  std::vector<KerasTensor> outputs;
  for (const auto& r : j.at("outputs")) outputs.push_back(resolve(r));
  return Model(inputs, outputs, j.at("name").get<std::string>());
}

std::vector<std::pair<std::string, Tensor>> named_weights(const LayerImpl& net) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const Variable& v : net.weights()) out.emplace_back(v.name(), v.value());
  return out;
}

void assign_weights(const LayerImpl& net, const io::TensorFile& file, const std::string& path) {
  const std::vector<Variable> vars = net.weights();
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : file.tensors) by_name[name] = &t;
  for (const Variable& v : vars) {
    auto it = by_name.find(v.name());
    LOCKSTEP_CHECK_AS(IOError, it != by_name.end(), path, ": the file has no weight '", v.name(),
                      "' (the model and the file differ in architecture)");
    LOCKSTEP_CHECK_AS(
        ShapeError, it->second->shape() == v.shape() && it->second->dtype() == v.dtype(), path,
        ": weight '", v.name(), "' has shape ", it->second->shape(), " (", it->second->dtype(),
        ") in the file and ", v.shape(), " (", v.dtype(), ") in the model");
  }
  LOCKSTEP_CHECK_AS(IOError, by_name.size() == vars.size(), path, ": the file holds ",
                    by_name.size(), " weights, the model ", vars.size());
  for (const Variable& v : vars) {
    Variable target = v;
    target.assign(*by_name.at(v.name()));
  }
}

}  // namespace detail

using detail::assign_weights;
using detail::model_from_lockstep_v1_config;
using detail::named_weights;

namespace {

enum class Format { kKeras, kWeightsH5, kLegacyH5, kSafetensors };

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The suffix decides, as in Keras.
Format format_of(const std::string& path, const char* op) {
  if (ends_with(path, ".keras")) return Format::kKeras;
  if (ends_with(path, ".weights.h5")) return Format::kWeightsH5;
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return Format::kLegacyH5;
  if (ends_with(path, ".safetensors")) return Format::kSafetensors;
  detail::throw_error<ValueError>(
      op, ": '", path,
      "' ends in no suffix Lockstep knows; use .keras (Keras's model file), .weights.h5 or .h5 "
      "(Keras's HDF5 weights; .h5 models are read only) or .safetensors (Lockstep's checkpoint)");
}

// A file whose bytes say it is of another kind than its suffix: named, so
// that "byte 0: the header claims 85966670672 bytes" never reaches a user.
void check_content(const std::string& path, Format format) {
  const std::uint64_t size = regular_file_size(path);
  std::ifstream in(path, std::ios::binary);
  std::string head(std::min<std::uint64_t>(size, 8), '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const bool zip = io::looks_like_zip(head), h5 = io::looks_like_h5(head);
  const char* is = zip  ? "a zip archive (a .keras file)"
                   : h5 ? "an HDF5 file (Keras's .h5)"
                        : nullptr;
  const bool fits = (format == Format::kKeras && zip) ||
                    ((format == Format::kWeightsH5 || format == Format::kLegacyH5) && h5) ||
                    (format == Format::kSafetensors && !zip && !h5);
  if (!fits && is != nullptr)
    detail::throw_error<IOError>(path, ": this file is ", is,
                                 "; its suffix says otherwise. Rename it to match its kind");
}

keras::CompiledForm compile_state_of(const Model::TrainState& s) {
  if (!s.compiled) return {};
  return {.optimizer = &s.optimizer,
          .losses = &s.losses,
          .loss_weights = &s.loss_weights,
          .metrics = &s.metric_specs,
          .output_metrics = &s.output_metric_specs,
          .named_outputs = &s.named_outputs,
          .num_outputs = std::max<std::size_t>(s.num_outputs, 1),
          .steps_per_execution = s.steps_per_execution};
}

}  // namespace

void Model::save(const std::string& path) const {
  LOCKSTEP_CHECK(defined(), "save: the model is undefined");
  detail::pull_from_parameter_servers(*this);
  switch (format_of(path, "save")) {
    case Format::kKeras:
      keras::save_keras_archive(*this, compile_state_of(state()), path);
      return;
    case Format::kWeightsH5:
      detail::throw_error<ValueError>("save: '", path,
                                      "' is a weights file name; use save_weights for it, or a "
                                      ".keras name to save the whole model");
    case Format::kLegacyH5:
      detail::throw_error<ValueError>(
          "save: '", path,
          "': Keras 2's .h5 model files are read, not written; save a .keras file (Keras 3 "
          "reads it) or save_weights to a .weights.h5");
    case Format::kSafetensors:
      break;
  }
  const json config = keras::model_config(*impl_);
  std::map<std::string, std::string> metadata = {{"format", kFormat},
                                                 {"format_version", std::to_string(kFormatVersion)},
                                                 {"model_config", config.dump()}};
  if (const keras::CompiledForm c = compile_state_of(state()); c.optimizer != nullptr) {
    metadata["compile_config"] = keras::compile_config(c).dump();
  }
  io::write_safetensors(path, named_weights(*impl_), metadata);
}

std::string Model::get_compile_config() const {
  const keras::CompiledForm c = compile_state_of(state());
  if (c.optimizer == nullptr) return "";
  return keras::compile_config(c).dump();
}

void Model::compile_from_config(const std::string& config) {
  LOCKSTEP_CHECK(defined(), "compile_from_config: the model is undefined");
  json parsed;
  try {
    parsed = json::parse(config);
  } catch (const json::exception& e) {
    detail::throw_error<ValueError>("compile_from_config: not JSON (", e.what(), ")");
  }
  keras::compile_from_config(*this, parsed, "compile_from_config");
}

std::string Model::to_json() const {
  LOCKSTEP_CHECK(defined(), "to_json: the model is undefined");
  return keras::model_config(*impl_).dump();
}

Model model_from_json(const std::string& text, const std::string& source) {
  check_json_nesting(text, source);
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(source, ": not valid JSON (", e.what(), ")");
  }
  if (config.is_object() && config.contains("config"))
    return keras::model_from_config(config, source);
  return model_from_lockstep_v1_config(config, source);
}

void Model::save_weights(const std::string& path) const {
  LOCKSTEP_CHECK(defined(), "save_weights: the model is undefined");
  detail::pull_from_parameter_servers(*this);
  switch (format_of(path, "save_weights")) {
    case Format::kWeightsH5:
      io::write_h5(path, keras::weights_tree(*impl_, compile_state_of(state()).optimizer));
      return;
    case Format::kLegacyH5:
      detail::throw_error<ValueError>("save_weights: '", path,
                                      "': the file name must end in .weights.h5, as in Keras 3");
    case Format::kKeras:
      detail::throw_error<ValueError>("save_weights: '", path,
                                      "' names a whole-model file; use save for it, or a "
                                      ".weights.h5 name for the weights alone");
    case Format::kSafetensors:
      break;
  }
  io::write_safetensors(path, named_weights(*impl_), {{"format", "lockstep.weights"}});
}

void Model::load_weights(const std::string& path, LoadWeightsOptions options) const {
  LOCKSTEP_CHECK(defined(), "load_weights: the model is undefined");
  const Format format = format_of(path, "load_weights");
  check_content(path, format);
  const Optimizer* optimizer = compile_state_of(state()).optimizer;
  if (format == Format::kSafetensors) {
    LOCKSTEP_CHECK(!options.by_name && !options.skip_mismatch, "load_weights: '", path,
                   "': by_name and skip_mismatch apply to Keras's .h5 files");
    assign_weights(*impl_, io::read_safetensors(path), path);
    return;
  }
  if (format == Format::kKeras) {
    LOCKSTEP_CHECK(!options.by_name, "load_weights: '", path,
                   "': by_name applies to legacy .h5 files only, as in Keras");
    for (const io::ZipMember& m : io::read_zip(path)) {
      if (m.name != "model.weights.h5") continue;
      keras::load_weights_tree(*impl_, io::read_h5_image(m.data, path + ": model.weights.h5"),
                               optimizer, path + ": model.weights.h5", options.skip_mismatch);
      return;
    }
    detail::throw_error<IOError>(path, ": the archive holds no model.weights.h5");
  }
  const io::H5Group file = io::read_h5(path);
  const io::H5Group* legacy = file.find_group("model_weights");
  if (legacy == nullptr &&
      (file.attributes.contains("layer_names") || file.attributes.contains("layer_names0")))
    legacy = &file;
  if (legacy != nullptr) {
    keras::load_legacy_weights(*impl_, *legacy, options.by_name, options.skip_mismatch, path);
    return;
  }
  LOCKSTEP_CHECK(!options.by_name, "load_weights: '", path,
                 "': by_name applies to legacy .h5 files only, as in Keras");
  keras::load_weights_tree(*impl_, file, optimizer, path, options.skip_mismatch);
}

Model load_model(const std::string& path) {
  const Format format = format_of(path, "load_model");
  check_content(path, format);
  if (format == Format::kKeras) return keras::load_keras_archive(path);
  if (format == Format::kWeightsH5 || format == Format::kLegacyH5)
    return keras::load_legacy_h5_model(path);
  const io::TensorFile file = io::read_safetensors(path);
  auto meta = [&](const std::string& key) {
    auto it = file.metadata.find(key);
    LOCKSTEP_CHECK_AS(IOError, it != file.metadata.end(), path,
                      ": not a saved Lockstep model (no '", key, "' in the metadata)");
    return it->second;
  };
  LOCKSTEP_CHECK_AS(IOError, meta("format") == kFormat, path, ": format is '", meta("format"),
                    "', expected '", kFormat, "'");
  const int version = std::stoi(meta("format_version"));
  LOCKSTEP_CHECK_AS(IOError, version <= kFormatVersion, path, ": format version ", version,
                    " is newer than this Lockstep reads (", kFormatVersion, "); upgrade Lockstep");
  check_json_nesting(meta("model_config"), path + ": model_config");
  json config;
  try {
    config = json::parse(meta("model_config"));
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(path, ": model_config is not valid JSON (", e.what(), ")");
  }
  Model model = version >= 2 ? keras::model_from_config(config, path + ": model_config")
                             : model_from_lockstep_v1_config(config, path);
  if (auto it = file.metadata.find("compile_config"); it != file.metadata.end()) {
    check_json_nesting(it->second, path + ": compile_config");
    json compile;
    try {
      compile = json::parse(it->second);
    } catch (const json::exception& e) {
      detail::throw_error<IOError>(path, ": compile_config is not valid JSON (", e.what(), ")");
    }
    keras::compile_from_config(model, compile, path);
  }
  assign_weights(*model.impl(), file, path);
  return model;
}

}  // namespace lockstep
