// The MPI backend: MPI_COMM_WORLD's collectives, called only from one
// communication thread per process (the one that initialised MPI).
#include <mpi.h>

#include <algorithm>
#include <bit>
#include <mutex>

#include "comm/serial_communicator.h"
#include "lockstep/comm/process_group.h"
#include "lockstep/core/dtype.h"
#include "lockstep/core/error.h"

namespace lockstep::comm {
namespace {

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

void check_mpi(int code, const char* call) {
  if (code != MPI_SUCCESS)
    throw DistributedError(lockstep::detail::str_cat(call, ": ", mpi_error(code)));
}

// The process's MPI: initialised on its own thread at first use, finalised
// at exit (unless a collective never came back: then MPI is left alone so
// that the process can still exit).
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime runtime;
    return runtime;
  }

  std::shared_ptr<detail::SerialExecutor> executor() { return executor_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  ~MpiRuntime() {
    if (executor_->stuck()) return;  // leave it: MPI_Finalize would wait forever
    auto task = std::make_shared<detail::Task>();
    task->run = [] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    };
    executor_->post(task);
    std::unique_lock lk(task->mu);
    task->cv.wait_for(lk, std::chrono::seconds(30), [&] { return task->done; });
  }

 private:
  MpiRuntime() : executor_(std::make_shared<detail::SerialExecutor>()) {
    auto task = std::make_shared<detail::Task>();
    int provided = 0;
    task->run = [&] {
      int initialized = 0;
      MPI_Initialized(&initialized);
      if (!initialized) {
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                  "MPI_Init_thread");
      } else {
        MPI_Query_thread(&provided);
      }
      // Errors come back as codes (and become DistributedErrors), not aborts.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
      MPI_Comm_size(MPI_COMM_WORLD, &size_);
    };
    executor_->post(task);
    std::unique_lock lk(task->mu);
    task->cv.wait(lk, [&] { return task->done; });
    if (task->error) std::rethrow_exception(task->error);
    LOCKSTEP_CHECK_AS(DistributedError, provided >= MPI_THREAD_FUNNELED,
                      "MPI provides thread level ", provided,
                      ", Lockstep needs MPI_THREAD_FUNNELED (", MPI_THREAD_FUNNELED,
                      "): every MPI call is made from one communication thread");
  }

  std::shared_ptr<detail::SerialExecutor> executor_;
  int rank_ = 0;
  int size_ = 1;
};

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kSum:
    case ReduceOp::kMean:
      break;
  }
  return MPI_SUM;
}

// inout = in (op) inout over bfloat16 bit patterns, each in float32,
// rounded back (ties to even): the user operations of all_reduce_bf16.
template <int kOp>
void bf16_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* x = static_cast<const std::uint16_t*>(in);
  auto* y = static_cast<std::uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float fx = std::bit_cast<float>(static_cast<std::uint32_t>(x[i]) << 16);
    const float fy = std::bit_cast<float>(static_cast<std::uint32_t>(y[i]) << 16);
    y[i] = bfloat16::round(kOp == 0 ? fx + fy : kOp == 1 ? std::max(fx, fy) : std::min(fx, fy));
  }
}

class MpiCommunicator final : public detail::SerialCommunicator {
 public:
  explicit MpiCommunicator(ProcessGroupOptions options)
      : SerialCommunicator(options, "mpi", MpiRuntime::get().executor()) {}
  ~MpiCommunicator() override { drain(); }

 protected:
  template <typename T>
  void all_reduce_t(T* data, std::size_t count, ReduceOp op, MPI_Datatype type) {
    // MPI counts are ints: large buffers go in pieces.
    constexpr std::size_t kMaxCount = std::size_t{1} << 30;
    for (std::size_t at = 0; at < count; at += kMaxCount) {
      const auto n = static_cast<int>(std::min(kMaxCount, count - at));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, data + at, n, type, mpi_op(op), MPI_COMM_WORLD),
                "MPI_Allreduce");
    }
    if (op == ReduceOp::kMean) {
      const T n = static_cast<T>(size());
      for (std::size_t i = 0; i < count; ++i) data[i] /= n;
    }
  }
  void do_all_reduce_f32(float* data, std::size_t count, ReduceOp op) override {
    all_reduce_t(data, count, op, MPI_FLOAT);
  }
  void do_all_reduce_f64(double* data, std::size_t count, ReduceOp op) override {
    all_reduce_t(data, count, op, MPI_DOUBLE);
  }
  void do_all_reduce_bf16(std::uint16_t* bf16, std::size_t count, ReduceOp op) override {
    // The operations are made once, on this (MPI's) thread; MPI_Finalize frees them.
    if (bf16_ops_[0] == MPI_OP_NULL) {
      check_mpi(MPI_Op_create(&bf16_op<0>, 1, &bf16_ops_[0]), "MPI_Op_create");
      check_mpi(MPI_Op_create(&bf16_op<1>, 1, &bf16_ops_[1]), "MPI_Op_create");
      check_mpi(MPI_Op_create(&bf16_op<2>, 1, &bf16_ops_[2]), "MPI_Op_create");
    }
    const MPI_Op mpi = bf16_ops_[op == ReduceOp::kMax ? 1 : op == ReduceOp::kMin ? 2 : 0];
    constexpr std::size_t kMaxCount = std::size_t{1} << 30;
    for (std::size_t at = 0; at < count; at += kMaxCount) {
      const auto n = static_cast<int>(std::min(kMaxCount, count - at));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, bf16 + at, n, MPI_UINT16_T, mpi, MPI_COMM_WORLD),
                "MPI_Allreduce");
    }
  }
  void do_broadcast(void* data, std::size_t bytes, int root) override {
    LOCKSTEP_CHECK(bytes < (std::size_t{1} << 31), "MPI broadcast of ", bytes,
                   " bytes: at most 2 GiB at once");
    check_mpi(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD),
              "MPI_Bcast");
  }
  void do_all_gather(const void* data, std::size_t bytes, void* out) override {
    LOCKSTEP_CHECK(bytes < (std::size_t{1} << 31), "MPI all_gather of ", bytes,
                   " bytes: at most 2 GiB at once");
    check_mpi(MPI_Allgather(data, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes),
                            MPI_BYTE, MPI_COMM_WORLD),
              "MPI_Allgather");
  }
  void do_barrier() override { check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

 private:
  MPI_Op bf16_ops_[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};  // sum, max, min
};

}  // namespace

std::pair<int, int> mpi_world_rank_and_size() {
  auto& runtime = MpiRuntime::get();
  return {runtime.rank(), runtime.size()};
}

std::unique_ptr<Communicator> create_mpi_communicator(ProcessGroupOptions options) {
  auto [rank, size] = mpi_world_rank_and_size();
  LOCKSTEP_CHECK_AS(DistributedError, rank == options.rank && size == options.size,
                    "MPI says this process is rank ", rank, " of ", size,
                    ", but the cluster resolver says worker ", options.rank, " of ", options.size);
  return std::make_unique<MpiCommunicator>(std::move(options));
}

}  // namespace lockstep::comm
