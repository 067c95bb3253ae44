// The Gloo backend, its ranks on threads of this process (each with its own
// store client and Gloo device, as separate processes would have); the
// multi-process behaviour is tested in tests/distribute.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

#include "lockstep/comm/process_group.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"

namespace lockstep::comm {
namespace {

using namespace std::chrono_literals;

class GlooTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = StoreServer::start(store_options(0, 10s)); }

  static StoreOptions store_options(int port, std::chrono::milliseconds timeout) {
    StoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.token = "t0ken";
    o.timeout = timeout;
    return o;
  }

  // Runs fn(rank, communicator) on `size` threads and rethrows the first failure.
  void run_ranks(int size, const std::function<void(int, Communicator&)>& fn,
                 std::chrono::milliseconds timeout = 10s) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        try {
          auto store = StoreClient::connect(store_options(server_->port(), 10s));
          auto comm = create_gloo_communicator(*store, "127.0.0.1", "test/",
                                               {.rank = r, .size = size, .timeout = timeout});
          fn(r, *comm);
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
  }

  std::unique_ptr<StoreServer> server_;
};

TEST_F(GlooTest, AllReduceBroadcastAllGatherAndBarrierOnThreeRanks) {
  constexpr int kRanks = 3;
  std::vector<std::vector<float>> sums(kRanks), means(kRanks), maxes(kRanks);
  std::vector<std::vector<std::int32_t>> gathered(kRanks);
  std::vector<std::vector<double>> doubles(kRanks);
  std::vector<std::string> broadcast(kRanks);
  run_ranks(kRanks, [&](int r, Communicator& c) {
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), kRanks);
    const auto i = static_cast<std::size_t>(r);
    // Big enough for Gloo to cut it into several segments.
    std::vector<float> v(300001);
    for (std::size_t k = 0; k < v.size(); ++k)
      v[k] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(k % 97);
    sums[i] = v;
    c.all_reduce(sums[i].data(), sums[i].size(), ReduceOp::kSum);
    means[i] = v;
    c.all_reduce(means[i].data(), means[i].size(), ReduceOp::kMean);
    maxes[i] = {static_cast<float>(r), static_cast<float>(-r)};
    c.all_reduce(maxes[i].data(), 2, ReduceOp::kMax);
    doubles[i] = {1.0 * r, 0.5};
    c.all_reduce(doubles[i].data(), 2, ReduceOp::kSum);
    char text[16] = {};
    if (r == 1) std::strcpy(text, "from rank one");
    c.broadcast(text, sizeof text, 1);
    broadcast[i] = text;
    const std::int32_t mine = 100 + r;
    gathered[i].resize(kRanks);
    c.all_gather(&mine, sizeof mine, gathered[i].data());
    c.barrier();
  });
  for (int r = 0; r < kRanks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    // Every rank holds bitwise the same result.
    EXPECT_EQ(std::memcmp(sums[i].data(), sums[0].data(), sums[0].size() * 4), 0);
    EXPECT_EQ(std::memcmp(means[i].data(), means[0].data(), means[0].size() * 4), 0);
    EXPECT_EQ(maxes[i], (std::vector<float>{2.0f, 0.0f}));
    EXPECT_EQ(doubles[i], (std::vector<double>{3.0, 1.5}));
    EXPECT_EQ(broadcast[i], "from rank one");
    EXPECT_EQ(gathered[i], (std::vector<std::int32_t>{100, 101, 102}));
  }
  for (std::size_t k = 0; k < sums[0].size(); k += 9973) {
    const float e = 1e-3f * static_cast<float>(k % 97);
    EXPECT_NEAR(sums[0][k], 0.6f + 3 * e, 1e-5f);
    EXPECT_NEAR(means[0][k], 0.2f + e, 1e-5f);
  }
}

