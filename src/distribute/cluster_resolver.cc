// TF_CONFIG and MPI launch environments -> ClusterResolver (Slurm's:
// slurm.cc).
#include "lockstep/distribute/cluster_resolver.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "lockstep/core/checked.h"
#include "lockstep/core/env.h"
#include "lockstep/core/error.h"

namespace lockstep::distribute {
namespace {

using json = nlohmann::json;

// The jobs TensorFlow knows; the ones that train in sync come first.
const char* const kJobs[] = {"chief", "worker", "ps", "evaluator"};

bool known_job(const std::string& job) {
  for (const char* j : kJobs) {
    if (job == j) return true;
  }
  return false;
}

TaskAddress parse_address(const std::string& text, const std::string& where) {
  // host:port, or [v6]:port.
  const auto colon = text.rfind(':');
  LOCKSTEP_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < text.size(), where,
                 ": expected an address \"host:port\", got \"", text, "\"");
  TaskAddress a;
  a.host = text.substr(0, colon);
  // A wildcard is where a server listens, not an address a peer can dial:
  // the store would listen on every interface and Gloo fail later, obscurely.
  for (const char* wildcard : {"0.0.0.0", "[::]", "::", "*", "[0:0:0:0:0:0:0:0]"}) {
    LOCKSTEP_CHECK(a.host != wildcard, where, ": \"", text, "\" is a wildcard address (", a.host,
                   " means every interface); give each task an address its peers can reach, "
                   "e.g. its host name or IP address");
  }
  if (a.host.front() == '[') {
    LOCKSTEP_CHECK(a.host.size() > 2 && a.host.back() == ']', where, ": bad IPv6 address \"", text,
                   "\"");
  }
  const std::string port = text.substr(colon + 1);
  LOCKSTEP_CHECK(port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos,
                 where, ": the port of \"", text, "\" is not a number");
  a.port = std::stoi(port);
  LOCKSTEP_CHECK(a.port >= 1 && a.port <= 65535, where, ": port ", a.port, " of \"", text,
                 "\" is outside 1..65535");
  return a;
}

}  // namespace

ClusterSpec::ClusterSpec(std::map<std::string, std::vector<TaskAddress>> jobs)
    : jobs_(std::move(jobs)) {}

int ClusterSpec::num_tasks(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : static_cast<int>(it->second.size());
}

const TaskAddress& ClusterSpec::task_address(const std::string& job, int index) const {
  auto it = jobs_.find(job);
  LOCKSTEP_CHECK(it != jobs_.end(), "ClusterSpec: no job '", job, "'");
  LOCKSTEP_CHECK_AS(IndexError, index >= 0 && index < static_cast<int>(it->second.size()),
                    "ClusterSpec: task ", index, " of job '", job, "' out of range (", job, " has ",
                    it->second.size(), ")");
  return it->second[static_cast<std::size_t>(index)];
}

