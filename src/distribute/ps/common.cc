// What the coordinator and the workers of a parameter-server job share: the
// job token, the channels to a job's tasks, calls to several ps tasks at
// once (a lost one named), and reading variables' shards into local copies.
#include <cstring>
#include <future>
#include <map>

#include "distribute/job_token.h"
#include "distribute/ps/ps_strategy.h"
#include "distribute/ps/wire.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute::ps {

std::string job_token(const std::string& given, const std::string& who) {
  if (auto token = given_job_token(given, who)) return *token;
  detail::throw_error<ValueError>(
      who,
      ": no job token: every call between the tasks of a parameter-server job is authenticated "
      "with it; set LOCKSTEP_JOB_TOKEN to the same secret on every task (lockstep launch makes "
      "one), or pass job_token");
}

std::vector<std::shared_ptr<comm::rpc::Channel>> open_channels(const ClusterResolver& r,
                                                               const std::string& job,
                                                               const std::string& token,
                                                               std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<comm::rpc::Channel>> out;
  for (int i = 0; i < r.cluster_spec().num_tasks(job); ++i) {
    out.push_back(
        comm::rpc::Channel::open({.address = r.cluster_spec().task_address(job, i).to_string(),
                                  .token = token,
                                  .peer = r.describe_task(job, i),
                                  .timeout = timeout}));
  }
  return out;
}

void for_each_ps(const std::vector<int>& tasks, const std::function<void(int task)>& fn,
                 const std::vector<std::shared_ptr<comm::rpc::Channel>>& channels) {
  auto guarded = [&](int task) {
    try {
      fn(task);
    } catch (const comm::rpc::RpcError& e) {
      if (!e.peer_lost()) throw;
      throw PsUnavailable(task, std::string(e.what()) + "; the parameter server " +
                                    channels.at(static_cast<std::size_t>(task))->peer() +
                                    " is lost: restart the job, which resumes from its last "
                                    "checkpoint");
    }
  };
  if (tasks.size() == 1) {
    guarded(tasks[0]);
    return;
  }
  std::vector<std::future<void>> others;
  for (std::size_t i = 1; i < tasks.size(); ++i)
    others.push_back(std::async(std::launch::async, guarded, tasks[i]));
  std::exception_ptr first;
  try {
    guarded(tasks[0]);
  } catch (...) {
    first = std::current_exception();
  }
  for (auto& f : others) {
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

void add_shard_entries(const comm::rpc::VariableLayout& l, const Tensor& value,
                       const std::vector<std::pair<std::string, Tensor>>& slots,
                       EntriesByTask& by_task) {
  const bool split = l.shards.size() > 1;
  auto part = [&](const Tensor& t, std::int64_t row, std::int64_t rows) {
    return split ? rows_to_wire(t, row, row + rows) : to_wire(t);
  };
  std::int64_t row = 0;
  for (const auto& s : l.shards) {
    comm::rpc::VariableEntry e{.id = s.id,
                               .name = l.name,
                               .trainable = l.trainable,
                               .value = part(value, row, s.rows),
                               .slots = {},
                               .version = 0};
    for (const auto& [slot, t] : slots) e.slots.push_back({slot, part(t, row, s.rows)});
    by_task[s.ps_task].push_back(std::move(e));
    row += s.rows;
  }
}

void assign_entries(EntriesByTask by_task, std::optional<std::int64_t> iterations,
                    const std::vector<std::shared_ptr<comm::rpc::Channel>>& channels) {
  std::vector<int> tasks;
  for (const auto& [task, unused] : by_task) tasks.push_back(task);
  if (tasks.empty()) return;
  for_each_ps(
      tasks,
      [&](int task) {
        channels.at(static_cast<std::size_t>(task))
            ->assign(std::move(by_task.at(task)), iterations);
      },
      channels);
}

void pull_into(const std::vector<std::shared_ptr<comm::rpc::Channel>>& ps,
               const std::vector<std::pair<Variable, comm::rpc::VariableLayout>>& vars,
               std::vector<std::vector<std::int64_t>>* versions) {
  // Per ps task: the shards to read, and where each goes.
  struct Target {
    std::size_t var;
    std::size_t shard;
    std::int64_t first_row;
  };
  std::map<int, std::pair<std::vector<std::int64_t>, std::vector<Target>>> by_task;
  if (versions) versions->assign(vars.size(), {});
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const auto& layout = vars[k].second;
    if (versions) (*versions)[k].assign(layout.shards.size(), 0);
    std::int64_t row = 0;
    for (std::size_t s = 0; s < layout.shards.size(); ++s) {
      auto& [ids, targets] = by_task[layout.shards[s].ps_task];
      ids.push_back(layout.shards[s].id);
      targets.push_back({k, s, row});
      row += layout.shards[s].rows;
    }
  }
  std::vector<int> tasks;
  for (const auto& [task, unused] : by_task) tasks.push_back(task);
  if (tasks.empty()) return;
  std::mutex versions_mu;
  for_each_ps(
      tasks,
      [&](int task) {
        const auto& [ids, targets] = by_task.at(task);
        comm::rpc::ReadResult got = ps.at(static_cast<std::size_t>(task))->read(ids, false);
        LOCKSTEP_CHECK_AS(InternalError, got.variables.size() == ids.size(),
                          ps[static_cast<std::size_t>(task)]->peer(), ": Read returned ",
                          got.variables.size(), " variables for ", ids.size());
        for (std::size_t i = 0; i < targets.size(); ++i) {
          const Target& t = targets[i];
          const Variable& var = vars[t.var].first;
          const Tensor& dst = var.replica_value(0);
          const std::size_t row_bytes =
              var.shape().rank() == 0 ? dst.nbytes()
                                      : dst.nbytes() / static_cast<std::size_t>(var.shape()[0]);
          const auto& bytes = got.variables[i].value.bytes;
          const std::size_t rows =
              static_cast<std::size_t>(vars[t.var].second.shards[t.shard].rows);
          LOCKSTEP_CHECK_AS(
              ShapeError,
              bytes.size() == (var.shape().rank() == 0 ? dst.nbytes() : rows * row_bytes),
              ps[static_cast<std::size_t>(task)]->peer(), ": variable '", var.name(), "' shard ",
              t.shard, " holds ", bytes.size(), " bytes, expected ", rows * row_bytes);
          std::memcpy(static_cast<char*>(dst.raw_data()) +
                          static_cast<std::size_t>(t.first_row) * row_bytes,
                      bytes.data(), bytes.size());
          if (versions) {
            std::lock_guard lk(versions_mu);
            (*versions)[t.var][t.shard] = got.variables[i].version;
          }
        }
      },
      ps);
}

}  // namespace lockstep::distribute::ps
