// Optimizers as Keras's files hold them: the config (class name and
// arguments) and `optimizer.variables` (iterations, the learning rate, the
// slots in Keras's order).
#include <cmath>
#include <set>

#include "lockstep/core/error.h"
#include "lockstep/core/nearest_name.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "optim/loss_scale.h"

namespace lockstep {

OptimizerConfig OptimizerImpl::get_config() const {
  OptimizerConfig c;
  if (learning_rate_.schedule().name() == "constant")
    c.emplace_back("learning_rate", learning_rate_.at(0));
  for (auto& e : own_config()) c.push_back(std::move(e));
  c.emplace_back("weight_decay", weight_decay_);
  c.emplace_back("clipnorm", clip_.clipnorm);
  c.emplace_back("clipvalue", clip_.clipvalue);
  c.emplace_back("global_clipnorm", clip_.global_clipnorm);
  return c;
}

namespace {

bool constant_rate(const LearningRateSchedule& s) { return s.name() == "constant"; }

// The Keras position of slot `i` of variable `k`.
std::size_t keras_slot_index(bool by_variable, std::size_t k, int i, std::size_t num_vars,
                             int num_slots) {
  return by_variable ? k * static_cast<std::size_t>(num_slots) + static_cast<std::size_t>(i)
                     : static_cast<std::size_t>(i) * num_vars + k;
}

}  // namespace

using detail::kLossScaleKerasVariables;

std::vector<Tensor> OptimizerImpl::keras_variables(const std::vector<Variable>& trainable) const {
  std::vector<Tensor> out;
  if (loss_scaling_) {
    out.push_back(Tensor::from_vector<std::int64_t>({0}, Shape{}));
    out.push_back(Tensor::from_vector<float>({0.0f}, Shape{}));
    out.push_back(Tensor::from_vector<std::int64_t>({loss_scale_step_counter()}, Shape{}));
    out.push_back(Tensor::from_vector<float>({static_cast<float>(dynamic_scale())}, Shape{}));
  }
  out.push_back(Tensor::from_vector<std::int64_t>({iterations()}, Shape{}));
  const bool constant = constant_rate(learning_rate_.schedule());
  if (constant)
    out.push_back(Tensor::from_vector<float>({static_cast<float>(learning_rate_.at(0))}, Shape{}));
  std::map<std::string, Tensor> made;
  for (auto& [key, t] : slot_values(trainable)) made.emplace(key, t);
  const int slots = num_slots();
  std::vector<Tensor> ordered(trainable.size() * static_cast<std::size_t>(slots));
  for (std::size_t k = 0; k < trainable.size(); ++k) {
    for (int i = 0; i < slots; ++i) {
      auto it = made.find(std::to_string(k) + "/" + slot_name(i));
      ordered[keras_slot_index(keras_slots_by_variable(), k, i, trainable.size(), slots)] =
          it != made.end() ? it->second.copy_to(host_device())
                           : Tensor::full(trainable[k].shape(), slot_initial_value(i));
    }
  }
  out.insert(out.end(), ordered.begin(), ordered.end());
  for (Tensor& t : keras_scalars(iterations())) out.push_back(std::move(t));
  return out;
}

void OptimizerImpl::set_keras_variables(const std::vector<Variable>& trainable,
                                        const std::vector<Tensor>& all_values,
                                        const std::string& source) {
  // A LossScaleOptimizer's own variables come first (Keras 3's order):
  // its step_counter and dynamic_scale go to restore_slot_values, which
  // checks them with the slots.
  std::vector<Tensor> values = all_values;
  std::map<std::string, Tensor> by_name;
  if (loss_scaling_) {
    LOCKSTEP_CHECK(values.size() > kLossScaleKerasVariables, source, ": the optimizer has ",
                   values.size(), " variables; a LossScaleOptimizer has ", kLossScaleKerasVariables,
                   " of its own (iterations, learning_rate, step_counter, dynamic_scale) before "
                   "its inner optimizer's");
    by_name.emplace(detail::kLossScaleStepsKey, values[2]);
    by_name.emplace(detail::kLossScaleKey, values[3]);
    values.erase(values.begin(), values.begin() + kLossScaleKerasVariables);
  }
  const bool constant = constant_rate(learning_rate_.schedule());
  const int slots = num_slots();
  const std::size_t scalars = 1 + (constant ? 1 : 0);
  const std::size_t after = keras_scalars(0).size();  // Nadam's u_product
  const std::size_t expected = scalars + trainable.size() * static_cast<std::size_t>(slots) + after;
  // An optimizer Keras never built (compiled, not trained) saves no slots.
  const bool unbuilt = values.size() == scalars && slots > 0;
  LOCKSTEP_CHECK(values.size() == expected || unbuilt, source, ": the optimizer (", name_, ") has ",
                 values.size(), " variables; expected ", expected, " (iterations, ",
                 constant ? "the learning rate, " : "", slots, " slot", slots == 1 ? "" : "s",
                 " for each of ", trainable.size(), " trainable variables",
                 after > 0 ? ", then " + std::to_string(after) + " scalar" : std::string(),
                 "): another optimizer, or its settings differ");
  for (std::size_t i = values.size() - (unbuilt ? 0 : after); i < values.size(); ++i) {
    LOCKSTEP_CHECK(values[i].numel() == 1 && is_floating(values[i].dtype()), source,
                   ": the optimizer's variable ", i, " is ", values[i].dtype(), " ",
                   values[i].shape(), "; expected one number (", name_,
                   "'s running product, which Lockstep derives from the step count)");
  }
  const Tensor& steps = values[0];
  LOCKSTEP_CHECK(steps.numel() == 1 && is_integral(steps.dtype()), source,
                 ": the optimizer's variable 0 (iterations) is ", steps.dtype(), " ", steps.shape(),
                 "; expected one integer");
  const std::int64_t step = steps.to(DType::kInt64).data<std::int64_t>()[0];
  LOCKSTEP_CHECK(step >= 0, source, ": the optimizer's variable 0 (iterations) is ", step,
                 "; a step count is >= 0");
  double rate = 0;
  if (constant) {
    const Tensor& lr = values[1];
    LOCKSTEP_CHECK(lr.numel() == 1 && is_floating(lr.dtype()), source,
                   ": the optimizer's variable 1 (learning_rate) is ", lr.dtype(), " ", lr.shape(),
                   "; expected one number");
    rate = lr.to(DType::kFloat32).data<float>()[0];
    LOCKSTEP_CHECK(std::isfinite(rate) && rate >= 0, source,
                   ": the optimizer's variable 1 (learning_rate) is ", rate,
                   "; a learning rate is a number >= 0");
  }
  const std::size_t first_slot = scalars;
  for (std::size_t k = 0; !unbuilt && k < trainable.size(); ++k) {
    for (int i = 0; i < slots; ++i) {
      const std::size_t at =
          first_slot + keras_slot_index(keras_slots_by_variable(), k, i, trainable.size(), slots);
      const Tensor& t = values[at];
      LOCKSTEP_CHECK_AS(ShapeError, t.shape() == trainable[k].shape(), source,
                        ": the optimizer's variable ", at, " (", slot_name(i), " of '",
                        trainable[k].name(), "') has shape ", t.shape(), "; the variable has ",
                        trainable[k].shape());
      by_name.emplace(std::to_string(k) + "/" + slot_name(i), t);
    }
  }
  if (!unbuilt || loss_scaling_) restore_slot_values(trainable, by_name);  // checks, then sets
  set_iterations(step);
  // Keras keeps the rate as a float32 variable: a value that rounds to ours
  // is ours (a round trip keeps every bit of the float64 rate); another one
  // was changed on purpose (a callback) and wins.
  if (constant && static_cast<float>(learning_rate_.at(0)) != static_cast<float>(rate))
    learning_rate_ = LearningRate(rate);
}

namespace optimizers {

Optimizer from_config(const std::string& class_name,
                      const std::map<std::string, OptimizerArgument>& args,
                      const LearningRateSchedule* learning_rate) {
  std::set<std::string> used;
  auto number = [&](const std::string& key, double fallback) {
    used.insert(key);
    auto it = args.find(key);
    if (it == args.end()) return fallback;
    if (const double* d = std::get_if<double>(&it->second)) return *d;
    detail::throw_error<ValueError>(class_name, ": argument '", key,
                                    "' must be a number, got a flag");
  };
  auto flag = [&](const std::string& key, bool fallback) {
    used.insert(key);
    auto it = args.find(key);
    if (it == args.end()) return fallback;
    if (const bool* b = std::get_if<bool>(&it->second)) return *b;
    detail::throw_error<ValueError>(class_name, ": argument '", key,
                                    "' must be true or false, got a number");
  };
  auto refuse = [&](const std::string& key, const char* why) {
    used.insert(key);
    LOCKSTEP_CHECK(!args.contains(key), class_name, ": argument '", key, "' is set, but ", why);
  };
  const double default_rate = class_name == "SGD" ? 0.01 : 0.001;
  const double rate = number("learning_rate", default_rate);
  // A negative or non-finite rate from a file trains uphill or to NaN
  // (issue #41: a .keras with learning_rate -0.1 was taken).
  LOCKSTEP_CHECK(std::isfinite(rate) && rate >= 0, class_name,
                 ": learning_rate must be a number >= 0, got ", rate);
  const LearningRate lr =
      learning_rate != nullptr ? LearningRate(*learning_rate) : LearningRate(rate);
  used.insert("learning_rate");
  const ClipOptions clip{.clipnorm = number("clipnorm", 0),
                         .clipvalue = number("clipvalue", 0),
                         .global_clipnorm = number("global_clipnorm", 0)};
  LOCKSTEP_CHECK(!flag("use_ema", false), class_name,
                 ": use_ema=true (weight averaging) is not implemented in Lockstep");
  (void)number("ema_momentum", 0.99);          // used only with use_ema
  (void)number("ema_overwrite_frequency", 0);  // used only with use_ema
  refuse("loss_scale_factor",
         "Lockstep has no fixed loss scale in the optimizer (LossScaleOptimizer scales "
         "dynamically)");
  refuse("gradient_accumulation_steps", "Lockstep does not accumulate gradients in the optimizer");

  Optimizer made;
  if (class_name == "SGD") {
    made = SGD({.learning_rate = lr,
                .momentum = number("momentum", 0.0),
                .nesterov = flag("nesterov", false),
                .weight_decay = number("weight_decay", 0),
                .clip = clip});
  } else if (class_name == "Adam" || class_name == "AdamW") {
    LOCKSTEP_CHECK(!flag("amsgrad", false), class_name,
                   ": amsgrad=true is not implemented in Lockstep");
    const double b1 = number("beta_1", 0.9), b2 = number("beta_2", 0.999),
                 eps = number("epsilon", 1e-7);
    if (class_name == "Adam") {
      made = Adam({.learning_rate = lr,
                   .beta_1 = b1,
                   .beta_2 = b2,
                   .epsilon = eps,
                   .weight_decay = number("weight_decay", 0),
                   .clip = clip});
    } else {
      made = AdamW({.learning_rate = lr,
                    .weight_decay = number("weight_decay", 0.004),
                    .beta_1 = b1,
                    .beta_2 = b2,
                    .epsilon = eps,
                    .clip = clip});
    }
  } else if (class_name == "RMSprop") {
    made = RMSprop({.learning_rate = lr,
                    .rho = number("rho", 0.9),
                    .momentum = number("momentum", 0.0),
                    .epsilon = number("epsilon", 1e-7),
                    .centered = flag("centered", false),
                    .weight_decay = number("weight_decay", 0),
                    .clip = clip});
  } else if (class_name == "Adagrad") {
    made = Adagrad({.learning_rate = lr,
                    .initial_accumulator_value = number("initial_accumulator_value", 0.1),
                    .epsilon = number("epsilon", 1e-7),
                    .weight_decay = number("weight_decay", 0),
                    .clip = clip});
  } else if (class_name == "Ftrl") {
    made = Ftrl(
        {.learning_rate = lr,
         .learning_rate_power = number("learning_rate_power", -0.5),
         .initial_accumulator_value = number("initial_accumulator_value", 0.1),
         .l1_regularization_strength = number("l1_regularization_strength", 0),
         .l2_regularization_strength = number("l2_regularization_strength", 0),
         .l2_shrinkage_regularization_strength = number("l2_shrinkage_regularization_strength", 0),
         .beta = number("beta", 0),
         .weight_decay = number("weight_decay", 0),
         .clip = clip});
  } else if (class_name == "Nadam" || class_name == "Adamax") {
    const AdamOptions o{.learning_rate = lr,
                        .beta_1 = number("beta_1", 0.9),
                        .beta_2 = number("beta_2", 0.999),
                        .epsilon = number("epsilon", 1e-7),
                        .weight_decay = number("weight_decay", 0),
                        .clip = clip};
    made = class_name == "Nadam" ? Optimizer(Nadam(o)) : Optimizer(Adamax(o));
  } else if (class_name == "Adadelta") {
    made = Adadelta({.learning_rate = lr,
                     .rho = number("rho", 0.95),
                     .epsilon = number("epsilon", 1e-7),
                     .weight_decay = number("weight_decay", 0),
                     .clip = clip});
  } else if (class_name == "Lion") {
    made = Lion({.learning_rate = lr,
                 .beta_1 = number("beta_1", 0.9),
                 .beta_2 = number("beta_2", 0.99),
                 .weight_decay = number("weight_decay", 0),
                 .clip = clip});
  } else {
    detail::throw_error<ValueError>(
        "unknown optimizer class '", class_name, "' (did you mean '",
        nearest_name(class_name, {"SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Ftrl", "Nadam",
                                  "Adamax", "Adadelta", "Lion"}),
        "'?); Lockstep has SGD, Adam, AdamW, RMSprop, Adagrad, Ftrl, Nadam, Adamax, Adadelta and "
        "Lion");
  }
  for (const auto& [key, value] : args) {
    LOCKSTEP_CHECK(used.contains(key), class_name, ": argument '", key, "' is not one Lockstep's ",
                   class_name, " takes");
  }
  return made;
}

}  // namespace optimizers
}  // namespace lockstep
