// TF_CONFIG and MPI launch environments.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <sstream>

#include "lockstep/lockstep.h"
#include "support/files.h"

namespace lockstep::distribute {
namespace {

TEST(ClusterResolver, ReadsTheGuidesTfConfig) {
  const auto r = ClusterResolver::from_tf_config(R"({
      "cluster": {"chief": ["host0:2222"], "worker": ["host1:2222", "host2:2223"],
                  "ps": ["host3:2222"]},
      "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})");
  EXPECT_EQ(r.task_type(), "worker");
  EXPECT_EQ(r.task_id(), 1);
  EXPECT_EQ(r.num_workers(), 3);
  EXPECT_EQ(r.worker_rank(), 2);
  EXPECT_FALSE(r.is_chief());
  EXPECT_EQ(r.rpc_layer(), "grpc");
  EXPECT_EQ(r.launcher(), Launcher::kTfConfig);
  EXPECT_EQ(r.cluster_spec().task_address("worker", 1).to_string(), "host2:2223");
  EXPECT_EQ(r.cluster_spec().num_tasks("ps"), 1);

  // Without a chief, worker 0 is the chief.
  const auto w0 = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_TRUE(w0.is_chief());
  EXPECT_EQ(w0.worker_rank(), 0);
}

// Elastic shrink: the job re-formed without a lost worker keeps the others
// in order, this process at its new place, and the jobs outside training.
TEST(ClusterResolver, ReformedWithSomeWorkersKeepsTheirOrderAndRenumbersThisOne) {
  const auto r = ClusterResolver::from_tf_config(R"({
      "cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1", "w2:1"], "ps": ["p:1"]},
      "task": {"type": "worker", "index": 2}})");
  ASSERT_EQ(r.worker_rank(), 3);
  const ClusterResolver kept = r.with_workers({0, 2, 3});  // w0 lost
  EXPECT_EQ(kept.num_workers(), 3);
  EXPECT_EQ(kept.worker_rank(), 2);
  EXPECT_EQ(kept.task_type(), "worker");
  EXPECT_EQ(kept.task_id(), 1);
  EXPECT_FALSE(kept.is_chief());
  EXPECT_EQ(kept.worker_address(0).to_string(), "c:1");
  EXPECT_EQ(kept.worker_address(1).to_string(), "w1:1");
  EXPECT_EQ(kept.worker_address(2).to_string(), "w2:1");
  EXPECT_EQ(kept.cluster_spec().num_tasks("ps"), 1);
  EXPECT_EQ(kept.describe_worker(2), "worker 2 (w2:1)");

  // Without a chief job, worker 0 stays the chief.
  const auto w = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["a:1", "b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})");
  const ClusterResolver two = w.with_workers({0, 2});
  EXPECT_TRUE(two.is_chief());
  EXPECT_EQ(two.num_workers(), 2);
  EXPECT_EQ(two.worker_address(1).to_string(), "c:1");
  EXPECT_NE(two.canonical_cluster_spec(), w.canonical_cluster_spec());

  // This process must be among those kept; ranks increasing and in range.
  EXPECT_THROW(r.with_workers({0, 1, 2}), ValueError);
  EXPECT_THROW(r.with_workers({3, 0}), ValueError);
  EXPECT_THROW(r.with_workers({0, 3, 4}), ValueError);
}

