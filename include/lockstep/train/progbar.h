// Progbar: Keras 3's progress display, byte for byte.
//
//   verbose = 1: the live bar, redrawn in place ("\r"), with ETA while
//                running and elapsed time when done:
//     782/782 ━━━━━━━━━━━━━━━━━━━━ 5s 7ms/step - loss: 0.5774 - ...
//   verbose = 2: one line when the target is reached:
//     782/782 - 5s - 7ms/step - loss: 0.5774 - ...
//
// The rules are Keras's: values are averaged over steps while running and
// shown as given at the end; 4 decimals, "%.4e" for small values; the time
// per step switches between s, ms and us; with verbose = 1 the first step is
// left out of the per-step time, with verbose = 2 (one update at the end) it
// is not. The clock and the output stream are injectable for tests.
#pragma once

#include <chrono>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "lockstep/train/logs.h"

namespace lockstep {

class Progbar {
 public:
  using Clock = std::function<double()>;  // seconds
  struct Options {
    int verbose = 1;
    int width = 20;
    double interval = 0.05;  // minimum seconds between redraws (verbose = 1)
    std::string unit_name = "step";
    bool dynamic_display = true;  // redraw in place; false: one line per update
    std::ostream* out = nullptr;  // default: the log sink (core/log.h), as kOutput
    Clock clock{};                // default steady_clock
  };

  // `target` <= 0: unknown.
  Progbar(std::int64_t target, Options options);
  void update(std::int64_t current, const Logs& values, bool finalize);
  void set_target(std::int64_t target) { target_ = target; }

 private:
  double now() const;
  void emit(const std::string& text) const;
  double estimate_step_duration(std::int64_t current, double now);
  std::string format_time(double time_per_unit) const;

  std::int64_t target_;
  Options o_;
  std::ostream* out_;  // null: the log sink
  std::vector<std::string> order_;
  std::vector<std::pair<double, double>> values_;  // per key: (weighted sum, weight)
  std::int64_t seen_so_far_ = 0;
  double start_;
  double last_update_ = 0.0;
  double time_after_first_step_ = -1.0;
  std::size_t prev_total_width_ = 0;
};

// True when standard output is a terminal (the live bar needs one).
bool stdout_is_terminal();

}  // namespace lockstep