ClusterResolver ClusterResolver::from_tf_config(const std::string& text,
                                                const std::string& source) {
  check_json_nesting(text, source);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    detail::throw_error<ValueError>(source, ": not valid JSON (", e.what(), ")");
  }
  LOCKSTEP_CHECK(j.is_object(), source, ": expected a JSON object with \"cluster\" and \"task\"");
  for (const auto& [key, value] : j.items()) {
    LOCKSTEP_CHECK(key == "cluster" || key == "task" || key == "rpc_layer" || key == "environment",
                   source, ": unknown key \"", key,
                   "\" (expected cluster, task, rpc_layer, environment)");
  }
  LOCKSTEP_CHECK(j.contains("cluster"), source, ": the \"cluster\" key is missing");
  LOCKSTEP_CHECK(j.contains("task"), source, ": the \"task\" key is missing");
  const json& cluster = j["cluster"];
  LOCKSTEP_CHECK(cluster.is_object() && !cluster.empty(), source,
                 ": \"cluster\" must be an object of jobs, e.g. {\"worker\": [\"host:port\"]}");

  ClusterResolver r;
  std::map<std::string, std::vector<TaskAddress>> jobs;
  std::map<std::string, std::string> seen;  // address -> "job[index]"
  for (const auto& [job, tasks] : cluster.items()) {
    const std::string where = source + ": cluster." + job;
    LOCKSTEP_CHECK(known_job(job), where, ": unknown job \"", job,
                   "\" (expected chief, worker, ps, evaluator)");
    LOCKSTEP_CHECK(tasks.is_array() && !tasks.empty(), where,
                   ": expected a non-empty list of \"host:port\" addresses");
    LOCKSTEP_CHECK((job != "chief" && job != "evaluator") || tasks.size() == 1, where,
                   ": there can be only one ", job, " task, got ", tasks.size());
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const std::string at = where + "[" + std::to_string(i) + "]";
      LOCKSTEP_CHECK(tasks[i].is_string(), at, ": expected an address string, got ",
                     tasks[i].dump());
      TaskAddress a = parse_address(tasks[i].get<std::string>(), at);
      const std::string name = job + "[" + std::to_string(i) + "]";
      auto [it, fresh] = seen.emplace(a.to_string(), name);
      LOCKSTEP_CHECK(fresh, source, ": cluster.", name, " and cluster.", it->second,
                     " have the same address ", a.to_string());
      jobs[job].push_back(std::move(a));
    }
  }
  r.cluster_ = ClusterSpec(std::move(jobs));

  const json& task = j["task"];
  LOCKSTEP_CHECK(task.is_object(), source, ": \"task\" must be an object {\"type\", \"index\"}");
  for (const auto& [key, value] : task.items()) {
    LOCKSTEP_CHECK(key == "type" || key == "index", source, ": task: unknown key \"", key,
                   "\" (expected type, index)");
  }
  LOCKSTEP_CHECK(task.contains("type") && task["type"].is_string(), source,
                 ": task.type is missing or not a string");
  r.task_type_ = task["type"].get<std::string>();
  // The evaluator may sit outside the cluster it evaluates (TensorFlow's
  // rule; ParameterServerStrategy requires it).
  const bool outside = r.task_type_ == "evaluator" && r.cluster_.num_tasks("evaluator") == 0;
  LOCKSTEP_CHECK(r.cluster_.num_tasks(r.task_type_) > 0 || outside, source, ": task.type \"",
                 r.task_type_, "\" is not a job of the cluster");
  LOCKSTEP_CHECK(!task.contains("index") || task["index"].is_number_integer(), source,
                 ": task.index must be an integer, got ", task.value("index", json()).dump());
  // Range-checked as read (as a 64-bit number: 4294967296 once became 0).
  const json index = task.value("index", json(0));
  const std::int64_t id = index.is_number_unsigned()
                              ? static_cast<std::int64_t>(
                                    std::min<std::uint64_t>(index.get<std::uint64_t>(), INT64_MAX))
                              : index.get<std::int64_t>();
  const int tasks = outside ? 1 : r.cluster_.num_tasks(r.task_type_);
  LOCKSTEP_CHECK(id >= 0 && id < tasks, source, ": task.index ", index.dump(),
                 " is out of range: the cluster has ", tasks, " ", r.task_type_, " task(s)");
  r.task_id_ = static_cast<int>(id);
  if (j.contains("rpc_layer")) {
    LOCKSTEP_CHECK(j["rpc_layer"].is_string(), source, ": rpc_layer must be a string");
    r.rpc_layer_ = j["rpc_layer"].get<std::string>();
  }
  if (j.contains("environment"))
    LOCKSTEP_CHECK(j["environment"].is_string(), source, ": environment must be a string");
  r.launcher_ = Launcher::kTfConfig;
  return r;
}

std::optional<ClusterResolver> ClusterResolver::from_mpi_environment(
    const std::function<const char*(const char*)>& getenv) {
  static const std::pair<const char*, const char*> kLaunchers[] = {
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},  // OpenMPI's mpirun
      {"PMI_RANK", "PMI_SIZE"},                          // MPICH, Intel MPI, srun --mpi=pmi2
  };
  for (const auto& [rank_var, size_var] : kLaunchers) {
    const char* rank_text = getenv(rank_var);
    if (!rank_text) continue;
    const char* size_text = getenv(size_var);
    LOCKSTEP_CHECK(size_text, rank_var, " is set but ", size_var, " is not");
    auto number = [](const char* var, const char* text) {
      const std::string s = text;
      LOCKSTEP_CHECK(
          !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos,
          var, ": expected a non-negative integer, got \"", s, "\"");
      return std::stoi(s);
    };
    const int rank = number(rank_var, rank_text), size = number(size_var, size_text);
    LOCKSTEP_CHECK(size >= 1 && rank < size, rank_var, "=", rank, " is out of range for ", size_var,
                   "=", size);
    ClusterResolver r;
    // Under MPI the ranks are the workers; addresses are the launcher's
    // business (placeholders, port 0 is never dialled).
    std::vector<TaskAddress> workers(static_cast<std::size_t>(size));
    for (int i = 0; i < size; ++i)
      workers[static_cast<std::size_t>(i)] = {"mpi-rank-" + std::to_string(i), 0};
    r.cluster_ = ClusterSpec({{"worker", std::move(workers)}});
    r.task_type_ = "worker";
    r.task_id_ = rank;
    r.launcher_ = Launcher::kMpi;
    return r;
  }
  return std::nullopt;
}

std::optional<ClusterResolver> ClusterResolver::from_environment() {
  if (const auto tf_config = env::tf_config()) return from_tf_config(*tf_config);
  if (auto mpi = from_mpi_environment(env::launcher_variable)) return mpi;
  return from_slurm_environment(env::launcher_variable);
}

