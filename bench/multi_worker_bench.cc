// Multi-worker figures (issue #7), one process per worker; bench/multi_worker.sh
// starts the processes and prints the table.
//
//   multi_worker_bench allreduce IMPL   IMPL: ours-gloo | ours-gloo-bf16 | bare-gloo |
//                                             ours-mpi | bare-mpi
//       (ours-gloo-bf16: the all-reduce with bfloat16 on the wire, gradient
//       compression's);
//       Gloo ranks read RANK, SIZE, PORT (the chief's store on 127.0.0.1:PORT);
//       MPI ranks come from mpirun. Rank 0 prints one line per size:
//       "allreduce IMPL SIZE_MIB MS_PER_OP ALGO_MB_S".
//   multi_worker_bench tcp              loopback TCP throughput, one stream
//   multi_worker_bench mlp MODE BATCH STEPS [LOCAL_REPLICAS [BYTES_PER_PACK]]
//       MODE: single (no strategy) | mwms (MultiWorkerMirroredStrategy from
//       the environment) | mwms-bf16 (the same, gradients compressed to
//       bfloat16 between workers). Rank 0 prints "mlp MODE ... samples/s".
#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/comm/process_group.h"
#include "lockstep/comm/store.h"
#include "seed_mlp.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace lockstep;

int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) {
    std::fprintf(stderr, "%s is not set\n", name);
    std::exit(2);
  }
  return std::atoi(v);
}

const std::vector<std::size_t> kSizesMiB = {1, 4, 16, 64};

int reps_for(double mib) { return mib >= 64 ? 8 : mib >= 16 ? 16 : 40; }

// Sizes in KiB: 1-64 MiB, or the list in BENCH_SIZES_KIB ("4,64,1024").
std::vector<std::size_t> sizes_kib() {
  std::vector<std::size_t> out;
  if (const char* env = std::getenv("BENCH_SIZES_KIB")) {
    for (const char* p = env; *p;) {
      out.push_back(std::strtoull(p, const_cast<char**>(&p), 10));
      if (*p == ',') ++p;
    }
    return out;
  }
  for (std::size_t mib : kSizesMiB) out.push_back(mib * 1024);
  return out;
}

template <typename AllReduce, typename Barrier>
void time_sizes(const std::string& impl, int rank, AllReduce all_reduce, Barrier barrier) {
  for (std::size_t kib : sizes_kib()) {
    const double mib = static_cast<double>(kib) / 1024.0;
    std::vector<float> v(kib * 1024 / 4, 1.0f);
    for (int i = 0; i < 3; ++i) all_reduce(v.data(), v.size());
    barrier();
    const int reps = reps_for(mib);
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) all_reduce(v.data(), v.size());
    const double s = std::chrono::duration<double>(Clock::now() - t0).count() / reps;
    barrier();
    if (rank == 0)
      std::printf("allreduce %s %g %.3f %.0f\n", impl.c_str(), mib, s * 1e3,
                  mib * 1048576.0 / s / 1e6);
  }
}

// Gloo's Store over our rendezvous store (the rendezvous is not timed).
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  explicit StoreAdapter(comm::StoreClient& c) : c_(c) {}
  void set(const std::string& k, const std::vector<char>& d) override { c_.set("bare/" + k, d); }
  std::vector<char> get(const std::string& k) override { return c_.get("bare/" + k); }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, std::chrono::milliseconds(60000));
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back("bare/" + k);
    c_.wait(full, t);
  }

 private:
  comm::StoreClient& c_;
};

// A Gloo full mesh on loopback, connected through our store (not timed).
std::shared_ptr<gloo::Context> connect_bare_gloo(int rank, int size, comm::StoreClient& client) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  StoreAdapter store(client);
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  ctx->connectFullMesh(store, device);
  return ctx;
}

