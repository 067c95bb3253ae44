// Internal to train/: Keras's files. `.keras` (a zip of metadata.json,
// config.json and model.weights.h5), `.weights.h5` (the weights alone, in
// Keras 3's layout: layers/<snake_case class>[_n]/vars/<i>, optimizer/vars/<i>)
// and Keras 2's legacy `.h5` (model_weights/<layer>/<weight names>, read only).
#pragma once

#include <string>

#include "lockstep/io/hdf5.h"
#include "lockstep/train/model.h"
#include "train/keras_config.h"

namespace lockstep::keras {

// The weights of `net` (and, with an optimizer, its variables) as Keras 3
// lays them out in HDF5.
io::H5Group weights_tree(const LayerImpl& net, const Optimizer* optimizer);
// Sets the weights of `net` (and the optimizer's variables, when the tree
// has them and `optimizer` is given) from such a tree. Everything is
// checked first — every group, count and shape, and that the file holds no
// weights the model has no place for — so nothing changes when it fails.
// `skip_mismatch` skips a layer whose weights do not fit (named in a warning, core/log.h).
void load_weights_tree(const LayerImpl& net, const io::H5Group& tree, const Optimizer* optimizer,
                       const std::string& source, bool skip_mismatch = false);
// Keras 2's layout (a legacy `.h5`: the model_weights group, or the root of
// a legacy weights file), by position or `by_name`; `skip_mismatch` skips
// layers whose weights do not fit (each named in a warning) instead of failing.
void load_legacy_weights(const LayerImpl& net, const io::H5Group& file, bool by_name,
                         bool skip_mismatch, const std::string& source);

void save_keras_archive(const Model& model, const CompiledForm& compiled, const std::string& path);
Model load_keras_archive(const std::string& path);
// A whole model from a legacy `.h5` (model_config, model_weights, and the
// compile settings of training_config).
Model load_legacy_h5_model(const std::string& path);

}  // namespace lockstep::keras