// Small and medium all-reduces take Gloo's halving-doubling algorithm (with
// cached instances and staging buffers), large ones and shapes past the
// cache gloo::allreduce: every
// size, type and op, on a power-of-two and a non-power-of-two rank count,
// repeated (cache hits) and interleaved (other cached instances in between),
// gives the exact result, bitwise the same on every rank.
TEST_F(GlooTest, AllReduceIsExactForEverySizeAlgorithmAndOp) {
  const std::vector<std::size_t> counts = {1,     2,      3,      5,     127, 1000,
                                           65537, 300001, 524288, 524289};  // 2 MiB: 2^19 floats
  for (int ranks : {2, 3}) {
    server_ = StoreServer::start(store_options(0, 10s));  // a fresh rendezvous per job
    std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(ranks));
    run_ranks(ranks, [&](int r, Communicator& c) {
      auto& out = results[static_cast<std::size_t>(r)];
      for (int round = 0; round < 2; ++round) {
        for (std::size_t n : counts) {
          // Small integers: every order of summation gives the same float.
          std::vector<float> v(n);
          for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<float>((k % 13) + 10 * r);
          std::vector<float> sum = v, mx = v;
          c.all_reduce(sum.data(), n, ReduceOp::kSum);
          c.all_reduce(mx.data(), n, ReduceOp::kMax);
          std::vector<double> d(n);
          for (std::size_t k = 0; k < n; ++k) d[k] = -static_cast<double>(k % 7) - r;
          c.all_reduce(d.data(), n, ReduceOp::kMin);
          for (std::size_t k = 0; k < n; ++k) {
            const float base = static_cast<float>(k % 13);
            ASSERT_EQ(sum[k], ranks * base + 10.0f * static_cast<float>(ranks * (ranks - 1) / 2))
                << n << " floats, element " << k;
            ASSERT_EQ(mx[k], base + 10.0f * static_cast<float>(ranks - 1));
            ASSERT_EQ(d[k], -static_cast<double>(k % 7) - (ranks - 1));
          }
          if (round == 1) out.push_back(std::move(sum));
        }
      }
      // More shapes than the halving-doubling cache keeps (64): the rest
      // take gloo::allreduce, as exact.
      for (std::size_t n = 1; n <= 80; ++n) {
        std::vector<float> v(n, static_cast<float>(r + 1));
        c.all_reduce(v.data(), n, ReduceOp::kSum);
        ASSERT_EQ(v, std::vector<float>(n, static_cast<float>(ranks * (ranks + 1) / 2))) << n;
      }
      // A non-integer mean, compared across ranks below.
      std::vector<float> mean(1001);
      for (std::size_t k = 0; k < mean.size(); ++k)
        mean[k] = 0.1f * static_cast<float>(r + 1) + 1e-3f * static_cast<float>(k);
      c.all_reduce(mean.data(), mean.size(), ReduceOp::kMean);
      out.push_back(std::move(mean));
    });
    for (int r = 1; r < ranks; ++r) {
      const auto& a = results[0];
      const auto& b = results[static_cast<std::size_t>(r)];
      ASSERT_EQ(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * sizeof(float)), 0)
            << ranks << " ranks, result " << i << " differs on rank " << r;
    }
    EXPECT_NEAR(results[0].back()[0], 0.1f * static_cast<float>(ranks + 1) / 2, 1e-6f);
  }
}

