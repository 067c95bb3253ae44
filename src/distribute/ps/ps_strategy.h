// ParameterServerStrategyImpl: the coordinator's side of a parameter-server
// job — the channels to the tasks, the table of variables it made (each
// whole on one ps task or in shards over several), the variable creator of
// its scope, and the pulls and pushes between its copies and the parameter
// servers. Internal to distribute/ (parameter_server_strategy.h is the
// public face, coordinator.cc schedules on the workers).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "distribute/strategy_impl.h"
#include "lockstep/comm/rpc.h"
#include "lockstep/distribute/parameter_server_strategy.h"

namespace lockstep::distribute {

class CoordinatorImpl;

namespace ps {

// A parameter server that is gone, by task index: what a worker reports
// and the coordinator raises (an UnavailableError naming the task).
class PsUnavailable : public UnavailableError {
 public:
  PsUnavailable(int task, const std::string& message) : UnavailableError(message), task_(task) {}
  int task() const { return task_; }

 private:
  int task_;
};

// The job token: given, or LOCKSTEP_JOB_TOKEN (a ValueError naming both
// when neither is set).
std::string job_token(const std::string& given, const std::string& who);

// Channels to every task of `job` in the cluster.
std::vector<std::shared_ptr<comm::rpc::Channel>> open_channels(const ClusterResolver& r,
                                                               const std::string& job,
                                                               const std::string& token,
                                                               std::chrono::milliseconds timeout);

// Runs fn(task) for every task in `tasks`, at once (one thread per task but
// the first); rethrows the first failure. A lost ps task becomes
// PsUnavailable naming it.
void for_each_ps(const std::vector<int>& tasks, const std::function<void(int task)>& fn,
                 const std::vector<std::shared_ptr<comm::rpc::Channel>>& channels);

// Per ps task, the entries that assign `value` to the variable laid out by
// `l` — each shard its rows, with the same rows of each of `slots` (name,
// tensor of the variable's shape) — appended to `by_task`.
using EntriesByTask = std::map<int, std::vector<comm::rpc::VariableEntry>>;
void add_shard_entries(const comm::rpc::VariableLayout& l, const Tensor& value,
                       const std::vector<std::pair<std::string, Tensor>>& slots,
                       EntriesByTask& by_task);
// Sends every task its entries (Channel::assign, with `iterations` if set),
// the tasks at once.
void assign_entries(EntriesByTask by_task, std::optional<std::int64_t> iterations,
                    const std::vector<std::shared_ptr<comm::rpc::Channel>>& channels);

// The variables of a table, pulled from or pushed to their shards: rows of
// each local variable, by the table's layout.
void pull_into(const std::vector<std::shared_ptr<comm::rpc::Channel>>& ps,
               const std::vector<std::pair<Variable, comm::rpc::VariableLayout>>& vars,
               std::vector<std::vector<std::int64_t>>* versions);

}  // namespace ps

class ParameterServerStrategyImpl final : public StrategyImpl {
 public:
  ParameterServerStrategyImpl(ClusterResolver resolver, ParameterServerStrategyOptions options);
  ~ParameterServerStrategyImpl() override;

  Variable create_variable(const Tensor& initial_value, Variable::Options options) const override;
  bool uses_parameter_servers() const override { return true; }
  void pull_variables(const std::vector<Variable>& vars) const override;
  void push_variables(const std::vector<Variable>& vars) const override;
  OptimizerState read_optimizer_state(const std::vector<Variable>& trainable) const override;
  void write_optimizer_state(const std::vector<Variable>& trainable,
                             const OptimizerState& state) const override;

  const ClusterResolver& resolver() const { return resolver_; }
  const ParameterServerStrategyOptions& options() const { return options_; }
  const std::string& token() const { return token_; }
  int num_ps() const { return static_cast<int>(ps_.size()); }
  const std::vector<std::shared_ptr<comm::rpc::Channel>>& ps_channels() const { return ps_; }

  // The table: every variable made in scope, in creation order, and a
  // version that changes whenever one is added.
  std::vector<comm::rpc::VariableLayout> layouts(std::int64_t* version) const;
  // The table's entry of `v` (a ValueError when it was not made in scope).
  comm::rpc::VariableLayout layout_of(const Variable& v, const char* op) const;
  comm::rpc::VariableLayout layout_at(std::int64_t index) const;
  ParameterServerStats stats() const;
  // Reads rows of every shard of layout `l` (with their slots).
  std::vector<comm::rpc::VariableEntry> read_shards(const comm::rpc::VariableLayout& l,
                                                    bool with_slots,
                                                    std::int64_t* iterations) const;
  void assign_shards(const comm::rpc::VariableLayout& l, const Tensor& value) const;

  // The strategy's one coordinator (made on first use).
  std::shared_ptr<CoordinatorImpl> coordinator();

 private:
  struct Logical {
    comm::rpc::VariableLayout layout;
    std::uint64_t local_id = 0;  // the coordinator's Variable's id()
  };

  ClusterResolver resolver_;
  ParameterServerStrategyOptions options_;
  std::string token_;
  std::vector<std::shared_ptr<comm::rpc::Channel>> ps_;
  mutable std::mutex mu_;
  mutable std::vector<Logical> table_;
  mutable std::int64_t next_id_ = 0;     // ids of variables and shards on the ps tasks
  mutable std::int64_t placements_ = 0;  // round-robin: the next variable's ps task
  std::mutex coordinator_mu_;
  std::shared_ptr<CoordinatorImpl> coordinator_;
};

}  // namespace lockstep::distribute
