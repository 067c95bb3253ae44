// The bookkeeping of recorded graphs' memory (tensor/backend/cuda/
// graph_memory.h), which the CUDA adapter and the emulated one share: which
// block a recording may take again, which one a graph keeps, and which one
// is freed when.
#include "tensor/backend/cuda/graph_memory.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace lockstep::backend::cuda {
namespace {

using GiveBack = GraphMemory::GiveBack;

// Distinct addresses standing for device blocks.
struct Blocks {
  char bytes[8] = {};
  void* operator[](int i) { return &bytes[i]; }
};

// One graph's bookkeeping, and blocks to give it.
class GraphMemoryTest : public ::testing::Test {
 protected:
  GraphMemory memory;
  Blocks b;
  const int g = 0;  // its address stands for a graph
};

TEST_F(GraphMemoryTest, ARecordingTakesAgainTheSmallestBlockItWasGivenBackThatFits) {
  memory.add(&g, b[0], 1024);
  memory.add(&g, b[1], 4096);
  memory.add(&g, b[2], 2048);
  EXPECT_EQ(memory.reuse(&g, 512), nullptr) << "nothing given back yet";
  EXPECT_EQ(memory.give_back(b[1], &g), GiveBack::kKept);
  EXPECT_EQ(memory.give_back(b[2], &g), GiveBack::kKept);
  EXPECT_EQ(memory.give_back(b[0], &g), GiveBack::kKept);
  EXPECT_EQ(memory.reuse(&g, 1500), b[2]) << "the smallest that holds 1500 bytes";
  EXPECT_EQ(memory.reuse(&g, 1500), nullptr) << "4096 bytes is more than twice 1500";
  EXPECT_EQ(memory.reuse(&g, 1000), b[0]);
  EXPECT_EQ(memory.reuse(&g, 3000), b[1]);
}

TEST_F(GraphMemoryTest, ABlockTwiceTheSizeOrMoreIsNotTakenForASmallRequest) {
  memory.add(&g, b[0], 4096);
  memory.give_back(b[0], &g);
  EXPECT_EQ(memory.reuse(&g, 1000), nullptr) << "4096 bytes for 1000";
  EXPECT_EQ(memory.reuse(&g, 2048), b[0]);
  EXPECT_EQ(memory.reuse(&g, 2048), nullptr) << "taken: in use again";
}

TEST_F(GraphMemoryTest, NoBlockIsTakenAcrossGraphsOrAfterTheRecordingEnded) {
  const int h = 0;
  memory.add(&g, b[0], 1024);
  memory.give_back(b[0], &g);
  EXPECT_EQ(memory.reuse(&h, 1024), nullptr) << "another graph's block";
  memory.add(&g, b[1], 1024);
  memory.recorded(&g);
  EXPECT_EQ(memory.give_back(b[1], nullptr), GiveBack::kKept)
      << "given back after the recording: the graph's launches still use it";
  EXPECT_EQ(memory.reuse(&g, 1024), nullptr) << "the recording has ended";
  EXPECT_EQ(memory.bytes(&g), 2048u);
}

TEST_F(GraphMemoryTest, ADestroyedGraphFreesWhatWasGivenBackAndLaterWhatIsStillHeld) {
  memory.add(&g, b[0], 1024);
  memory.add(&g, b[1], 1024);
  memory.give_back(b[0], &g);
  memory.recorded(&g);
  EXPECT_EQ(memory.destroyed(&g), (std::vector<GraphMemory::ToFree>{{b[0], false}}));
  EXPECT_EQ(memory.bytes(&g), 0u);
  EXPECT_EQ(memory.give_back(b[1], nullptr), GiveBack::kFreeNow) << "its tensor outlived the graph";
  EXPECT_EQ(memory.give_back(b[1], nullptr), GiveBack::kNotAGraphs) << "forgotten once freed";
}

TEST_F(GraphMemoryTest, ABlockFromBeforeTheRecordingGivenBackDuringItIsKeptTillTheGraphGoes) {
  EXPECT_EQ(memory.give_back(b[0], nullptr), GiveBack::kNotAGraphs) << "no recording";
  EXPECT_EQ(memory.give_back(b[1], &g), GiveBack::kKept) << "a recorded kernel may read it";
  EXPECT_EQ(memory.reuse(&g, 1), nullptr) << "its size is not known: never taken again";
  EXPECT_EQ(memory.destroyed(&g), (std::vector<GraphMemory::ToFree>{{b[1], true}}));
}

TEST_F(GraphMemoryTest, AGraphsBlockGivenBackTwiceIsAnError) {
  memory.add(&g, b[0], 64);
  memory.give_back(b[0], &g);
  EXPECT_THROW(memory.give_back(b[0], &g), std::runtime_error);
}

}  // namespace
}  // namespace lockstep::backend::cuda
