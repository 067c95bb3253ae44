// fit's training step recorded once and replayed on a GPU (issue #35).
//
// On a device whose kernels record (DeviceKernels::can_capture: a GPU),
// fit runs its first step eagerly (it builds the weights, the optimizer's
// slots, the libraries' workspaces; under loss scaling, until a step is
// not skipped), then copies the next batch into fixed
// device tensors and records the step on them — forward, loss, backward,
// the optimizer's update — as a graph (a CUDA graph); each later batch of
// the same shapes is copied into those tensors and the graph replayed,
// without the host's work of issuing each kernel. After each replay the
// metrics are updated on the host from the recording's outputs (which
// every replay rewrites) and the optimizer's step count advanced; the
// numbers that change from step to step (the learning rate, Adam's bias
// correction) are staged in device memory before it
// (OptimizerImpl::stage_device_step), so a replay is step for step the
// eager step, bit for bit. A batch of other shapes (the last, partial
// batch) runs eagerly. Under loss scaling (mixed_float16's
// LossScaleOptimizer) the scale is staged too, the gradients' check for an
// inf or a NaN stays on the device — the recorded update kernels change
// nothing when it fails — and is read after each replay to move the scale
// and count the step, as the eager step does.
//
// An op's check on the host of the step's input (a label in range) is run
// before each replay on the batch's host copy (detail::HostCheck). Random
// numbers drawn by a layer's own counter (random::uniform_next: Dropout,
// recurrent dropout, RandomFlip, RandomRotation) are drawn on the device
// from a stream staged before each replay, which advances the layer's
// counter as the eager step does (a detail::ReplayStage): a replay draws
// the eager step's numbers; RandomRotation's matrices are worked out on the
// host before each replay from the stream the eager step would draw. An Embedding's ids are
// range-checked and grouped for its gradient on the host before each replay likewise (a HostCheck
// that writes detail::GatherOnDevice). What a recording cannot hold keeps the step eager, said once
// on the log: a draw of a fixed stream (random::uniform with its stream given, as a custom layer
// may make), an optimizer without an update kernel, a value read back or a tensor made in host
// memory inside the step (the recording refuses it by name). Gradient clipping is recorded (on a
// device its norms are device ops). Only Model's own train_step (a subclass's may do anything),
// not under compile's run_eagerly, with one replica (no strategy, OneDeviceStrategy, a
// MirroredStrategy of one device) or with the replicas of one worker that sum on their GPUs
// (logical GPUs of one GPU in the device, distinct GPUs with NCCL): each replica thread records
// its own step on its own stream and replays it under the strategy's run, the host's part of
// the gradients' sum done between the recordings' parts (distribute/gradient_reduction.h). The
// replicas make every choice together: fit's loop replays only batches split evenly, and each
// replica's choices follow from what is the same on every replica (the model, the shapes of its
// share, its step count). A step that changes a variable the strategy averages on the host after it
// (a BatchNormalization's moving statistics under several replicas) runs eagerly: a replay changes
// it where the host does not see it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "batch_sources.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/train/model.h"

namespace lockstep::detail {

class StepGraph {
 public:
  // What the graph needs of the model being fit (fit's loops give it).
  struct Step {
    OptimizerImpl& optimizer;
    int replica = 0;              // the local replica it runs (0 without a strategy)
    bool run_eagerly = false;     // compile's
    bool own_train_step = false;  // Model's own (not a subclass's)
    // Model's train_step on x and y before its metrics; returns what
    // updates them (Model::Loops::train_step_body).
    std::function<std::function<void()>(const std::vector<Tensor>&, const std::vector<Tensor>&)>
        body;
    // The variables the strategy averages over the replicas on the host
    // after each step when the step changed them (null: none).
    const std::vector<Variable>* synced = nullptr;
  };
  // `says_why`: this graph logs why the step runs eagerly (one replica's
  // of several says it for all).
  explicit StepGraph(bool says_why = true) : says_why_(says_why) {}
  // Batch `b`'s step, replayed or recorded here, on the calling thread's
  // device (a replica's, under a strategy of one replica); false when the
  // caller runs it eagerly (and must: this step was not run). The metrics
  // are updated either way; the caller reads them.
  bool step(const Step& s, const Batch& b);
  // Replays so far (the recording's own run counts as one).
  std::int64_t replays() const { return replays_; }
  // Why the step runs eagerly, once it does for good ("" otherwise).
  const std::string& eager_reason() const { return reason_; }

 private:
  enum class State { kFirst, kReady, kRecorded, kOff };
  // A check an op handed over while the step was recorded, on one of the
  // batch's tensors.
  struct Check {
    bool of_y = false;
    std::size_t index = 0;
    Shape shape{};
    std::function<void(const Tensor& host)> check;
  };
  bool same_shapes(const Batch& b) const;
  // Takes the recorded ops' host checks, each on a tensor fed to the step;
  // false when one is on anything else.
  bool adopt_checks(std::vector<HostCheck> checks);
  void run_checks(const Batch& b) const;
  void feed(const Batch& b);
  // Replays the recording for the batch fed, then what the host does after
  // a step: the optimizer's count and loss scale, the metrics.
  void replay(const Step& s);
  bool turn_off(std::string why);

  State state_ = State::kFirst;
  Device* device_ = nullptr;
  std::uint64_t random_fills_ = 0;  // before the first step
  std::int64_t eager_count_ = 0;    // the optimizer's step count before it
  std::vector<Tensor> x_, y_;       // the recording's input
  std::vector<Check> checks_;
  std::unique_ptr<DeviceGraph> graph_;
  // The recording's host work before each replay; after graph_, freed
  // before it.
  std::vector<ReplayStage> stages_;
  std::function<void()> update_metrics_;
  std::int64_t replays_ = 0;
  std::string reason_;
  bool says_why_ = true;
};

}  // namespace lockstep::detail
