// Thread-local registry of active tape recorders (see recording.h).
#include "lockstep/tensor/recording.h"

#include <algorithm>

namespace lockstep::detail {
namespace {

struct RecordingState {
  std::vector<TapeRecorder*> recorders;
  int paused = 0;
};

// Per thread, as the tapes it serves (autodiff/gradient_tape.cc).
thread_local RecordingState t_state;
thread_local const std::vector<bool>* t_needs_input_grad = nullptr;

bool active() { return !t_state.recorders.empty() && t_state.paused == 0; }

}  // namespace

void push_recorder(TapeRecorder* recorder) { t_state.recorders.push_back(recorder); }

void pop_recorder(TapeRecorder* recorder) {
  auto& v = t_state.recorders;
  auto it = std::find(v.rbegin(), v.rend(), recorder);
  if (it != v.rend()) v.erase(std::next(it).base());
}

bool should_record(std::span<const Tensor> inputs) {
  if (!active()) return false;
  for (TapeRecorder* r : t_state.recorders) {
    if (r->wants(inputs)) return true;
  }
  return false;
}

bool should_record(std::initializer_list<Tensor> inputs) {
  if (!active()) return false;  // fast path: no tape on this thread
  return should_record(std::span<const Tensor>(inputs.begin(), inputs.size()));
}

void record(const char* op, std::span<const Tensor> inputs, const Tensor& output,
            BackwardFn backward) {
  if (!active()) return;
  auto shared = std::make_shared<const BackwardFn>(std::move(backward));
  for (TapeRecorder* r : t_state.recorders) {
    if (r->wants(inputs)) r->record(op, inputs, output, shared);
  }
}

void record(const char* op, std::initializer_list<Tensor> inputs, const Tensor& output,
            BackwardFn backward) {
  record(op, std::span<const Tensor>(inputs.begin(), inputs.size()), output, std::move(backward));
}

bool needs_input_grad(std::size_t i) {
  const std::vector<bool>* needed = t_needs_input_grad;
  return needed == nullptr || i >= needed->size() || (*needed)[i];
}

NeedsInputGradScope::NeedsInputGradScope(const std::vector<bool>& needed)
    : previous_(t_needs_input_grad) {
  t_needs_input_grad = &needed;
}
NeedsInputGradScope::~NeedsInputGradScope() { t_needs_input_grad = previous_; }

RecordingPause::RecordingPause() { ++t_state.paused; }
RecordingPause::~RecordingPause() { --t_state.paused; }

}  // namespace lockstep::detail
