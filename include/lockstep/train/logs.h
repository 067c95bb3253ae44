// Logs: the ordered name -> value pairs that fit / evaluate return and that
// callbacks receive (Keras's `logs` dict).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace lockstep {

class Logs {
 public:
  using Entry = std::pair<std::string, double>;
  Logs() = default;
  Logs(std::initializer_list<Entry> entries) : entries_(entries) {}

  // Sets `name` (appending it if new).
  void set(const std::string& name, double value);
  std::optional<double> get(const std::string& name) const;
  // The value of `name`; ValueError listing the names present otherwise.
  double at(const std::string& name) const;
  bool contains(const std::string& name) const { return get(name).has_value(); }
  const std::vector<Entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<Entry> entries_;
};

}  // namespace lockstep
