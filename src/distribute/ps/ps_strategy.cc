// ParameterServerStrategy on the coordinator: the cluster check and the
// channels to the ps tasks, the variable creator of its scope (round-robin
// placement; shards by the partitioner, TensorFlow's "div" split), the pulls
// and pushes of variables and of the optimizer's state between the
// coordinator's copies and the parameter servers, ShardedVariable, and the
// job's end (every task told).
#include "distribute/ps/ps_strategy.h"

#include <cstdio>
#include <cstring>
#include <map>

#include "distribute/ps/coordinator.h"
#include "distribute/ps/wire.h"
#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::distribute {

using comm::rpc::VariableEntry;
using comm::rpc::VariableLayout;

namespace {

ClusterResolver resolve(const ParameterServerStrategyOptions& o) {
  if (o.cluster_resolver) return *o.cluster_resolver;
  auto r = ClusterResolver::from_environment();
  LOCKSTEP_CHECK(r.has_value(),
                 "ParameterServerStrategy: no cluster: set TF_CONFIG (a chief, workers and ps "
                 "tasks; lockstep launch --ps makes one) or pass cluster_resolver");
  return *r;
}

}  // namespace

ParameterServerStrategyImpl::ParameterServerStrategyImpl(ClusterResolver resolver,
                                                         ParameterServerStrategyOptions options)
    : StrategyImpl("ParameterServerStrategy", {&host_device()}, 1, comm::InProcessGroup::Options{},
                   false),
      resolver_(std::move(resolver)),
      options_(std::move(options)) {
  resolver_.check_parameter_server_cluster();
  LOCKSTEP_CHECK(resolver_.task_type() == "chief", "ParameterServerStrategy: this task is ",
                 resolver_.describe_task(resolver_.task_type(), resolver_.task_id()),
                 "; the strategy is made by the chief (the coordinator). Workers and ps tasks "
                 "serve instead: distribute::Server(resolver).join(), or `lockstep worker` / "
                 "`lockstep ps`");
  token_ = ps::job_token(options_.job_token, "ParameterServerStrategy");
  ps_ = ps::open_channels(resolver_, "ps", token_, options_.timeout);
  for (auto& channel : ps_) {
    try {
      channel->connect(options_.connect_timeout);
    } catch (const comm::rpc::RpcError& e) {
      detail::throw_error<TimeoutError>("ParameterServerStrategy: ", channel->peer(),
                                        " did not answer within ",
                                        options_.connect_timeout.count() / 1000.0, " s (", e.what(),
                                        "); is it running, with this job's token?");
    }
  }
}

ParameterServerStrategyImpl::~ParameterServerStrategyImpl() {
  std::shared_ptr<CoordinatorImpl> coordinator;
  {
    std::lock_guard lk(coordinator_mu_);
    coordinator = std::move(coordinator_);
  }
  if (coordinator) coordinator->stop();
  // The job is over: every task may exit (best effort; a task that is
  // gone already is no error here).
  auto workers = ps::open_channels(resolver_, "worker", token_, std::chrono::seconds(2));
  for (auto* group : {&workers, &ps_}) {
    for (auto& channel : *group) {
      try {
        channel->shutdown();
      } catch (const Error&) {
      }
    }
  }
}

std::shared_ptr<CoordinatorImpl> ParameterServerStrategyImpl::coordinator() {
  std::lock_guard lk(coordinator_mu_);
  if (!coordinator_) coordinator_ = std::make_shared<CoordinatorImpl>(this);
  return coordinator_;
}

