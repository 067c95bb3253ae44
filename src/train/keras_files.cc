// Keras's files: `.keras` archives, `.weights.h5` in Keras 3's layout, and
// Keras 2's legacy `.h5`, read and written through io's HDF5 and zip
// adapters. Weights are matched by path, as Keras matches them: the
// snake_case class name of each layer plus a counter, in the order of the
// model's layers (not by layer name, which differs between processes).
#include "train/keras_files.h"

#include <chrono>
#include <ctime>
#include <iostream>
#include <set>

#include "lockstep/core/checked.h"
#include "lockstep/core/file.h"
#include "lockstep/core/log.h"
#include "lockstep/io/zip.h"
#include "lockstep/nn/functional.h"
#include "train/keras_config.h"

namespace lockstep::keras {
namespace {

// The Keras release whose layout these files follow, written into
// metadata.json as Keras writes its own version (the fixtures in
// tests/interop/keras_fixtures come from it).
constexpr const char* kKerasVersion = "3.15.1";

// One `vars` group: where it is, whose it is, and the variables it holds.
struct VarsGroup {
  std::string path;  // "layers/dense_1/vars"
  std::string layer_name;
  std::vector<Variable> vars;
};

bool is_network(const LayerImpl& l) {
  return dynamic_cast<const FunctionalImpl*>(&l) != nullptr ||
         dynamic_cast<const SequentialImpl*>(&l) != nullptr;
}

// saving_lib's walk: the object's own `vars` (a recurrent layer's are its
// cell's, `cell/vars`), then each layer of a network under layers/<unique
// snake_case class name>/ and each sublayer of a layer under its attribute,
// each object once.
void walk(const LayerImpl& obj, const std::string& prefix, std::vector<VarsGroup>& out,
          std::set<const LayerImpl*>& visited) {
  visited.insert(&obj);
  const std::string own = obj.keras_vars_path();
  if (own != "vars") out.push_back({prefix + "vars", obj.name(), {}});  // Keras's, empty
  out.push_back({prefix + own, obj.name(), obj.own_variables()});
  std::map<std::string, int> used;
  const std::vector<const LayerImpl*> children = keras_layers(obj);
  for (std::size_t i = 0; i < children.size(); ++i) {
    const LayerImpl* l = children[i];
    // A layer's sublayers sit under their attribute's name (a Bidirectional's
    // forward_layer), a network's under layers/<snake_case class>.
    if (!is_network(obj) && !obj.sublayer_attribute(i).empty()) {
      if (!visited.contains(l)) walk(*l, prefix + obj.sublayer_attribute(i) + "/", out, visited);
      continue;
    }
    std::string name = to_snake_case(l->class_name());
    if (auto it = used.find(name); it != used.end()) {
      name += "_" + std::to_string(++it->second);
    } else {
      used[name] = 0;
    }
    if (visited.contains(l)) continue;
    walk(*l, prefix + "layers/" + name + "/", out, visited);
  }
}

std::vector<VarsGroup> layout(const LayerImpl& net) {
  std::vector<VarsGroup> out;
  std::set<const LayerImpl*> visited;
  walk(net, "", out, visited);
  return out;
}

std::string snake_optimizer_name(const Optimizer& o) { return to_snake_case(o->class_name()); }

// iterations, learning_rate, step_counter, dynamic_scale (optim/keras_state.cc).
constexpr std::size_t kLossScaleOptimizerOwnVariables = 4;

// Datasets "0".."n-1" of a vars group, in order; n is what the group holds.
std::vector<const Tensor*> numbered(const io::H5Group& g) {
  std::vector<const Tensor*> out;
  for (std::size_t i = 0;; ++i) {
    auto it = g.datasets.find(std::to_string(i));
    if (it == g.datasets.end()) break;
    out.push_back(&it->second);
  }
  return out;
}

// Every `vars` group of the tree that holds datasets, by path.
void groups_with_data(const io::H5Group& g, const std::string& path,
                      std::vector<std::string>& out) {
  for (const auto& [name, child] : g.groups) {
    const std::string p = path.empty() ? name : path + "/" + name;
    if (name == "vars" && !child.datasets.empty()) out.push_back(p);
    groups_with_data(child, p, out);
  }
}

struct Assignment {
  Variable target;
  Tensor value;
};

void check_fits(const Variable& v, const Tensor& t, const std::string& source,
                const std::string& where) {
  LOCKSTEP_CHECK_AS(ShapeError, t.shape() == v.shape(), source, ": ", where, " has shape ",
                    t.shape(), "; the model's '", v.name(), "' has shape ", v.shape());
  LOCKSTEP_CHECK(is_floating(t.dtype()) == is_floating(v.dtype()), source, ": ", where, " is ",
                 t.dtype(), "; the model's '", v.name(), "' is ", v.dtype());
}

void apply(std::vector<Assignment>& assignments) {
  for (Assignment& a : assignments) {
    a.target.assign(a.value.dtype() == a.target.dtype() ? a.value : a.value.to(a.target.dtype()));
  }
}

std::string date_saved() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d@%H:%M:%S", &tm);
  return buf;
}

json parse_member(const std::string& text, const std::string& where) {
  check_json_nesting(text, where);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error<IOError>(where, ": not valid JSON (", e.what(), ")");
  }
}

