// Models and layers as Keras 3's serialized configs, and back: the graph of
// a Functional model (InputLayers, layers with their inbound nodes), a
// Sequential stack, nested models, and each layer's arguments with Keras's
// keys (initializers and regularizers as Keras objects, dtype policies).
// Reading also takes Keras 2's layout (legacy `.h5` model_config).
#include "train/keras_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "lockstep/core/nearest_name.h"
#include "lockstep/nn/attention_layers.h"
#include "lockstep/nn/functional.h"
#include "lockstep/nn/initializers.h"
#include "lockstep/nn/recurrent_layers.h"
#include "lockstep/nn/sequence_layers.h"

namespace lockstep::keras {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

json dtype_policy(const std::string& name) {
  return {{"module", "keras"},
          {"class_name", "DTypePolicy"},
          {"config", {{"name", name}}},
          {"registered_name", nullptr}};
}

// [batch, dims...]: the batch null (Keras's None) unless static (> 0).
json batch_shape(const Shape& sample_shape, std::int64_t batch = 0) {
  json s = json::array({batch > 0 ? json(batch) : json(nullptr)});
  for (std::int64_t d : sample_shape.dims()) s.push_back(d);
  return s;
}

// ---- initializers and regularizers ----------------------------------------

// Lockstep's initializer names and Keras's classes (and the aliases Keras
// reads too).
const std::vector<std::pair<std::string, std::string>>& initializer_classes() {
  static const std::vector<std::pair<std::string, std::string>> table = {
      {"glorot_uniform", "GlorotUniform"},
      {"glorot_normal", "GlorotNormal"},
      {"he_normal", "HeNormal"},
      {"he_uniform", "HeUniform"},
      {"lecun_normal", "LecunNormal"},
      {"lecun_uniform", "LecunUniform"},
      {"variance_scaling", "VarianceScaling"},
      {"orthogonal", "Orthogonal"},
      {"orthogonal", "OrthogonalInitializer"},
      {"identity", "Identity"},
      {"identity", "IdentityInitializer"},
      {"random_normal", "RandomNormal"},
      {"random_normal", "normal"},
      {"random_uniform", "RandomUniform"},
      {"random_uniform", "uniform"},
      {"truncated_normal", "TruncatedNormal"},
      {"zeros", "Zeros"},
      {"zeros", "zero"},
      {"ones", "Ones"},
      {"ones", "one"},
      {"constant", "Constant"}};
  return table;
}

// The initializer named under `key` of a layer's config, with its
// arguments ("key.argument"), as Keras's object.
json initializer_object(const std::string& name, const LayerConfig& c, const std::string& key) {
  std::string cls;
  for (const auto& [ours, theirs] : initializer_classes()) {
    if (ours == name && cls.empty()) cls = theirs;
  }
  LOCKSTEP_CHECK(!cls.empty(), "save: initializer '", name, "' of '", key, "' has no Keras class");
  json config = json::object();
  const std::string prefix = key + ".";
  for (const auto& [k, v] : c.entries()) {
    if (k.rfind(prefix, 0) == 0)
      std::visit([&](const auto& x) { config[k.substr(prefix.size())] = x; }, v);
  }
  // Keras's random initializers carry a seed; none: fresh values.
  if (name != "zeros" && name != "ones" && name != "constant" && name != "identity")
    config["seed"] = nullptr;
  return {{"module", "keras.initializers"},
          {"class_name", cls},
          {"config", config},
          {"registered_name", nullptr}};
}

// A Keras initializer (object or identifier) as Lockstep's name under `key`
// and its arguments under "key.argument". A seed is dropped (the weights
// come from the file); an argument Lockstep's initializer does not take is
// refused by initializers::from_config, naming it.
void read_initializer(const json& v, const std::string& key, LayerConfig& out,
                      const std::string& where) {
  std::string cls = v.is_string() ? v.get<std::string>() : v.value("class_name", std::string());
  const json config = v.is_object() ? v.value("config", json::object()) : json::object();
  std::string name;
  for (const auto& [ours, theirs] : initializer_classes()) {
    if (cls == theirs || cls == ours) name = ours;
  }
  if (name.empty()) {
    std::vector<std::string> known;
    for (const auto& [ours, theirs] : initializer_classes()) known.push_back(theirs);
    detail::throw_error<ValueError>(
        where, ": ", key, " is the initializer '", cls,
        "', which Lockstep does not have; did you mean '", nearest_name(cls, known), "'? (it has ",
        [&] {
          std::string all;
          for (const auto& n : initializers::names()) all += (all.empty() ? "" : ", ") + n;
          return all;
        }(),
        ")");
  }
  Initializer::Args args;
  for (const auto& [arg, value] : config.items()) {
    if (arg == "seed" || value.is_null()) continue;  // a seed only picks fresh values
    if (value.is_number()) {
      args.emplace_back(arg, value.get<double>());
    } else if (value.is_string()) {
      args.emplace_back(arg, value.get<std::string>());
    } else {
      detail::throw_error<ValueError>(where, ": ", key, " (", cls, ") has ", arg, " = ",
                                      value.dump(), ", which Lockstep cannot take");
    }
  }
  try {
    initializers::from_config(name, args);  // refuses what it cannot take, now
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", key, " (", cls, "): ", e.what());
  }
  out.set(key, name);
  for (const auto& [arg, value] : args)
    std::visit([&, &a = arg](const auto& x) { out.set(key + "." + a, x); }, value);
}

json regularizer_object(double l1, double l2) {
  return {{"module", "keras.regularizers"},
          {"class_name", "L1L2"},
          {"config", {{"l1", l1}, {"l2", l2}}},
          {"registered_name", nullptr}};
}

void read_regularizer(const json& v, const std::string& key, LayerConfig& out,
                      const std::string& where) {
  const std::string cls =
      v.is_string() ? v.get<std::string>() : v.value("class_name", std::string());
  const json config = v.is_object() ? v.value("config", json::object()) : json::object();
  double l1 = 0, l2 = 0;
  auto number = [&](const char* arg, double fallback) {
    return config.contains(arg) && config[arg].is_number() ? config[arg].get<double>() : fallback;
  };
  if (cls == "L1L2" || cls == "l1_l2") {
    l1 = number("l1", 0.0);
    l2 = number("l2", 0.0);
  } else if (cls == "L1" || cls == "l1") {
    l1 = number("l1", 0.01);
  } else if (cls == "L2" || cls == "l2") {
    l2 = number("l2", 0.01);
  } else {
    detail::throw_error<ValueError>(where, ": ", key, " is the regularizer '", cls,
                                    "'; Lockstep has L1, L2 and L1L2");
  }
  out.set(key + "_l1", l1);
  out.set(key + "_l2", l2);
}

// ---- leaf layers --------------------------------------------------------------

// Keras's "config" of one layer from Lockstep's LayerConfig.
json leaf_config(const LayerImpl& layer) {
  const LayerConfig ours = layer.get_config();
  json c = {{"name", layer.name()},
            {"trainable", layer.trainable()},
            {"dtype", dtype_policy(layer.dtype_policy().name)}};
  std::map<std::string, std::pair<double, double>> regularizers;
  for (const auto& [k, v] : ours.entries()) {
    if (k == "name" || k == "trainable" || k.find("_initializer.") != std::string::npos) continue;
    if (ends_with(k, "_regularizer_l1") || ends_with(k, "_regularizer_l2")) {
      auto& r = regularizers[k.substr(0, k.size() - 3)];
      (ends_with(k, "_l1") ? r.first : r.second) = std::get<double>(v);
      continue;
    }
    if (ends_with(k, "_initializer")) {
      c[k] = initializer_object(std::get<std::string>(v), ours, k);
      continue;
    }
    std::visit([&, key = k](const auto& value) { c[key] = value; }, v);
  }
  for (const auto& [k, r] : regularizers) c[k] = regularizer_object(r.first, r.second);
  const std::string& cls = layer.class_name();
  if (cls == "ReLU" && !c.contains("max_value")) c["max_value"] = nullptr;
  for (const auto& [layer_class, key] :
       {std::pair<std::string, std::string>{"ZeroPadding2D", "padding"},
        {"Cropping2D", "cropping"}}) {
    if (cls != layer_class) continue;
    const auto p = ours.get<std::vector<std::int64_t>>(key);
    c[key] = json::array({json::array({p[0], p[1]}), json::array({p[2], p[3]})});
  }
  if (cls == "BatchNormalization") c["axis"] = -1;
  if (cls == "EinsumDense") {  // -1: Keras's None
    for (json& d : c["output_shape"]) {
      if (d == -1) d = nullptr;
    }
  }
  return c;
}

// Keras's initializer defaults for keys Lockstep's layers do not take (the
// weight is always made this way): accepted when the file says the same.
const std::map<std::string, std::string>& fixed_initializers() {
  static const std::map<std::string, std::string> table = {
      {"BatchNormalization.beta_initializer", "zeros"},
      {"BatchNormalization.gamma_initializer", "ones"},
      {"BatchNormalization.moving_mean_initializer", "zeros"},
      {"BatchNormalization.moving_variance_initializer", "ones"},
      {"DepthwiseConv2D.depthwise_initializer", "glorot_uniform"},
      {"DepthwiseConv2D.bias_initializer", "zeros"},
      {"Embedding.embeddings_initializer", "random_uniform"}};
  return table;
}

// Keras-only settings that Lockstep accepts only at the value it implements.
const std::map<std::string, json>& fixed_settings() {
  static const std::map<std::string, json> table = {{"data_format", "channels_last"},
                                                    {"synchronized", false},
                                                    {"renorm", false},
                                                    {"sparse", false},
                                                    {"ragged", false},
                                                    {"optional", false},
                                                    {"use_cudnn", "auto"},
                                                    {"use_gate", false},
                                                    {"activity_regularizer", nullptr},
                                                    {"output_padding", nullptr}};
  return table;
}

// Settings with no effect here whatever their value, because another
// setting switches them off (renorm_momentum without renorm).
const std::set<std::string>& inert_settings() {
  static const std::set<std::string> s = {"renorm_momentum", "renorm_clipping", "input_length"};
  return s;
}

// The dtype policy a layer's config names, checked: Keras writes a policy
// object ({"class_name": "DTypePolicy", "config": {"name": ...}}) or, in
// older files, its name. Policies Lockstep refuses say why.
std::string policy_name(const json& v, const std::string& where) {
  std::string name = "float32";
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object()) {
    name = v.value("config", json::object()).value("name", std::string("float32"));
  }
  try {
    return DTypePolicy::from_name(name).name;
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
}

bool same_value(const LayerConfig::Value& a, const LayerConfig::Value& b) {
  auto number = [](const LayerConfig::Value& v, double& out) {
    if (const auto* d = std::get_if<double>(&v)) return out = *d, true;
    if (const auto* i = std::get_if<std::int64_t>(&v)) return out = static_cast<double>(*i), true;
    return false;
  };
  double x, y;
  if (number(a, x) && number(b, y)) return std::abs(x - y) <= 1e-6 * std::max(1.0, std::abs(x));
  return a == b;
}

std::string value_text(const LayerConfig::Value& v) {
  json j;
  std::visit([&](const auto& x) { j = x; }, v);
  return j.dump();
}

// Keras's config of a leaf layer as Lockstep's LayerConfig.
LayerConfig read_leaf_config(const std::string& cls, const json& config, const std::string& where) {
  LOCKSTEP_CHECK(config.is_object(), where, ": the layer's config is not a JSON object");
  LayerConfig c;
  for (const auto& [k, v] : config.items()) {
    if (k == "dtype") {
      policy_name(v, where);  // checked here, set by make_leaf
      continue;
    }
    if (inert_settings().contains(k)) continue;
    if (auto f = fixed_settings().find(k); f != fixed_settings().end()) {
      const bool same = v == f->second || (v.is_number() && f->second.is_number() &&
                                           v.get<double>() == f->second.get<double>());
      LOCKSTEP_CHECK(same || (v.is_null() && f->second.is_null()), where, ": ", k, " = ", v.dump(),
                     "; Lockstep implements only ", f->second.dump());
      continue;
    }
    if (v.is_null()) continue;  // Keras's "not set"
    if (ends_with(k, "_constraint"))
      detail::throw_error<ValueError>(where, ": ", k, " = ", v.dump(),
                                      "; Lockstep has no weight constraints");
    if (ends_with(k, "_initializer")) {
      read_initializer(v, k, c, where);
      continue;
    }
    if (ends_with(k, "_regularizer")) {
      read_regularizer(v, k, c, where);
      continue;
    }
    if (cls == "BatchNormalization" && k == "axis") {
      const bool last = (v.is_number_integer() && v.get<int>() == -1) ||
                        (v.is_array() && v.size() == 1 && v[0].get<int>() == -1);
      LOCKSTEP_CHECK(last, where, ": axis = ", v.dump(),
                     "; Lockstep normalizes the last axis (channels_last) only");
      continue;
    }
    if (k == "output_shape" && (cls == "EinsumDense" || cls == "MultiHeadAttention")) {
      // Keras's partial shape: a number or a list, None where the input
      // gives the size (Lockstep's -1). MultiHeadAttention's is one number.
      std::vector<std::int64_t> dims;
      for (const json& d : v.is_array() ? v : json::array({v})) {
        LOCKSTEP_CHECK(d.is_null() || d.is_number_integer(), where, ": output_shape = ", v.dump(),
                       " is not a shape");
        dims.push_back(d.is_null() ? -1 : d.get<std::int64_t>());
      }
      if (cls == "MultiHeadAttention") {
        LOCKSTEP_CHECK(dims.size() == 1 && dims[0] > 0, where, ": output_shape = ", v.dump(),
                       "; Lockstep's MultiHeadAttention takes one output size");
        c.set(k, dims[0]);
      } else {
        c.set(k, dims);
      }
      continue;
    }
    if ((cls == "ZeroPadding2D" && k == "padding") || (cls == "Cropping2D" && k == "cropping")) {
      std::vector<std::int64_t> p;
      if (v.is_number_integer()) {
        p.assign(4, v.get<std::int64_t>());
      } else if (v.is_array() && v.size() == 2 && v[0].is_number_integer()) {
        p = {v[0], v[0], v[1], v[1]};
      } else if (v.is_array() && v.size() == 2 && v[0].is_array() && v[1].is_array() &&
                 v[0].size() == 2 && v[1].size() == 2 && v[0][0].is_number_integer() &&
                 v[0][1].is_number_integer() && v[1][0].is_number_integer() &&
                 v[1][1].is_number_integer()) {
        p = {v[0][0], v[0][1], v[1][0], v[1][1]};
      }
      LOCKSTEP_CHECK(p.size() == 4, where, ": ", k, " = ", v.dump(), " is not a 2-D ", k);
      c.set(k, p);
      continue;
    }
    if (v.is_boolean()) {
      c.set(k, v.get<bool>());
    } else if (v.is_number_integer()) {
      c.set(k, v.get<std::int64_t>());
    } else if (v.is_number()) {
      c.set(k, v.get<double>());
    } else if (v.is_string()) {
      c.set(k, v.get<std::string>());
    } else if (v.is_array() && std::all_of(v.begin(), v.end(),
                                           [](const json& e) { return e.is_number_integer(); })) {
      c.set(k, v.get<std::vector<std::int64_t>>());
    } else if (v.is_array() &&
               std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number(); })) {
      c.set(k, v.get<std::vector<double>>());  // RandomRotation's factor
    } else {
      detail::throw_error<ValueError>(where, ": ", k, " = ", v.dump(),
                                      " is a setting Lockstep cannot take");
    }
  }
  if ((cls == "MaxPooling2D" || cls == "AveragePooling2D") && !c.has("strides") &&
      c.has("pool_size"))
    c.set("strides", c.get<std::vector<std::int64_t>>("pool_size"));
  return c;
}

