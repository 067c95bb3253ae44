// Sources and transformations against expected sequences.
#include "lockstep/data/dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <thread>

#include "data_test_util.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::data {
namespace {

using testing::expect_error;
using testing::iota;
using testing::scalars;

Tensor int64s(std::vector<std::int64_t> v) { return Tensor::from_vector<std::int64_t>(v); }

Element plus(const Element& e, std::int64_t k) {
  return Element{Tensor::from_vector<std::int64_t>({e[0].item<std::int64_t>() + k}, Shape{})};
}

TEST(DatasetSources, RangeMatchesPython) {
  EXPECT_EQ(scalars(Dataset::range(5)), iota(5));
  EXPECT_EQ(scalars(Dataset::range(2, 11, 3)), (std::vector<std::int64_t>{2, 5, 8}));
  EXPECT_EQ(scalars(Dataset::range(5, 0, -2)), (std::vector<std::int64_t>{5, 3, 1}));
  EXPECT_EQ(Dataset::range(2, 11, 3).cardinality(), 3);
  EXPECT_EQ(Dataset::range(5, 0, -2).cardinality(), 3);
  EXPECT_EQ(Dataset::range(3, 3).cardinality(), 0);
}

TEST(DatasetSources, TensorSlicesAreZeroCopyRows) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = int64s({7, 8, 9});
  Dataset ds = Dataset::from_tensor_slices({x, y}, {"x", "y"});
  EXPECT_EQ(ds.cardinality(), 3);
  Iterator it = ds.make_iterator();
  Element e0 = it.get_next();
  EXPECT_EQ(e0["x"].shape(), Shape({2}));
  EXPECT_EQ(e0["x"].to_vector<float>(), (std::vector<float>{1, 2}));
  EXPECT_EQ(e0["y"].item<std::int64_t>(), 7);
  EXPECT_EQ(e0["x"].raw_data(), x.raw_data());  // a view, not a copy
  Element e2 = (it.get_next(), it.get_next());
  EXPECT_EQ(e2[0].to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_FALSE(it.next().has_value());
  EXPECT_FALSE(it.next().has_value());  // and stays at the end
}

TEST(DatasetSources, FromTensorsIsOneElement) {
  Dataset ds = Dataset::from_tensors(Element{int64s({1, 2, 3})});
  EXPECT_EQ(ds.cardinality(), 1);
  Iterator it = ds.make_iterator();
  EXPECT_EQ(it.get_next()[0].to_vector<std::int64_t>(), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_FALSE(it.next());
}

TEST(DatasetSources, GeneratorIsCalledPerIteration) {
  int made = 0;
  Dataset ds = Dataset::from_generator([&made] {
    ++made;
    return Generator([i = std::int64_t{0}]() mutable -> std::optional<Element> {
      if (i == 4) return std::nullopt;
      return Element{Tensor::from_vector<std::int64_t>({i++}, Shape{})};
    });
  });
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(scalars(ds), iota(4));
  EXPECT_EQ(scalars(ds), iota(4));
  EXPECT_EQ(made, 2);
}

TEST(DatasetSources, ZipEndsWithTheShortest) {
  Dataset ds = Dataset::zip({Dataset::range(5), Dataset::range(10, 13)});
  EXPECT_EQ(ds.cardinality(), 3);
  std::vector<std::pair<std::int64_t, std::int64_t>> got;
  for (const Element& e : ds)
    got.emplace_back(e[0].item<std::int64_t>(), e[1].item<std::int64_t>());
  EXPECT_EQ(got, (std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 10}, {1, 11}, {2, 12}}));
}

TEST(DatasetSources, ConcatenateChains) {
  Dataset ds = Dataset::range(3).concatenate(Dataset::range(10, 12));
  EXPECT_EQ(ds.cardinality(), 5);
  EXPECT_EQ(scalars(ds), (std::vector<std::int64_t>{0, 1, 2, 10, 11}));
}

