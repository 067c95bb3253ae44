// The communicator of one replica of a MultiWorkerMirroredStrategy with
// several replicas per worker (internal): reduce among the worker's replica
// threads, all-reduce across workers on the worker's first replica (the
// leader), broadcast back inside the worker. Ranks are replicas in sync:
// worker * local replicas + local replica.
#pragma once

#include <vector>

#include "lockstep/comm/communicator.h"

namespace lockstep::distribute {

class HierarchicalCommunicator final : public comm::Communicator {
 public:
  // `cross` is the worker's communicator on the leader (local rank 0), null
  // on the other replicas.
  HierarchicalCommunicator(comm::Communicator& local, comm::Communicator* cross, int worker,
                           int num_workers)
      : local_(local), cross_(cross), worker_(worker), num_workers_(num_workers) {}

  int rank() const override { return worker_ * local_.size() + local_.rank(); }
  int size() const override { return num_workers_ * local_.size(); }

  void all_reduce(float* data, std::size_t count, comm::ReduceOp op) override {
    all_reduce_t(data, count, op);
  }
  void all_reduce(double* data, std::size_t count, comm::ReduceOp op) override {
    all_reduce_t(data, count, op);
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    const int k = local_.size();
    if (root / k == worker_) local_.broadcast(data, bytes, root % k);
    if (cross_) cross_->broadcast(data, bytes, root / k);
    local_.broadcast(data, bytes, 0);
  }

  void all_gather(const void* data, std::size_t bytes, void* out) override {
    const std::size_t worker_bytes = bytes * static_cast<std::size_t>(local_.size());
    std::vector<char> mine(worker_bytes);
    local_.all_gather(data, bytes, mine.data());
    if (cross_) cross_->all_gather(mine.data(), worker_bytes, out);
    local_.broadcast(out, worker_bytes * static_cast<std::size_t>(num_workers_), 0);
  }

  void barrier() override {
    local_.barrier();
    if (cross_) cross_->barrier();
    local_.barrier();
  }

  void abort(const std::string& reason) override {
    local_.abort(reason);
    if (cross_) cross_->abort(reason);
  }

 private:
  template <typename T>
  void all_reduce_t(T* data, std::size_t count, comm::ReduceOp op) {
    const comm::ReduceOp partial = op == comm::ReduceOp::kMean ? comm::ReduceOp::kSum : op;
    local_.all_reduce(data, count, partial);
    if (cross_) cross_->all_reduce(data, count, partial);
    local_.broadcast(data, count * sizeof(T), 0);
    if (op == comm::ReduceOp::kMean) {
      const T n = static_cast<T>(size());
      for (std::size_t i = 0; i < count; ++i) data[i] /= n;
    }
  }

  comm::Communicator& local_;
  comm::Communicator* cross_;
  int worker_;
  int num_workers_;
};

}  // namespace lockstep::distribute