// Whether `k` ("X_initializer.argument") is an argument of an initializer
// that a `cls` layer always applies, at that initializer's own value.
bool fixed_initializer_argument(const std::string& cls, const std::string& k,
                                const LayerConfig::Value& v) {
  const auto dot = k.find("_initializer.");
  if (dot == std::string::npos) return false;
  const std::string key = k.substr(0, dot + 12), arg = k.substr(dot + 13);
  const auto always = fixed_initializers().find(cls + "." + key);
  if (always == fixed_initializers().end()) return false;
  const Initializer applied = initializers::get(always->second);
  for (const auto& [name, value] : applied.args()) {
    const auto mine = std::visit([](const auto& x) -> LayerConfig::Value { return x; }, value);
    if (name == arg && same_value(v, mine)) return true;
  }
  return false;
}

// Every setting of the file reached the layer: the rebuilt layer's own config
// holds it with the same value, or it is an initializer Lockstep always
// applies and the file names that one, with its arguments.
void check_nothing_dropped(const std::string& cls, const LayerConfig& wanted, const Layer& made,
                           const std::string& where) {
  const LayerConfig got = made->get_config();
  for (const auto& [k, v] : wanted.entries()) {
    if (got.has(k)) {
      for (const auto& [gk, gv] : got.entries()) {
        if (gk == k && !same_value(v, gv))
          detail::throw_error<ValueError>(where, ": ", k, " = ", value_text(v), "; Lockstep's ",
                                          cls, " took ", value_text(gv));
      }
      continue;
    }
    if (fixed_initializer_argument(cls, k, v)) continue;
    auto fixed = fixed_initializers().find(cls + "." + k);
    if (fixed != fixed_initializers().end() && std::get_if<std::string>(&v) &&
        std::get<std::string>(v) == fixed->second)
      continue;
    detail::throw_error<ValueError>(
        where, ": ", k, " = ", value_text(v), " is a setting Lockstep's ", cls, " does not have",
        fixed != fixed_initializers().end() ? " (it always uses " + fixed->second + ")" : "");
  }
}