TEST(DatasetTransforms, MapFilterTakeSkipEnumerate) {
  Dataset ds = Dataset::range(20)
                   .map([](const Element& e) { return plus(e, 100); })
                   .filter([](const Element& e) { return e[0].item<std::int64_t>() % 3 == 0; });
  EXPECT_EQ(ds.cardinality(), kUnknownCardinality);
  EXPECT_EQ(scalars(ds), (std::vector<std::int64_t>{102, 105, 108, 111, 114, 117}));
  EXPECT_EQ(scalars(Dataset::range(10).skip(3).take(4)), (std::vector<std::int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(Dataset::range(10).skip(3).take(4).cardinality(), 4);
  EXPECT_EQ(Dataset::range(10).take(-1).cardinality(), 10);
  EXPECT_EQ(scalars(Dataset::range(10).skip(-1)), std::vector<std::int64_t>{});
  Iterator it = Dataset::range(5, 8).enumerate(10).make_iterator();
  Element e = it.get_next();
  EXPECT_EQ(e[0].item<std::int64_t>(), 10);
  EXPECT_EQ(e[1].item<std::int64_t>(), 5);
}

TEST(DatasetTransforms, ShardsPartitionTheData) {
  std::vector<std::int64_t> all;
  for (int i = 0; i < 3; ++i) {
    Dataset s = Dataset::range(10).shard(3, i);
    const auto v = scalars(s);
    EXPECT_EQ(static_cast<std::int64_t>(v.size()), s.cardinality());
    for (auto x : v) EXPECT_EQ(x % 3, i);
    all.insert(all.end(), v.begin(), v.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(10));
}

TEST(DatasetTransforms, BatchStacksAndKeepsOrDropsTheRemainder) {
  Tensor x = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, {5, 2});
  Dataset ds = Dataset::from_tensor_slices({x, int64s({0, 1, 2, 3, 4})});
  EXPECT_EQ(ds.batch(2).cardinality(), 3);
  EXPECT_EQ(ds.batch(2, true).cardinality(), 2);
  Iterator it = ds.batch(2).make_iterator();
  Element b0 = it.get_next();
  EXPECT_EQ(b0[0].shape(), Shape({2, 2}));
  EXPECT_EQ(b0[0].to_vector<float>(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(b0[1].to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
  it.get_next();
  Element last = it.get_next();
  EXPECT_EQ(last[0].shape(), Shape({1, 2}));
  EXPECT_FALSE(it.next());

  // Every element exactly once, with and without drop_remainder.
  for (bool drop : {false, true}) {
    std::vector<std::int64_t> seen;
    for (const Element& b : Dataset::range(103).batch(10, drop)) {
      const auto v = b[0].to_vector<std::int64_t>();
      seen.insert(seen.end(), v.begin(), v.end());
    }
    EXPECT_EQ(seen, iota(drop ? 100 : 103));
  }
}

// batch over a source with random access (or a shuffle or repeat over one)
// copies the rows straight from the source; behind an identity map it stacks
// elements.
// The batches must be the same: values, dtypes, shapes, names, remainders.
TEST(DatasetTransforms, BatchGathersRowsFromASourceAsStackingElementsWould) {
  auto identity = [](const Element& e) { return e; };
  auto fingerprints = [](const Dataset& ds) {
    std::vector<std::string> out;
    for (const Element& e : ds) {
      std::string f;
      for (std::size_t c = 0; c < e.size(); ++c)
        f += std::string(dtype_name(e[c].dtype())) + e[c].shape().to_string() +
             e[c].to_string(1000) + "|";
      for (const std::string& name : e.names()) f += name + ",";
      out.push_back(f);
    }
    return out;
  };
  std::vector<float> values(103 * 6);
  std::iota(values.begin(), values.end(), 0.0f);
  const Tensor x = Tensor::from_vector(values, Shape{103, 2, 3});
  const Tensor y = Tensor::from_vector(iota(103));
  std::vector<std::uint8_t> bytes(103 * 5);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 7);
  const Tensor z = Tensor::from_vector(bytes, Shape{103, 5});
  const Dataset slices = Dataset::from_tensor_slices({x, y, z}, {"x", "y", "z"});
  for (std::int64_t batch : {1, 8, 10, 103, 500}) {
    for (bool drop : {false, true}) {
      const auto plain = fingerprints(slices.batch(batch, drop));
      EXPECT_EQ(plain, fingerprints(slices.map(identity).batch(batch, drop)))
          << "batch " << batch << ", drop " << drop;
      EXPECT_EQ(plain.size(), static_cast<std::size_t>(drop ? 103 / batch : (102 + batch) / batch));
      for (std::int64_t buffer : {7, 200})
        EXPECT_EQ(
            fingerprints(slices.shuffle(buffer, {.seed = 3}).batch(batch, drop)),
            fingerprints(slices.map(identity).shuffle(buffer, {.seed = 3}).batch(batch, drop)))
            << "batch " << batch << ", drop " << drop << ", buffer " << buffer;
    }
  }
  // Through repeat (the multi-worker guide's shuffle → repeat → batch): a
  // batch spans two passes, each shuffled with its own key.
  for (std::int64_t batch : {10, 64})
    EXPECT_EQ(fingerprints(slices.shuffle(50, {.seed = 4}).repeat(3).batch(batch)),
              fingerprints(slices.map(identity).shuffle(50, {.seed = 4}).repeat(3).batch(batch)))
        << "batch " << batch;
  EXPECT_EQ(fingerprints(slices.repeat(2).batch(64, true)),
            fingerprints(slices.map(identity).repeat(2).batch(64, true)));
  // range's rows are made one by one (the default gather), the same way.
  EXPECT_EQ(fingerprints(Dataset::range(23).shuffle(5, {.seed = 1}).batch(4)),
            fingerprints(Dataset::range(23).map(identity).shuffle(5, {.seed = 1}).batch(4)));
  // No rows: no batch.
  EXPECT_TRUE(fingerprints(Dataset::from_tensor_slices(Tensor::zeros({0, 3})).batch(4)).empty());
}

TEST(DatasetTransforms, PaddedBatchPadsToTheLargestShape) {
  Dataset ds = Dataset::range(1, 4).map([](const Element& e) {
    const auto n = e[0].item<std::int64_t>();
    std::vector<std::int64_t> v(static_cast<std::size_t>(n), n);
    return Element{Tensor::from_vector<std::int64_t>(v)};
  });
  Iterator it = ds.padded_batch(3, {.padding_value = -1}).make_iterator();
  Element b = it.get_next();
  EXPECT_EQ(b[0].shape(), Shape({3, 3}));
  EXPECT_EQ(b[0].to_vector<std::int64_t>(),
            (std::vector<std::int64_t>{1, -1, -1, 2, 2, -1, 3, 3, 3}));
  expect_error<ShapeError>([&] { ds.batch(3).make_iterator().get_next(); },
                           {"batch: element 1", "[2]", "[1]", "padded_batch"});
}

TEST(DatasetTransforms, UnbatchInvertsBatch) {
  Dataset ds = Dataset::range(11).batch(4).unbatch();
  EXPECT_EQ(scalars(ds), iota(11));
  EXPECT_EQ(Dataset::range(11).batch(4).unbatch().batch(3).unbatch().cardinality(),
            kUnknownCardinality);
}

TEST(DatasetShuffle, SeededIsReproducibleAndReshufflesPerEpoch) {
  Dataset ds = Dataset::range(100).shuffle(100, {.seed = 7});
  const auto e0 = scalars(ds, 0), e1 = scalars(ds, 1);
  EXPECT_EQ(scalars(ds, 0), e0);  // same seed, same epoch: same order
  EXPECT_NE(e0, e1);              // a new order each epoch
  EXPECT_NE(e0, iota(100));
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(100));  // a permutation
  // The same seed in a newly built pipeline gives the same orders.
  EXPECT_EQ(scalars(Dataset::range(100).shuffle(100, {.seed = 7}), 1), e1);
  // Without reshuffling, every epoch has epoch 0's order.
  Dataset fixed = Dataset::range(100).shuffle(100, {.seed = 7, .reshuffle_each_iteration = false});
  EXPECT_EQ(scalars(fixed, 0), scalars(fixed, 5));
  // Unseeded: one seed per Dataset, drawn at construction.
  Dataset unseeded = Dataset::range(100).shuffle(100);
  EXPECT_EQ(scalars(unseeded, 3), scalars(unseeded, 3));
}

TEST(DatasetShuffle, SmallBufferStillEmitsEveryElementOnce) {
  for (std::int64_t buffer : {1, 3, 10, 1000}) {
    auto v = scalars(Dataset::range(257).shuffle(buffer, {.seed = 3}));
    if (buffer == 1) {
      EXPECT_EQ(v, iota(257));  // a buffer of one cannot reorder
    }
    std::sort(v.begin(), v.end());
    EXPECT_EQ(v, iota(257)) << "buffer " << buffer;
  }
}

// from_tensor_slices and range read any element directly, so shuffle keeps
// indices in its buffer; behind a map it keeps the elements. The draws are
// the same, so the orders must be too, whatever the buffer.
TEST(DatasetShuffle, OverASourceWithRandomAccessGivesTheOrderOfTheElementBuffer) {
  auto identity = [](const Element& e) { return e; };
  for (std::int64_t buffer : {1, 3, 100, 257, 1000}) {
    for (std::uint64_t epoch : {0, 1}) {
      EXPECT_EQ(scalars(Dataset::range(257).shuffle(buffer, {.seed = 5}), epoch),
                scalars(Dataset::range(257).map(identity).shuffle(buffer, {.seed = 5}), epoch))
          << "buffer " << buffer << ", epoch " << epoch;
    }
  }
  // Two components, through repeat (each pass its own key).
  std::vector<float> rows(300 * 3);
  std::iota(rows.begin(), rows.end(), 0.0f);
  const Tensor x = Tensor::from_vector(rows, Shape{300, 3});
  const Tensor y = Tensor::from_vector(iota(300));
  auto fingerprints = [](const Dataset& ds) {
    std::vector<std::string> out;
    for (const Element& e : ds) out.push_back(e[0].to_string() + e[1].to_string());
    return out;
  };
  const Dataset slices = Dataset::from_tensor_slices({x, y});
  for (std::int64_t buffer : {7, 300}) {
    EXPECT_EQ(fingerprints(slices.shuffle(buffer, {.seed = 9}).repeat(2).batch(8)),
              fingerprints(slices.map(identity).shuffle(buffer, {.seed = 9}).repeat(2).batch(8)))
        << "buffer " << buffer;
  }
}

TEST(DatasetShuffle, FullBufferPermutationsAreUniform) {
  // 4 elements have 24 orders; 4800 epochs give 200 of each in expectation.
  // Chi-square with 23 degrees of freedom: 49.7 is the 0.001 critical value.
  Dataset ds = Dataset::range(4).shuffle(4, {.seed = 12345});
  std::map<std::vector<std::int64_t>, int> counts;
  const int epochs = 4800;
  for (int e = 0; e < epochs; ++e) ++counts[scalars(ds, static_cast<std::uint64_t>(e))];
  EXPECT_EQ(counts.size(), 24u);
  const double expected = epochs / 24.0;
  double chi2 = 0;
  for (const auto& [order, n] : counts) chi2 += (n - expected) * (n - expected) / expected;
  EXPECT_LT(chi2, 49.7);
  // And positions over a larger set with a partial buffer: each element's
  // output position is spread, not stuck near its input position.
  std::vector<double> mean_pos(20, 0.0);
  Dataset big = Dataset::range(20).shuffle(20, {.seed = 99});
  for (int e = 0; e < 2000; ++e) {
    const auto v = scalars(big, static_cast<std::uint64_t>(e));
    for (std::size_t p = 0; p < v.size(); ++p)
      mean_pos[static_cast<std::size_t>(v[p])] += p / 2000.0;
  }
  for (double m : mean_pos) EXPECT_NEAR(m, 9.5, 0.6);
}

TEST(DatasetRepeat, RepeatsWithAFreshOrderPerPass) {
  EXPECT_EQ(scalars(Dataset::range(3).repeat(2)), (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(Dataset::range(3).repeat(2).cardinality(), 6);
  EXPECT_EQ(Dataset::range(3).repeat().cardinality(), kInfiniteCardinality);
  EXPECT_EQ(Dataset::range(3).repeat().take(7).cardinality(), 7);
  EXPECT_EQ(scalars(Dataset::range(3).repeat().take(7)),
            (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2, 0}));
  const auto v = scalars(Dataset::range(50).shuffle(50, {.seed = 1}).repeat(2));
  EXPECT_NE(std::vector<std::int64_t>(v.begin(), v.begin() + 50),
            std::vector<std::int64_t>(v.begin() + 50, v.end()));
  // repeat() of an empty dataset ends instead of spinning.
  EXPECT_EQ(scalars(Dataset::range(0).repeat()), std::vector<std::int64_t>{});
}

TEST(DatasetInterleave, CyclesThroughBlocks) {
  // tf.data: range(1, 4).interleave(x -> repeat x, 3 times, cycle 2, block 2)
  Dataset ds = Dataset::range(1, 4).interleave(
      [](const Element& e) { return Dataset::from_tensors(e).repeat(3); },
      {.cycle_length = 2, .block_length = 2});
  const std::vector<std::int64_t> expected{1, 1, 2, 2, 1, 2, 3, 3, 3};
  EXPECT_EQ(scalars(ds), expected);
  Dataset parallel = Dataset::range(1, 4).interleave(
      [](const Element& e) { return Dataset::from_tensors(e).repeat(3); },
      {.cycle_length = 2, .block_length = 2, .num_parallel_calls = kAutotune});
  EXPECT_EQ(scalars(parallel), expected);
}

TEST(DatasetParallel, ParallelMapAndPrefetchDeliverTheSequentialSequence) {
  auto slow = [](const Element& e) {
    // Uneven work so that workers finish out of order.
    const auto v = e[0].item<std::int64_t>();
    std::this_thread::sleep_for(std::chrono::microseconds((v * 37) % 200));
    return plus(e, 1000);
  };
  const auto expected = scalars(Dataset::range(300).map(slow));
  for (std::int64_t calls : {std::int64_t{2}, std::int64_t{4}, kAutotune}) {
    EXPECT_EQ(scalars(Dataset::range(300).map(slow, {.num_parallel_calls = calls})), expected)
        << calls;
    EXPECT_EQ(scalars(Dataset::range(300).map(slow, {.num_parallel_calls = calls}).prefetch(3)),
              expected);
  }
  EXPECT_EQ(scalars(Dataset::range(300).prefetch(kAutotune)), iota(300));
  // tf.data's spelling, as a port writes it: the same constant.
  static_assert(AUTOTUNE == kAutotune);
  EXPECT_EQ(
      scalars(Dataset::range(300).map(slow, {.num_parallel_calls = AUTOTUNE}).prefetch(AUTOTUNE)),
      expected);
  EXPECT_EQ(scalars(Dataset::range(300).prefetch(1).prefetch(1)), iota(300));
  // Not deterministic: the same elements, in any order.
  auto any =
      scalars(Dataset::range(300).map(slow, {.num_parallel_calls = 4, .deterministic = false}));
  std::sort(any.begin(), any.end());
  EXPECT_EQ(any, expected);
}

TEST(DatasetParallel, ErrorsReachTheConsumerInOrder) {
  auto make = [](std::int64_t fail_at) {
    return Dataset::from_generator([fail_at] {
      return Generator([fail_at, i = std::int64_t{0}]() mutable -> std::optional<Element> {
        if (i == fail_at)
          throw std::runtime_error("sensor unplugged at element " + std::to_string(i));
        return Element{Tensor::from_vector<std::int64_t>({i++}, Shape{})};
      });
    });
  };
  for (std::int64_t depth : {std::int64_t{1}, std::int64_t{4}, kAutotune}) {
    Iterator it = make(5).prefetch(depth).make_iterator();
    EXPECT_EQ(scalars(it, 5), iota(5));
    expect_error<std::runtime_error>([&] { it.next(); }, {"sensor unplugged at element 5"});
    EXPECT_FALSE(it.next().has_value());  // the failed input is not read again
  }
  Iterator it = Dataset::range(10)
                    .map(
                        [](const Element& e) {
                          if (e[0].item<std::int64_t>() == 6) throw ValueError("bad element 6");
                          return e;
                        },
                        {.num_parallel_calls = 3})
                    .make_iterator();
  EXPECT_EQ(scalars(it, 6), iota(6));
  expect_error<ValueError>([&] { it.next(); }, {"bad element 6"});
}

TEST(DatasetParallel, DestroyingAnIteratorMidStreamJoinsItsThreads) {
  std::atomic<int> live{0};
  for (int round = 0; round < 20; ++round) {
    Iterator it = Dataset::range(1000000)
                      .map(
                          [&live](const Element& e) {
                            ++live;
                            --live;
                            return e;
                          },
                          {.num_parallel_calls = 2})
                      .prefetch(8)
                      .make_iterator();
    it.get_next();
  }  // each iterator's destructor stops and joins its workers
  EXPECT_EQ(live.load(), 0);
}

TEST(DatasetBadInput, ClearErrors) {
  expect_error<ShapeError>(
      [] {
        Dataset::from_tensor_slices({Tensor::zeros({3, 2}), Tensor::zeros({4})});
      },
      {"same size in dimension 0", "[3, 2]", "[4]", "tensor 1"});
  expect_error<ShapeError>([] { Dataset::from_tensor_slices(Tensor::scalar(1)); }, {"scalar"});
  expect_error<ValueError>([] { Dataset::range(3).batch(0); }, {"batch_size must be > 0, got 0"});
  expect_error<IndexError>([] { Dataset::range(3).shard(2, 2); },
                           {"index 2 is out of range for 2 shards"});
  expect_error<ValueError>([] { Dataset::range(3).shuffle(0); }, {"buffer_size must be > 0"});
  Iterator it = Dataset::range(2).make_iterator();
  it.get_next();
  it.get_next();
  expect_error<IndexError>([&] { it.get_next(); }, {"end of sequence after 2 elements"});
  expect_error<IndexError>([] { Element{Tensor::scalar(1)}["label"]; },
                           {"no component named 'label'"});
}

TEST(DatasetCache, MemoryCacheReadsTheInputOnce) {
  std::atomic<int> calls{0};
  Dataset ds = Dataset::range(10)
                   .map([&calls](const Element& e) {
                     ++calls;
                     return e;
                   })
                   .cache();
  EXPECT_EQ(scalars(ds), iota(10));
  EXPECT_EQ(calls.load(), 10);
  EXPECT_EQ(scalars(ds), iota(10));
  EXPECT_EQ(calls.load(), 10);  // the second pass came from the cache
  // A pass abandoned half way does not leave a partial cache behind.
  std::atomic<int> calls2{0};
  Dataset ds2 = Dataset::range(10)
                    .map([&calls2](const Element& e) {
                      ++calls2;
                      return e;
                    })
                    .cache();
  {
    Iterator it = ds2.make_iterator();
    scalars(it, 4);
  }
  EXPECT_EQ(scalars(ds2), iota(10));
  EXPECT_EQ(calls2.load(), 14);
  // cache() freezes the order of a shuffle before it, as in tf.data.
  Dataset frozen = Dataset::range(30).shuffle(30, {.seed = 5}).cache().repeat(2);
  const auto v = scalars(frozen);
  EXPECT_EQ(std::vector<std::int64_t>(v.begin(), v.begin() + 30),
            std::vector<std::int64_t>(v.begin() + 30, v.end()));
}

}  // namespace
}  // namespace lockstep::data

namespace lockstep::data {
namespace {

// How far an autotuned prefetch runs ahead of a consumer that stalled often
// and then stops: bounded by the memory budget.
std::int64_t read_ahead_after_stalls(std::size_t budget_bytes) {
  const std::size_t saved = autotune_memory_budget();
  set_autotune_memory_budget(budget_bytes);
  auto produced = std::make_shared<std::atomic<std::int64_t>>(0);
  Dataset ds = Dataset::from_generator([produced] {
                 return Generator([produced]() -> std::optional<Element> {
                   std::this_thread::sleep_for(std::chrono::microseconds(300));
                   ++*produced;
                   return Element{Tensor::zeros({256 * 1024})};  // 1 MiB
                 });
               }).prefetch(kAutotune);
  Iterator it = ds.make_iterator();
  for (int i = 0; i < 150; ++i) it.get_next();  // a fast consumer: it waits, the buffer grows
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // then it stops
  const std::int64_t ahead = produced->load() - 150;
  set_autotune_memory_budget(saved);
  return ahead;
}

TEST(DatasetAutotune, PrefetchDepthGrowsWhenTheConsumerWaitsWithinTheMemoryBudget) {
  // 4 MiB of budget holds 4 elements (+1 being produced when the consumer stopped).
  EXPECT_LE(read_ahead_after_stalls(std::size_t{4} << 20), 5);
  // With room, the same stalls deepen the buffer well past that.
  EXPECT_GT(read_ahead_after_stalls(std::size_t{1} << 30), 10);
}

}  // namespace
}  // namespace lockstep::data