Variable ParameterServerStrategyImpl::create_variable(const Tensor& initial,
                                                      Variable::Options options) const {
  // The coordinator's copy: the whole (logical) variable.
  Variable local(initial, options);
  VariableLayout layout{.index = 0,
                        .name = options.name,
                        .dtype = std::string(dtype_name(initial.dtype())),
                        .shape = initial.shape().to_vector(),
                        .shards = {},
                        .trainable = options.trainable};
  std::int64_t shards = 1;
  if (options_.variable_partitioner && initial.rank() >= 1 && initial.dim(0) >= 1) {
    const std::vector<std::int64_t> parts =
        options_.variable_partitioner(initial.shape(), initial.dtype());
    bool valid = parts.size() == static_cast<std::size_t>(initial.rank()) && parts[0] >= 1;
    for (std::size_t i = 1; i < parts.size(); ++i) valid &= parts[i] == 1;
    LOCKSTEP_CHECK(valid,
                   "ParameterServerStrategy: variable_partitioner must return one count "
                   "per axis, 1 but for the first (>= 1), got ",
                   parts.size(), " counts for variable '", options.name, "' of shape ",
                   initial.shape());
    shards = parts[0];
  }
  std::vector<std::int64_t> rows =
      shards > 1 ? shard_rows(initial.dim(0), shards)
                 : std::vector<std::int64_t>{initial.rank() == 0 ? 1 : initial.dim(0)};
  std::map<int, std::vector<VariableEntry>> by_task;
  {
    std::lock_guard lk(mu_);
    layout.index = static_cast<std::int64_t>(table_.size());
    std::int64_t row = 0;
    for (std::size_t s = 0; s < rows.size(); ++s) {
      const int task = static_cast<int>(placements_++ % static_cast<std::int64_t>(ps_.size()));
      const std::int64_t id = next_id_++;
      layout.shards.push_back({task, id, rows[s]});
      by_task[task].push_back(
          {.id = id,
           .name = rows.size() > 1 ? options.name + "/part_" + std::to_string(s) : options.name,
           .trainable = options.trainable,
           .value = rows.size() > 1 ? ps::rows_to_wire(initial, row, row + rows[s])
                                    : ps::to_wire(initial),
           .slots = {},
           .version = 0});
      row += rows[s];
    }
    table_.push_back({layout, local.id()});
  }
  std::vector<int> tasks;
  for (const auto& [task, unused] : by_task) tasks.push_back(task);
  ps::for_each_ps(
      tasks,
      [&](int task) { ps_[static_cast<std::size_t>(task)]->create(std::move(by_task.at(task))); },
      ps_);
  return local;
}

std::vector<VariableLayout> ParameterServerStrategyImpl::layouts(std::int64_t* version) const {
  std::lock_guard lk(mu_);
  std::vector<VariableLayout> out;
  for (const Logical& l : table_) out.push_back(l.layout);
  if (version) *version = static_cast<std::int64_t>(table_.size());
  return out;
}

VariableLayout ParameterServerStrategyImpl::layout_of(const Variable& v, const char* op) const {
  std::lock_guard lk(mu_);
  for (const Logical& l : table_) {
    if (l.local_id == v.id()) return l.layout;
  }
  detail::throw_error<ValueError>(op, ": variable '", v.name(),
                                  "' was not made in this ParameterServerStrategy's scope (build "
                                  "and compile the model inside strategy.scope())");
}

VariableLayout ParameterServerStrategyImpl::layout_at(std::int64_t index) const {
  std::lock_guard lk(mu_);
  LOCKSTEP_CHECK_AS(IndexError, index >= 0 && index < static_cast<std::int64_t>(table_.size()),
                    "ParameterServerStrategy: no variable ", index);
  return table_[static_cast<std::size_t>(index)].layout;
}

void ParameterServerStrategyImpl::pull_variables(const std::vector<Variable>& vars) const {
  std::vector<std::pair<Variable, VariableLayout>> pairs;
  for (const Variable& v : vars) pairs.emplace_back(v, layout_of(v, "pull_variables"));
  ps::pull_into(ps_, pairs, nullptr);
}