bool is_model_class(const std::string& cls) {
  return cls == "Functional" || cls == "Sequential" || cls == "Model";
}

// The Lockstep class of a layer entry: its class_name, or for a layer
// registered under a package ("lockstep>Scale") the registered name's class.
std::string entry_class(const json& entry) {
  std::string cls = entry.value("class_name", std::string());
  if (entry.contains("registered_name") && entry["registered_name"].is_string()) {
    const std::string reg = entry["registered_name"];
    if (reg.rfind("lockstep>", 0) == 0) cls = reg.substr(9);
  }
  return cls;
}

Layer make_leaf(const json& entry, const std::string& where);

// A Bidirectional: its layer and backward_layer are layer entries of their own.
Layer make_bidirectional(const json& config, const std::string& where) {
  LOCKSTEP_CHECK(config.contains("layer") && config["layer"].is_object(), where,
                 ": a Bidirectional without its layer");
  const Layer layer = make_leaf(config["layer"], where + " (its layer)");
  std::optional<Layer> backward;
  if (config.contains("backward_layer") && !config["backward_layer"].is_null())
    backward = make_leaf(config["backward_layer"], where + " (its backward_layer)");
  const json mode = config.value("merge_mode", json("concat"));
  LOCKSTEP_CHECK(mode.is_string(), where, ": merge_mode = ", mode.dump(),
                 "; Lockstep merges the two directions (concat, sum, mul or ave), it does not "
                 "return them as two outputs yet");
  for (const auto& [k, v] : config.items()) {
    static const std::set<std::string> known = {"layer", "backward_layer", "merge_mode",
                                                "name",  "trainable",      "dtype"};
    LOCKSTEP_CHECK(known.contains(k) || v.is_null(), where, ": ", k, " = ", v.dump(),
                   " is a setting Lockstep's Bidirectional does not have");
  }
  Layer made;
  try {
    made = layers::Bidirectional(
        layer, {.merge_mode = mode.get<std::string>(), .name = config.value("name", "")}, backward);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
  made.set_trainable(config.value("trainable", true));
  if (config.contains("dtype")) made.set_dtype_policy(policy_name(config["dtype"], where));
  return made;
}

// A TimeDistributed: its layer is a layer entry of its own.
Layer make_time_distributed(const json& config, const std::string& where) {
  LOCKSTEP_CHECK(config.contains("layer") && config["layer"].is_object(), where,
                 ": a TimeDistributed without its layer");
  const Layer layer = make_leaf(config["layer"], where + " (its layer)");
  for (const auto& [k, v] : config.items()) {
    static const std::set<std::string> known = {"layer", "name", "trainable", "dtype"};
    LOCKSTEP_CHECK(known.contains(k) || v.is_null(), where, ": ", k, " = ", v.dump(),
                   " is a setting Lockstep's TimeDistributed does not have");
  }
  Layer made = layers::TimeDistributed(layer, config.value("name", ""));
  made.set_trainable(config.value("trainable", true));
  if (config.contains("dtype")) made.set_dtype_policy(policy_name(config["dtype"], where));
  return made;
}

// A Lambda: Python code, replaced by the C++ layer registered under its
// name (register_lambda), or refused with how to supply one.
Layer make_lambda(const json& config, const std::string& where) {
  const std::string name = config.value("name", std::string());
  const LayerFactory factory = lambda_factory(name);
  LOCKSTEP_CHECK(factory != nullptr, where,
                 ": a Lambda layer holds Python code, which Lockstep cannot run; Hint: supply "
                 "the layer in C++ with lockstep::register_lambda(\"",
                 name, "\", factory) before loading (docs/models.md, \"Custom layers\")");
  LayerConfig given;
  given.set("name", name);
  given.set("trainable", config.value("trainable", true));
  Layer made = factory(given);
  LOCKSTEP_CHECK(made.defined(), where, ": the factory registered for Lambda '", name,
                 "' made no layer");
  made.set_trainable(config.value("trainable", true));
  if (config.contains("dtype")) made.set_dtype_policy(policy_name(config["dtype"], where));
  return made;
}

Layer make_leaf(const json& entry, const std::string& where) {
  const std::string cls = entry_class(entry);
  const json config = entry.value("config", json::object());
  if (cls == "Bidirectional") return make_bidirectional(config, where);
  if (cls == "TimeDistributed") return make_time_distributed(config, where);
  if (cls == "Lambda") return make_lambda(config, where);
  const LayerConfig wanted = read_leaf_config(cls, config, where);
  Layer made;
  try {
    made = layer_from_config(cls, wanted);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
  check_nothing_dropped(cls, wanted, made, where);
  if (config.contains("dtype")) made.set_dtype_policy(policy_name(config["dtype"], where));
  return made;
}

// Whether Keras calls the layer with its inputs as separate arguments
// (MultiHeadAttention(query, value, key)) rather than one list (Add([a, b])).
bool takes_positional_inputs(const LayerImpl& layer) {
  return dynamic_cast<const layers::MultiHeadAttentionImpl*>(&layer) != nullptr;
}

// Whether Keras calls the layer as rnn(sequences, initial_state=[...]): the
// recurrent layers and Bidirectional.
bool takes_initial_state(const LayerImpl& layer) {
  return dynamic_cast<const layers::RecurrentImpl*>(&layer) != nullptr ||
         dynamic_cast<const layers::BidirectionalImpl*>(&layer) != nullptr;
}

// The call arguments Keras must call this layer with: the attention
// layers' use_causal_mask and return_attention_scores, which Lockstep holds
// as their settings.
json call_kwargs(const LayerImpl& layer) {
  json kwargs = json::object();
  auto put = [&](const auto& attention) {
    if (attention.use_causal_mask()) kwargs["use_causal_mask"] = true;
    if (attention.return_attention_scores()) kwargs["return_attention_scores"] = true;
  };
  if (const auto* mha = dynamic_cast<const layers::MultiHeadAttentionImpl*>(&layer)) put(*mha);
  if (const auto* att = dynamic_cast<const layers::AttentionImpl*>(&layer)) put(*att);
  return kwargs;
}

json leaf_entry(const LayerImpl& layer, const json& build_shape) {
  const bool builtin = is_builtin_layer_class(layer.class_name());
  json config = leaf_config(layer);
  if (const auto* bi = dynamic_cast<const layers::BidirectionalImpl*>(&layer)) {
    // Keras builds each from its build_config: the wrapper's input shape.
    config["layer"] = leaf_entry(bi->forward_layer(), build_shape);
    config["backward_layer"] = leaf_entry(bi->backward_layer(), build_shape);
  }
  if (const auto* td = dynamic_cast<const layers::TimeDistributedImpl*>(&layer)) {
    json step_shape = build_shape;  // one step's: without the steps axis
    if (step_shape.is_array() && step_shape.size() >= 2) step_shape.erase(1);
    config["layer"] = leaf_entry(*td->layer().impl(), step_shape);
  }
  json build = {{"input_shape", build_shape}};
  if (takes_positional_inputs(layer) && build_shape.is_array() && build_shape.size() >= 2) {
    // MultiHeadAttention.build(query_shape, value_shape, key_shape=None);
    // an attention mask, the last input, is no part of it.
    const auto* mha = dynamic_cast<const layers::MultiHeadAttentionImpl*>(&layer);
    const std::size_t shapes = build_shape.size() - (mha && mha->attention_mask() ? 1 : 0);
    build = {{"shapes_dict", {{"query_shape", build_shape[0]}, {"value_shape", build_shape[1]}}}};
    if (shapes > 2) build["shapes_dict"]["key_shape"] = build_shape[2];
  }
  if (takes_initial_state(layer) && build_shape.is_array() && !build_shape.empty() &&
      build_shape[0].is_array()) {
    // RNN.build(sequences_shape, initial_state_shape), as Keras saves it
    // for a layer called with initial_state (a list of the states' shapes).
    json states(build_shape.begin() + 1, build_shape.end());
    build = {
        {"shapes_dict", {{"sequences_shape", build_shape[0]}, {"initial_state_shape", states}}}};
  }
  return {{"module", builtin ? json("keras.layers") : json("lockstep")},
          {"class_name", layer.class_name()},
          {"config", config},
          {"registered_name", builtin ? json(nullptr) : json("lockstep>" + layer.class_name())},
          {"build_config", build}};
}

// batch: the Input's static batch size (0: any, Keras's None).
json input_layer_config(const std::string& name, const Shape& shape, DType dtype,
                        std::int64_t batch) {
  return {{"batch_shape", batch_shape(shape, batch)},
          {"dtype", std::string(dtype_name(dtype))},
          {"sparse", false},
          {"ragged", false},
          {"name", name},
          {"optional", false}};
}

// ---- functional graphs -----------------------------------------------------------

json layer_entry(const LayerImpl& layer, const json& build_shape);

// The layer a graph node calls: its layer, or an Input's InputLayer.
const LayerImpl* operation_of(const KerasTensor::Node* n) {
  return n->layer ? n->layer.get() : n->input_layer.get();
}

json functional_config(const FunctionalImpl& f) {
  // Node indices: a layer's calls in the order the graph runs them.
  std::map<const KerasTensor::Node*, int> node_index;
  std::map<const LayerImpl*, std::vector<const KerasTensor::Node*>> calls;
  for (const auto& step : f.steps()) {
    const LayerImpl* layer = step.node->layer.get();
    node_index[step.node] = static_cast<int>(calls[layer].size());
    calls[layer].push_back(step.node);
  }
  auto history = [&](const KerasTensor& k) {
    const KerasTensor::Node* n = k.node().get();
    if (!n->layer) return json::array({n->input_name, 0, k.index()});
    return json::array({n->layer->name(), node_index.at(n), k.index()});
  };
  // A tensor's static batch size: its Input's (layers keep the batch).
  std::function<std::int64_t(const KerasTensor&)> batch_of = [&](const KerasTensor& k) {
    const KerasTensor::Node* n = k.node().get();
    if (!n->layer) return n->input_batch_size;
    return n->inputs.empty() ? std::int64_t{0} : batch_of(n->inputs[0]);
  };
  auto shape_of = [&](const KerasTensor& k) { return batch_shape(k.sample_shape(), batch_of(k)); };
  auto tensor = [&](const KerasTensor& k) {
    return json{{"class_name", "__keras_tensor__"},
                {"config",
                 {{"shape", shape_of(k)},
                  {"dtype", std::string(dtype_name(k.dtype()))},
                  {"keras_history", history(k)}}}};
  };
  std::map<const LayerImpl*, const KerasTensor*> input_of;
  for (const KerasTensor& in : f.inputs()) input_of[in.node()->input_layer.get()] = &in;
  json layers = json::array();
  for (const LayerImpl* layer : keras_layer_order(f)) {
    if (auto it = input_of.find(layer); it != input_of.end()) {
      const KerasTensor& in = *it->second;
      const std::string& name = in.node()->input_name;
      layers.push_back({{"module", "keras.layers"},
                        {"class_name", "InputLayer"},
                        {"config", input_layer_config(name, in.sample_shape(), in.dtype(),
                                                      in.node()->input_batch_size)},
                        {"registered_name", nullptr},
                        {"name", name},
                        {"inbound_nodes", json::array()}});
      continue;
    }
    const auto& ins = calls.at(layer).front()->inputs;
    json shape = ins.size() == 1 ? shape_of(ins[0]) : json::array();
    if (ins.size() != 1) {
      for (const KerasTensor& k : ins) shape.push_back(shape_of(k));
    }
    json entry = layer_entry(*layer, shape);
    entry["name"] = layer->name();
    entry["inbound_nodes"] = json::array();
    for (const KerasTensor::Node* node : calls.at(layer)) {
      json args = json::array();
      json kwargs = call_kwargs(*layer);
      if (takes_initial_state(*layer)) {
        // lstm(x, initial_state=[h, c]): the states Keras takes by keyword.
        args.push_back(tensor(node->inputs.at(0)));
        for (std::size_t i = 1; i < node->inputs.size(); ++i)
          kwargs["initial_state"].push_back(tensor(node->inputs[i]));
      } else if (node->inputs.size() == 1 || takes_positional_inputs(*layer)) {
        // mha(query, value, key, attention_mask=m): the mask by keyword.
        const auto* mha = dynamic_cast<const layers::MultiHeadAttentionImpl*>(layer);
        const std::size_t positional = node->inputs.size() - (mha && mha->attention_mask() ? 1 : 0);
        for (std::size_t i = 0; i < positional; ++i) args.push_back(tensor(node->inputs[i]));
        if (positional < node->inputs.size())
          kwargs["attention_mask"] = tensor(node->inputs.back());
      } else {
        json list = json::array();
        for (const KerasTensor& k : node->inputs) list.push_back(tensor(k));
        args.push_back(list);
      }
      entry["inbound_nodes"].push_back({{"args", args}, {"kwargs", kwargs}});
    }
    layers.push_back(entry);
  }
  auto ends = [&](const std::vector<KerasTensor>& ts) {
    if (ts.size() == 1) return history(ts[0]);
    json list = json::array();
    for (const KerasTensor& k : ts) list.push_back(history(k));
    return list;
  };
  return {{"name", f.name()},
          {"trainable", f.trainable()},
          {"layers", layers},
          {"input_layers", ends(f.inputs())},
          {"output_layers", ends(f.outputs())}};
}

json sequential_config(const SequentialImpl& s) {
  LOCKSTEP_CHECK(s.input().defined(), "save: Sequential '", s.name(),
                 "' has no input shape, so a loaded copy could not be built. Hint: create it "
                 "with Sequential(layers, {.input_shape = ...})");
  json layers = json::array();
  const std::string input_name = s.input().node()->input_name;
  const std::int64_t batch = s.input().node()->input_batch_size;
  layers.push_back(
      {{"module", "keras.layers"},
       {"class_name", "InputLayer"},
       {"config", input_layer_config(input_name.empty() ? s.name() + "_input" : input_name,
                                     s.input().sample_shape(), s.input().dtype(), batch)},
       {"registered_name", nullptr}});
  KerasTensor previous = s.input();
  for (std::size_t i = 0; i < s.layers().size(); ++i) {
    layers.push_back(
        layer_entry(*s.layers()[i].impl(), batch_shape(previous.sample_shape(), batch)));
    if (i < s.layer_outputs().size()) previous = s.layer_outputs()[i];
  }
  return {{"name", s.name()},
          {"trainable", s.trainable()},
          {"dtype", dtype_policy(s.dtype_policy().name)},
          {"layers", layers},
          {"build_input_shape", batch_shape(s.input().sample_shape(), batch)}};
}

json layer_entry(const LayerImpl& layer, const json& build_shape) {
  if (dynamic_cast<const FunctionalImpl*>(&layer) || dynamic_cast<const SequentialImpl*>(&layer))
    return model_config(layer);
  return leaf_entry(layer, build_shape);
}

// ---- reading graphs ---------------------------------------------------------------

// Keras 3's and Keras 2's references to a layer output: [name, node, tensor].
struct Ref {
  std::string layer;
  std::size_t node = 0;
  std::size_t tensor = 0;
};

Ref read_ref(const json& r, const std::string& where) {
  LOCKSTEP_CHECK(r.is_array() && r.size() >= 3 && r[0].is_string() && r[1].is_number_integer() &&
                     r[2].is_number_integer(),
                 where, ": ", r.dump(), " is not a [layer, node, tensor] reference");
  return {r[0].get<std::string>(), r[1].get<std::size_t>(), r[2].get<std::size_t>()};
}

// The call arguments besides tensors that Lockstep's layers take:
// use_causal_mask and return_attention_scores, which MultiHeadAttention and
// Attention hold as settings.
struct CallArguments {
  std::map<std::string, bool> attention{};
  // The operations that made the masks the call passes: Keras 3 records
  // the mask it propagated to a layer (made by not_equal, any, ... ops
  // that are not layers of the model), which Lockstep's graph propagates
  // itself. A mask from a layer of the model was passed by hand.
  std::vector<std::string> mask_sources{};
  // A recurrent layer's initial_state: inputs after the sequences.
  std::vector<Ref> initial_state{};
  // MultiHeadAttention's attention_mask: its last input.
  std::vector<Ref> attention_mask{};
};

bool is_mask_argument(const std::string& key) {
  return key == "mask" || key == "query_mask" || key == "value_mask" || key == "key_mask";
}

// The references of one inbound node, in argument order.
std::vector<Ref> node_refs(const json& node, const std::string& where,
                           CallArguments* arguments = nullptr) {
  std::vector<Ref> refs;
  if (node.is_object()) {  // Keras 3: {"args": [...], "kwargs": {...}}
    std::function<void(const json&)> collect = [&](const json& a) {
      if (a.is_object() && a.value("class_name", std::string()) == "__keras_tensor__") {
        refs.push_back(read_ref(a.at("config").at("keras_history"), where));
      } else if (a.is_array()) {
        for (const json& e : a) collect(e);
      } else if (!a.is_null()) {
        detail::throw_error<ValueError>(where, ": a call argument ", a.dump(),
                                        " is not a tensor; Lockstep passes tensors only");
      }
    };
    collect(node.value("args", json::array()));
    // `training`: Keras records the flag of the call that built the graph,
    // and overrides it with the caller's in fit, evaluate and predict
    // (functional.py, operation_fn) — as every Lockstep call passes one.
    const json kwargs = node.value("kwargs", json::object());
    for (const auto& [k, v] : kwargs.items()) {
      if ((k == "use_causal_mask" || k == "return_attention_scores") && v.is_boolean() &&
          arguments != nullptr) {
        arguments->attention[k] = v.get<bool>();
        continue;
      }
      if (k == "initial_state" && !v.is_null() && arguments != nullptr) {
        const json states = v.is_array() ? v : json::array({v});
        for (const json& state : states) {
          LOCKSTEP_CHECK(
              state.is_object() && state.value("class_name", std::string()) == "__keras_tensor__",
              where, ": initial_state holds ", state.dump(), ", not a tensor of the model");
          arguments->initial_state.push_back(
              read_ref(state.at("config").at("keras_history"), where));
        }
        continue;
      }
      if (k == "attention_mask" && !v.is_null() && arguments != nullptr) {
        LOCKSTEP_CHECK(v.is_object() && v.value("class_name", std::string()) == "__keras_tensor__",
                       where, ": attention_mask holds ", v.dump(), ", not a tensor of the model");
        arguments->attention_mask.push_back(read_ref(v.at("config").at("keras_history"), where));
        arguments->attention["attention_mask"] = true;
        continue;
      }
      if (is_mask_argument(k) && v.is_object() &&
          v.value("class_name", std::string()) == "__keras_tensor__" && arguments != nullptr) {
        arguments->mask_sources.push_back(
            read_ref(v.at("config").at("keras_history"), where).layer);
        continue;
      }
      LOCKSTEP_CHECK(v.is_null() || (k == "training" && v.is_boolean()), where,
                     ": the call passes ", k, " = ", v.dump(),
                     ", which Lockstep's graphs do not take");
    }
  } else if (node.is_array()) {  // Keras 2: [[name, node, tensor, kwargs], ...]
    for (const json& r : node) {
      refs.push_back(read_ref(r, where));
      if (r.size() > 3 && r[3].is_object()) {
        for (const auto& [k, v] : r[3].items()) {
          LOCKSTEP_CHECK(v.is_null(), where, ": the call passes ", k, " = ", v.dump(),
                         ", which Lockstep's graphs do not take");
        }
      }
    }
  } else {
    detail::throw_error<ValueError>(where, ": an inbound node is neither an object nor a list");
  }
  return refs;
}

std::vector<Ref> end_refs(const json& j, const std::string& where) {
  if (j.is_array() && !j.empty() && j[0].is_string()) return {read_ref(j, where)};
  std::vector<Ref> refs;
  for (const json& r : j) refs.push_back(read_ref(r, where));
  return refs;
}

Shape input_shape_of(const json& config, const std::string& where) {
  const json shape = config.contains("batch_shape")         ? config["batch_shape"]
                     : config.contains("batch_input_shape") ? config["batch_input_shape"]
                                                            : json();
  LOCKSTEP_CHECK(shape.is_array() && !shape.empty(), where, ": an InputLayer without batch_shape");
  std::vector<std::int64_t> dims;
  for (std::size_t i = 1; i < shape.size(); ++i) {
    LOCKSTEP_CHECK(shape[i].is_number_integer(), where, ": input shape ", shape.dump(),
                   " has an unknown dimension besides the batch; Lockstep needs every one");
    dims.push_back(shape[i]);
  }
  return Shape(dims);
}

// The static batch size of an InputLayer's batch_shape (0: None).
std::int64_t input_batch_of(const json& config) {
  const json shape = config.contains("batch_shape")         ? config["batch_shape"]
                     : config.contains("batch_input_shape") ? config["batch_input_shape"]
                                                            : json();
  return shape.is_array() && !shape.empty() && shape[0].is_number_integer() && shape[0] > 0
             ? shape[0].get<std::int64_t>()
             : 0;
}

DType input_dtype_of(const json& config) {
  const json d = config.value("dtype", json("float32"));
  if (d.is_string()) return dtype_from_name(d.get<std::string>());
  return dtype_from_name(d.value("config", json::object()).value("name", std::string("float32")));
}

// A call's use_causal_mask or return_attention_scores, which Lockstep's
// attention layers hold for every call: a layer called with and without
// one is refused.
void set_call_argument(LayerImpl& layer, const std::string& key, bool on, std::size_t call,
                       const std::string& where) {
  bool was = false;
  if (key == "attention_mask") {
    auto* mha = dynamic_cast<layers::MultiHeadAttentionImpl*>(&layer);
    LOCKSTEP_CHECK(mha != nullptr, where,
                   ": the call passes attention_mask, which only MultiHeadAttention takes");
    was = mha->attention_mask();
    mha->set_attention_mask(on);
    LOCKSTEP_CHECK(call == 0 || was == on, where, ": call ", call,
                   " passes an attention_mask and an earlier call none (or the reverse); "
                   "Lockstep's MultiHeadAttention takes one in every call or in none");
    return;
  }
  auto set = [&](auto& attention) {
    if (key == "use_causal_mask") {
      was = attention.use_causal_mask();
      attention.set_use_causal_mask(on);
    } else {
      was = attention.return_attention_scores();
      attention.set_return_attention_scores(on);
    }
  };
  if (auto* mha = dynamic_cast<layers::MultiHeadAttentionImpl*>(&layer)) {
    set(*mha);
  } else if (auto* att = dynamic_cast<layers::AttentionImpl*>(&layer)) {
    set(*att);
  } else {
    detail::throw_error<ValueError>(where, ": the call passes ", key,
                                    ", which only MultiHeadAttention and Attention take");
  }
  LOCKSTEP_CHECK(call == 0 || was == on, where, ": call ", call, " passes ", key, " = ", on,
                 " and an earlier call ", was,
                 "; Lockstep's attention layers hold it for every "
                 "call");
}

Model functional_from_config(const json& config, const std::string& where) {
  const std::string name = config.value("name", std::string());
  // layer -> the outputs of each of its calls
  std::map<std::string, std::vector<std::vector<KerasTensor>>> outputs_of;
  struct Pending {
    std::string name;
    Layer layer;
    json nodes;
    std::size_t done = 0;
  };
  std::vector<Pending> pending;
  // Keras 3 lists the operations that made the masks it passed to layers
  // (NotEqual, Any, LogicalOr, ConvertToTensor from keras.src.ops) among
  // the layers. Lockstep's graph makes those masks itself: the operations
  // are skipped, and only a layer reading one as an input is refused.
  std::map<std::string, std::string> operations;  // name -> class
  for (const json& entry : config.at("layers")) {
    const json layer_config = entry.value("config", json::object());
    const std::string lname = entry.contains("name") ? entry["name"].get<std::string>()
                                                     : layer_config.value("name", std::string());
    const std::string at = where + ": layer '" + lname + "'";
    const std::string cls = entry_class(entry);
    const std::string module = entry.value("module", std::string());
    // A legacy .h5 file's model_config names no modules: its mask
    // operations are known by their classes.
    static const std::set<std::string> kMaskOperations{
        "NotEqual", "Any", "All", "LogicalOr", "LogicalAnd", "ConvertToTensor"};
    if (module.rfind("keras.src.ops.", 0) == 0 || module.rfind("keras.ops.", 0) == 0 ||
        (!entry.contains("module") && kMaskOperations.contains(cls))) {
      operations[lname] = cls;
      continue;
    }
    if (cls == "InputLayer") {
      outputs_of[lname].push_back(
          {Input(input_shape_of(layer_config, at), input_dtype_of(layer_config), lname,
                 input_batch_of(layer_config))});
      continue;
    }
    Layer layer = is_model_class(cls) ? Layer(model_from_config(entry, at).impl())
                                      : make_leaf(entry, at + " (" + cls + ")");
    pending.push_back({lname, layer, entry.value("inbound_nodes", json::array()), 0});
  }
  auto resolve = [&](const Ref& r, bool& ok) -> KerasTensor {
    auto it = outputs_of.find(r.layer);
    if (it == outputs_of.end() || r.node >= it->second.size()) {
      ok = false;
      return {};
    }
    const std::vector<KerasTensor>& outs = it->second[r.node];
    LOCKSTEP_CHECK(r.tensor < outs.size(), where, ": a layer reads output ", r.tensor, " of '",
                   r.layer, "', which has ", outs.size());
    return outs[r.tensor];
  };
  // Calls in dependency order: a node waits until what it reads exists.
  for (bool progress = true; progress;) {
    progress = false;
    for (Pending& p : pending) {
      while (p.done < p.nodes.size()) {
        const std::string at = where + ": layer '" + p.name + "'";
        std::vector<KerasTensor> args;
        bool ok = true;
        CallArguments call_arguments;
        std::vector<Ref> refs = node_refs(p.nodes[p.done], at, &call_arguments);
        refs.insert(refs.end(), call_arguments.initial_state.begin(),
                    call_arguments.initial_state.end());
        refs.insert(refs.end(), call_arguments.attention_mask.begin(),
                    call_arguments.attention_mask.end());
        for (const auto& [key, on] : call_arguments.attention)
          set_call_argument(*p.layer.impl(), key, on, p.done, at);
        for (const std::string& source : call_arguments.mask_sources) {
          LOCKSTEP_CHECK(!outputs_of.contains(source) &&
                             std::none_of(pending.begin(), pending.end(),
                                          [&](const Pending& q) { return q.name == source; }),
                         at, ": the call passes a mask made by layer '", source,
                         "'; Lockstep's graphs carry the masks their layers make (Embedding with "
                         "mask_zero, Masking), not masks passed by hand");
        }
        for (const Ref& r : refs) {
          if (auto op = operations.find(r.layer); op != operations.end()) {
            detail::throw_error<ValueError>(
                at, ": reads the result of Keras operation '", r.layer, "' (", op->second,
                "), which Lockstep builds no layer for; Hint: write it as a layer (a Lambda "
                "needs a registered C++ layer, lockstep::register_layer)");
          }
          args.push_back(resolve(r, ok));
        }
        if (!ok) break;
        LOCKSTEP_CHECK(!args.empty(), at, ": call ", p.done, " passes no tensor");
        try {  // builds the layer: its weights' shapes come from the file
          outputs_of[p.name].push_back(p.layer.call_all(args));
        } catch (const Error&) {
          detail::rethrow_with_prefix(at + ": ");
        }
        ++p.done;
        progress = true;
      }
    }
  }
  for (const Pending& p : pending) {
    if (p.done < p.nodes.size()) {
      detail::throw_error<ValueError>(where, ": layer '", p.name, "' call ", p.done,
                                      " reads a layer output that no layer makes");
    }
  }
  auto ends = [&](const char* key) {
    std::vector<KerasTensor> out;
    for (const Ref& r : end_refs(config.at(key), where)) {
      bool ok = true;
      out.push_back(resolve(r, ok));
      LOCKSTEP_CHECK(ok, where, ": ", key, " names '", r.layer, "'[", r.node,
                     "], which the graph does not make");
    }
    return out;
  };
  return Model(ends("input_layers"), ends("output_layers"), name);
}

Model sequential_from_config(const json& config, const std::string& where) {
  Sequential seq({}, {.name = config.value("name", std::string())});
  auto* impl = static_cast<SequentialImpl*>(seq.impl().get());
  bool shaped = false;
  auto set_shape = [&](const Shape& s, DType d, std::int64_t batch) {
    impl->set_input_shape(s, d, batch);
    shaped = true;
  };
  std::vector<Layer> layers;
  for (const json& entry : config.at("layers")) {
    const json layer_config = entry.value("config", json::object());
    const std::string lname = layer_config.value("name", std::string());
    const std::string at = where + ": layer '" + lname + "'";
    const std::string cls = entry_class(entry);
    if (cls == "InputLayer") {
      set_shape(input_shape_of(layer_config, at), input_dtype_of(layer_config),
                input_batch_of(layer_config));
      continue;
    }
    if (!shaped && layers.empty() && layer_config.contains("batch_input_shape"))
      set_shape(input_shape_of(layer_config, at), input_dtype_of(layer_config),
                input_batch_of(layer_config));
    layers.push_back(is_model_class(cls) ? Layer(model_from_config(entry, at).impl())
                                         : make_leaf(entry, at + " (" + cls + ")"));
  }
  if (!shaped && config.contains("build_input_shape") && config["build_input_shape"].is_array())
    set_shape(input_shape_of({{"batch_shape", config["build_input_shape"]}}, where),
              DType::kFloat32, input_batch_of({{"batch_shape", config["build_input_shape"]}}));
  LOCKSTEP_CHECK(shaped, where,
                 ": a Sequential model without an input shape; Lockstep builds it when loaded "
                 "and needs the shape");
  for (const Layer& l : layers) {
    try {  // builds the layer: its weights' shapes come from the file
      seq.add(l);
    } catch (const Error&) {
      detail::rethrow_with_prefix(where + ": layer '" + l.name() + "': ");
    }
  }
  return seq;
}

}  // namespace

namespace {
Model model_from_checked_config(const json& j, const std::string& where);
}  // namespace

std::string to_snake_case(const std::string& class_name) {
  // Keras's three steps: drop non-word characters; re.sub("(.)([A-Z][a-z]+)",
  // r"\1_\2"); re.sub("([a-z])([A-Z])", r"\1_\2"); lower case. Each
  // substitution scans left to right without overlaps, as re.sub does.
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  std::string name;
  for (char ch : class_name) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_') name += ch;
  }
  std::string words;
  for (std::size_t p = 0; p < name.size();) {
    if (p + 2 < name.size() && upper(name[p + 1]) && lower(name[p + 2])) {
      words += name[p];
      words += '_';
      std::size_t q = p + 1;
      words += name[q++];
      while (q < name.size() && lower(name[q])) words += name[q++];
      p = q;
    } else {
      words += name[p++];
    }
  }
  std::string out;
  for (std::size_t p = 0; p < words.size();) {
    if (p + 1 < words.size() && lower(words[p]) && upper(words[p + 1])) {
      out += words[p];
      out += '_';
      out += words[p + 1];
      p += 2;
    } else {
      out += words[p++];
    }
  }
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return out;
}

