// A ps task's service: the variables (or shards) placed on it, each with a
// lock, a version (the updates applied to it) and its own optimizer — made
// from the workers' optimizer spec on the first update, so its slots (Adam's
// momentum and velocity) live beside the variable and its step is the
// variable's own count. An update holds the variable's lock: updates are
// atomic per variable, and concurrent across variables.
#include "distribute/ps/parameter_server.h"

#include <algorithm>
#include <chrono>

#include "distribute/ps/wire.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute::ps {

using comm::rpc::ApplyResult;
using comm::rpc::Gradient;
using comm::rpc::OptimizerSpec;
using comm::rpc::ReadResult;
using comm::rpc::VariableEntry;

ParameterServer::ParameterServer(std::string task) : task_(std::move(task)) {}

std::shared_ptr<ParameterServer::Entry> ParameterServer::find(std::int64_t id, const char* op) {
  std::lock_guard lk(table_mu_);
  auto it = entries_.find(id);
  LOCKSTEP_CHECK(it != entries_.end(), task_, ": ", op, ": no variable ", id,
                 " here (was this ps task restarted? restart the job from its last checkpoint)");
  return it->second;
}

void ParameterServer::create(std::vector<VariableEntry> variables) {
  for (VariableEntry& v : variables) {
    auto e = std::make_shared<Entry>();
    e->name = v.name;
    e->trainable = v.trainable;
    e->var = Variable(from_wire(v.value, task_ + ": variable '" + v.name + "'"),
                      {.name = v.name, .trainable = v.trainable});
    // Made again (a coordinator that restarted): a fresh variable.
    std::lock_guard lk(table_mu_);
    entries_[v.id] = std::move(e);
  }
}

std::vector<comm::rpc::NamedWireTensor> ParameterServer::slots_of(Entry& e) {
  std::vector<comm::rpc::NamedWireTensor> out;
  if (e.optimizer.defined()) {
    for (const auto& [name, t] : e.optimizer->slot_values({e.var}))
      out.push_back({name.substr(name.find('/') + 1), to_wire(t)});
  }
  if (out.empty()) {
    for (const auto& [name, t] : e.pending_slots) out.push_back({name, to_wire(t)});
  }
  return out;
}

ReadResult ParameterServer::read(const std::vector<std::int64_t>& ids, bool with_slots) {
  ReadResult r;
  for (std::int64_t id : ids) {
    auto e = find(id, "Read");
    std::lock_guard lk(e->mu);
    VariableEntry v{.id = id,
                    .name = e->name,
                    .trainable = e->trainable,
                    .value = to_wire(e->var.replica_value(0)),
                    .slots = {},
                    .version = e->version};
    if (with_slots) v.slots = slots_of(*e);
    r.variables.push_back(std::move(v));
  }
  r.iterations = iterations_.load();
  return r;
}

void ParameterServer::assign(std::vector<VariableEntry> variables,
                             std::optional<std::int64_t> iterations) {
  for (VariableEntry& v : variables) {
    auto e = find(v.id, "Assign");
    const Tensor value = from_wire(v.value, task_ + ": Assign of '" + e->name + "'");
    std::map<std::string, Tensor> slots;
    for (auto& s : v.slots)
      slots[s.name] = from_wire(s.value, task_ + ": slot '" + s.name + "' of '" + e->name + "'");
    std::lock_guard lk(e->mu);
    LOCKSTEP_CHECK_AS(ShapeError, value.shape() == e->var.shape(), task_, ": Assign of '",
                      e->name, "': expected shape ", e->var.shape(), ", got ", value.shape());
    e->var.assign(value);
    if (!slots.empty()) {
      if (e->optimizer.defined()) {
        std::map<std::string, Tensor> named;
        for (auto& [name, t] : slots) named["0/" + name] = t;
        e->optimizer->restore_slot_values({e->var}, named);
      } else {
        e->pending_slots = std::move(slots);  // for the optimizer the first update makes
      }
    }
    if (iterations) e->version = *iterations;
  }
  if (iterations) iterations_ = *iterations;
}

ApplyResult ParameterServer::apply_gradients(const OptimizerSpec& spec,
                                             std::vector<Gradient> gradients,
                                             bool count_iteration) {
  const std::string key = spec_key(spec);
  ApplyResult result;
  for (Gradient& g : gradients) {
    auto e = find(g.id, "ApplyGradients");
    const Tensor grad = from_wire(g.value, task_ + ": gradient of '" + e->name + "'");
    std::lock_guard lk(e->mu);
    LOCKSTEP_CHECK_AS(ShapeError, grad.shape() == e->var.shape(), task_, ": the gradient of '",
                      e->name, "' has shape ", grad.shape(), ", the variable ", e->var.shape());
    if (!e->optimizer.defined() || e->optimizer_key != key) {
      e->optimizer = make_optimizer(spec);
      e->optimizer_key = key;
      if (!e->pending_slots.empty()) {
        std::map<std::string, Tensor> named;
        for (auto& [name, t] : e->pending_slots) named["0/" + name] = t;
        e->optimizer->restore_slot_values({e->var}, named);
        e->pending_slots.clear();
      }
    }
    // The variable's own step: Adam's bias correction follows its updates.
    e->optimizer->set_iterations(e->version);
    const std::int64_t staleness = std::max<std::int64_t>(0, e->version - g.read_version);
    const auto start = std::chrono::steady_clock::now();
    e->optimizer.apply_gradients({grad}, {e->var});
    const auto took = std::chrono::steady_clock::now() - start;
    ++e->version;
    result.staleness.push_back(staleness);
    ++updates_;
    staleness_sum_ += staleness;
    std::int64_t max = staleness_max_.load();
    while (staleness > max && !staleness_max_.compare_exchange_weak(max, staleness)) {
    }
    bytes_applied_ += static_cast<std::int64_t>(grad.nbytes());
    apply_nanos_ += std::chrono::duration_cast<std::chrono::nanoseconds>(took).count();
  }
  result.iterations = count_iteration ? ++iterations_ : iterations_.load();
  return result;
}

comm::rpc::ParameterServerStats ParameterServer::stats() {
  return {updates_.load(),    staleness_sum_.load(), staleness_max_.load(),
          iterations_.load(), bytes_applied_.load(), static_cast<double>(apply_nanos_.load()) * 1e-9};
}

}  // namespace lockstep::distribute::ps
