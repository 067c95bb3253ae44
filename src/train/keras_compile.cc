// Keras 3's compile_config: the optimizer, the losses and the metrics of a
// compiled model as Keras serializes them, and back.
#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include "train/keras_config.h"
#include "train/model_internal.h"

namespace lockstep::keras {
namespace {

// Keras's "not set" for the base optimizer's numbers that are 0 here.
bool unset_when_zero(const std::string& key, const std::string& cls) {
  if (key == "weight_decay") return cls != "AdamW";
  return key == "clipnorm" || key == "clipvalue" || key == "global_clipnorm";
}

json loss_json(const Loss& loss) {
  const LayerConfig ours = loss.impl()->get_config();
  json config = json::object();
  for (const auto& [k, v] : ours.entries()) {
    std::visit([&, key = k](const auto& value) { config[key] = value; }, v);
  }
  return {{"module", "keras.losses"},
          {"class_name", loss.impl()->class_name()},
          {"config", config},
          {"registered_name", nullptr}};
}

Loss loss_from_json(const json& j, const std::string& where) {
  if (j.is_string()) {
    try {
      return losses::get(j.get<std::string>());
    } catch (const ValueError& e) {
      detail::throw_error<ValueError>(where, ": ", e.what());
    }
  }
  LOCKSTEP_CHECK(j.is_object() && j.contains("class_name"), where, ": the loss ", j.dump(),
                 " is neither a name nor a Keras object");
  LayerConfig c;
  const json config = j.value("config", json::object());
  for (const auto& [k, v] : config.items()) {
    if (v.is_null()) continue;
    if (k == "axis") {
      LOCKSTEP_CHECK(v == -1, where, ": the loss reduces over axis ", v.dump(),
                     "; Lockstep's losses use the last axis");
      continue;
    }
    if (k == "dtype") continue;  // the loss's compute dtype: float32 here
    if (v.is_boolean()) {
      c.set(k, v.get<bool>());
    } else if (v.is_number()) {
      c.set(k, v.get<double>());
    } else if (v.is_string()) {
      c.set(k, v.get<std::string>());
    } else {
      detail::throw_error<ValueError>(where, ": the loss's ", k, " = ", v.dump(),
                                      " is a setting Lockstep cannot take");
    }
  }
  try {
    return losses::from_config(j["class_name"].get<std::string>(), c);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
}

// A learning-rate schedule as Keras serializes it; Lockstep's RampUp, which
// Keras lacks, is registered under the "lockstep>" package.
json schedule_json(const LearningRateSchedule& schedule) {
  const std::string& cls = schedule.name();
  LOCKSTEP_CHECK(!schedule.get_config().empty(), "save: the learning-rate schedule '", cls,
                 "' is a bare function with no config, which a model file cannot hold; build it "
                 "with one of schedules:: (ExponentialDecay, PiecewiseConstantDecay, CosineDecay, "
                 "PolynomialDecay, RampUp)");
  json config = {{"name", cls}};
  for (const auto& [k, v] : schedule.get_config()) {
    json value;
    std::visit([&](const auto& x) { value = x; }, v);
    if (cls == "CosineDecay" && k == "warmup_target" && value.get<double>() < 0) value = nullptr;
    config[k] = value;
  }
  const bool keras_has = cls != "RampUp";
  return {{"module", keras_has ? "keras.optimizers.schedules" : "lockstep"},
          {"class_name", cls},
          {"config", config},
          {"registered_name", keras_has ? json(nullptr) : json("lockstep>" + cls)}};
}

LearningRateSchedule schedule_from_json(const json& j, const std::string& where) {
  std::map<std::string, ScheduleArgument> args;
  const json config = j.value("config", json::object());
  for (const auto& [k, v] : config.items()) {
    if (v.is_null() || k == "name") continue;
    if (v.is_boolean()) {
      args[k] = v.get<bool>();
    } else if (v.is_number()) {
      args[k] = v.get<double>();
    } else if (v.is_array()) {
      args[k] = v.get<std::vector<double>>();
    } else {
      detail::throw_error<ValueError>(where, ": the schedule's ", k, " = ", v.dump(),
                                      " is a setting Lockstep cannot take");
    }
  }
  std::string cls = j.value("class_name", std::string());
  if (j.contains("registered_name") && j["registered_name"].is_string() &&
      j["registered_name"].get<std::string>().rfind("lockstep>", 0) == 0)
    cls = j["registered_name"].get<std::string>().substr(9);
  try {
    return schedules::from_config(cls, args);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
}

// A metric as compile_config records it: the name given as a string, or
// Keras's object with the metric's settings.
json metric_json(const MetricSpec& m) {
  if (!m.metric.defined()) return m.name;
  const MetricImpl& impl = *m.metric.impl();
  if (impl.keras_class().empty()) return impl.name();  // a custom metric: its name
  json config = {{"name", impl.name()}, {"dtype", "float32"}};
  for (const auto& [k, v] : impl.keras_settings())
    std::visit([&, key = k](const auto& x) { config[key] = x; }, v);
  return {{"module", "keras.metrics"},
          {"class_name", impl.keras_class()},
          {"config", config},
          {"registered_name", nullptr}};
}

// Keras's metric object (a compile_config entry) as a Lockstep metric with
// its settings and name.
Metric metric_from_json(const json& m, const std::string& where) {
  const std::string cls = m["class_name"].get<std::string>();
  const json config = m.value("config", json::object());
  std::string name;
  MetricSettings settings;
  for (const auto& [k, v] : config.items()) {
    if (v.is_null()) continue;
    if (k == "name") {
      name = v.get<std::string>();
    } else if (k == "dtype") {
      const std::string d = v.is_string() ? v.get<std::string>()
                                          : v.value("config", json::object()).value("name", "");
      LOCKSTEP_CHECK(d == "float32", where, ": the metric ", cls, " '", name, "' has dtype ",
                     v.dump(), "; Lockstep's metrics accumulate in float64 and report float32");
    } else if (v.is_boolean()) {
      settings.emplace_back(k, v.get<bool>());
    } else if (v.is_number_integer()) {
      settings.emplace_back(k, v.get<std::int64_t>());
    } else if (v.is_number()) {
      settings.emplace_back(k, v.get<double>());
    } else if (v.is_string()) {
      settings.emplace_back(k, v.get<std::string>());
    } else {
      detail::throw_error<ValueError>(where, ": the metric ", cls, "'s ", k, " = ", v.dump(),
                                      " is a setting Lockstep cannot take");
    }
  }
  try {
    return metrics::from_config(cls, settings, name);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": metric '", name.empty() ? cls : name,
                                    "': ", e.what());
  }
}

}  // namespace

json optimizer_json(const Optimizer& optimizer) {
  const OptimizerImpl& o = *optimizer.operator->();
  const std::string& cls = o.class_name();
  json config = {{"name", to_snake_case(cls)}};
  for (const auto& [k, v] : o.get_config()) {
    json value;
    std::visit([&](const auto& x) { value = x; }, v);
    config[k] = value.is_number() && value.get<double>() == 0 && unset_when_zero(k, cls)
                    ? json(nullptr)
                    : value;
  }
  if (o.learning_rate_schedule().name() != "constant")
    config["learning_rate"] = schedule_json(o.learning_rate_schedule());
  config["use_ema"] = false;
  config["ema_momentum"] = 0.99;
  config["ema_overwrite_frequency"] = nullptr;
  config["loss_scale_factor"] = nullptr;
  config["gradient_accumulation_steps"] = nullptr;
  json inner = {{"module", "keras.optimizers"},
                {"class_name", cls},
                {"config", config},
                {"registered_name", nullptr}};
  if (!o.loss_scaling()) return inner;
  return {{"module", "keras.optimizers"},
          {"class_name", "LossScaleOptimizer"},
          {"config",
           {{"name", "loss_scale_optimizer"},
            {"inner_optimizer", std::move(inner)},
            {"initial_scale", o.loss_scaling()->initial_scale},
            {"dynamic_growth_steps", o.loss_scaling()->dynamic_growth_steps}}},
          {"registered_name", nullptr}};
}

Optimizer optimizer_from_json(const json& j, const std::string& where) {
  if (j.is_string()) {
    try {
      return optimizers::get(j.get<std::string>());
    } catch (const ValueError& e) {
      detail::throw_error<ValueError>(where, ": ", e.what());
    }
  }
  LOCKSTEP_CHECK(j.is_object() && j.contains("class_name"), where, ": the optimizer ", j.dump(),
                 " is neither a name nor a Keras object");
  std::map<std::string, OptimizerArgument> args;
  const json config = j.value("config", json::object());
  if (j["class_name"] == "LossScaleOptimizer") {
    LOCKSTEP_CHECK(config.is_object() && config.contains("inner_optimizer"), where,
                   ": the LossScaleOptimizer has no inner_optimizer");
    optimizers::LossScaleOptimizerOptions options;
    for (const auto& [k, v] : config.items()) {
      if (k == "name" || k == "inner_optimizer") continue;
      if (k == "initial_scale" && v.is_number()) {
        options.initial_scale = v.get<double>();
      } else if (k == "dynamic_growth_steps" && v.is_number_integer()) {
        options.dynamic_growth_steps = v.get<std::int64_t>();
      } else {
        detail::throw_error<ValueError>(where, ": the LossScaleOptimizer's ", k, " = ", v.dump(),
                                        " is a setting Lockstep cannot take");
      }
    }
    const Optimizer inner =
        optimizer_from_json(config["inner_optimizer"], where + ": inner_optimizer");
    try {
      return optimizers::LossScaleOptimizer(inner, options);
    } catch (const ValueError& e) {
      detail::throw_error<ValueError>(where, ": ", e.what());
    }
  }
  std::optional<LearningRateSchedule> schedule;
  for (const auto& [k, v] : config.items()) {
    if (v.is_null() || k == "name") continue;
    if (k == "learning_rate" && v.is_object()) {
      schedule = schedule_from_json(v, where + ": learning_rate");
      continue;
    }
    if (v.is_boolean()) {
      args[k] = v.get<bool>();
    } else if (v.is_number()) {
      args[k] = v.get<double>();
    } else {
      detail::throw_error<ValueError>(where, ": the optimizer's ", k, " = ", v.dump(),
                                      k == "learning_rate"
                                          ? " is a schedule Lockstep cannot rebuild yet"
                                          : " is a setting Lockstep cannot take");
    }
  }
  try {
    return optimizers::from_config(j["class_name"].get<std::string>(), args,
                                   schedule ? &*schedule : nullptr);
  } catch (const ValueError& e) {
    detail::throw_error<ValueError>(where, ": ", e.what());
  }
}

json compile_config(const CompiledForm& c) {
  const std::vector<std::string> names =
      c.named_outputs ? *c.named_outputs : std::vector<std::string>{};
  const bool by_name = !names.empty();
  const std::vector<Loss>& losses = *c.losses;
  json loss;
  if (losses.size() == 1) {
    loss = loss_json(losses[0]);
  } else if (by_name) {
    loss = json::object();
    for (std::size_t i = 0; i < losses.size(); ++i)
      loss[names.at(i)] = losses[i].defined() ? loss_json(losses[i]) : json(nullptr);
  } else {
    loss = json::array();
    for (const Loss& l : losses) loss.push_back(loss_json(l));
  }
  json weights = nullptr;
  if (!c.loss_weights->empty()) {
    weights = json::array();
    for (double w : *c.loss_weights) weights.push_back(w);
    if (by_name) {
      weights = json::object();
      for (std::size_t i = 0; i < c.loss_weights->size(); ++i)
        weights[names.at(i)] = (*c.loss_weights)[i];
    }
  }
  auto list = [](const std::vector<MetricSpec>& specs) {
    json out = json::array();
    for (const MetricSpec& m : specs) out.push_back(metric_json(m));
    return out;
  };
  // Keras 3 reads a flat list of a multi-output model's metrics as one entry
  // per output: every output's metrics are written as one list per output.
  std::vector<std::vector<MetricSpec>> per_output = c.output_metrics && !c.output_metrics->empty()
                                                        ? *c.output_metrics
                                                        : std::vector<std::vector<MetricSpec>>{};
  if (per_output.empty() && c.num_outputs > 1 && !c.metrics->empty())
    per_output.assign(c.num_outputs, *c.metrics);
  json metrics = nullptr;
  if (!per_output.empty()) {
    metrics = by_name ? json::object() : json::array();
    for (std::size_t i = 0; i < per_output.size(); ++i) {
      const json entry = per_output[i].empty() ? json(nullptr) : list(per_output[i]);
      if (by_name) {
        if (!per_output[i].empty()) metrics[names.at(i)] = entry;
      } else {
        metrics.push_back(entry);
      }
    }
  } else if (!c.metrics->empty()) {
    metrics = list(*c.metrics);
  }
  return {{"optimizer", optimizer_json(*c.optimizer)},
          {"loss", loss},
          {"loss_weights", weights},
          {"metrics", metrics},
          {"weighted_metrics", nullptr},
          {"run_eagerly", false},
          {"steps_per_execution", c.steps_per_execution},
          {"jit_compile", false}};
}

void compile_from_config(Model& model, const json& config, const std::string& where) {
  CompileOptions options = compile_options_from_config(
      config, where, detail::output_names(*model.impl(), detail::declared_outputs(*model.impl())));
  try {
    model.compile(std::move(options));
  } catch (const Error&) {
    detail::rethrow_naming(where + ": compile_config");
  }
}

namespace {

CompileOptions checked_compile_options(const json& config, const std::string& where,
                                       const std::vector<std::string>& outputs);

}  // namespace

CompileOptions compile_options_from_config(const json& config, const std::string& where,
                                           const std::vector<std::string>& output_names) {
  try {
    return checked_compile_options(config, where, output_names);
  } catch (const json::exception& e) {
    detail::throw_error<ValueError>(where, ": compile_config: not one Lockstep reads (", e.what(),
                                    ")");
  }
}

namespace {

// A metric entry: a name, or Keras's object.
MetricSpec metric_entry(const json& m, const std::string& at) {
  if (m.is_string()) return MetricSpec(m.get<std::string>());
  LOCKSTEP_CHECK(m.is_object() && m.contains("class_name"), at, ": the metric ", m.dump(),
                 " is not one Lockstep reads (a name or a Keras metric object)");
  return MetricSpec(metric_from_json(m, at));
}

// One output's metrics: null, one entry, or a list of them.
std::vector<MetricSpec> metric_entries(const json& m, const std::string& at) {
  std::vector<MetricSpec> out;
  if (m.is_null()) return out;
  if (m.is_array()) {
    for (const json& x : m) out.push_back(metric_entry(x, at));
  } else {
    out.push_back(metric_entry(m, at));
  }
  return out;
}

// A dict's keys must be output names.
void check_output_names(const json& dict, const std::vector<std::string>& outputs,
                        const std::string& at, const char* what) {
  for (const auto& [key, value] : dict.items()) {
    if (std::find(outputs.begin(), outputs.end(), key) != outputs.end()) continue;
    std::string all;
    for (const std::string& n : outputs) all += (all.empty() ? "" : ", ") + n;
    detail::throw_error<ValueError>(at, ": ", what, " names the output '", key,
                                    "'; the model's outputs are ", all.empty() ? "unnamed" : all);
  }
}

CompileOptions checked_compile_options(const json& config, const std::string& where,
                                       const std::vector<std::string>& outputs) {
  const std::string at = where + ": compile_config";
  LOCKSTEP_CHECK(config.is_object(), at, " is not a JSON object");
  const std::size_t n = std::max<std::size_t>(outputs.size(), 1);
  CompileOptions o;
  if (config.contains("optimizer") && !config["optimizer"].is_null())
    o.optimizer = optimizer_from_json(config["optimizer"], at + ": optimizer");
  const json loss = config.value("loss", json());
  LOCKSTEP_CHECK(!loss.is_null(), at, " has no loss; Lockstep compiles with one");
  if (loss.is_array()) {
    for (const json& l : loss) o.losses.push_back(loss_from_json(l, at + ": loss"));
  } else if (loss.is_object() && !loss.contains("class_name")) {
    check_output_names(loss, outputs, at, "loss");
    for (const auto& [name, l] : loss.items()) {
      if (!l.is_null()) o.loss_by_output[name] = loss_from_json(l, at + ": loss of " + name);
    }
  } else {
    o.loss = loss_from_json(loss, at + ": loss");
  }
  const json weights = config.value("loss_weights", json());
  if (weights.is_array()) {
    for (const json& w : weights) o.loss_weights.push_back(w.get<double>());
  } else if (weights.is_object()) {
    check_output_names(weights, outputs, at, "loss_weights");
    for (const auto& [name, w] : weights.items()) o.loss_weights_by_output[name] = w.get<double>();
  } else {
    LOCKSTEP_CHECK(weights.is_null(), at, ": loss_weights ", weights.dump(),
                   " is neither a list nor a dict by output name");
  }
  // Keras 3's reading (trainers/compile_utils.py): one output takes every
  // metric given; several take a list with one entry per output, or a dict
  // by output name.
  const json metrics = config.value("metrics", json());
  const std::string mat = at + ": metrics";
  if (metrics.is_null()) {
  } else if (n == 1) {
    if (metrics.is_object() && !metrics.contains("class_name")) {
      check_output_names(metrics, outputs, at, "metrics");
      for (const auto& [name, m] : metrics.items())
        for (MetricSpec& spec : metric_entries(m, mat)) o.metrics.push_back(std::move(spec));
    } else {
      const json flat = metrics.is_array() ? metrics : json::array({metrics});
      for (const json& m : flat)
        for (MetricSpec& spec : metric_entries(m, mat)) o.metrics.push_back(std::move(spec));
    }
  } else if (metrics.is_array()) {
    LOCKSTEP_CHECK(metrics.size() == n, mat, " ", metrics.dump(), " has ", metrics.size(),
                   " entries for a model with ", n,
                   " outputs; Keras 3 reads a list as one entry per output");
    for (const json& m : metrics) o.output_metrics.push_back(metric_entries(m, mat));
  } else if (metrics.is_object() && !metrics.contains("class_name")) {
    check_output_names(metrics, outputs, at, "metrics");
    for (const auto& [name, m] : metrics.items())
      o.metrics_by_output[name] = metric_entries(m, mat);
  } else {
    detail::throw_error<ValueError>(mat, " ", metrics.dump(), " for a model with ", n,
                                    " outputs: Keras 3 takes a list with one entry per output "
                                    "or a dict by output name");
  }
  const json weighted = config.value("weighted_metrics", json());
  LOCKSTEP_CHECK(weighted.is_null() || (weighted.is_array() && weighted.empty()), at,
                 ": weighted_metrics are not supported");
  const json spe = config.value("steps_per_execution", json(1));
  LOCKSTEP_CHECK(spe.is_number_integer() && spe.get<std::int64_t>() >= 1, at,
                 ": steps_per_execution = ", spe.dump(), " is not a count >= 1");
  o.steps_per_execution = spe.get<std::int64_t>();
  o.run_eagerly = config.value("run_eagerly", false);
  return o;
}

}  // namespace
}  // namespace lockstep::keras
