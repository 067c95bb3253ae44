// Where loss scaling's state goes beside an optimizer's slots (loss_scale.cc):
// its names among slot_values' entries (Keras's variable names), and how
// many variables of its own a Keras file holds before the inner optimizer's.
// Internal to optim/.
#pragma once

#include <cstddef>

namespace lockstep::detail {

inline constexpr char kLossScaleKey[] = "loss_scale/dynamic_scale";
inline constexpr char kLossScaleStepsKey[] = "loss_scale/step_counter";
// iterations, learning_rate (both 0: Keras counts and schedules in the
// inner optimizer), step_counter, dynamic_scale.
inline constexpr std::size_t kLossScaleKerasVariables = 4;

}  // namespace lockstep::detail
