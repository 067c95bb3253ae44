// GradientReduction against a communicator that records what is posted.
#include <gtest/gtest.h>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

// Plays a second, identical replica: every all-reduce doubles the buffer.
// Records each post's length and the order of posts.
class RecordingCommunicator final : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  void all_reduce(float* data, std::size_t count, comm::ReduceOp) override {
    posted.push_back(count);
    for (std::size_t i = 0; i < count; ++i) data[i] *= 2.0f;
  }
  void all_reduce(double*, std::size_t, comm::ReduceOp) override {}
  void broadcast(void*, std::size_t, int) override {}
  void all_gather(const void*, std::size_t, void*) override {}
  void barrier() override {}
  void abort(const std::string&) override {}
  std::vector<std::size_t> posted;
};

TEST(GradientReduction, PostsEachBucketWhenItAndAllBucketsBeforeItAreComplete) {
  // Buckets are laid out in reverse variable order; with a 16-byte cap each
  // of these variables is a bucket of its own: [v2], [v1], [v0].
  std::vector<Variable> vars{Variable(Tensor::zeros({16}), {.name = "v0"}),
                             Variable(Tensor::zeros({8}), {.name = "v1"}),
                             Variable(Tensor::zeros({4}), {.name = "v2"})};
  distribute::GradientBuckets buckets;
  RecordingCommunicator comm;
  std::vector<Tensor> summed;
  {
    distribute::GradientReduction reduction(&buckets, &comm, vars, 16);
    ASSERT_TRUE(reduction.active());
    reduction.add(0, Tensor::full({16}, 1.0f));  // last in posting order: waits
    EXPECT_TRUE(comm.posted.empty());
    reduction.add(2, Tensor::full({4}, 3.0f));  // first bucket: posted at once
    ASSERT_EQ(comm.posted, (std::vector<std::size_t>{4 + 1}));
    reduction.add(1, Tensor());  // no gradient here; releases [v1] and [v0]
    EXPECT_EQ(comm.posted, (std::vector<std::size_t>{4 + 1, 8 + 1, 16 + 1}));
    summed = reduction.finish(std::vector<Tensor>(3));
  }
  ASSERT_EQ(summed.size(), 3u);
  EXPECT_EQ(summed[0].to_vector<float>(), std::vector<float>(16, 2.0f));
  EXPECT_FALSE(summed[1].defined());  // no replica had one
  EXPECT_EQ(summed[2].to_vector<float>(), std::vector<float>(4, 6.0f));

  // Automatic size: one bucket, posted when the last gradient arrives; the
  // layout is rebuilt for the new size and reused after that.
  comm.posted.clear();
  for (int step = 0; step < 2; ++step) {
    distribute::GradientReduction reduction(&buckets, &comm, vars, 0);
    summed = reduction.finish({Tensor::ones({16}), Tensor::ones({8}), Tensor::ones({4})});
    EXPECT_EQ(summed[1].to_vector<float>(), std::vector<float>(8, 2.0f));
  }
  EXPECT_EQ(comm.posted, (std::vector<std::size_t>{28 + 3, 28 + 3}));
}

TEST(GradientReduction, AGradientOfTheWrongShapeIsAnErrorNamingTheVariable) {
  std::vector<Variable> vars{Variable(Tensor::zeros({2, 3}), {.name = "kernel"})};
  distribute::GradientBuckets buckets;
  RecordingCommunicator comm;
  distribute::GradientReduction reduction(&buckets, &comm, vars, 0);
  try {
    reduction.add(0, Tensor::zeros({3, 2}));
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'kernel'"), std::string::npos) << e.what();
  }
}

TEST(GradientReduction, InactiveOutsideReplicasPassesGradientsThrough) {
  Variable v(Tensor::zeros({3}));
  distribute::ReplicaContext cross_replica;  // replica 0 of 1
  auto reduction = cross_replica.start_gradient_reduction({v});
  EXPECT_FALSE(reduction.active());
  EXPECT_FALSE(reduction.listener());
  const auto out = reduction.finish({Tensor::ones({3})});
  EXPECT_EQ(out[0].to_vector<float>(), std::vector<float>(3, 1.0f));
}

}  // namespace
}  // namespace lockstep
