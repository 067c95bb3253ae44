// The communicator of one replica of a MultiWorkerMirroredStrategy with
// several replicas per worker (internal): reduce among the worker's replica
// threads, all-reduce across workers on the worker's first replica (the
// leader), broadcast back inside the worker. Ranks are replicas in sync:
// worker * local replicas + local replica.
//
// all_reduce_async sums among the replica threads at once (they meet there,
// in the order backward produces buckets), posts the cross-worker stage to
// the worker's communication thread and returns; the broadcast back inside
// the worker happens when the handle is waited for. Waiting for one handle
// first finishes every earlier one, and every blocking collective finishes
// them all, so the replicas broadcast in one order whatever order they wait in.
#pragma once

#include <deque>
#include <memory>
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
    finish_pending();
    all_reduce_t(data, count, op);
  }
  void all_reduce(double* data, std::size_t count, comm::ReduceOp op) override {
    finish_pending();
    all_reduce_t(data, count, op);
  }

  comm::WorkHandle all_reduce_async(float* data, std::size_t count, comm::ReduceOp op) override {
    return post(data, count, op, false);
  }
  // The local sum in float32; only the cross-worker stage is compressed.
  comm::WorkHandle all_reduce_bf16_async(float* data, std::size_t count,
                                         comm::ReduceOp op) override {
    return post(data, count, op, true);
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    finish_pending();
    const int k = local_.size();
    if (root / k == worker_) local_.broadcast(data, bytes, root % k);
    if (cross_) cross_->broadcast(data, bytes, root / k);
    local_.broadcast(data, bytes, 0);
  }

  void all_gather(const void* data, std::size_t bytes, void* out) override {
    finish_pending();
    const std::size_t worker_bytes = bytes * static_cast<std::size_t>(local_.size());
    std::vector<char> mine(worker_bytes);
    local_.all_gather(data, bytes, mine.data());
    if (cross_) cross_->all_gather(mine.data(), worker_bytes, out);
    local_.broadcast(out, worker_bytes * static_cast<std::size_t>(num_workers_), 0);
  }

  void barrier() override {
    finish_pending();
    local_.barrier();
    if (cross_) cross_->barrier();
    local_.barrier();
  }

  void abort(const std::string& reason) override {
    local_.abort(reason);
    if (cross_) cross_->abort(reason);
  }

 private:
  // An all-reduce whose cross-worker stage may still be in flight.
  struct Pending {
    float* data = nullptr;
    std::size_t count = 0;
    comm::ReduceOp op = comm::ReduceOp::kSum;
    comm::WorkHandle cross;  // the leader's
    bool done = false;
  };

  class Work final : public comm::Work {
   public:
    Work(HierarchicalCommunicator* owner, std::shared_ptr<Pending> p)
        : owner_(owner), p_(std::move(p)) {}
    ~Work() override {
      try {
        wait();
      } catch (...) {
        // A dropped handle does not throw; the next collective reports it.
      }
    }
    // True once waited for: the broadcast inside the worker is a collective
    // of the replica threads, made in wait().
    bool test() override { return p_->done; }
    void wait() override {
      while (!p_->done) owner_->finish_front();
    }

   private:
    HierarchicalCommunicator* owner_;
    std::shared_ptr<Pending> p_;
  };

  comm::WorkHandle post(float* data, std::size_t count, comm::ReduceOp op, bool bf16) {
    auto p = std::make_shared<Pending>();
    p->data = data;
    p->count = count;
    p->op = op;
    const comm::ReduceOp partial = op == comm::ReduceOp::kMean ? comm::ReduceOp::kSum : op;
    local_.all_reduce(data, count, partial);
    if (cross_)
      p->cross = bf16 ? cross_->all_reduce_bf16_async(data, count, partial)
                      : cross_->all_reduce_async(data, count, partial);
    pending_.push_back(p);
    return std::make_unique<Work>(this, std::move(p));
  }

  void finish_front() {
    std::shared_ptr<Pending> p = pending_.front();
    pending_.pop_front();
    p->done = true;  // even if it throws: it will not be retried
    if (p->cross) p->cross->wait();
    local_.broadcast(p->data, p->count * sizeof(float), 0);
    if (p->op == comm::ReduceOp::kMean) {
      const auto n = static_cast<float>(size());
      for (std::size_t i = 0; i < p->count; ++i) p->data[i] /= n;
    }
  }

  void finish_pending() {
    while (!pending_.empty()) finish_front();
  }

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
  std::deque<std::shared_ptr<Pending>> pending_;  // posting order
};

}  // namespace lockstep::distribute
