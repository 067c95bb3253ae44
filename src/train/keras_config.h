// Internal to train/: models, layers, optimizers and losses as Keras 3's
// serialized configs (the `config.json` of a `.keras` file, model.to_json()),
// and back.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lockstep/train/model.h"

namespace lockstep::keras {

using json = nlohmann::json;

// Keras's naming.to_snake_case: "BatchNormalization" -> "batch_normalization",
// "Conv2D" -> "conv2d", "RMSprop" -> "rm_sprop".
std::string to_snake_case(const std::string& class_name);

// A Functional or Sequential network as Keras serializes it: {"module",
// "class_name", "config", "registered_name", "build_config"}. A subclassed
// network is a ValueError (it has no config).
json model_config(const LayerImpl& net);
// Rebuilds a network from such a config (also Keras 2's layout, as legacy
// `.h5` files hold it). `where` names the source in errors. Every setting
// Lockstep cannot honour is a ValueError naming the layer and the key; none
// is dropped.
Model model_from_config(const json& config, const std::string& where);

// Keras's compile_config of a compiled model: optimizer, loss,
// loss_weights, metrics (and Keras's other keys at their defaults).
json compile_config(const Optimizer& optimizer, const std::vector<Loss>& losses,
                    const std::vector<double>& loss_weights,
                    const std::vector<MetricSpec>& metrics);
// The compile() options a compile_config holds; a setting Lockstep cannot
// honour is a ValueError naming it.
CompileOptions compile_options_from_config(const json& config, const std::string& where);

// An optimizer as Keras serializes it ({"module", "class_name", "config",
// "registered_name"}), and back.
json optimizer_json(const Optimizer& optimizer);
Optimizer optimizer_from_json(const json& j, const std::string& where);

}  // namespace lockstep::keras
