// Saving and loading models: JSON config + weights in one safetensors file.
#include "train/saving.h"

#include <nlohmann/json.hpp>

#include "lockstep/io/safetensors.h"
#include "lockstep/nn/functional.h"
#include "lockstep/train/model.h"

namespace lockstep {
namespace {

using json = nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr const char* kFormat = "lockstep.model";

json config_to_json(const LayerConfig& c) {
  json out = json::object();
  for (const auto& [k, v] : c.entries()) {
    std::visit([&, key = k](const auto& value) { out[key] = value; }, v);
  }
  return out;
}

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

json layer_json(const LayerImpl& layer) {
  return {{"class_name", layer.class_name()}, {"config", config_to_json(layer.get_config())}};
}

}  // namespace

namespace detail {

json model_config(const LayerImpl& net) {
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    json j = {{"class_name", "Functional"}, {"name", f->name()}};
    json inputs = json::array(), layers = json::array(), nodes = json::array(),
         outputs = json::array();
    for (const KerasTensor& in : f->inputs()) {
      inputs.push_back({{"name", in.node()->input_name},
                        {"shape", in.sample_shape().to_vector()},
                        {"dtype", std::string(dtype_name(in.dtype()))}});
    }
    std::map<const KerasTensor::Node*, int> node_index;
    std::map<const LayerImpl*, int> calls;
    auto ref = [&](const KerasTensor& k) {
      const KerasTensor::Node* n = k.node().get();
      if (!n->layer) return json::array({n->input_name, 0, k.index()});
      return json::array({n->layer->name(), node_index.at(n), k.index()});
    };
    for (const auto& step : f->steps()) {
      const LayerImpl* layer = step.node->layer.get();
      if (calls[layer]++ == 0) layers.push_back(layer_json(*layer));
      node_index[step.node] = calls[layer] - 1;
      json in = json::array();
      for (const KerasTensor& k : step.node->inputs) in.push_back(ref(k));
      nodes.push_back({{"layer", layer->name()}, {"inputs", in}});
    }
    for (const KerasTensor& out : f->outputs()) outputs.push_back(ref(out));
    j["inputs"] = inputs;
    j["layers"] = layers;
    j["nodes"] = nodes;
    j["outputs"] = outputs;
    return j;
  }
  if (auto* s = dynamic_cast<const SequentialImpl*>(&net)) {
    LOCKSTEP_CHECK(
        s->input().defined(), "save: Sequential '", s->name(),
        "' has no input shape, so a loaded copy could not be built. Hint: create it with "
        "Sequential(layers, {.input_shape = ...})");
    json layers = json::array();
    for (const Layer& l : s->layers()) layers.push_back(layer_json(*l.impl()));
    return {{"class_name", "Sequential"},
            {"name", s->name()},
            {"input_shape", s->input().sample_shape().to_vector()},
            {"input_dtype", std::string(dtype_name(s->input().dtype()))},
            {"layers", layers}};
  }
  detail::throw_error<ValueError>(
      "save: model '", net.name(), "' is a subclassed model (", net.class_name(),
      "), which has no config. Hint: use save_weights / load_weights with a model you "
      "construct in code");
}

Model model_from_config(const json& j, const std::string& path) {
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
using detail::model_config;
using detail::model_from_config;
using detail::named_weights;

void Model::save(const std::string& path) const {
  LOCKSTEP_CHECK(defined(), "save: the model is undefined");
  const json config = model_config(*impl_);
  io::write_safetensors(path, named_weights(*impl_),
                        {{"format", kFormat},
                         {"format_version", std::to_string(kFormatVersion)},
                         {"model_config", config.dump()}});
}

std::string Model::to_json() const {
  LOCKSTEP_CHECK(defined(), "to_json: the model is undefined");
  return model_config(*impl_).dump();
}

Model model_from_json(const std::string& text, const std::string& source) {
  json config;
  try {
    config = json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(source, ": not valid JSON (", e.what(), ")");
  }
  return model_from_config(config, source);
}

void Model::save_weights(const std::string& path) const {
  LOCKSTEP_CHECK(defined(), "save_weights: the model is undefined");
  io::write_safetensors(path, named_weights(*impl_), {{"format", "lockstep.weights"}});
}

void Model::load_weights(const std::string& path) const {
  LOCKSTEP_CHECK(defined(), "load_weights: the model is undefined");
  assign_weights(*impl_, io::read_safetensors(path), path);
}

Model load_model(const std::string& path) {
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
  json config;
  try {
    config = json::parse(meta("model_config"));
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(path, ": model_config is not valid JSON (", e.what(), ")");
  }
  Model model = model_from_config(config, path);
  assign_weights(*model.impl(), file, path);
  return model;
}

}  // namespace lockstep
