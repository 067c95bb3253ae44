// LogTexts: what the library logs while a test looks (tests only).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/core/log.h"
#include "lockstep/tensor/device.h"

namespace lockstep::testing_support {

// Every text the library logs while it lives, at every level (the log
// level and sink put back after).
class LogTexts {
 public:
  LogTexts()
      : previous_sink_(
            set_log_sink([this](LogLevel, std::string_view t) { texts_.emplace_back(t); })),
        previous_level_(set_log_level(LogLevel::kDebug)) {}
  ~LogTexts() {
    set_log_level(previous_level_);
    set_log_sink(previous_sink_);
  }
  LogTexts(const LogTexts&) = delete;
  LogTexts& operator=(const LogTexts&) = delete;
  bool has(const std::string& part) const {
    return std::any_of(texts_.begin(), texts_.end(),
                       [&](const std::string& t) { return t.find(part) != std::string::npos; });
  }
  void clear() { texts_.clear(); }
  std::string all() const {
    std::string out;
    for (const std::string& t : texts_) out += t;
    return out;
  }

 private:
  std::vector<std::string> texts_;
  LogSink previous_sink_;
  LogLevel previous_level_;
};

// fit recorded a step on each of `devices` (one replica each) and replayed
// them `replays` times.
inline void expect_each_replica_replayed(const LogTexts& logged,
                                         const std::vector<Device*>& devices, int replays) {
  for (const Device* d : devices)
    EXPECT_TRUE(logged.has("fit: the step is recorded as a graph on " + d->name()))
        << d->name() << ": " << logged.all();
  EXPECT_TRUE(logged.has("fit: " + std::to_string(replays) +
                         " steps replayed from the recorded step on each replica"))
      << logged.all();
}

}  // namespace lockstep::testing_support