std::vector<const LayerImpl*> keras_layer_order(const FunctionalImpl& f) {
  using Node = KerasTensor::Node;
  // Depth-first from the outputs: nodes finish inputs-first; an operation's
  // index is where the walk first meets it.
  std::vector<const Node*> finished_order;
  std::set<const Node*> finished, in_progress;
  std::map<const LayerImpl*, int> index;
  std::function<void(const KerasTensor&)> visit = [&](const KerasTensor& t) {
    const Node* node = t.node().get();
    if (finished.contains(node)) return;
    LOCKSTEP_CHECK(!in_progress.contains(node), "the graph has a cycle");
    index.emplace(operation_of(node), static_cast<int>(index.size()));
    in_progress.insert(node);
    if (node->layer) {
      for (const KerasTensor& in : node->inputs) visit(in);
    }
    in_progress.erase(node);
    finished.insert(node);
    finished_order.push_back(node);
  };
  for (const KerasTensor& out : f.outputs()) visit(out);
  // Depths from the outputs (0) inwards; an operation takes its deepest call.
  std::map<const Node*, int> node_depth;
  std::map<const LayerImpl*, int> depth;
  for (auto it = finished_order.rbegin(); it != finished_order.rend(); ++it) {
    const Node* node = *it;
    int d = node_depth[node];
    d = std::max(d, depth[operation_of(node)]);
    depth[operation_of(node)] = d;
    node_depth[node] = d;
    if (!node->layer) continue;
    for (const KerasTensor& in : node->inputs) {
      const Node* parent = in.node().get();
      if (!finished.contains(parent)) continue;
      node_depth[parent] = std::max(d + 1, node_depth[parent]);
    }
  }
  for (const KerasTensor& in : f.inputs()) {  // inputs no output needs
    const LayerImpl* op = operation_of(in.node().get());
    if (!depth.contains(op)) {
      depth[op] = 0;
      index[op] = -1;
    }
  }
  std::vector<const LayerImpl*> order;
  for (const auto& [op, d] : depth) order.push_back(op);
  std::sort(order.begin(), order.end(), [&](const LayerImpl* a, const LayerImpl* b) {
    if (depth[a] != depth[b]) return depth[a] > depth[b];
    return index[a] < index[b];
  });
  return order;
}

