// Slurm's srun environment -> ClusterResolver (TensorFlow's
// SlurmClusterResolver): the step's node list and tasks per node give every
// task's host and port, SLURM_PROCID this process's place among them, and
// the node's GPUs this task's share of them.
#include <cctype>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/distribute/cluster_resolver.h"

namespace lockstep::distribute {
namespace {

// A non-negative decimal of at most 9 digits (no sign, no spaces).
int small_number(const std::string& text, const std::string& what) {
  LOCKSTEP_CHECK(!text.empty() && text.size() <= 9 &&
                     text.find_first_not_of("0123456789") == std::string::npos,
                 what, ": expected a non-negative integer, got \"", text, "\"");
  return std::stoi(text);
}

// Splits at the commas outside brackets.
std::vector<std::string> top_level_items(const std::string& list, const std::string& what) {
  std::vector<std::string> items;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    LOCKSTEP_CHECK(depth == 0 || depth == 1, what, ": unbalanced or nested brackets in \"", list,
                   "\"");
    if (c == ',' && depth == 0) {
      items.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  LOCKSTEP_CHECK(depth == 0, what, ": unbalanced brackets in \"", list, "\"");
  items.push_back(current);
  for (const std::string& item : items)
    LOCKSTEP_CHECK(!item.empty(), what, ": an empty host name in \"", list, "\"");
  return items;
}

// "01-03,07" -> 01 02 03 07 (each number as wide as the range's first).
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& what) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= ranges.size()) {
    const std::size_t comma = ranges.find(',', start);
    const std::string part =
        ranges.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::size_t dash = part.find('-');
    const std::string lo_text = part.substr(0, dash);
    const std::string hi_text = dash == std::string::npos ? lo_text : part.substr(dash + 1);
    const int lo = small_number(lo_text, what), hi = small_number(hi_text, what);
    LOCKSTEP_CHECK(lo <= hi, what, ": the range \"", part, "\" runs backwards");
    LOCKSTEP_CHECK(hi - lo < 100000, what, ": the range \"", part, "\" is too large");
    for (int v = lo; v <= hi; ++v) {
      std::string digits = std::to_string(v);
      if (digits.size() < lo_text.size()) digits.insert(0, lo_text.size() - digits.size(), '0');
      out.push_back(digits);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One name with zero or more bracket groups, expanded as their product.
void expand_name(const std::string& name, const std::string& what, std::vector<std::string>& out) {
  const std::size_t open = name.find('[');
  if (open == std::string::npos) {
    LOCKSTEP_CHECK(name.find(']') == std::string::npos, what, ": a stray ']' in \"", name, "\"");
    out.push_back(name);
    return;
  }
  const std::size_t close = name.find(']', open);
  LOCKSTEP_CHECK(close != std::string::npos, what, ": an unclosed '[' in \"", name, "\"");
  const std::string prefix = name.substr(0, open), rest = name.substr(close + 1);
  for (const std::string& v : expand_ranges(name.substr(open + 1, close - open - 1), what))
    expand_name(prefix + v + rest, what, out);
}

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list, const std::string& what) {
  std::vector<std::string> hosts;
  for (const std::string& item : top_level_items(list, what)) expand_name(item, what, hosts);
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& list, const std::string& what) {
  std::vector<int> counts;
  for (const std::string& item : top_level_items(list, what)) {
    const std::size_t paren = item.find('(');
    const int tasks = small_number(item.substr(0, paren), what);
    int repeat = 1;
    if (paren != std::string::npos) {
      LOCKSTEP_CHECK(
          item.size() > paren + 3 && item.compare(paren, 2, "(x") == 0 && item.back() == ')', what,
          ": expected \"N\" or \"N(xM)\", got \"", item, "\"");
      repeat = small_number(item.substr(paren + 2, item.size() - paren - 3), what);
    }
    LOCKSTEP_CHECK(repeat <= 100000, what, ": \"", item, "\" repeats too often");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), tasks);
  }
  return counts;
}

