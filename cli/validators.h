// Flag value checks whose messages state the real bounds: CLI11's
// PositiveNumber says "Value 0 not in range 0.000000 to 1797693...".
//
//   train->add_option("--epochs", a.epochs)->check(cli::at_least(1));
//   -> "--epochs: expected an integer >= 1, got 0"
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

namespace lockstep::cli {

// An integer >= min.
inline CLI::Validator at_least(long long min) {
  const std::string bound = ">= " + std::to_string(min);
  return CLI::Validator(
      [min, bound](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno == ERANGE || v < min)
          return "expected an integer " + bound + ", got " + value;
        return "";
      },
      "INT " + bound);
}

// An integer in [min, max], with `why` for the upper bound in the message.
inline CLI::Validator between(long long min, long long max, const std::string& why) {
  const std::string bound = "from " + std::to_string(min) + " to " + std::to_string(max);
  return CLI::Validator(
      [min, max, bound, why](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
          return "expected an integer " + bound + " (" + why + "), got " + value;
        return "";
      },
      "INT " + bound);
}

// An integer in [0, 2^64 - 1] (CLI11 would wrap "-1" and "2^64" silently).
inline CLI::Validator unsigned_64() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const bool digits =
            !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        if (digits) std::strtoull(value.c_str(), &end, 10);
        if (!digits || errno == ERANGE)
          return "expected an integer from 0 to 18446744073709551615, got " + value;
        return "";
      },
      "UINT64");
}

// A real number > 0.
inline CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !(v > 0.0) || v == HUGE_VAL)
          return "expected a number > 0, got " + value;
        return "";
      },
      "NUMBER > 0");
}

}  // namespace lockstep::cli