int ClusterResolver::num_workers() const {
  return cluster_.num_tasks("chief") + cluster_.num_tasks("worker");
}

int ClusterResolver::worker_rank() const {
  if (task_type_ == "chief") return 0;
  if (task_type_ == "worker") return cluster_.num_tasks("chief") + task_id_;
  return -1;
}

bool ClusterResolver::is_chief() const {
  if (cluster_.num_tasks("chief") > 0) return task_type_ == "chief";
  return task_type_ == "worker" && task_id_ == 0;
}

}  // namespace lockstep::distribute

namespace lockstep::distribute {

ClusterResolver ClusterResolver::single_worker() {
  ClusterResolver r;
  r.cluster_ = ClusterSpec({{"worker", {TaskAddress{"localhost", 0}}}});
  r.task_type_ = "worker";
  r.task_id_ = 0;
  return r;
}

const TaskAddress& ClusterResolver::worker_address(int rank) const {
  const int chiefs = cluster_.num_tasks("chief");
  LOCKSTEP_CHECK_AS(IndexError, rank >= 0 && rank < num_workers(), "worker_address: rank ", rank,
                    " of ", num_workers(), " workers");
  return rank < chiefs ? cluster_.task_address("chief", rank)
                       : cluster_.task_address("worker", rank - chiefs);
}

std::string ClusterResolver::describe_worker(int rank) const {
  std::string s = "worker " + std::to_string(rank);
  if (rank >= 0 && rank < num_workers() && launcher_ == Launcher::kTfConfig)
    s += " (" + worker_address(rank).to_string() + ")";
  return s;
}

std::string ClusterResolver::describe_task(const std::string& job, int index) const {
  std::string s = job + " " + std::to_string(index);
  if (index >= 0 && index < cluster_.num_tasks(job))
    s += " (" + cluster_.task_address(job, index).to_string() + ")";
  return s;
}

void ClusterResolver::check_parameter_server_cluster(const std::string& source) const {
  const std::string hint =
      " (ParameterServerStrategy needs a \"chief\" that coordinates, \"worker\" tasks that "
      "compute and \"ps\" tasks that hold the variables)";
  LOCKSTEP_CHECK(launcher_ == Launcher::kTfConfig, source,
                 ": ParameterServerStrategy needs a TF_CONFIG cluster; an MPI launch has only "
                 "workers");
  LOCKSTEP_CHECK(cluster_.num_tasks("ps") >= 1, source,
                 ": cluster.ps: there must be at least one ps task", hint);
  LOCKSTEP_CHECK(cluster_.num_tasks("chief") == 1, source,
                 ": cluster.chief: there must be a chief task, the coordinator", hint);
  LOCKSTEP_CHECK(cluster_.num_tasks("worker") >= 1, source,
                 ": cluster.worker: there must be at least one worker task", hint);
  LOCKSTEP_CHECK(cluster_.num_tasks("evaluator") == 0, source,
                 ": cluster.evaluator: the evaluator sits outside the cluster, as a sidecar that "
                 "evaluates checkpoints; leave it out of \"cluster\" (its own TF_CONFIG has "
                 "task.type \"evaluator\")");
}

std::string ClusterResolver::canonical_cluster_spec() const {
  std::string s;
  for (const auto& [job, tasks] : cluster_.jobs()) {
    s += job + ":";
    for (const auto& t : tasks) s += t.to_string() + ",";
    s += ";";
  }
  return s;
}

ClusterResolver ClusterResolver::with_workers(const std::vector<int>& ranks) const {
  LOCKSTEP_CHECK(std::is_sorted(ranks.begin(), ranks.end()) &&
                     std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
                     !ranks.empty() && ranks.front() >= 0 && ranks.back() < num_workers(),
                 "ClusterResolver::with_workers: expected increasing ranks below ", num_workers());
  const int me = worker_rank();
  LOCKSTEP_CHECK(std::find(ranks.begin(), ranks.end(), me) != ranks.end(),
                 "ClusterResolver::with_workers: this process, ", describe_worker(me),
                 ", is not among the workers kept");
  const int chiefs = cluster_.num_tasks("chief");
  std::map<std::string, std::vector<TaskAddress>> jobs = cluster_.jobs();
  jobs.erase("chief");
  jobs.erase("worker");
  ClusterResolver r = *this;
  for (int rank : ranks) {
    jobs[rank < chiefs ? "chief" : "worker"].push_back(worker_address(rank));
    if (rank == me && task_type_ == "worker")
      r.task_id_ = static_cast<int>(jobs["worker"].size()) - 1;
  }
  r.cluster_ = ClusterSpec(std::move(jobs));
  return r;
}

}  // namespace lockstep::distribute
