// The in-process communicator with real threads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "lockstep/comm/communicator.h"

namespace lockstep::comm {
namespace {

// Runs fn(rank) on `n` threads and joins them; exceptions are returned per rank.
std::vector<std::exception_ptr> run_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::string message(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  }
}

TEST(InProcessAllReduce, BitwiseRankOrderSumOnEveryRankWithBothAlgorithms) {
  for (Algorithm algo : {Algorithm::kReduceScatterAllGather, Algorithm::kReductionToOneDevice}) {
    for (int n : {1, 2, 3, 4}) {
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099},
                                std::size_t{100003}}) {
        std::mt19937 rng(static_cast<unsigned>(n * 1000 + count));
        std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
        std::vector<std::vector<float>> data(static_cast<std::size_t>(n),
                                             std::vector<float>(count));
        for (auto& v : data) {
          for (auto& x : v) x = dist(rng);
        }
        // The oracle: rank 0's value, plus rank 1's, ... in float.
        std::vector<float> expected(count);
        for (std::size_t i = 0; i < count; ++i) {
          float acc = data[0][i];
          for (int r = 1; r < n; ++r) acc += data[static_cast<std::size_t>(r)][i];
          expected[i] = acc;
        }
        auto group = InProcessGroup::create(n, {.algorithm = algo});
        auto errors = run_ranks(n, [&](int r) {
          group->communicator(r).all_reduce(data[static_cast<std::size_t>(r)].data(), count,
                                            ReduceOp::kSum);
        });
        for (int r = 0; r < n; ++r) {
          ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
              << message(errors[static_cast<std::size_t>(r)]);
          EXPECT_TRUE(count == 0 || std::memcmp(data[static_cast<std::size_t>(r)].data(),
                                                expected.data(), count * sizeof(float)) == 0)
              << "rank " << r << " of " << n << ", count " << count;
        }
      }
    }
  }
}

TEST(InProcessAllReduce, MeanMaxMinAndDouble) {
  const int n = 3;
  auto group = InProcessGroup::create(n);
  std::vector<std::vector<double>> mean(n), mx(n), mn(n);
  auto errors = run_ranks(n, [&](int r) {
    auto& c = group->communicator(r);
    mean[static_cast<std::size_t>(r)] = {double(r), 10.0 * r};
    mx[static_cast<std::size_t>(r)] = {double(r), -double(r)};
    mn[static_cast<std::size_t>(r)] = {double(r), -double(r)};
    c.all_reduce(mean[static_cast<std::size_t>(r)].data(), 2, ReduceOp::kMean);
    c.all_reduce(mx[static_cast<std::size_t>(r)].data(), 2, ReduceOp::kMax);
    c.all_reduce(mn[static_cast<std::size_t>(r)].data(), 2, ReduceOp::kMin);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)]);
    EXPECT_EQ(mean[static_cast<std::size_t>(r)], (std::vector<double>{1.0, 10.0}));
    EXPECT_EQ(mx[static_cast<std::size_t>(r)], (std::vector<double>{2.0, 0.0}));
    EXPECT_EQ(mn[static_cast<std::size_t>(r)], (std::vector<double>{0.0, -2.0}));
  }
}

TEST(InProcessCollectives, BroadcastAndAllGather) {
  const int n = 4;
  auto group = InProcessGroup::create(n);
  std::vector<int> value(n), gathered(n * n);
  auto errors = run_ranks(n, [&](int r) {
    auto& c = group->communicator(r);
    value[static_cast<std::size_t>(r)] = r == 2 ? 42 : -1;
    c.broadcast(&value[static_cast<std::size_t>(r)], sizeof(int), 2);
    const int mine = 100 + r;
    c.all_gather(&mine, sizeof(int), &gathered[static_cast<std::size_t>(r * n)]);
    c.barrier();
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)]);
    EXPECT_EQ(value[static_cast<std::size_t>(r)], 42);
    for (int s = 0; s < n; ++s) EXPECT_EQ(gathered[static_cast<std::size_t>(r * n + s)], 100 + s);
  }
}

