// Iterator state: restoring at element k yields exactly what an
// uninterrupted iterator produces from k on.
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "data_test_util.h"
#include "lockstep/data/dataset.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::data {
namespace {

using testing::expect_error;

std::string fingerprint(const Element& e) {
  std::string s;
  for (const Tensor& t : e.components()) s += t.to_string(1 << 20) + ";";
  return s;
}

std::vector<std::string> drain(Iterator& it) {
  std::vector<std::string> out;
  while (auto e = it.next()) out.push_back(fingerprint(*e));
  return out;
}

// A deep copy, so the restored iterator cannot lean on the saved one's buffers.
IteratorState deep_copy(const IteratorState& s) {
  IteratorState c;
  c.json = s.json;  // text: a copy is a deep copy
  for (const auto& [k, t] : s.tensors) c.tensors[k] = t.copy();
  return c;
}

// Saves at several positions of `make()`'s iteration for `epoch` and checks
// each restored continuation (into an iterator of a freshly built pipeline)
// against the uninterrupted run.
void check_resume(const std::function<Dataset()>& make, std::uint64_t epoch = 0,
                  bool fresh_pipeline = true) {
  Dataset ds = make();
  Iterator full = ds.make_iterator({.epoch = epoch});
  const auto expected = drain(full);
  ASSERT_FALSE(expected.empty());
  std::mt19937 rng(17);
  std::vector<std::size_t> cuts{0, expected.size() / 2, expected.size() - 1, expected.size()};
  for (int i = 0; i < 4; ++i) cuts.push_back(rng() % expected.size());
  for (std::size_t k : cuts) {
    Iterator it = ds.make_iterator({.epoch = epoch});
    for (std::size_t i = 0; i < k; ++i) ASSERT_EQ(fingerprint(it.get_next()), expected[i]);
    const IteratorState state = deep_copy(it.save());
    // The saved iterator itself carries on unchanged after save().
    auto rest_original = drain(it);
    // Restoring into an iterator of another epoch: the state wins.
    Iterator restored = (fresh_pipeline ? make() : ds).make_iterator({.epoch = epoch + 1000});
    restored.restore(state);
    EXPECT_EQ(restored.position(), static_cast<std::int64_t>(k));
    const auto rest = drain(restored);
    const std::vector<std::string> want(expected.begin() + static_cast<std::ptrdiff_t>(k),
                                        expected.end());
    EXPECT_EQ(rest, want) << "resumed at element " << k << " of " << expected.size();
    EXPECT_EQ(rest_original, want) << "after save() at element " << k;
  }
}

Element features(const Element& e) {
  const auto v = e[0].item<std::int64_t>();
  return Element{Tensor::from_vector<float>({static_cast<float>(v), static_cast<float>(v) * 0.5f}),
                 Tensor::from_vector<std::int64_t>({v % 10}, Shape{})};
}

TEST(IteratorState, ShuffleBatchRepeatPrefetch) {
  check_resume([] {
    return Dataset::range(200)
        .map(features)
        .shuffle(50, {.seed = 11})
        .batch(7)
        .repeat(3)
        .prefetch(kAutotune);
  });
}

TEST(IteratorState, UnseededShuffleRecordsItsSeed) {
  // The same Dataset object (an unseeded shuffle draws its seed per Dataset).
  check_resume(
      [] {
        Tensor x = Tensor::from_vector<float>(std::vector<float>(1200, 1.0f), {300, 4});
        Tensor y = Tensor::from_vector<std::int64_t>(testing::iota(300));
        return Dataset::from_tensor_slices({x, y})
            .shuffle(64)
            .map([](const Element& e) { return e; }, {.num_parallel_calls = kAutotune})
            .batch(16, true)
            .prefetch(2);
      },
      3, /*fresh_pipeline=*/false);
}

// batch gathers these rows from the source by index, through repeat: the
// state is the same iterators', so resumes are exact at every batch.
TEST(IteratorState, BatchesGatheredThroughShuffleAndRepeat) {
  check_resume([] {
    std::vector<float> rows(90 * 3);
    for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i);
    Tensor x = Tensor::from_vector<float>(rows, {90, 3});
    Tensor y = Tensor::from_vector<std::int64_t>(testing::iota(90));
    return Dataset::from_tensor_slices({x, y}).shuffle(20, {.seed = 6}).repeat(2).batch(16);
  });
}

