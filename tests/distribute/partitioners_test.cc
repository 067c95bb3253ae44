// Variable partitioners and the shard split, against what TensorFlow's own
// partitioners and ParameterServerStrategy gave (fixtures/partitioners.json,
// written by tests/interop/make_partitioner_fixtures.py with TF 2.21), and
// the cluster checks of ParameterServerStrategy's TF_CONFIG.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/distribute/partitioners.h"
#include "lockstep/lockstep.h"
#include "support/errors.h"

namespace lockstep::distribute {
namespace {

using testing_support::message_of;

VariablePartitioner make(const nlohmann::json& c) {
  const std::string kind = c["kind"];
  const auto& a = c["args"];
  if (kind == "fixed") return FixedShardsPartitioner(a["num_shards"].get<int>());
  if (kind == "min_size")
    return MinSizePartitioner({.min_shard_bytes = a["min_shard_bytes"].get<std::int64_t>(),
                               .max_shards = a["max_shards"].get<int>()});
  MaxSizePartitionerOptions o{.max_shard_bytes = a["max_shard_bytes"].get<std::int64_t>()};
  if (a.contains("max_shards")) o.max_shards = a["max_shards"].get<int>();
  return MaxSizePartitioner(o);
}

TEST(Partitioners, GiveTensorFlowsPartitionsAndShardShapes) {
  std::ifstream in(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/distribute/fixtures/partitioners.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["cases"].size(), 10u);
  for (const auto& c : fixture["cases"]) {
    const Shape shape(c["shape"].get<std::vector<std::int64_t>>());
    const DType dtype = dtype_from_name(c["dtype"].get<std::string>());
    const std::vector<std::int64_t> partitions = make(c)(shape, dtype);
    EXPECT_EQ(partitions, c["partitions"].get<std::vector<std::int64_t>>()) << c.dump();
    std::vector<std::vector<std::int64_t>> shards;
    for (std::int64_t rows : shard_rows(shape[0], partitions[0])) {
      std::vector<std::int64_t> s = shape.to_vector();
      s[0] = rows;
      shards.push_back(s);
    }
    EXPECT_EQ(shards, c["shard_shapes"].get<std::vector<std::vector<std::int64_t>>>())
        << c.dump();
  }
}

TEST(Partitioners, ThirteenRowsOverFiveShardsAreThreeThreeThreeTwoTwo) {
  EXPECT_EQ(shard_rows(13, 5), (std::vector<std::int64_t>{3, 3, 3, 2, 2}));
  EXPECT_EQ(shard_rows(2, 5), (std::vector<std::int64_t>{1, 1}));  // never an empty shard
  EXPECT_TRUE(FixedShardsPartitioner(3)(Shape{}, DType::kFloat32).empty());  // scalars stay whole
}

TEST(Partitioners, RefuseArgumentsTensorFlowRefuses) {
  EXPECT_NE(message_of([] { FixedShardsPartitioner(0); }).find("num_shards must be >= 1"),
            std::string::npos);
  EXPECT_NE(message_of([] { MinSizePartitioner({.min_shard_bytes = 0}); })
                .find("min_shard_bytes must be positive"),
            std::string::npos);
  EXPECT_NE(message_of([] { MinSizePartitioner({.max_shards = 0}); })
                .find("max_shards must be positive"),
            std::string::npos);
  EXPECT_NE(message_of([] { MaxSizePartitioner({}); }).find("max_shard_bytes must be positive"),
            std::string::npos);
  EXPECT_NE(message_of([] { MaxSizePartitioner({.max_shard_bytes = 8, .max_shards = 0}); })
                .find("max_shards must be positive"),
            std::string::npos);
}

TEST(ParameterServerCluster, EachBadConfigIsAValueErrorNamingTheKey) {
  const std::map<std::string, std::string> cases = {
      {R"({"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "chief"}})",
       "TF_CONFIG: cluster.ps: there must be at least one ps task"},
      {R"({"cluster": {"worker": ["b:1"], "ps": ["c:1"]}, "task": {"type": "worker"}})",
       "TF_CONFIG: cluster.chief: there must be a chief task"},
      {R"({"cluster": {"chief": ["a:1"], "ps": ["c:1"]}, "task": {"type": "chief"}})",
       "TF_CONFIG: cluster.worker: there must be at least one worker task"},
      {R"({"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"],
                       "evaluator": ["d:1"]}, "task": {"type": "chief"}})",
       "TF_CONFIG: cluster.evaluator: the evaluator sits outside the cluster"},
  };
  for (const auto& [text, expected] : cases) {
    try {
      ClusterResolver::from_tf_config(text).check_parameter_server_cluster();
      ADD_FAILURE() << "accepted: " << text;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos)
          << "for " << text << "\n got: " << e.what();
    }
  }
  // A worker index out of range is refused as the TF_CONFIG is read.
  try {
    ClusterResolver::from_tf_config(
        R"({"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
            "task": {"type": "worker", "index": 1}})");
    ADD_FAILURE() << "worker 1 of 1 accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("task.index 1 is out of range: the cluster has 1 worker"),
              std::string::npos)
        << e.what();
  }
}

TEST(ParameterServerCluster, TheEvaluatorHasItsOwnTfConfigOutsideTheCluster) {
  const auto r = ClusterResolver::from_tf_config(
      R"({"cluster": {"chief": ["a:1"], "worker": ["b:1"], "ps": ["c:1"]},
          "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(r.task_type(), "evaluator");
  EXPECT_EQ(r.worker_rank(), -1);
  EXPECT_NO_THROW(r.check_parameter_server_cluster());
  EXPECT_EQ(r.describe_task("ps", 0), "ps 0 (c:1)");
}

TEST(ParameterServerCluster, MultiWorkerMirroredStrategyRefusesAPsJobInsteadOfIgnoringIt) {
  const auto r = ClusterResolver::from_tf_config(
      R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]},
          "task": {"type": "worker", "index": 0}})");
  const std::string got =
      message_of([&] { MultiWorkerMirroredStrategy s({.cluster_resolver = r}); });
  EXPECT_NE(got.find("cluster.ps"), std::string::npos) << got;
  EXPECT_NE(got.find("use ParameterServerStrategy"), std::string::npos) << got;
}

}  // namespace
}  // namespace lockstep::distribute