// all_reduce_bf16_async: each rank's floats rounded to bfloat16, summed in
// float32 and rounded again. With 2 ranks that is bf16(bf16(a) + bf16(b))
// exactly; with 3 the order of the partial sums is the algorithm's, so the
// result is a bfloat16 value within two roundings of the exact sum.
TEST_F(GlooTest, Bf16AllReduceSumsBfloat16RoundedValuesInFloat32) {
  auto value = [](int rank, std::size_t i) {
    return std::sin(0.37f * static_cast<float>(i) + static_cast<float>(rank)) *
           (1.0f + static_cast<float>(i % 7));
  };
  auto bf16 = [](float x) { return static_cast<float>(bfloat16(x)); };
  // Small buffers go through halving-doubling, large ones (over 2 MiB of
  // bfloat16) through gloo::allreduce.
  const std::vector<std::pair<int, std::size_t>> cases = {{2, 1000}, {2, 1500000}, {3, 1000}};
  for (const auto& [ranks, kCount] : cases) {
    server_ = StoreServer::start(store_options(0, 10s));  // a fresh rendezvous per group
    std::vector<std::vector<float>> out(static_cast<std::size_t>(ranks));
    run_ranks(ranks, [&](int r, Communicator& c) {
      std::vector<float> data(kCount);
      for (std::size_t i = 0; i < kCount; ++i) data[i] = value(r, i);
      c.all_reduce_bf16_async(data.data(), kCount, ReduceOp::kSum)->wait();
      out[static_cast<std::size_t>(r)] = data;
    });
    for (std::size_t i = 0; i < kCount; ++i) {
      const float got = out[0][i];
      for (int r = 1; r < ranks; ++r) ASSERT_EQ(out[static_cast<std::size_t>(r)][i], got) << i;
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got) & 0xffffu, 0u) << "not a bfloat16: " << got;
      if (ranks == 2) {
        EXPECT_EQ(got, bf16(bf16(value(0, i)) + bf16(value(1, i)))) << i;
      } else {
        double exact = 0, magnitude = 0;
        for (int r = 0; r < ranks; ++r) {
          exact += value(r, i);
          magnitude += std::abs(value(r, i));
        }
        EXPECT_NEAR(got, exact, 3 * magnitude / 256) << i;
      }
    }
  }
}

TEST_F(GlooTest, AsyncAllReducesCompleteInPostingOrderAndMayBeWaitedInAnyOrder) {
  constexpr int kRanks = 2;
  constexpr int kBuckets = 12;
  std::vector<std::vector<std::vector<float>>> out(kRanks);
  run_ranks(kRanks, [&](int r, Communicator& c) {
    auto& bufs = out[static_cast<std::size_t>(r)];
    bufs.resize(kBuckets);
    std::vector<WorkHandle> work;
    for (int b = 0; b < kBuckets; ++b) {
      bufs[static_cast<std::size_t>(b)].assign(1000 + static_cast<std::size_t>(b),
                                               static_cast<float>(b + r));
      work.push_back(c.all_reduce_async(bufs[static_cast<std::size_t>(b)].data(),
                                        bufs[static_cast<std::size_t>(b)].size(), ReduceOp::kSum));
    }
    for (int b = kBuckets - 1; b >= 0; --b) work[static_cast<std::size_t>(b)]->wait();
  });
  for (int b = 0; b < kBuckets; ++b) {
    for (int r = 0; r < kRanks; ++r)
      EXPECT_EQ(
          out[static_cast<std::size_t>(r)][static_cast<std::size_t>(b)],
          std::vector<float>(1000 + static_cast<std::size_t>(b), static_cast<float>(2 * b + 1)));
  }
}

TEST_F(GlooTest, APeerThatLeavesBreaksTheCollectiveWithAClearErrorNotAHang) {
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  run_ranks(
      2,
      [&](int r, Communicator& c) {
        std::vector<float> v(1000, 1.0f);
        c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
        if (r == 1) return;  // leaves: its communicator (and sockets) go away
        try {
          std::this_thread::sleep_for(100ms);
          c.all_reduce(v.data(), v.size(), ReduceOp::kSum);
          message = "(no error)";
        } catch (const DistributedError& e) {
          message = e.what();
        }
        // Broken for good: the next collective fails at once with the same report.
        EXPECT_THROW(c.barrier(), DistributedError);
      },
      3s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_NE(message.find("worker 0: all_reduce of 1000 floats across 2 workers (gloo) failed"),
            std::string::npos)
      << message;
}

TEST_F(GlooTest, AMissingPeerIsATimeoutNotAHang) {
  auto store = StoreClient::connect(store_options(server_->port(), 1s));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(create_gloo_communicator(*store, "127.0.0.1", "alone/",
                                        {.rank = 0, .size = 2, .timeout = 1s}),
               DistributedError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
}

}  // namespace
}  // namespace lockstep::comm