TEST(IteratorState, InterleaveEnumerate) {
  check_resume([] {
    return Dataset::range(1, 6)
        .interleave(
            [](const Element& e) {
              const auto x = e[0].item<std::int64_t>();
              return Dataset::range(x * 10, x * 10 + x).shuffle(3, {.seed = 2});
            },
            {.cycle_length = 3, .block_length = 2, .num_parallel_calls = kAutotune})
        .enumerate()
        .map([](const Element& e) { return e; }, {.num_parallel_calls = 2})
        .prefetch(4);  // fused into the map's buffer
  });
}

TEST(IteratorState, CacheShuffleRepeatUnbatchTakeSkip) {
  check_resume([] {
    return Dataset::range(40)
        .cache()
        .shuffle(40, {.seed = 8})
        .repeat(2)
        .batch(5)
        .unbatch()
        .take(70)
        .skip(3);
  });
}

TEST(IteratorState, GeneratorZipConcatenateFilterPaddedBatchShard) {
  check_resume([] {
    Dataset gen = Dataset::from_generator([] {
      return Generator([i = std::int64_t{0}]() mutable -> std::optional<Element> {
        if (i == 60) return std::nullopt;
        std::vector<float> v(static_cast<std::size_t>(i % 4 + 1), static_cast<float>(i));
        ++i;
        return Element{Tensor::from_vector<float>(v)};
      });
    });
    return Dataset::zip({gen, Dataset::range(100)})
        .concatenate(Dataset::zip({gen.take(5), Dataset::range(5)}))
        .filter([](const Element& e) { return e[1].item<std::int64_t>() % 5 != 0; })
        .shard(2, 1)
        .padded_batch(4);
  });
}

TEST(IteratorState, MemoryCacheInAnotherProcess) {
  // A new Dataset has an empty cache, like a restarted process: a state
  // saved while reading the cache (epoch 1) refills it from the first pass's
  // key, and a state saved while filling it finishes and then caches that pass.
  auto make = [] { return Dataset::range(30).shuffle(30, {.seed = 4}).cache().repeat(2); };
  check_resume(make, 0, /*fresh_pipeline=*/true);
}

// A shuffle over from_tensor_slices buffers indices (DatasetShuffle's
// random-access test): its state holds 8 bytes a buffered element, not the
// rows — 60,000 Fashion-MNIST images would be 188 MB of float32.
TEST(IteratorState, ShuffleOverSlicesSavesIndicesNotRows) {
  const Tensor x = Tensor::zeros({3000, 64});
  const Tensor y = Tensor::from_vector<std::int64_t>(testing::iota(3000));
  const Dataset ds = Dataset::from_tensor_slices({x, y}).shuffle(3000, {.seed = 1}).batch(10);
  check_resume([&] { return ds; });
  Iterator it = ds.make_iterator();
  for (int i = 0; i < 5; ++i) it.get_next();
  const IteratorState state = it.save();
  std::size_t bytes = 0;
  for (const auto& [name, t] : state.tensors) bytes += t.nbytes();
  EXPECT_EQ(bytes, (3000 - 50) * sizeof(std::int64_t));  // the 2,950 indices not yet drawn
}

TEST(IteratorState, ShuffleIndicesNotYetReadAreRejected) {
  const Tensor y = Tensor::from_vector<std::int64_t>(testing::iota(100));
  const Dataset ds = Dataset::from_tensor_slices({y}).shuffle(10, {.seed = 1});
  Iterator it = ds.make_iterator();
  it.get_next();
  IteratorState state = it.save();
  ASSERT_EQ(state.tensors.size(), 1u);
  Tensor& indices = state.tensors.begin()->second;
  indices = indices.copy();
  indices.data<std::int64_t>()[3] = 50;  // only 0..10 have been read
  Iterator restored = ds.make_iterator();
  expect_error<ValueError>([&] { restored.restore(state); },
                           {"shuffle", "buffered index 50", "next index 11"});
}

TEST(IteratorState, StateFromAnotherPipelineIsRejected) {
  Iterator a = Dataset::range(10).shuffle(5, {.seed = 1}).make_iterator();
  a.get_next();
  const IteratorState state = a.save();
  Iterator b = Dataset::range(10).batch(2).make_iterator();
  expect_error<ValueError>([&] { b.restore(state); },
                           {"different pipeline", "'shuffle'", "'batch'"});
  expect_error<ValueError>([&] { b.restore(IteratorState{}); }, {"not an iterator state"});
}

}  // namespace
}  // namespace lockstep::data