std::vector<const LayerImpl*> keras_layers(const LayerImpl& net) {
  std::vector<const LayerImpl*> out;
  if (auto* s = dynamic_cast<const SequentialImpl*>(&net)) {
    for (const Layer& l : s->layers()) out.push_back(l.impl().get());
    return out;
  }
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) return keras_layer_order(*f);
  for (const auto& sub : net.sublayers()) out.push_back(sub.get());
  return out;
}

std::vector<Variable> keras_trainable_variables(const LayerImpl& net) {
  std::vector<Variable> out;
  std::set<std::uint64_t> seen;
  std::function<void(const LayerImpl&)> add = [&](const LayerImpl& l) {
    if (!l.trainable()) return;
    for (const Variable& v : l.own_variables()) {
      if (v.trainable() && seen.insert(v.id()).second) out.push_back(v);
    }
    for (const LayerImpl* sub : keras_layers(l)) add(*sub);
  };
  add(net);
  return out;
}

json model_config(const LayerImpl& net) {
  if (auto* f = dynamic_cast<const FunctionalImpl*>(&net)) {
    return {{"module", "keras.src.models.functional"},
            {"class_name", "Functional"},
            {"config", functional_config(*f)},
            {"registered_name", "Functional"},
            {"build_config", {{"input_shape", nullptr}}}};
  }
  if (auto* s = dynamic_cast<const SequentialImpl*>(&net)) {
    json config = sequential_config(*s);
    return {{"module", "keras"},
            {"class_name", "Sequential"},
            {"config", config},
            {"registered_name", nullptr},
            {"build_config", {{"input_shape", config["build_input_shape"]}}}};
  }
  detail::throw_error<ValueError>(
      "save: model '", net.name(), "' is a subclassed model (", net.class_name(),
      "), which has no config. Hint: use save_weights / load_weights with a model you "
      "construct in code");
}