int run_allreduce(const std::string& impl) {
  if (impl == "bare-mpi") {
    MPI_Init(nullptr, nullptr);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    time_sizes(
        impl, rank,
        [](float* d, std::size_t n) {
          MPI_Allreduce(MPI_IN_PLACE, d, static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        },
        [] { MPI_Barrier(MPI_COMM_WORLD); });
    MPI_Finalize();
    return 0;
  }
  if (impl == "ours-mpi") {
    const auto [rank, size] = comm::mpi_world_rank_and_size();
    auto c = comm::create_mpi_communicator({.rank = rank, .size = size});
    time_sizes(
        impl, rank, [&](float* d, std::size_t n) { c->all_reduce(d, n, comm::ReduceOp::kSum); },
        [&] { c->barrier(); });
    return 0;
  }
  const int rank = env_int("RANK"), size = env_int("SIZE"), port = env_int("PORT");
  comm::StoreOptions so;
  so.host = "127.0.0.1";
  so.port = port;
  so.token = "bench";
  std::unique_ptr<comm::StoreServer> server;
  if (rank == 0) server = comm::StoreServer::start(so);
  auto client = comm::StoreClient::connect(so);
  if (impl == "ours-gloo" || impl == "ours-gloo-bf16") {
    auto c =
        comm::create_gloo_communicator(*client, "127.0.0.1", "ours/", {.rank = rank, .size = size});
    const bool bf16 = impl == "ours-gloo-bf16";
    time_sizes(
        impl, rank,
        [&](float* d, std::size_t n) {
          if (bf16) {
            c->all_reduce_bf16_async(d, n, comm::ReduceOp::kSum)->wait();
          } else {
            c->all_reduce(d, n, comm::ReduceOp::kSum);
          }
        },
        [&] { c->barrier(); });
  } else if (impl == "bare-gloo" || impl == "bare-gloo-bcube") {
    auto ctx = connect_bare_gloo(rank, size, *client);
    std::uint32_t tag = 1;
    const bool bcube = impl == "bare-gloo-bcube";
    auto sum = [&](float* d, std::size_t n) {
      gloo::AllreduceOptions o(ctx);
      o.setOutput(d, n);
      o.setReduceFunction(
          [](void* c, const void* a, const void* b, size_t k) { gloo::sum<float>(c, a, b, k); });
      o.setTag(tag++);
      if (bcube) o.setAlgorithm(gloo::AllreduceOptions::Algorithm::BCUBE);
      gloo::allreduce(o);
    };
    float one = 0;
    time_sizes(impl, rank, sum, [&] { sum(&one, 1); });
  } else if (impl == "bare-gloo-hd") {
    // Gloo's halving-doubling algorithm bound to the caller's buffer (made
    // once per buffer, in the untimed warm-up): what ours-gloo runs up to
    // 2 MiB, without our staging copies and communication thread.
    auto ctx = connect_bare_gloo(rank, size, *client);
    std::map<std::pair<float*, std::size_t>, std::unique_ptr<gloo::Algorithm>> made;
    auto sum = [&](float* d, std::size_t n) {
      auto& a = made[{d, n}];
      if (!a)
        a = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, std::vector<float*>{d},
                                                                    static_cast<int>(n));
      a->run();
    };
    float one = 0;
    time_sizes(impl, rank, sum, [&] { sum(&one, 1); });
  } else {
    std::fprintf(stderr, "unknown all-reduce implementation %s\n", impl.c_str());
    return 2;
  }
  // Leave together: the chief's store must outlive the others' goodbyes.
  client->set("bench/done/" + std::to_string(rank), {'1'});
  if (rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("bench/done/" + std::to_string(r));
    client->wait(keys, std::chrono::milliseconds(60000));
    // Let the last set's reply reach its rank before the store goes away.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return 0;
}

// One TCP stream over loopback: the ceiling for Gloo's transport.
int run_tcp() {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::listen(listener, 1);
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  constexpr std::size_t kTotal = std::size_t{1} << 30;  // 1 GiB
  std::thread receiver([&] {
    const int fd = ::accept(listener, nullptr, nullptr);
    std::vector<char> buf(1 << 20);
    std::size_t got = 0;
    while (got < kTotal) {
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  std::vector<char> buf(1 << 20, 1);
  const auto t0 = Clock::now();
  std::size_t sent = 0;
  while (sent < kTotal) {
    const ssize_t n = ::send(fd, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  ::close(fd);
  receiver.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("tcp loopback %.0f MB/s\n", static_cast<double>(kTotal) / s / 1e6);
  ::close(listener);
  return 0;
}

int run_mlp(const std::string& mode, std::int64_t batch, std::int64_t steps, int local,
            std::size_t bytes_per_pack) {
  std::optional<distribute::Strategy> strategy;
  if (mode == "mwms" || mode == "mwms-bf16")
    strategy = distribute::MultiWorkerMirroredStrategy(
        {.gradient_compression = mode == "mwms-bf16" ? distribute::GradientCompression::kBfloat16
                                                     : distribute::GradientCompression::kNone,
         .local_replicas = local,
         .bytes_per_pack = bytes_per_pack});
  Model model;
  {
    std::unique_ptr<distribute::Strategy::Scope> scope;
    if (strategy) scope = strategy->scope();
    model = bench::seed_mlp();
  }
  const data::Dataset ds = bench::synthetic_batches(batch);
  model.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = 30});  // warm-up
  const auto t0 = Clock::now();
  model.fit(ds, {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  const int rank = strategy ? strategy->worker_index() : 0;
  if (rank == 0)
    std::printf("mlp %s workers=%d local_replicas=%d batch=%lld %.0f samples/s\n", mode.c_str(),
                strategy ? strategy->num_workers() : 1,
                strategy ? strategy->num_local_replicas() : 1, static_cast<long long>(batch),
                static_cast<double>(batch * steps) / s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string what = argc > 1 ? argv[1] : "";
  try {
    if (what == "allreduce" && argc > 2) return run_allreduce(argv[2]);
    if (what == "tcp") return run_tcp();
    if (what == "mlp" && argc > 4)
      return run_mlp(argv[2], std::atoll(argv[3]), std::atoll(argv[4]),
                     argc > 5 ? std::atoi(argv[5]) : 1,
                     argc > 6 ? static_cast<std::size_t>(std::atoll(argv[6])) : 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "multi_worker_bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: see the comment at the top of bench/multi_worker_bench.cc\n");
  return 2;
}
