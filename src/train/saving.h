// Internal to train/: the model config and weight (de)serialisation that
// Model::save, load_model and Checkpoint share.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/io/safetensors.h"
#include "lockstep/train/model.h"

namespace lockstep::detail {

// A model from the config of a Lockstep file of format version 1 (Lockstep's
// own layout, before Keras's config replaced it: train/keras_config.h).
Model model_from_lockstep_v1_config(const nlohmann::json& j, const std::string& path);
// Every weight by its name (copy 0 of a mirrored one).
std::vector<std::pair<std::string, Tensor>> named_weights(const LayerImpl& net);
// Assigns every weight (every copy) from the file's tensors by name, after
// checking that names and shapes match exactly.
void assign_weights(const LayerImpl& net, const io::TensorFile& file, const std::string& path);

}  // namespace lockstep::detail
