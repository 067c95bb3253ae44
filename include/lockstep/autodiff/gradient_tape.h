// GradientTape: reverse-mode automatic differentiation, as tf.GradientTape.
//
// While a tape is alive it records, on the thread that created it, every op
// whose inputs it watches: tensors passed to watch(), trainable variables
// read in its lifetime, and everything computed from them. gradient() walks
// the record backwards, applying each op's gradient rule (kept beside the op
// in the tensor layer).
//
//   lockstep::GradientTape tape;
//   auto loss = lockstep::mean(lockstep::square(lockstep::matmul(x, w) - y));
//   auto grads = tape.gradient(loss, {w});   // w: a Variable
//
// Ownership: not copyable or movable (it registers its own address); create
// and destroy it on one thread. A non-persistent tape answers gradient()
// once and then frees what it recorded; a persistent one answers many times.
// Higher-order gradients are not supported: gradient() records nothing.
#pragma once

#include <functional>
#include <memory>
#include <unordered_set>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/tensor/recording.h"

namespace lockstep {

// RAII, thread-local: while alive, no tape on this thread records anything
// (inference, metric updates, optimizer steps). Nestable; not copyable.
class NoGradGuard {
 public:
  NoGradGuard() = default;
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  detail::RecordingPause pause_;
};

// What gradient() returns for a source the target does not depend on.
enum class UnconnectedGradients { kNone, kZero };

// Called by gradient() for source `index` as soon as its gradient is final
// (no op left to walk contributes to it), while backward goes on: how a
// strategy starts summing early gradients across replicas during backward
// (distribute's GradientReduction). Called exactly once per source, on the tape's
// thread, with the value gradient() returns for it.
using GradientReadyFn = std::function<void(std::size_t index, const Tensor& grad)>;

class GradientTape : private detail::TapeRecorder {
 public:
  struct Options {
    bool persistent = false;
    bool watch_accessed_variables = true;
  };

  GradientTape() : GradientTape(Options{}) {}
  explicit GradientTape(Options options);
  ~GradientTape() override;
  GradientTape(const GradientTape&) = delete;
  GradientTape& operator=(const GradientTape&) = delete;

  // Starts tracing `t` (and everything computed from it). Only float32 and
  // bfloat16 tensors can be watched.
  void watch(const Tensor& t);
  void watch(const Variable& v);

  // d(sum of target) / d(source) for each source; an undefined Tensor (or
  // zeros, with kZero) for a source the target does not depend on.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               UnconnectedGradients unconnected = UnconnectedGradients::kNone);
  // The same, announcing each source's gradient to `on_ready` when final.
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Variable>& sources,
                               UnconnectedGradients unconnected, const GradientReadyFn& on_ready);
  std::vector<Tensor> gradient(const Tensor& target, const std::vector<Tensor>& sources,
                               UnconnectedGradients unconnected, const GradientReadyFn& on_ready);
  Tensor gradient(const Tensor& target, const Tensor& source,
                  UnconnectedGradients unconnected = UnconnectedGradients::kNone);

  // Trainable variables read while recording, in first-read order.
  std::vector<Variable> watched_variables() const;

  // Forgets everything recorded and watched; the tape keeps recording.
  void reset();

  // Number of ops recorded so far (for tests and debugging).
  std::size_t num_recorded_ops() const { return nodes_.size(); }

  // RAII: while alive, this tape records nothing (other tapes still do).
  class StopRecording {
   public:
    explicit StopRecording(GradientTape& tape) : tape_(tape) { ++tape_.stopped_; }
    ~StopRecording() { --tape_.stopped_; }
    StopRecording(const StopRecording&) = delete;
    StopRecording& operator=(const StopRecording&) = delete;

   private:
    GradientTape& tape_;
  };
  [[nodiscard]] StopRecording stop_recording() { return StopRecording(*this); }

  // Implementer-facing: called when a variable is read on this thread.
  static void notify_variable_read(const Variable& v);

 private:
  struct Node {
    const char* op{};
    std::vector<std::uint64_t> input_ids{};
    std::vector<bool> input_watched{};
    std::vector<Shape> input_shapes{};
    std::uint64_t output_id{};
    std::shared_ptr<const detail::BackwardFn> backward{};
  };

  bool wants(std::span<const Tensor> inputs) const override;
  void record(const char* op, std::span<const Tensor> inputs, const Tensor& output,
              const std::shared_ptr<const detail::BackwardFn>& backward) override;

  Options options_;
  int stopped_ = 0;
  bool used_ = false;
  std::unordered_set<std::uint64_t> watched_;
  std::vector<Variable> watched_variables_;
  std::vector<Node> nodes_;
};

}  // namespace lockstep