std::vector<VariableEntry> ParameterServerStrategyImpl::read_shards(
    const VariableLayout& l, bool with_slots, std::int64_t* iterations) const {
  std::vector<VariableEntry> out(l.shards.size());
  std::vector<int> tasks;
  for (const auto& s : l.shards) tasks.push_back(s.ps_task);
  std::sort(tasks.begin(), tasks.end());
  tasks.erase(std::unique(tasks.begin(), tasks.end()), tasks.end());
  std::mutex out_mu;
  ps::for_each_ps(
      tasks,
      [&](int task) {
        std::vector<std::int64_t> ids;
        std::vector<std::size_t> where;
        for (std::size_t s = 0; s < l.shards.size(); ++s) {
          if (l.shards[s].ps_task != task) continue;
          ids.push_back(l.shards[s].id);
          where.push_back(s);
        }
        comm::rpc::ReadResult got = ps_[static_cast<std::size_t>(task)]->read(ids, with_slots);
        std::lock_guard lk(out_mu);
        for (std::size_t i = 0; i < where.size(); ++i)
          out[where[i]] = std::move(got.variables.at(i));
        if (iterations && task == 0) *iterations = got.iterations;
      },
      ps_);
  return out;
}

void ParameterServerStrategyImpl::assign_shards(const VariableLayout& l,
                                                const Tensor& value) const {
  LOCKSTEP_CHECK_AS(ShapeError, value.shape() == Shape(l.shape), "assign of variable '", l.name,
                    "': expected shape ", Shape(l.shape), ", got ", value.shape());
  ps::EntriesByTask by_task;
  ps::add_shard_entries(l, value, {}, by_task);
  ps::assign_entries(std::move(by_task), std::nullopt, ps_);
}

void ParameterServerStrategyImpl::push_variables(const std::vector<Variable>& vars) const {
  for (const Variable& v : vars) assign_shards(layout_of(v, "push_variables"), v.replica_value(0));
}

OptimizerState ParameterServerStrategyImpl::read_optimizer_state(
    const std::vector<Variable>& trainable) const {
  OptimizerState state;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const VariableLayout l = layout_of(trainable[i], "read_optimizer_state");
    std::vector<VariableEntry> shards = read_shards(l, true, nullptr);
    // Each slot: its shards' parts, concatenated (the logical slot).
    std::map<std::string, std::vector<Tensor>> parts;
    std::vector<std::string> order;
    for (auto& shard : shards) {
      for (auto& slot : shard.slots) {
        if (!parts.count(slot.name)) order.push_back(slot.name);
        parts[slot.name].push_back(ps::from_wire(slot.value, "slot '" + slot.name + "'"));
      }
    }
    for (const std::string& name : order) {
      const auto& p = parts[name];
      if (p.size() != shards.size()) continue;  // not every shard updated yet: no slot
      state.slots.emplace_back(std::to_string(i) + "/" + name, p.size() == 1 ? p[0] : concat(p, 0));
    }
  }
  // iterations is counted on ps task 0 (every step's updates name it).
  ps::for_each_ps(
      {0}, [&](int) { state.iterations = ps_[0]->read({}, false).iterations; }, ps_);
  return state;
}

void ParameterServerStrategyImpl::write_optimizer_state(const std::vector<Variable>& trainable,
                                                        const OptimizerState& state) const {
  std::map<std::size_t, std::vector<std::pair<std::string, Tensor>>> by_var;
  for (const auto& [name, t] : state.slots) {
    const std::size_t slash = name.find('/');
    LOCKSTEP_CHECK(slash != std::string::npos, "write_optimizer_state: slot name '", name,
                   "' is not <index>/<slot>");
    const std::size_t i = std::stoul(name.substr(0, slash));
    LOCKSTEP_CHECK_AS(IndexError, i < trainable.size(), "write_optimizer_state: slot '", name,
                      "' of variable ", i, " of ", trainable.size());
    by_var[i].emplace_back(name.substr(slash + 1), t);
  }
  ps::EntriesByTask by_task;
  for (std::size_t i = 0; i < trainable.size(); ++i) {
    const VariableLayout l = layout_of(trainable[i], "write_optimizer_state");
    const Tensor& value = trainable[i].replica_value(0);
    for (const auto& [slot, t] : by_var[i]) {
      LOCKSTEP_CHECK_AS(ShapeError, t.shape() == value.shape(), "write_optimizer_state: slot '",
                        slot, "' of '", l.name, "' has shape ", t.shape(), ", the variable ",
                        value.shape());
    }
    ps::add_shard_entries(l, value, by_var[i], by_task);
  }
  by_task[0];  // ps task 0 keeps iterations
  ps::assign_entries(std::move(by_task), state.iterations, ps_);
}

