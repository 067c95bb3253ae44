// Keras 3's Progbar, reproduced rule by rule (keras/src/utils/progbar.py).
#include "lockstep/train/progbar.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "lockstep/core/error.h"
#include "lockstep/core/log.h"

namespace lockstep {
namespace {

std::string format_number(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, v);
  return buf;
}

int num_digits(std::int64_t target) {
  return static_cast<int>(std::floor(std::log10(static_cast<double>(target)))) + 1;
}

std::string count_string(std::int64_t current, std::int64_t target) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%*lld/%lld", num_digits(target), static_cast<long long>(current),
                static_cast<long long>(target));
  return buf;
}

// Python's len() of a UTF-8 string: code points, not bytes.
std::size_t code_points(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

void Logs::set(const std::string& name, double value) {
  for (auto& e : entries_) {
    if (e.first == name) {
      e.second = value;
      return;
    }
  }
  entries_.emplace_back(name, value);
}

std::optional<double> Logs::get(const std::string& name) const {
  for (const auto& e : entries_) {
    if (e.first == name) return e.second;
  }
  return std::nullopt;
}

double Logs::at(const std::string& name) const {
  if (auto v = get(name)) return *v;
  std::string names;
  for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e.first;
  detail::throw_error<ValueError>("logs have no entry '", name,
                                  "'; present: ", names.empty() ? "(none)" : names);
}

bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

void Progbar::emit(const std::string& text) const {
  if (out_ != nullptr) {
    *out_ << text << std::flush;
  } else {
    log(LogLevel::kOutput, text);
  }
}

Progbar::Progbar(std::int64_t target, Options options)
    : target_(target), o_(std::move(options)), out_(o_.out) {
  start_ = now();
}

double Progbar::now() const {
  if (o_.clock) return o_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Progbar::estimate_step_duration(std::int64_t current, double t) {
  if (current == 0) return 0.0;
  double per_unit;
  if (time_after_first_step_ >= 0.0 && current > 1) {
    per_unit = (t - time_after_first_step_) / static_cast<double>(current - 1);
  } else {
    per_unit = (t - start_) / static_cast<double>(current);
  }
  if (current == 1) time_after_first_step_ = t;
  return per_unit;
}

std::string Progbar::format_time(double t) const {
  if (t >= 1 || t == 0) return format_number(" %.0f", t) + "s/" + o_.unit_name;
  if (t >= 1e-3) return format_number(" %.0f", t * 1000.0) + "ms/" + o_.unit_name;
  return format_number(" %.0f", t * 1000000.0) + "us/" + o_.unit_name;
}

void Progbar::update(std::int64_t current, const Logs& values, bool finalize) {
  for (const auto& [k, v] : values) {
    std::size_t i = 0;
    while (i < order_.size() && order_[i] != k) ++i;
    if (i == order_.size()) {
      order_.push_back(k);
      values_.emplace_back(0.0, 0.0);
    }
    if (finalize) {
      values_[i] = {v, 1.0};
    } else {
      const double base = static_cast<double>(std::max<std::int64_t>(current - seen_so_far_, 1));
      values_[i].first += v * base;
      values_[i].second += base;
    }
  }
  seen_so_far_ = current;
  const double t = now();
  const double time_per_unit = estimate_step_duration(current, t);
  auto average = [&](std::size_t i) { return values_[i].first / std::max(1.0, values_[i].second); };

  if (o_.verbose == 1) {
    if (t - last_update_ < o_.interval && !finalize) return;
    std::string message;
    if (o_.dynamic_display) {
      message.append(prev_total_width_, '\b');
      message += '\r';
    } else {
      message += '\n';
    }
    std::size_t special = 0;
    std::string bar;
    if (target_ > 0) {
      bar = "\x1b[1m" + count_string(current, target_) + "\x1b[0m ";
      special += 8;
      const double progress = static_cast<double>(current) / static_cast<double>(target_);
      const int filled = static_cast<int>(o_.width * progress);
      if (filled > 0) {
        bar += "\x1b[32m";
        for (int i = 0; i < filled; ++i) bar += "\u2501";
        bar += "\x1b[0m";
        special += 9;
      }
      bar += "\x1b[37m";
      for (int i = 0; i < o_.width - filled; ++i) bar += "\u2501";
      bar += "\x1b[0m";
      special += 9;
    } else {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%7lld/Unknown", static_cast<long long>(current));
      bar = buf;
    }
    message += bar;
    std::string info;
    if (target_ > 0 && !finalize) {
      const double eta = time_per_unit * static_cast<double>(target_ - current);
      char buf[64];
      if (eta > 3600) {
        std::snprintf(buf, sizeof(buf), "%d:%02d:%02d", static_cast<int>(eta / 3600),
                      static_cast<int>(std::fmod(eta, 3600) / 60),
                      static_cast<int>(std::fmod(eta, 60)));
      } else if (eta > 60) {
        std::snprintf(buf, sizeof(buf), "%d:%02d", static_cast<int>(eta / 60),
                      static_cast<int>(std::fmod(eta, 60)));
      } else {
        std::snprintf(buf, sizeof(buf), "%ds", static_cast<int>(eta));
      }
      info = std::string(" \x1b[1m") + buf + "\x1b[0m";
    } else {
      info = " \x1b[1m" + format_number("%.0f", t - start_) + "s\x1b[0m";
    }
    special += 8;
    info += format_time(time_per_unit);
    for (std::size_t i = 0; i < order_.size(); ++i) {
      const double avg = average(i);
      info +=
          " - " + order_[i] + ":" + format_number(std::fabs(avg) > 1e-3 ? " %.4f" : " %.4e", avg);
    }
    message += info;
    const std::size_t total_width = code_points(bar) + code_points(info) - special;
    if (prev_total_width_ > total_width) message.append(prev_total_width_ - total_width, ' ');
    if (finalize) message += '\n';
    emit(message);
    prev_total_width_ = total_width;
  } else if (o_.verbose == 2) {
    if (finalize && target_ > 0) {
      std::string info =
          count_string(current, target_) + " - " + format_number("%.0f", t - start_) + "s";
      info += " -" + format_time(time_per_unit);
      for (std::size_t i = 0; i < order_.size(); ++i) {
        const double avg = average(i);
        info += " - " + order_[i] + ":" + format_number(avg > 1e-3 ? " %.4f" : " %.4e", avg);
      }
      emit(info + '\n');
    }
  }
  last_update_ = t;
}

}  // namespace lockstep