TEST(InProcessFailures, AMissingRankIsNamedAfterTheDeadline) {
  auto group = InProcessGroup::create(3, {.timeout = std::chrono::milliseconds(200)});
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    if (r != 1) group->communicator(r).barrier();  // rank 1 never comes
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 2.0);
  ASSERT_TRUE(errors[0] && errors[2]);
  const std::string m0 = message(errors[0]) + message(errors[2]);
  EXPECT_NE(m0.find("rank(s) 1 that never arrived"), std::string::npos) << m0;
}

TEST(InProcessFailures, AbortReleasesEveryWaiterWithTheReason) {
  auto group = InProcessGroup::create(3);
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_ranks(3, [&](int r) {
    if (r == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group->communicator(r).abort("replica 2 failed: bad batch");
      return;
    }
    std::vector<float> v(10, 1.0f);
    group->communicator(r).all_reduce(v.data(), v.size(), ReduceOp::kSum);
  });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  for (int r : {0, 1}) {
    ASSERT_TRUE(errors[static_cast<std::size_t>(r)]);
    EXPECT_NE(message(errors[static_cast<std::size_t>(r)]).find("replica 2 failed: bad batch"),
              std::string::npos);
  }
  // Later collectives fail at once too.
  EXPECT_THROW(group->communicator(0).barrier(), DistributedError);
}

TEST(InProcessFailures, MismatchedLengthsAreAnError) {
  auto group = InProcessGroup::create(2);
  auto errors = run_ranks(2, [&](int r) {
    std::vector<float> v(r == 0 ? 8 : 9, 1.0f);
    group->communicator(r).all_reduce(v.data(), v.size(), ReduceOp::kSum);
  });
  for (const auto& e : errors) {
    ASSERT_TRUE(e);
    EXPECT_NE(message(e).find("rank 1 has 9 elements but rank 0 has 8"), std::string::npos)
        << message(e);
  }
}

// Values that make float addition order visible: the rank-order sum is the
// only right answer, bit for bit.
std::vector<float> rank_values(int rank, std::size_t count, unsigned seed) {
  std::mt19937 gen(seed * 131 + static_cast<unsigned>(rank));
  std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(gen) * (rank % 2 ? 1e-4f : 1.0f);
  return v;
}

std::vector<float> rank_order_sum(int n, std::size_t count, unsigned seed) {
  std::vector<float> sum = rank_values(0, count, seed);
  for (int r = 1; r < n; ++r) {
    const auto v = rank_values(r, count, seed);
    for (std::size_t i = 0; i < count; ++i) sum[i] += v[i];
  }
  return sum;
}

