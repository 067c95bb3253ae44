// The log sink (core/log.h): one process-wide sink and level under one lock.
#include "lockstep/core/log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <utility>

namespace lockstep {
namespace {

std::mutex& sink_mutex() {
  static std::mutex mu;
  return mu;
}

LogSink& current_sink() {
  static LogSink sink;  // empty: the default
  return sink;
}

std::atomic<int>& current_level() {
  static std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
  return level;
}

void default_sink(LogLevel level, std::string_view text) {
  std::FILE* f = level == LogLevel::kOutput ? stdout : stderr;
  std::fwrite(text.data(), 1, text.size(), f);
  std::fflush(f);
}

}  // namespace

bool log_enabled(LogLevel level) {
  return level != LogLevel::kOff &&
         static_cast<int>(level) >= current_level().load(std::memory_order_relaxed);
}

void log(LogLevel level, std::string_view text) {
  if (!log_enabled(level) || text.empty()) return;
  std::lock_guard lk(sink_mutex());
  if (const LogSink& sink = current_sink()) {
    sink(level, text);
  } else {
    default_sink(level, text);
  }
}

LogSink set_log_sink(LogSink sink) {
  std::lock_guard lk(sink_mutex());
  return std::exchange(current_sink(), std::move(sink));
}

LogLevel set_log_level(LogLevel level) {
  return static_cast<LogLevel>(
      current_level().exchange(static_cast<int>(level), std::memory_order_relaxed));
}

}  // namespace lockstep