TEST(ClusterResolver, EveryBadTfConfigNamesItsProblem) {
  const std::map<std::string, std::string> cases = {
      {"not json", "TF_CONFIG: not valid JSON"},
      {R"([1, 2])", "expected a JSON object"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}, "extra": 1})",
       "unknown key \"extra\""},
      {R"({"task": {"type": "worker", "index": 0}})", "the \"cluster\" key is missing"},
      {R"({"cluster": {"worker": ["a:1"]}})", "the \"task\" key is missing"},
      {R"({"cluster": {"master": ["a:1"]}, "task": {"type": "master"}})",
       "cluster.master: unknown job \"master\""},
      {R"({"cluster": {"worker": []}, "task": {"type": "worker"}})",
       "cluster.worker: expected a non-empty list"},
      {R"({"cluster": {"chief": ["a:1", "b:1"]}, "task": {"type": "chief"}})",
       "only one chief task, got 2"},
      {R"({"cluster": {"worker": ["a"]}, "task": {"type": "worker"}})",
       "cluster.worker[0]: expected an address \"host:port\", got \"a\""},
      {R"({"cluster": {"worker": ["a:http"]}, "task": {"type": "worker"}})",
       "the port of \"a:http\" is not a number"},
      {R"({"cluster": {"worker": ["a:70000"]}, "task": {"type": "worker"}})",
       "port 70000 of \"a:70000\" is outside 1..65535"},
      {R"({"cluster": {"chief": ["a:1"], "worker": ["b:2", "a:1"]}, "task": {"type": "chief"}})",
       "cluster.worker[1] and cluster.chief[0] have the same address a:1"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})",
       "task.type \"ps\" is not a job of the cluster"},
      {R"({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 2}})",
       "task.index 2 is out of range: the cluster has 2 worker task(s)"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": "0"}})",
       "task.index must be an integer"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "id": 0}})",
       "task: unknown key \"id\""},
      // Issue #23, item 11: range-checked as read (it wrapped to 0).
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 4294967296}})",
       "task.index 4294967296 is out of range: the cluster has 1 worker task(s)"},
      {R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}})",
       "task.index -1 is out of range"},
      // Issue #23, item 2: a wildcard is not an address a peer can dial.
      {R"({"cluster": {"worker": ["0.0.0.0:2222"]}, "task": {"type": "worker"}})",
       "cluster.worker[0]: \"0.0.0.0:2222\" is a wildcard address"},
      {R"({"cluster": {"worker": ["a:1", "[::]:2222"]}, "task": {"type": "worker"}})",
       "cluster.worker[1]: \"[::]:2222\" is a wildcard address"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      ClusterResolver::from_tf_config(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "for " << text << "\n got: " << e.what();
    }
  }
}