std::optional<ClusterResolver> ClusterResolver::from_slurm_environment(
    const std::function<const char*(const char*)>& getenv) {
  // A step that srun started: srun alone sets SLURM_STEP_NODELIST. A batch
  // script (sbatch) has SLURM_PROCID and the job's node list too, but it is
  // one process, not the job's tasks: it trains alone.
  const char* procid = getenv("SLURM_PROCID");
  const char* nodes = getenv("SLURM_STEP_NODELIST");
  if (!procid || !nodes) return std::nullopt;
  const char* tasks = getenv("SLURM_STEP_TASKS_PER_NODE");
  LOCKSTEP_CHECK(tasks, "SLURM_STEP_NODELIST is set but SLURM_STEP_TASKS_PER_NODE is not");
  const std::string nodes_var = "SLURM_STEP_NODELIST", nodes_text = nodes;
  const std::string tasks_var = "SLURM_STEP_TASKS_PER_NODE", tasks_text = tasks;
  const char* ntasks_text = getenv("SLURM_NTASKS");
  LOCKSTEP_CHECK(ntasks_text, "SLURM_PROCID is set but SLURM_NTASKS is not");
  const int rank = small_number(procid, "SLURM_PROCID");
  const int ntasks = small_number(ntasks_text, "SLURM_NTASKS");
  int port_base = 8888;
  if (const char* base = getenv("LOCKSTEP_SLURM_PORT_BASE"))
    port_base = small_number(base, "LOCKSTEP_SLURM_PORT_BASE");

  const std::vector<std::string> hosts = expand_slurm_hostlist(nodes_text, nodes_var);
  const std::vector<int> per_node = expand_slurm_tasks_per_node(tasks_text, tasks_var);
  LOCKSTEP_CHECK(hosts.size() == per_node.size(), nodes_var, "=", nodes_text, " names ",
                 hosts.size(), " node(s) but ", tasks_var, "=", tasks_text, " gives tasks for ",
                 per_node.size());
  std::vector<TaskAddress> workers;
  for (std::size_t node = 0; node < hosts.size(); ++node) {
    for (int i = 0; i < per_node[node]; ++i) {
      LOCKSTEP_CHECK(port_base + i <= 65535, "LOCKSTEP_SLURM_PORT_BASE=", port_base, ": node ",
                     hosts[node], "'s task ", i, " would get a port past 65535");
      workers.push_back({hosts[node], port_base + i});
    }
  }
  LOCKSTEP_CHECK(static_cast<int>(workers.size()) == ntasks, tasks_var, "=", tasks_text, " places ",
                 workers.size(), " task(s) but SLURM_NTASKS=", ntasks);
  LOCKSTEP_CHECK(rank < ntasks, "SLURM_PROCID=", rank,
                 " is out of range for SLURM_NTASKS=", ntasks);
  ClusterResolver r;
  // This task's node and its place among the node's tasks (srun's block
  // distribution; SLURM_LOCALID says the same where it is set).
  std::size_t node = 0;
  int first = 0;
  while (first + per_node[node] <= rank) first += per_node[node++];
  int local = rank - first;
  if (const char* localid = getenv("SLURM_LOCALID")) local = small_number(localid, "SLURM_LOCALID");
  LOCKSTEP_CHECK(local < per_node[node], "SLURM_LOCALID=", local, " is out of range for the ",
                 per_node[node], " task(s) ", tasks_var, " places on node ", hosts[node]);
  std::string step_var = "SLURM_STEP_GPUS";
  const char* step_gpus = getenv("SLURM_STEP_GPUS");
  if (!step_gpus || !*step_gpus) {
    step_var = "SLURM_JOB_GPUS";
    step_gpus = getenv("SLURM_JOB_GPUS");
  }
  const char* auto_set = getenv("LOCKSTEP_SLURM_AUTO_SET_GPU");
  const bool auto_set_gpu = auto_set == nullptr || std::string(auto_set) != "0";
  if (auto_set_gpu && step_gpus && per_node[node] > 1) {
    const std::vector<std::string> node_gpus = split_commas(step_gpus);
    const char* visible_text = getenv("CUDA_VISIBLE_DEVICES");
    // Slurm's cgroup may renumber the GPUs a task sees: what it sees is
    // CUDA_VISIBLE_DEVICES, and all of the node's when it lists as many.
    const std::vector<std::string> visible = visible_text ? split_commas(visible_text) : node_gpus;
    if (!node_gpus.empty() && visible.size() == node_gpus.size()) {
      const std::size_t tasks = static_cast<std::size_t>(per_node[node]);
      const std::string where = "local task " + std::to_string(local) + " of " +
                                std::to_string(tasks) + " on node " + hosts[node] + ", " +
                                step_var + "=" + step_gpus;
      LOCKSTEP_CHECK(visible.size() % tasks == 0, "Slurm shows each of the ", tasks,
                     " tasks on node ", hosts[node], " all ", visible.size(), " of its GPUs (",
                     step_var, "=", step_gpus,
                     "), which do not split evenly among them: ask srun for --gpus-per-task, "
                     "or a GPU count that the node's tasks divide, or set "
                     "LOCKSTEP_SLURM_AUTO_SET_GPU=0 to choose by hand");
      const std::size_t share = visible.size() / tasks;
      const auto begin = visible.begin() + static_cast<std::ptrdiff_t>(share * local);
      r.task_gpus_.assign(begin, begin + static_cast<std::ptrdiff_t>(share));
      r.task_gpus_reason_ = where;
    }
  }
  r.cluster_ = ClusterSpec({{"worker", std::move(workers)}});
  r.task_type_ = "worker";
  r.task_id_ = rank;
  r.launcher_ = Launcher::kSlurm;
  return r;
}

}  // namespace lockstep::distribute
