// Layer configurations: what a layer needs to be rebuilt (Keras's
// get_config / from_config), as plain typed values — the train layer turns
// them into Keras's JSON (train/keras_config.cc).
//
// Built-in layers are registered by class name; a custom layer becomes
// loadable with register_layer("MyLayer", factory).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace lockstep {

class Layer;

class LayerConfig {
 public:
  using Value = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                             std::vector<double>>;

  void set(const std::string& key, Value value);
  bool has(const std::string& key) const;
  // The value of `key` as T; ValueError naming the key when it is missing or
  // of another type.
  template <typename T>
  T get(const std::string& key) const;
  template <typename T>
  T get_or(const std::string& key, T fallback) const {
    return has(key) ? get<T>(key) : fallback;
  }
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
};

using LayerFactory = std::function<Layer(const LayerConfig&)>;

// Makes `class_name` loadable (replaces an earlier registration).
void register_layer(const std::string& class_name, LayerFactory factory);
// The same under Keras's word for it (register_keras_serializable, or a
// load_model custom_objects entry).
inline void register_keras_layer(const std::string& class_name, LayerFactory factory) {
  register_layer(class_name, std::move(factory));
}
// A Keras Lambda layer holds Python code Lockstep cannot run: registered by
// the layer's name, `factory` builds the C++ layer that replaces the one of
// that name when a Keras file is loaded (it gets the name and trainable
// flag). Saved again, it is saved as the C++ layer's class.
void register_lambda(const std::string& layer_name, LayerFactory factory);
// The factory registered for the Lambda layer of that name; empty if none.
LayerFactory lambda_factory(const std::string& layer_name);
// Whether `class_name` is one of Lockstep's own layers (each is a Keras
// class of the same name), not one registered with register_layer.
bool is_builtin_layer_class(const std::string& class_name);
// Whether layer_from_config (or Keras's file loader) can build `class_name`:
// one of Lockstep's own, or registered.
bool is_known_layer_class(const std::string& class_name);
// A new layer of `class_name` from its config; ValueError listing the known
// classes otherwise.
Layer layer_from_config(const std::string& class_name, const LayerConfig& config);

}  // namespace lockstep