TEST(ClusterResolver, DetectsAnMpiLaunchFromItsEnvironment) {
  auto env = [](std::map<std::string, std::string> vars) {
    return [vars = std::move(vars)](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  EXPECT_FALSE(ClusterResolver::from_mpi_environment(env({})).has_value());
  for (auto [rank_var, size_var] : std::vector<std::pair<std::string, std::string>>{
           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}}) {
    const auto r = ClusterResolver::from_mpi_environment(env({{rank_var, "2"}, {size_var, "3"}}));
    ASSERT_TRUE(r.has_value()) << rank_var;
    EXPECT_EQ(r->launcher(), Launcher::kMpi);
    EXPECT_EQ(r->task_type(), "worker");
    EXPECT_EQ(r->task_id(), 2);
    EXPECT_EQ(r->num_workers(), 3);
    EXPECT_FALSE(r->is_chief());
  }
  try {
    ClusterResolver::from_mpi_environment(
        env({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}}));
    ADD_FAILURE() << "rank 3 of 3 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("OMPI_COMM_WORLD_RANK=3 is out of range"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ClusterResolver::from_mpi_environment(env({{"PMI_RANK", "0"}})), ValueError);
}

std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

// `base` with `changes` applied: a value replaces, an empty one removes.
std::map<std::string, std::string> changed(std::map<std::string, std::string> base,
                                           const std::map<std::string, std::string>& changes) {
  for (const auto& [k, v] : changes) {
    if (v.empty()) {
      base.erase(k);
    } else {
      base[k] = v;
    }
  }
  return base;
}

TEST(SlurmClusterResolver, ExpandsHostListsAndTasksPerNodeAsSlurmWritesThem) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_hostlist("node01"), V({"node01"}));
  EXPECT_EQ(expand_slurm_hostlist("node[01-03,07],gpu5"),
            V({"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_slurm_hostlist("n[8-10]"), V({"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_hostlist("rack[1-2]-n[0-1].cluster"),
            V({"rack1-n0.cluster", "rack1-n1.cluster", "rack2-n0.cluster", "rack2-n1.cluster"}));
  EXPECT_EQ(expand_slurm_tasks_per_node("2(x3),1"), std::vector<int>({2, 2, 2, 1}));
  EXPECT_EQ(expand_slurm_tasks_per_node("4"), std::vector<int>({4}));
  for (const char* bad : {"node[01-03", "node]1", "node[3-1]", "node[a-b]", "a,,b", "n[[1]]"}) {
    try {
      expand_slurm_hostlist(bad, "SLURM_STEP_NODELIST");
      ADD_FAILURE() << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_STEP_NODELIST"), std::string::npos) << e.what();
    }
  }
  for (const char* bad : {"2(x", "2(3)", "x", "2(x)"}) {
    EXPECT_THROW(expand_slurm_tasks_per_node(bad), ValueError) << bad;
  }
}

TEST(SlurmClusterResolver, PlacesTheStepsTasksOnItsNodesInOrder) {
  EXPECT_FALSE(ClusterResolver::from_slurm_environment(fake_env({})).has_value());
  // 5 tasks: 2 on n1, 2 on n2, 1 on n3; this process is task 3 (n2's second).
  const auto r =
      ClusterResolver::from_slurm_environment(fake_env({{"SLURM_PROCID", "3"},
                                                        {"SLURM_NTASKS", "5"},
                                                        {"SLURM_STEP_NODELIST", "n[1-3]"},
                                                        {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                                        {"SLURM_JOB_NODELIST", "ignored[1-9]"},
                                                        {"LOCKSTEP_SLURM_PORT_BASE", "9000"}}));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->launcher(), Launcher::kSlurm);
  EXPECT_EQ(r->task_type(), "worker");
  EXPECT_EQ(r->task_id(), 3);
  EXPECT_EQ(r->num_workers(), 5);
  EXPECT_FALSE(r->is_chief());
  std::vector<std::string> addresses;
  for (int i = 0; i < 5; ++i) addresses.push_back(r->worker_address(i).to_string());
  EXPECT_EQ(addresses,
            std::vector<std::string>({"n1:9000", "n1:9001", "n2:9000", "n2:9001", "n3:9000"}));
  // TensorFlow's port 8888 by default.
  const auto step =
      ClusterResolver::from_slurm_environment(fake_env({{"SLURM_PROCID", "0"},
                                                        {"SLURM_NTASKS", "2"},
                                                        {"SLURM_STEP_NODELIST", "a,b"},
                                                        {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}}));
  ASSERT_TRUE(step.has_value());
  EXPECT_TRUE(step->is_chief());
  EXPECT_EQ(step->worker_address(1).to_string(), "b:8888");
  // A batch script (sbatch: the job's variables, no step's) is one process
  // that trains alone, not a task of a step.
  EXPECT_FALSE(
      ClusterResolver::from_slurm_environment(fake_env({{"SLURM_PROCID", "0"},
                                                        {"SLURM_NTASKS", "2"},
                                                        {"SLURM_JOB_NODELIST", "a,b"},
                                                        {"SLURM_TASKS_PER_NODE", "1(x2)"}}))
          .has_value());
}

// A step that gave each node's GPUs to all its tasks at once: each task
// takes an equal share in local order (TensorFlow's auto_set_gpu); a step
// that bound each task's GPUs itself is left alone.
TEST(SlurmClusterResolver, TasksSharingTheirNodesGpusTakeAnEqualShareEach) {
  const std::map<std::string, std::string> step = {{"SLURM_NTASKS", "4"},
                                                   {"SLURM_STEP_NODELIST", "gpu[01-02]"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                                                   {"SLURM_STEP_GPUS", "0,1,2,3"}};
  const auto resolve = [&](std::map<std::string, std::string> changes) {
    return ClusterResolver::from_slurm_environment(fake_env(changed(step, changes))).value();
  };
  using Ids = std::vector<std::string>;
  // Task 3: node gpu02's second task; its local id from the placement.
  const ClusterResolver r = resolve({{"SLURM_PROCID", "3"}});
  EXPECT_EQ(r.task_gpus(), Ids({"2", "3"}));
  EXPECT_NE(r.task_gpus_reason().find("local task 1 of 2 on node gpu02, SLURM_STEP_GPUS=0,1,2,3"),
            std::string::npos)
      << r.task_gpus_reason();
  // Slurm shows them all (its cgroup's numbers) and names the local id.
  EXPECT_EQ(
      resolve({{"SLURM_PROCID", "2"}, {"SLURM_LOCALID", "0"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}})
          .task_gpus(),
      Ids({"0", "1"}));
  // The job's GPUs when the step's are not named.
  EXPECT_EQ(resolve({{"SLURM_PROCID", "1"}, {"SLURM_STEP_GPUS", ""}, {"SLURM_JOB_GPUS", "4,5"}})
                .task_gpus(),
            Ids({"5"}));
  // Bound by Slurm (--gpus-per-task: each task sees its own), opted out, or
  // one task per node: nothing to choose.
  EXPECT_TRUE(
      resolve({{"SLURM_PROCID", "1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}}).task_gpus().empty());
  EXPECT_TRUE(
      resolve({{"SLURM_PROCID", "1"}, {"LOCKSTEP_SLURM_AUTO_SET_GPU", "0"}}).task_gpus().empty());
  EXPECT_TRUE(
      resolve(
          {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}})
          .task_gpus()
          .empty());
  // Three GPUs for two tasks do not split: said, with what to do.
  try {
    resolve({{"SLURM_PROCID", "0"}, {"SLURM_STEP_GPUS", "0,1,2"}});
    ADD_FAILURE() << "three GPUs split between two tasks";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("do not split evenly"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--gpus-per-task"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "2"}}), ValueError);
}

TEST(SlurmClusterResolver, AnInconsistentEnvironmentIsAnErrorNamingTheVariables) {
  const std::map<std::string, std::string> good = {{"SLURM_PROCID", "1"},
                                                   {"SLURM_NTASKS", "2"},
                                                   {"SLURM_STEP_NODELIST", "n[1-2]"},
                                                   {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}};
  const auto expect_refused = [&](std::map<std::string, std::string> changes,
                                  const std::string& named) {
    try {
      ClusterResolver::from_slurm_environment(fake_env(changed(good, changes)));
      ADD_FAILURE() << "accepted: " << named;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  expect_refused({{"SLURM_STEP_TASKS_PER_NODE", "1(x3)"}}, "names 2 node(s) but");
  expect_refused({{"SLURM_NTASKS", "3"}}, "places 2 task(s) but SLURM_NTASKS=3");
  expect_refused({{"SLURM_PROCID", "2"}}, "SLURM_PROCID=2 is out of range");
  expect_refused({{"SLURM_STEP_TASKS_PER_NODE", ""}}, "SLURM_STEP_TASKS_PER_NODE is not");
  expect_refused({{"SLURM_NTASKS", ""}}, "SLURM_NTASKS is not");
  expect_refused({{"LOCKSTEP_SLURM_PORT_BASE", "65535"},
                  {"SLURM_STEP_TASKS_PER_NODE", "2"},
                  {"SLURM_STEP_NODELIST", "n1"}},
                 "past 65535");
}

// The Kubernetes example (examples/kubernetes/multi-worker.yaml), read as
// lines: a manifest value, the value of a container's env variable, and the
// pod's shell script (the block under `args: - |`).
struct Manifest {
  std::vector<std::string> lines;
  explicit Manifest(const std::string& text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  static std::string trimmed(const std::string& s) {
    const auto b = s.find_first_not_of(' ');
    return b == std::string::npos ? "" : s.substr(b);
  }
  // The text after "key: " on the first line that starts with it (quotes
  // and a trailing comment removed).
  std::string value(const std::string& key) const {
    for (const std::string& line : lines) {
      std::string t = trimmed(line);
      if (t.rfind("- ", 0) == 0) t = t.substr(2);  // the first key of a list item
      if (t.rfind(key + ": ", 0) != 0) continue;
      std::string v = t.substr(key.size() + 2);
      v = v.substr(0, v.find("  #"));
      if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
    return "";
  }
  std::string env(const std::string& name) const {
    for (std::size_t i = 0; i + 1 < lines.size(); ++i) {
      const std::string t = trimmed(lines[i]);
      if (t.rfind("- name: " + name, 0) == 0) {
        const std::string v = trimmed(lines[i + 1]);
        if (v.rfind("value: \"", 0) == 0) return v.substr(8, v.size() - 9);
      }
    }
    return "";
  }
  std::string script() const {
    std::string out;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (trimmed(lines[i]) != "- |") continue;
      const std::size_t indent = lines[i].find('-') + 2;
      for (std::size_t j = i + 1; j < lines.size(); ++j) {
        if (!trimmed(lines[j]).empty() && lines[j].find_first_not_of(' ') < indent) break;
        out += (lines[j].size() > indent ? lines[j].substr(indent) : "") + "\n";
      }
      break;
    }
    return out;
  }
};

// The manifest's parts agree (replicas and WORKERS, the Service and the
// StatefulSet's serviceName, the port), and its pod script, run as each pod
// of the StatefulSet with a stand-in `lockstep` that records its
// environment, gives that pod a TF_CONFIG Lockstep reads as a cluster of
// every pod through the headless Service, with the pod's own index (pod 0
// the chief), and passes the Secret's token on.
TEST(KubernetesExample, EachPodGetsATfConfigNamingEveryPodAndItsOwnIndex) {
  const Manifest m(testing_support::slurp(std::filesystem::path(LOCKSTEP_SOURCE_DIR) /
                                          "examples/kubernetes/multi-worker.yaml"));
  const int replicas = std::stoi(m.value("replicas"));
  ASSERT_GE(replicas, 2);
  EXPECT_EQ(m.env("WORKERS"), std::to_string(replicas));
  EXPECT_EQ(m.value("serviceName"), m.env("SERVICE"));
  EXPECT_EQ(m.value("port"), m.env("PORT"));
  EXPECT_EQ(m.value("containerPort"), m.env("PORT"));
  EXPECT_EQ(m.value("clusterIP"), "None");  // headless: one DNS name per pod
  const std::string script = m.script();
  ASSERT_NE(script.find("exec lockstep supervise --max-restarts"), std::string::npos) << script;
  ASSERT_NE(script.find("lockstep train --strategy multi-worker"), std::string::npos) << script;

  testing_support::TempDir dir("lockstep_k8s");
  testing_support::spit(dir / "pod.sh", script);
  std::filesystem::create_directories(dir.path / "bin");
  testing_support::spit(
      dir / "bin/lockstep",
      "#!/bin/sh\nprintf '%s\\n%s' \"$TF_CONFIG\" \"$LOCKSTEP_JOB_TOKEN\" > \"$OUT\"\n");
  ::chmod((dir / "bin/lockstep").c_str(), 0755);
  const std::string statefulset = m.value("name");  // the Service's and the set's
  for (int pod = 0; pod < replicas; ++pod) {
    SCOPED_TRACE("pod " + std::to_string(pod));
    const std::string out = dir / ("pod" + std::to_string(pod));
    const std::string command =
        "env -i PATH=" + (dir.path / "bin").string() + ":/usr/bin:/bin HOSTNAME=" + statefulset +
        "-" + std::to_string(pod) + " WORKERS=" + m.env("WORKERS") + " PORT=" + m.env("PORT") +
        " SERVICE=" + m.env("SERVICE") + " LOCKSTEP_JOB_TOKEN=s3cret OUT=" + out + " /bin/sh " +
        (dir / "pod.sh");
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    const std::string written = testing_support::slurp(out);
    const std::string tf_config = written.substr(0, written.find('\n'));
    EXPECT_EQ(written.substr(written.find('\n') + 1), "s3cret");
    const ClusterResolver r = ClusterResolver::from_tf_config(tf_config, "pod's TF_CONFIG");
    EXPECT_EQ(r.num_workers(), replicas);
    EXPECT_EQ(r.task_type(), "worker");
    EXPECT_EQ(r.task_id(), pod);
    EXPECT_EQ(r.is_chief(), pod == 0);
    for (int w = 0; w < replicas; ++w) {
      EXPECT_EQ(r.worker_address(w).to_string(), statefulset + "-" + std::to_string(w) + "." +
                                                     m.env("SERVICE") + ":" + m.env("PORT"));
    }
  }
}

}  // namespace
}  // namespace lockstep::distribute
