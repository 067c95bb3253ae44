// Learning-rate schedules, with Keras 3's formulas.
#include "lockstep/optim/schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>

#include "lockstep/core/error.h"

namespace lockstep::schedules {

LearningRateSchedule ExponentialDecay(double initial, std::int64_t decay_steps, double rate,
                                      bool staircase) {
  LOCKSTEP_CHECK(decay_steps > 0, "ExponentialDecay: decay_steps must be > 0, got ", decay_steps);
  return LearningRateSchedule("ExponentialDecay",
                              [=](std::int64_t step) {
                                double p =
                                    static_cast<double>(step) / static_cast<double>(decay_steps);
                                if (staircase) p = std::floor(p);
                                return initial * std::pow(rate, p);
                              },
                              {{"initial_learning_rate", initial},
                               {"decay_steps", static_cast<double>(decay_steps)},
                               {"decay_rate", rate},
                               {"staircase", staircase}});
}

LearningRateSchedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries,
                                            std::vector<double> values) {
  LOCKSTEP_CHECK(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay: expected ",
                 boundaries.size() + 1, " values for ", boundaries.size(), " boundaries, got ",
                 values.size());
  LOCKSTEP_CHECK(std::is_sorted(boundaries.begin(), boundaries.end()),
                 "PiecewiseConstantDecay: boundaries must be increasing");
  return LearningRateSchedule(
      "PiecewiseConstantDecay",
      [=](std::int64_t step) {
        for (std::size_t i = 0; i < boundaries.size(); ++i) {
          if (step <= boundaries[i]) return values[i];
        }
        return values.back();
      },
      {{"boundaries", std::vector<double>(boundaries.begin(), boundaries.end())},
       {"values", values}});
}

LearningRateSchedule CosineDecay(double initial, std::int64_t decay_steps, CosineDecayOptions o) {
  LOCKSTEP_CHECK(decay_steps > 0, "CosineDecay: decay_steps must be > 0, got ", decay_steps);
  auto decay = [=](double step, double from) {
    const double fraction =
        std::min(step, static_cast<double>(decay_steps)) / static_cast<double>(decay_steps);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * fraction));
    return from * ((1.0 - o.alpha) * cosine + o.alpha);
  };
  return LearningRateSchedule(
      "CosineDecay",
      [=](std::int64_t step) {
        const double s = static_cast<double>(step);
        if (o.warmup_target < 0.0) return decay(s, initial);
        if (step < o.warmup_steps) {
          return initial + (o.warmup_target - initial) * s / static_cast<double>(o.warmup_steps);
        }
        return decay(s - static_cast<double>(o.warmup_steps), o.warmup_target);
      },
      {{"initial_learning_rate", initial},
       {"decay_steps", static_cast<double>(decay_steps)},
       {"alpha", o.alpha},
       {"warmup_target", o.warmup_target},
       {"warmup_steps", static_cast<double>(o.warmup_steps)}});
}

LearningRateSchedule PolynomialDecay(double initial, std::int64_t decay_steps, double end,
                                     double power, bool cycle) {
  LOCKSTEP_CHECK(decay_steps > 0, "PolynomialDecay: decay_steps must be > 0, got ", decay_steps);
  return LearningRateSchedule("PolynomialDecay",
                              [=](std::int64_t step) {
                                double s = static_cast<double>(step);
                                double steps = static_cast<double>(decay_steps);
                                if (cycle) {
                                  steps *= std::max(1.0, std::ceil(s / steps));
                                } else {
                                  s = std::min(s, steps);
                                }
                                return (initial - end) * std::pow(1.0 - s / steps, power) + end;
                              },
                              {{"initial_learning_rate", initial},
                               {"decay_steps", static_cast<double>(decay_steps)},
                               {"end_learning_rate", end},
                               {"power", power},
                               {"cycle", cycle}});
}