Model model_from_config(const json& j, const std::string& where) {
  try {
    return model_from_checked_config(j, where);
  } catch (const json::exception& e) {
    // A key of another JSON type than Keras writes (a number for a name, …).
    detail::throw_error<ValueError>(where, ": not a model config Lockstep reads (", e.what(), ")");
  } catch (const Error&) {  // a layer's or the graph's own check: it names no file
    detail::rethrow_naming(where);
  }
}

namespace {

Model model_from_checked_config(const json& j, const std::string& where) {
  LOCKSTEP_CHECK(j.is_object() && j.contains("class_name") && j.contains("config"), where,
                 ": not a Keras model config (expected an object with class_name and config)");
  const std::string cls = j["class_name"];
  const json& config = j["config"];
  Model model;
  if (cls == "Sequential") {
    model = sequential_from_config(config, where);
  } else if (cls == "Functional" || cls == "Model") {
    model = functional_from_config(config, where);
  } else {
    detail::throw_error<ValueError>(where, ": the model class '", cls,
                                    "' is not one Lockstep rebuilds (Functional, Sequential)");
  }
  if (config.contains("trainable") && config["trainable"].is_boolean() && !config["trainable"])
    model.set_trainable(false);
  return model;
}

}  // namespace
}  // namespace lockstep::keras
