// Learning-rate schedules, with Keras 3's formulas.
#include "lockstep/optim/schedules.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "lockstep/core/error.h"

namespace lockstep::schedules {

LearningRateSchedule ExponentialDecay(double initial, std::int64_t decay_steps, double rate,
                                      bool staircase) {
  LOCKSTEP_CHECK(decay_steps > 0, "ExponentialDecay: decay_steps must be > 0, got ", decay_steps);
  return LearningRateSchedule("ExponentialDecay", [=](std::int64_t step) {
    double p = static_cast<double>(step) / static_cast<double>(decay_steps);
    if (staircase) p = std::floor(p);
    return initial * std::pow(rate, p);
  });
}

LearningRateSchedule PiecewiseConstantDecay(std::vector<std::int64_t> boundaries,
                                            std::vector<double> values) {
  LOCKSTEP_CHECK(values.size() == boundaries.size() + 1, "PiecewiseConstantDecay: expected ",
                 boundaries.size() + 1, " values for ", boundaries.size(), " boundaries, got ",
                 values.size());
  LOCKSTEP_CHECK(std::is_sorted(boundaries.begin(), boundaries.end()),
                 "PiecewiseConstantDecay: boundaries must be increasing");
  return LearningRateSchedule("PiecewiseConstantDecay", [=](std::int64_t step) {
    for (std::size_t i = 0; i < boundaries.size(); ++i) {
      if (step <= boundaries[i]) return values[i];
    }
    return values.back();
  });
}

LearningRateSchedule CosineDecay(double initial, std::int64_t decay_steps, CosineDecayOptions o) {
  LOCKSTEP_CHECK(decay_steps > 0, "CosineDecay: decay_steps must be > 0, got ", decay_steps);
  auto decay = [=](double step, double from) {
    const double fraction =
        std::min(step, static_cast<double>(decay_steps)) / static_cast<double>(decay_steps);
    const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * fraction));
    return from * ((1.0 - o.alpha) * cosine + o.alpha);
  };
  return LearningRateSchedule("CosineDecay", [=](std::int64_t step) {
    const double s = static_cast<double>(step);
    if (o.warmup_target < 0.0) return decay(s, initial);
    if (step < o.warmup_steps) {
      return initial + (o.warmup_target - initial) * s / static_cast<double>(o.warmup_steps);
    }
    return decay(s - static_cast<double>(o.warmup_steps), o.warmup_target);
  });
}

LearningRateSchedule PolynomialDecay(double initial, std::int64_t decay_steps, double end,
                                     double power, bool cycle) {
  LOCKSTEP_CHECK(decay_steps > 0, "PolynomialDecay: decay_steps must be > 0, got ", decay_steps);
  return LearningRateSchedule("PolynomialDecay", [=](std::int64_t step) {
    double s = static_cast<double>(step);
    double steps = static_cast<double>(decay_steps);
    if (cycle) {
      steps *= std::max(1.0, std::ceil(s / steps));
    } else {
      s = std::min(s, steps);
    }
    return (initial - end) * std::pow(1.0 - s / steps, power) + end;
  });
}

LearningRateSchedule RampUp(RampUpOptions o) {
  LOCKSTEP_CHECK(o.steps_per_unit > 0, "RampUp: steps_per_unit must be > 0, got ",
                 o.steps_per_unit);
  return LearningRateSchedule("RampUp", [=](std::int64_t step) {
    const double unit =
        std::floor(static_cast<double>(step) / static_cast<double>(o.steps_per_unit));
    if (unit < o.rampup) return o.start + (o.max - o.start) * unit / o.rampup;
    if (unit < o.rampup + o.sustain) return o.max;
    return (o.max - o.min) * std::pow(o.decay, unit - o.rampup - o.sustain) + o.min;
  });
}

}  // namespace lockstep::schedules
