// DistributedDataset in one process, over two replicas: what each replica
// gets from a global dataset, one dataset per replica, and one dataset per
// worker (the Estimator's input_fn), peeking, stopping, evaluation's
// partial steps; and WorkerBatches' positions, replayed or whole. (Across
// worker processes: multi_worker_test.cc.)
#include <gtest/gtest.h>

#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/distribute/worker_batches.h"

namespace {

using namespace lockstep;
using distribute::DistributedDataset;
using distribute::InputContext;
using distribute::MirroredStrategy;

MirroredStrategy two_replicas() {
  return MirroredStrategy({.devices = {&host_device()}, .replicas_per_device = 2});
}

// The values of an element's first component.
std::vector<std::int64_t> values(const data::Element& e) {
  return e[0].to(DType::kInt64).to_vector<std::int64_t>();
}

TEST(DistributedDataset, AGlobalBatchIsSplitOverTheReplicas) {
  const MirroredStrategy strategy = two_replicas();
  DistributedDataset::Iterator it =
      DistributedDataset::from_global(strategy, data::Dataset::range(10).batch(5)).make_iterator();
  auto step = it.next();
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(values((*step)[0]), (std::vector<std::int64_t>{0, 1, 2}));
  EXPECT_EQ(values((*step)[1]), (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(it.global_rows(), 5);
  ASSERT_TRUE(it.next().has_value());
  EXPECT_FALSE(it.next().has_value());
}

TEST(DistributedDataset, EachReplicaReadsItsOwnPipelineFromAFunction) {
  const MirroredStrategy strategy = two_replicas();
  std::vector<int> ids;
  DistributedDataset::Iterator it =
      DistributedDataset::from_function(strategy, [&](const InputContext& ctx) {
        ids.push_back(ctx.input_pipeline_id);
        EXPECT_EQ(ctx.num_input_pipelines, 2);
        return data::Dataset::range(ctx.input_pipeline_id * 100, ctx.input_pipeline_id * 100 + 4)
            .batch(2);
      }).make_iterator();
  EXPECT_EQ(ids, (std::vector<int>{0, 1}));
  auto step = it.next();
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(values((*step)[0]), (std::vector<std::int64_t>{0, 1}));
  EXPECT_EQ(values((*step)[1]), (std::vector<std::int64_t>{100, 101}));
  EXPECT_EQ(it.global_rows(), 4);
}

// TensorFlow's PER_WORKER input (the Estimator's input_fn): called once,
// told of one pipeline and two replicas in sync; its elements go to the
// replicas in turn, and a step is taken only when both have one.
TEST(DistributedDataset, AWorkersElementsGoToItsReplicasInTurn) {
  const MirroredStrategy strategy = two_replicas();
  int calls = 0;
  DistributedDataset::Iterator it =
      DistributedDataset::from_worker_function(strategy, [&](const InputContext& ctx) {
        ++calls;
        EXPECT_EQ(ctx.num_input_pipelines, 1);
        EXPECT_EQ(ctx.input_pipeline_id, 0);
        EXPECT_EQ(ctx.num_replicas_in_sync, 2);
        return data::Dataset::range(5).batch(1);
      }).make_iterator();
  EXPECT_EQ(calls, 1);
  for (std::int64_t first : {0, 2}) {
    auto step = it.next();
    ASSERT_TRUE(step.has_value());
    EXPECT_EQ(values((*step)[0]), (std::vector<std::int64_t>{first}));
    EXPECT_EQ(values((*step)[1]), (std::vector<std::int64_t>{first + 1}));
    EXPECT_EQ(it.global_rows(), 2);
  }
  EXPECT_FALSE(it.next().has_value()) << "element 4 has no partner: the input ends";
}

TEST(DistributedDataset, PeekShowsTheFirstBatchWithoutTakingIt) {
  const MirroredStrategy strategy = two_replicas();
  DistributedDataset::Iterator it =
      DistributedDataset::from_worker_function(strategy, [](const InputContext&) {
        return data::Dataset::range(4).batch(1);
      }).make_iterator();
  const data::Element* first = it.peek();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(values(*first), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(it.peek(), first) << "a second peek reads nothing more";
  auto step = it.next();
  ASSERT_TRUE(step.has_value());
  EXPECT_EQ(values((*step)[0]), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(values((*step)[1]), (std::vector<std::int64_t>{1}));

  DistributedDataset::Iterator empty =
      DistributedDataset::from_worker_function(strategy, [](const InputContext&) {
        return data::Dataset::range(0).batch(1);
      }).make_iterator();
  EXPECT_EQ(empty.peek(), nullptr);
  EXPECT_FALSE(empty.next().has_value());
}

TEST(DistributedDataset, AStopEndsTheInputAtThatStep) {
  const MirroredStrategy strategy = two_replicas();
  DistributedDataset::Iterator it =
      DistributedDataset::from_global(strategy, data::Dataset::range(100).batch(4)).make_iterator();
  ASSERT_TRUE(it.next().has_value());
  EXPECT_FALSE(it.next(/*stop=*/true).has_value());
}

// Evaluation counts every example: the last step has a batch for replica 0
// only.
TEST(DistributedDataset, PartialStepsHandOutEveryExample) {
  const MirroredStrategy strategy = two_replicas();
  DistributedDataset::Iterator it =
      DistributedDataset::from_worker_function(strategy, [](const InputContext&) {
        return data::Dataset::range(5).batch(1);
      }).make_iterator();
  std::vector<std::int64_t> seen;
  int steps = 0;
  while (auto step = it.next_partial()) {
    ASSERT_EQ(step->size(), 2u);
    for (const auto& e : *step) {
      if (e) seen.push_back(values(*e).at(0));
    }
    ++steps;
  }
  EXPECT_EQ(steps, 3);
  EXPECT_EQ(seen, (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(it.global_rows(), 1) << "the last step's rows";

  DistributedDataset::Iterator global =
      DistributedDataset::from_global(strategy, data::Dataset::range(4).batch(2)).make_iterator();
  EXPECT_THROW(global.next_partial(), ValueError);
}

// A position replays to the same next element as going on; so does the
// iterator's whole state.
TEST(WorkerBatches, APositionResumesWhereItWasTaken) {
  const data::Dataset ds = data::Dataset::range(20).shuffle(20, {.seed = 7}).batch(3);
  distribute::WorkerBatches a(nullptr, ds, "test");
  a.start(5);
  ASSERT_TRUE(a.next().has_value());
  ASSERT_TRUE(a.next().has_value());
  const distribute::WorkerBatches::Position p = a.position();
  EXPECT_EQ(p.epoch_key, 5u);
  EXPECT_EQ(p.elements, 2);
  const data::IteratorState whole = a.save_full();
  const std::vector<std::int64_t> expected = values(*a.next());

  distribute::WorkerBatches b(nullptr, ds, "test");
  b.restore(p);
  EXPECT_EQ(values(*b.next()), expected);
  distribute::WorkerBatches c(nullptr, ds, "test");
  c.restore_full(5, whole);
  EXPECT_EQ(values(*c.next()), expected);

  distribute::WorkerBatches short_input(nullptr, data::Dataset::range(3).batch(3), "test");
  EXPECT_THROW(short_input.restore({.epoch_key = 0, .elements = 4, .part = 0}), ValueError);
}

}  // namespace
