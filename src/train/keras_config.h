// Internal to train/: models, layers, optimizers and losses as Keras 3's
// serialized configs (the `config.json` of a `.keras` file, model.to_json()),
// and back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/nn/functional.h"
#include "lockstep/train/model.h"

namespace lockstep::keras {

using json = nlohmann::json;

// Keras's naming.to_snake_case: "BatchNormalization" -> "batch_normalization",
// "Conv2D" -> "conv2d", "RMSprop" -> "rm_sprop".
std::string to_snake_case(const std::string& class_name);

// Keras's model.layers of a functional model: its InputLayers and layers
// ordered as Keras's map_graph orders them (by depth from the outputs,
// deepest first; ties in the order a depth-first walk from the outputs
// meets them). Weight paths and optimizer variables follow this order.
std::vector<const LayerImpl*> keras_layer_order(const FunctionalImpl& f);
// Keras's model.layers of any network: the above for a functional model, a
// Sequential's layers, another layer's sublayers.
std::vector<const LayerImpl*> keras_layers(const LayerImpl& net);
// Keras's model.trainable_variables: each layer's in keras_layers order,
// nested networks expanded in place, each variable once. The same set as
// net.trainable_weights(), in the order Keras's optimizer lists its slots.
std::vector<Variable> keras_trainable_variables(const LayerImpl& net);

// A Functional or Sequential network as Keras serializes it: {"module",
// "class_name", "config", "registered_name", "build_config"}. A subclassed
// network is a ValueError (it has no config).
json model_config(const LayerImpl& net);
// Rebuilds a network from such a config (also Keras 2's layout, as legacy
// `.h5` files hold it). `where` names the source in errors. Every setting
// Lockstep cannot honour is a ValueError naming the layer and the key; none
// is dropped.
Model model_from_config(const json& config, const std::string& where);

// What a model was compiled with, as Keras's compile_config records it.
struct CompiledForm {
  const Optimizer* optimizer = nullptr;
  const std::vector<Loss>* losses = nullptr;  // one, or one per output (undefined: none)
  const std::vector<double>* loss_weights = nullptr;
  const std::vector<MetricSpec>* metrics = nullptr;                      // every output's
  const std::vector<std::vector<MetricSpec>>* output_metrics = nullptr;  // or each output's
  // The output names when compile named outputs: losses, weights and
  // metrics are written as Keras's dicts.
  const std::vector<std::string>* named_outputs = nullptr;
  std::size_t num_outputs = 1;
  std::int64_t steps_per_execution = 1;
};

// Keras's compile_config of a compiled model: optimizer, loss,
// loss_weights, metrics (and Keras's other keys at their defaults), each in
// the form Keras 3 reads back as the same: metrics of every output of a
// multi-output model as one list per output.
json compile_config(const CompiledForm& compiled);
// The compile() options a compile_config holds, read as Keras 3 reads them
// for a model with these outputs (a list of metrics with one entry per
// output is each output's own; dicts by output name); a setting Lockstep
// cannot honour is a ValueError naming it.
CompileOptions compile_options_from_config(const json& config, const std::string& where,
                                           const std::vector<std::string>& output_names);
// Compiles `model` as a compile_config says; every error, the model's own
// checks included (an unknown metric, a loss for no output), names `where`.
void compile_from_config(Model& model, const json& config, const std::string& where);

// An optimizer as Keras serializes it ({"module", "class_name", "config",
// "registered_name"}), and back.
json optimizer_json(const Optimizer& optimizer);
Optimizer optimizer_from_json(const json& j, const std::string& where);

}  // namespace lockstep::keras