TEST(InProcessAsync, OutstandingAllReducesWaitedInReverseOrderAreBitwiseRankOrderSums) {
  for (auto algorithm : {Algorithm::kReduceScatterAllGather, Algorithm::kReductionToOneDevice}) {
    const int n = 3, ops = 40;
    auto group = InProcessGroup::create(n, {.algorithm = algorithm});
    auto size_of = [](int op) { return static_cast<std::size_t>(1 + (op * 977) % 5000); };
    std::vector<std::vector<std::vector<float>>> bufs(n);
    auto errors = run_ranks(n, [&](int r) {
      auto& mine = bufs[static_cast<std::size_t>(r)];
      std::vector<WorkHandle> work;
      for (int op = 0; op < ops; ++op) {
        mine.push_back(rank_values(r, size_of(op), static_cast<unsigned>(op)));
        work.push_back(group->communicator(r).all_reduce_async(mine.back().data(), size_of(op),
                                                               ReduceOp::kSum));
      }
      for (int op = ops - 1; op >= 0; --op) work[static_cast<std::size_t>(op)]->wait();
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
          << message(errors[static_cast<std::size_t>(r)]);
      for (int op = 0; op < ops; ++op) {
        const auto expected = rank_order_sum(n, size_of(op), static_cast<unsigned>(op));
        ASSERT_EQ(
            0, std::memcmp(expected.data(),
                           bufs[static_cast<std::size_t>(r)][static_cast<std::size_t>(op)].data(),
                           expected.size() * sizeof(float)))
            << "rank " << r << " op " << op;
      }
    }
  }
}

TEST(InProcessAsync, ManyMoreCollectivesThanSlotsWithBlockingCollectivesInBetween) {
  // A window of 8 in flight over 300 collectives (the ring has 64 slots), a
  // barrier now and then while some are still pending, and polling with
  // test() instead of wait() on odd ones.
  const int n = 2, ops = 300, window = 8;
  auto group = InProcessGroup::create(n);
  std::vector<int> mismatches(n, 0);
  auto errors = run_ranks(n, [&](int r) {
    Communicator& comm = group->communicator(r);
    std::vector<std::vector<float>> bufs(ops);
    std::vector<WorkHandle> work(ops);
    auto finish = [&](int op) {
      if (op % 2) {
        while (!work[static_cast<std::size_t>(op)]->test()) {
        }
      } else {
        work[static_cast<std::size_t>(op)]->wait();
      }
      const auto expected = rank_order_sum(n, 64, static_cast<unsigned>(op));
      if (std::memcmp(expected.data(), bufs[static_cast<std::size_t>(op)].data(),
                      64 * sizeof(float)))
        ++mismatches[static_cast<std::size_t>(r)];
    };
    for (int op = 0; op < ops; ++op) {
      bufs[static_cast<std::size_t>(op)] = rank_values(r, 64, static_cast<unsigned>(op));
      work[static_cast<std::size_t>(op)] =
          comm.all_reduce_async(bufs[static_cast<std::size_t>(op)].data(), 64, ReduceOp::kSum);
      if (op % 50 == 7) comm.barrier();
      if (op >= window) finish(op - window);
    }
    for (int op = ops - window; op < ops; ++op) finish(op);
  });
  for (int r = 0; r < n; ++r) {
    ASSERT_FALSE(errors[static_cast<std::size_t>(r)])
        << message(errors[static_cast<std::size_t>(r)]);
    EXPECT_EQ(mismatches[static_cast<std::size_t>(r)], 0) << "rank " << r;
  }
}

TEST(InProcessAsync, AHandleDroppedUnwaitedStillCompletesForTheOthers) {
  auto group = InProcessGroup::create(2);
  std::vector<float> kept(100, 1.0f);
  auto errors = run_ranks(2, [&](int r) {
    std::vector<float> mine(100, 2.0f);
    auto work = group->communicator(r).all_reduce_async(r == 0 ? kept.data() : mine.data(), 100,
                                                        ReduceOp::kSum);
    if (r == 0) work->wait();
    // rank 1 drops its handle: the destructor sees the collective through.
  });
  for (const auto& e : errors) ASSERT_FALSE(e) << message(e);
  EXPECT_EQ(kept[0], 3.0f);
  EXPECT_EQ(kept[99], 3.0f);
}

TEST(InProcessAsync, AMissingRankAndMismatchedLengthsAreErrorsOnEveryRank) {
  {
    auto group = InProcessGroup::create(2, {.timeout = std::chrono::milliseconds(200)});
    std::vector<float> v(10, 1.0f);
    auto errors = run_ranks(2, [&](int r) {
      if (r == 1) return;  // never posts
      group->communicator(r).all_reduce_async(v.data(), v.size(), ReduceOp::kSum)->wait();
    });
    ASSERT_TRUE(errors[0]);
    EXPECT_NE(message(errors[0]).find("rank(s) 1 that never arrived"), std::string::npos)
        << message(errors[0]);
  }
  {
    auto group = InProcessGroup::create(3);
    auto errors = run_ranks(3, [&](int r) {
      std::vector<float> v(r == 2 ? 5 : 4, 1.0f);
      group->communicator(r).all_reduce_async(v.data(), v.size(), ReduceOp::kSum)->wait();
    });
    for (const auto& e : errors) {
      ASSERT_TRUE(e);
      EXPECT_NE(message(e).find("rank 2 has 5 elements but rank 0 has 4"), std::string::npos)
          << message(e);
    }
  }
}

}  // namespace
}  // namespace lockstep::comm
