// TF_CONFIG and MPI launch environments.
#include <gtest/gtest.h>

#include <map>

#include "lockstep/lockstep.h"

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
           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
           {"PMI_RANK", "PMI_SIZE"},
           {"SLURM_PROCID", "SLURM_NTASKS"}}) {
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

}  // namespace
}  // namespace lockstep::distribute
