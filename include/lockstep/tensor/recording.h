// The seam between ops and gradient tapes.
//
// Ops live in the tensor layer and must not depend on autodiff, yet each op
// keeps its gradient rule beside its forward code. An op therefore asks
// `should_record(inputs)` — a thread-local check that costs a load when no
// tape is active — and, only if it is true, hands its backward function to
// `record`. GradientTape (autodiff layer) implements TapeRecorder and
// registers itself here while it is recording.
//
// Implementer-facing: users write GradientTape, not this.
#pragma once

#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep::detail {

// One gradient per op input (undefined where the input gets none), given the
// gradient of the loss with respect to the op's output.
using Grads = std::vector<Tensor>;
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

class TapeRecorder {
 public:
  virtual ~TapeRecorder() = default;
  // True if any of `inputs` is watched by this recorder.
  virtual bool wants(std::span<const Tensor> inputs) const = 0;
  virtual void record(const char* op, std::span<const Tensor> inputs, const Tensor& output,
                      const std::shared_ptr<const BackwardFn>& backward) = 0;
};

// Recorders active on this thread, innermost last. Used by GradientTape.
void push_recorder(TapeRecorder* recorder);
void pop_recorder(TapeRecorder* recorder);

// True when some active, unpaused recorder on this thread watches an input.
bool should_record(std::initializer_list<Tensor> inputs);
bool should_record(std::span<const Tensor> inputs);

// Offers the op to every active recorder that wants it.
void record(const char* op, std::initializer_list<Tensor> inputs, const Tensor& output,
            BackwardFn backward);
void record(const char* op, std::span<const Tensor> inputs, const Tensor& output,
            BackwardFn backward);

// While a tape runs an op's backward function: whether the op's input `i`
// (in the order the op recorded its inputs) gets a gradient from this walk.
// A rule may skip the work for an input that does not and return an
// undefined Tensor in its place — for a Dense layer over the model's input
// that is a whole GEMM (g·Wᵀ) per step. True outside a backward call.
bool needs_input_grad(std::size_t i);

// RAII, used by a tape around one backward call: `needed[i]` says whether
// input i gets a gradient. `needed` must outlive the scope. Nestable.
class NeedsInputGradScope {
 public:
  explicit NeedsInputGradScope(const std::vector<bool>& needed);
  ~NeedsInputGradScope();
  NeedsInputGradScope(const NeedsInputGradScope&) = delete;
  NeedsInputGradScope& operator=(const NeedsInputGradScope&) = delete;

 private:
  const std::vector<bool>* previous_;
};

// RAII: pauses all recording on this thread (gradient computation itself runs
// under it). Nestable. Not copyable or movable.
class RecordingPause {
 public:
  RecordingPause();
  ~RecordingPause();
  RecordingPause(const RecordingPause&) = delete;
  RecordingPause& operator=(const RecordingPause&) = delete;
};

}  // namespace lockstep::detail