LearningRateSchedule RampUp(RampUpOptions o) {
  LOCKSTEP_CHECK(o.steps_per_unit > 0, "RampUp: steps_per_unit must be > 0, got ",
                 o.steps_per_unit);
  return LearningRateSchedule(
      "RampUp",
      [=](std::int64_t step) {
        const double unit =
            std::floor(static_cast<double>(step) / static_cast<double>(o.steps_per_unit));
        if (unit < o.rampup) return o.start + (o.max - o.start) * unit / o.rampup;
        if (unit < o.rampup + o.sustain) return o.max;
        return (o.max - o.min) * std::pow(o.decay, unit - o.rampup - o.sustain) + o.min;
      },
      {{"start", o.start},
       {"max", o.max},
       {"min", o.min},
       {"rampup", o.rampup},
       {"sustain", o.sustain},
       {"decay", o.decay},
       {"steps_per_unit", static_cast<double>(o.steps_per_unit)}});
}

LearningRateSchedule from_config(const std::string& class_name,
                                 const std::map<std::string, ScheduleArgument>& args) {
  std::vector<std::string> used;
  auto number = [&](const std::string& key, std::optional<double> fallback = std::nullopt) {
    used.push_back(key);
    auto it = args.find(key);
    if (it == args.end()) {
      LOCKSTEP_CHECK(fallback.has_value(), class_name, ": argument '", key, "' is missing");
      return *fallback;
    }
    const double* d = std::get_if<double>(&it->second);
    LOCKSTEP_CHECK(d != nullptr, class_name, ": argument '", key, "' must be a number");
    return *d;
  };
  auto flag = [&](const std::string& key, bool fallback) {
    used.push_back(key);
    auto it = args.find(key);
    if (it == args.end()) return fallback;
    const bool* b = std::get_if<bool>(&it->second);
    LOCKSTEP_CHECK(b != nullptr, class_name, ": argument '", key, "' must be true or false");
    return *b;
  };
  auto list = [&](const std::string& key) {
    used.push_back(key);
    auto it = args.find(key);
    LOCKSTEP_CHECK(it != args.end(), class_name, ": argument '", key, "' is missing");
    const auto* l = std::get_if<std::vector<double>>(&it->second);
    LOCKSTEP_CHECK(l != nullptr, class_name, ": argument '", key, "' must be a list");
    return *l;
  };
  auto steps = [](double v) { return static_cast<std::int64_t>(std::llround(v)); };
  LearningRateSchedule made("constant", [](std::int64_t) { return 0.0; });
  if (class_name == "ExponentialDecay") {
    made = ExponentialDecay(number("initial_learning_rate"), steps(number("decay_steps")),
                            number("decay_rate"), flag("staircase", false));
  } else if (class_name == "PiecewiseConstantDecay") {
    std::vector<std::int64_t> boundaries;
    for (double b : list("boundaries")) boundaries.push_back(steps(b));
    made = PiecewiseConstantDecay(boundaries, list("values"));
  } else if (class_name == "CosineDecay") {
    made = CosineDecay(number("initial_learning_rate"), steps(number("decay_steps")),
                       {.alpha = number("alpha", 0.0),
                        .warmup_target = number("warmup_target", -1.0),
                        .warmup_steps = steps(number("warmup_steps", 0.0))});
  } else if (class_name == "PolynomialDecay") {
    made = PolynomialDecay(number("initial_learning_rate"), steps(number("decay_steps")),
                           number("end_learning_rate", 1e-4), number("power", 1.0),
                           flag("cycle", false));
  } else if (class_name == "RampUp") {
    const RampUpOptions d;
    made = RampUp({.start = number("start", d.start),
                   .max = number("max", d.max),
                   .min = number("min", d.min),
                   .rampup = number("rampup", d.rampup),
                   .sustain = number("sustain", d.sustain),
                   .decay = number("decay", d.decay),
                   .steps_per_unit = steps(number("steps_per_unit", 1.0))});
  } else {
    detail::throw_error<ValueError>(
        "unknown learning-rate schedule '", class_name,
        "'; Lockstep has ExponentialDecay, PiecewiseConstantDecay, CosineDecay, PolynomialDecay "
        "and RampUp");
  }
  for (const auto& [key, value] : args) {
    LOCKSTEP_CHECK(key == "name" || std::find(used.begin(), used.end(), key) != used.end(),
                   class_name, ": argument '", key, "' is not one Lockstep's ", class_name,
                   " takes");
  }
  return made;
}

}  // namespace lockstep::schedules
