// Learning-rate schedules (keras.optimizers.schedules): functions of the
// optimizer's step count (the number of updates applied so far).
//
//   ls::optimizers::Adam({.learning_rate = ls::schedules::ExponentialDecay(1e-3, 1000, 0.96)})
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace lockstep {

// One argument of a schedule's Keras config: a flag, a number, or a list.
using ScheduleArgument = std::variant<bool, double, std::vector<double>>;
using ScheduleConfig = std::vector<std::pair<std::string, ScheduleArgument>>;

// A named function from the step to a learning rate. Value type. The
// built-in schedules carry their Keras arguments (config), so a model file
// can hold them; a schedule made from a bare function has none.
class LearningRateSchedule {
 public:
  using Fn = std::function<double(std::int64_t step)>;
  LearningRateSchedule(std::string name, Fn fn, ScheduleConfig config = {})
      : name_(std::move(name)), fn_(std::move(fn)), config_(std::move(config)) {}
  double operator()(std::int64_t step) const { return fn_(step); }
  // Keras's class name ("ExponentialDecay"), or "constant" for a number.
  const std::string& name() const { return name_; }
  const ScheduleConfig& get_config() const { return config_; }

 private:
  std::string name_;
  Fn fn_;
  ScheduleConfig config_;
};

// A constant rate or a schedule (what `learning_rate` options accept).
class LearningRate {
 public:
  LearningRate(double value)  // NOLINT: a plain number is the common case
      : schedule_("constant", [value](std::int64_t) { return value; }) {}
  LearningRate(LearningRateSchedule schedule) : schedule_(std::move(schedule)) {}  // NOLINT
  double at(std::int64_t step) const { return schedule_(step); }
  const LearningRateSchedule& schedule() const { return schedule_; }

 private:
  LearningRateSchedule schedule_;
};

namespace schedules {

// initial · rate^(step / decay_steps) (floored exponent with staircase).
LearningRateSchedule ExponentialDecay(double initial_learning_rate, std::int64_t decay_steps,
                                      double decay_rate, bool staircase = false);
// values[i] while step <= boundaries[i]; values.back() after the last boundary.
LearningRateSchedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries,
                                            std::vector<double> values);
struct CosineDecayOptions {
  double alpha = 0.0;             // final rate as a fraction of the initial
  double warmup_target = -1.0;    // < 0: no warmup
  std::int64_t warmup_steps = 0;  // linear warmup from initial to warmup_target
};
// Keras 3's CosineDecay, with its optional linear warmup.
LearningRateSchedule CosineDecay(double initial_learning_rate, std::int64_t decay_steps,
                                 CosineDecayOptions options = {});
LearningRateSchedule PolynomialDecay(double initial_learning_rate, std::int64_t decay_steps,
                                     double end_learning_rate = 1e-4, double power = 1.0,
                                     bool cycle = false);

// The ramp-up used when fine-tuning (the guide's TPU/MobileNet recipe): a
// linear ramp from `start` to `max` over `rampup` units, `max` held for
// `sustain` units, then exponential decay towards `min`. A unit is
// `steps_per_unit` optimizer steps (steps per epoch, for a schedule in epochs).
struct RampUpOptions {
  double start = 1e-5;
  double max = 5e-4;
  double min = 1e-5;
  double rampup = 5;
  double sustain = 0;
  double decay = 0.8;
  std::int64_t steps_per_unit = 1;
};
LearningRateSchedule RampUp(RampUpOptions options);

// A built-in schedule from its class name and get_config()'s arguments; an
// unknown class or argument is a ValueError naming it.
LearningRateSchedule from_config(const std::string& class_name,
                                 const std::map<std::string, ScheduleArgument>& args);

}  // namespace schedules
}  // namespace lockstep