// A string-list attribute, or Keras 2's chunks of it (name0, name1, ...),
// which it writes when one attribute would pass HDF5's 64 KiB limit.
std::vector<std::string> string_list(const io::H5Group& g, const std::string& name) {
  auto read = [](const io::H5Attribute& a) {
    if (const auto* l = std::get_if<std::vector<std::string>>(&a)) return *l;
    if (const auto* s = std::get_if<std::string>(&a)) return std::vector<std::string>{*s};
    return std::vector<std::string>{};  // h5py writes an empty list as a float array
  };
  if (auto it = g.attributes.find(name); it != g.attributes.end()) return read(it->second);
  std::vector<std::string> out;
  for (int chunk = 0;; ++chunk) {
    auto it = g.attributes.find(name + std::to_string(chunk));
    if (it == g.attributes.end()) break;
    const auto part = read(it->second);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace

io::H5Group weights_tree(const LayerImpl& net, const Optimizer* optimizer) {
  io::H5Group root;
  for (const VarsGroup& g : layout(net)) {
    io::H5Group& vars = root.group(g.path);
    vars.attributes["name"] = g.layer_name;
    for (std::size_t i = 0; i < g.vars.size(); ++i)
      vars.datasets[std::to_string(i)] = g.vars[i].value().copy_to(host_device());
  }
  if (optimizer != nullptr && optimizer->defined()) {
    io::H5Group& vars = root.group("optimizer/vars");
    const bool scaled = (*optimizer)->loss_scaling().has_value();
    vars.attributes["name"] = scaled ? "loss_scale_optimizer" : snake_optimizer_name(*optimizer);
    const std::vector<Tensor> values =
        (*optimizer)->keras_variables(keras_trainable_variables(net));
    for (std::size_t i = 0; i < values.size(); ++i)
      vars.datasets[std::to_string(i)] = values[i].cpu();
    if (scaled) {
      // Keras 3 writes a LossScaleOptimizer's variables (its own four, then
      // the inner optimizer's), and the inner optimizer's again on their own.
      io::H5Group& inner = root.group("optimizer/inner_optimizer/vars");
      inner.attributes["name"] = snake_optimizer_name(*optimizer);
      for (std::size_t i = kLossScaleOptimizerOwnVariables; i < values.size(); ++i)
        inner.datasets[std::to_string(i - kLossScaleOptimizerOwnVariables)] = values[i].cpu();
    }
  }
  return root;
}

void load_weights_tree(const LayerImpl& net, const io::H5Group& tree, const Optimizer* optimizer,
                       const std::string& source, bool skip_mismatch) {
  std::vector<Assignment> assignments;
  std::set<std::string> claimed;
  for (const VarsGroup& g : layout(net)) {
    if (g.vars.empty()) continue;
    const io::H5Group* group = tree.find_group(g.path);
    LOCKSTEP_CHECK_AS(IOError, group != nullptr, source, ": no group ", g.path, " for layer '",
                      g.layer_name, "' (", g.vars.size(),
                      " weights); the file holds another architecture");
    claimed.insert(g.path);
    const std::vector<const Tensor*> data = numbered(*group);
    try {
      LOCKSTEP_CHECK_AS(IOError, data.size() == g.vars.size(), source, ": ", g.path, " holds ",
                        data.size(), " weights; layer '", g.layer_name, "' has ", g.vars.size());
      for (std::size_t i = 0; i < data.size(); ++i)
        check_fits(g.vars[i], *data[i], source, g.path + "/" + std::to_string(i));
    } catch (const Error& e) {
      if (!skip_mismatch) throw;
      log(LogLevel::kWarning,
          detail::str_cat("load_weights: skipping layer '", g.layer_name, "': ", e.what(), "\n"));
      continue;
    }
    for (std::size_t i = 0; i < data.size(); ++i) assignments.push_back({g.vars[i], *data[i]});
  }
  std::vector<std::string> present;
  groups_with_data(tree, "", present);
  for (const std::string& p : present) {
    // A LossScaleOptimizer's inner variables are in optimizer/vars too.
    if (p == "optimizer/vars" || p == "optimizer/inner_optimizer/vars") continue;
    LOCKSTEP_CHECK_AS(IOError, claimed.contains(p), source, ": ", p,
                      " holds weights the model has no place for; the file holds another "
                      "architecture");
  }
  const io::H5Group* opt = tree.find_group("optimizer/vars");
  if (optimizer != nullptr && optimizer->defined() && opt != nullptr && !opt->datasets.empty()) {
    // Keras 3's compile wraps a mixed_float16 model's optimizer in a
    // LossScaleOptimizer and its compile config names the inner one only;
    // the variables say it was wrapped. Wrapped here too (the same state),
    // whatever the global policy: Keras itself, loading such a file under
    // float32, drops the optimizer's variables with a warning.
    if (!(*optimizer)->loss_scaling() &&
        tree.find_group("optimizer/inner_optimizer/vars") != nullptr)
      const optimizers::LossScaleOptimizer wrapped(*optimizer);
    std::vector<Tensor> values;
    for (const Tensor* t : numbered(*opt)) values.push_back(*t);
    (*optimizer)
        ->set_keras_variables(keras_trainable_variables(net), values, source + ": optimizer/vars");
  }
  apply(assignments);
}

void load_legacy_weights(const LayerImpl& net, const io::H5Group& file, bool by_name,
                         bool skip_mismatch, const std::string& source) {
  struct FileLayer {
    std::string name;
    std::vector<std::pair<std::string, const Tensor*>> weights;
  };
  std::vector<FileLayer> in_file;
  for (const std::string& name : string_list(file, "layer_names")) {
    auto g = file.groups.find(name);
    LOCKSTEP_CHECK_AS(IOError, g != file.groups.end(), source, ": layer_names lists '", name,
                      "' but there is no such group");
    FileLayer fl{name, {}};
    for (const std::string& w : string_list(g->second, "weight_names")) {
      const Tensor* t = g->second.find_dataset(w);
      LOCKSTEP_CHECK_AS(IOError, t != nullptr, source, ": ", name, "/", w,
                        " is listed in weight_names but missing");
      fl.weights.emplace_back(name + "/" + w, t);
    }
    if (!fl.weights.empty()) in_file.push_back(std::move(fl));
  }
  struct ModelLayer {
    std::string name;
    std::vector<Variable> weights;
  };
  std::vector<ModelLayer> in_model;
  for (const LayerImpl* l : keras_layers(net)) {
    std::vector<Variable> w = is_network(*l) ? l->trainable_weights() : l->own_variables();
    if (is_network(*l)) {
      for (const Variable& v : l->non_trainable_weights()) w.push_back(v);
    } else if (w.empty()) {
      // A wrapper (Bidirectional, TimeDistributed) keeps its layers' weights
      // in its own group, in their order (forward_gru/gru_cell/kernel, ...).
      w = l->weights();
    }
    if (!w.empty()) in_model.push_back({l->name(), w});
  }
  std::vector<Assignment> assignments;
  auto match = [&](const FileLayer& f, const ModelLayer& m) {
    std::string why;
    if (f.weights.size() != m.weights.size()) {
      why = "holds " + std::to_string(f.weights.size()) + " weights; layer '" + m.name + "' has " +
            std::to_string(m.weights.size());
    }
    for (std::size_t i = 0; why.empty() && i < f.weights.size(); ++i) {
      if (f.weights[i].second->shape() != m.weights[i].shape()) {
        std::ostringstream s;
        s << f.weights[i].first << " has shape " << f.weights[i].second->shape()
          << "; the model's '" << m.weights[i].name() << "' has shape " << m.weights[i].shape();
        why = s.str();
      }
    }
    if (!why.empty()) {
      if (skip_mismatch) {
        log(LogLevel::kWarning, detail::str_cat("load_weights: ", source, ": skipping layer '",
                                                f.name, "': ", why, "\n"));
        return;
      }
      detail::throw_error<ValueError>(source, ": layer '", f.name, "' ", why);
    }
    for (std::size_t i = 0; i < f.weights.size(); ++i)
      assignments.push_back({m.weights[i], *f.weights[i].second});
  };
  if (by_name) {
    for (const FileLayer& f : in_file) {
      for (const ModelLayer& m : in_model) {
        if (m.name == f.name) match(f, m);
      }
    }
  } else {
    LOCKSTEP_CHECK(in_file.size() == in_model.size(), source, ": the file has ", in_file.size(),
                   " layers with weights, the model ", in_model.size(),
                   " (load by position needs the same architecture; by_name matches layer names)");
    for (std::size_t k = 0; k < in_file.size(); ++k) match(in_file[k], in_model[k]);
  }
  apply(assignments);
}

void save_keras_archive(const Model& model, const CompiledForm& compiled, const std::string& path) {
  json config = model_config(*model.impl());
  if (compiled.optimizer != nullptr) {
    config["compile_config"] = compile_config(compiled);
  }
  const json metadata = {{"keras_version", kKerasVersion}, {"date_saved", date_saved()}};
  const io::H5Group tree = weights_tree(*model.impl(), compiled.optimizer);
  const std::vector<io::ZipMember> members = {{"metadata.json", metadata.dump()},
                                              {"config.json", config.dump()},
                                              {"model.weights.h5", io::h5_file_image(tree)}};
  atomic_write(path, io::zip_archive_image(members, std::time(nullptr)));
}

Model load_keras_archive(const std::string& path) {
  const std::vector<io::ZipMember> members = io::read_zip(path);
  const io::ZipMember* config_member = nullptr;
  const io::ZipMember* weights_member = nullptr;
  std::string names;
  for (const io::ZipMember& m : members) {
    if (m.name == "config.json") config_member = &m;
    if (m.name == "model.weights.h5") weights_member = &m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  LOCKSTEP_CHECK_AS(IOError, config_member != nullptr && weights_member != nullptr, path,
                    ": a .keras archive holds config.json and model.weights.h5; this one holds ",
                    names.empty() ? "nothing" : names);
  const json config = parse_member(config_member->data, path + ": config.json");
  Model model = model_from_config(config, path + ": config.json");
  const io::H5Group tree = io::read_h5_image(weights_member->data, path + ": model.weights.h5");
  const json compile = config.value("compile_config", json());
  if (compile.is_object() && !compile.empty()) {
    compile_from_config(model, compile, path + ": config.json");
    const Optimizer& optimizer = model.optimizer();
    load_weights_tree(*model.impl(), tree, &optimizer, path + ": model.weights.h5");
  } else {
    load_weights_tree(*model.impl(), tree, nullptr, path + ": model.weights.h5");
  }
  return model;
}

Model load_legacy_h5_model(const std::string& path) {
  const io::H5Group file = io::read_h5(path);
  const std::string* config_text = file.string_attribute("model_config");
  LOCKSTEP_CHECK_AS(IOError, config_text != nullptr, path,
                    ": no model_config attribute; this .h5 holds weights only. Build the model "
                    "and call load_weights");
  const io::H5Group* weights = file.find_group("model_weights");
  LOCKSTEP_CHECK_AS(IOError, weights != nullptr, path, ": no model_weights group");
  Model model = model_from_config(parse_member(*config_text, path + ": model_config"),
                                  path + ": model_config");
  if (const std::string* training = file.string_attribute("training_config")) {
    json t = parse_member(*training, path + ": training_config");
    if (t.contains("optimizer_config") && !t.contains("optimizer"))
      t["optimizer"] = t["optimizer_config"];
    compile_from_config(model, t, path + ": training_config");
  }
  load_legacy_weights(*model.impl(), *weights, false, false, path);
  // The optimizer's state: Keras 3's legacy saver lists it in Keras 3's
  // order; Keras 2's order differs, so its state is left fresh (and said).
  const io::H5Group* opt = file.find_group("optimizer_weights");
  if (opt != nullptr && model.compiled()) {
    const std::string* version = file.string_attribute("keras_version");
    const auto names = string_list(*opt, "weight_names");
    if (version != nullptr && version->rfind("3.", 0) == 0) {
      std::vector<Tensor> values;
      for (const std::string& n : names) {
        const Tensor* t = opt->find_dataset(n);
        LOCKSTEP_CHECK_AS(IOError, t != nullptr, path, ": optimizer_weights/", n, " is missing");
        values.push_back(*t);
      }
      model.optimizer()->set_keras_variables(keras_trainable_variables(*model.impl()), values,
                                             path + ": optimizer_weights");
    } else if (!names.empty()) {
      log(LogLevel::kWarning,
          detail::str_cat("load_model: ", path, ": the optimizer's state was saved by Keras ",
                          version ? *version : "2",
                          ", whose layout Lockstep does not read; the optimizer starts fresh\n"));
    }
  }
  return model;
}

}  // namespace lockstep::keras