ParameterServerStats ParameterServerStrategyImpl::stats() const {
  ParameterServerStats s;
  std::vector<int> tasks;
  for (int t = 0; t < num_ps(); ++t) tasks.push_back(t);
  std::mutex mu;
  std::int64_t staleness_sum = 0;
  ps::for_each_ps(
      tasks,
      [&](int task) {
        const comm::rpc::ParameterServerStats got = ps_[static_cast<std::size_t>(task)]->stats();
        std::lock_guard lk(mu);
        s.updates += got.updates;
        staleness_sum += got.staleness_sum;
        s.max_staleness = std::max(s.max_staleness, got.staleness_max);
        if (task == 0) s.iterations = got.iterations;
        s.bytes_applied += got.bytes_applied;
        s.apply_seconds += got.apply_seconds;
      },
      ps_);
  s.mean_staleness = s.updates > 0 ? static_cast<double>(staleness_sum) / s.updates : 0.0;
  return s;
}

// ---- The public faces ----

ParameterServerStrategy::ParameterServerStrategy(ParameterServerStrategyOptions options) {
  ClusterResolver resolver = resolve(options);
  static_cast<Strategy&>(*this) = Strategy(
      std::make_shared<ParameterServerStrategyImpl>(std::move(resolver), std::move(options)));
}

ParameterServerStrategy::ParameterServerStrategy(const Strategy& strategy) : Strategy(strategy) {
  LOCKSTEP_CHECK(std::dynamic_pointer_cast<ParameterServerStrategyImpl>(impl_) != nullptr,
                 "ParameterServerStrategy: the strategy is a ", strategy.name());
}

std::shared_ptr<ParameterServerStrategyImpl> ParameterServerStrategy::ps_impl() const {
  return std::static_pointer_cast<ParameterServerStrategyImpl>(impl_);
}

const ClusterResolver& ParameterServerStrategy::cluster_resolver() const {
  return ps_impl()->resolver();
}
int ParameterServerStrategy::num_ps() const { return ps_impl()->num_ps(); }
int ParameterServerStrategy::num_worker_tasks() const {
  return cluster_resolver().cluster_spec().num_tasks("worker");
}
ParameterServerStats ParameterServerStrategy::stats() const { return ps_impl()->stats(); }

std::int64_t ParameterServerStrategy::variable_index(const Variable& v) const {
  return ps_impl()->layout_of(v, "variable_index").index;
}

ShardedVariable ParameterServerStrategy::sharded_variable(const Variable& v) const {
  ShardedVariable s;
  s.impl_ = ps_impl();
  const VariableLayout l = s.impl_->layout_of(v, "sharded_variable");
  s.index_ = l.index;
  s.name_ = l.name;
  s.shape_ = Shape(l.shape);
  return s;
}

const std::string& ShardedVariable::name() const { return name_; }
const Shape& ShardedVariable::shape() const { return shape_; }

int ShardedVariable::num_shards() const {
  return static_cast<int>(impl_->layout_at(index_).shards.size());
}

std::vector<std::int64_t> ShardedVariable::shard_rows() const {
  std::vector<std::int64_t> rows;
  for (const auto& s : impl_->layout_at(index_).shards) rows.push_back(s.rows);
  return rows;
}

std::vector<int> ShardedVariable::ps_tasks() const {
  std::vector<int> tasks;
  for (const auto& s : impl_->layout_at(index_).shards) tasks.push_back(s.ps_task);
  return tasks;
}

std::vector<Tensor> ShardedVariable::variables() const {
  std::vector<Tensor> out;
  for (auto& shard : impl_->read_shards(impl_->layout_at(index_), false, nullptr))
    out.push_back(ps::from_wire(shard.value, "shard of '" + shard.name + "'"));
  return out;
}

Tensor ShardedVariable::read_value() const {
  const std::vector<Tensor> parts = variables();
  return parts.size() == 1 ? parts[0] : concat(parts, 0);
}

void ShardedVariable::assign(const Tensor& value) const {
  impl_->assign_shards(impl_->layout_at(index_), value);
}

}  // namespace lockstep::distribute
