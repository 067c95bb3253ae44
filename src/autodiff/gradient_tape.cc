// GradientTape: records ops on watched tensors and walks them backwards.
#include "lockstep/autodiff/gradient_tape.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "lockstep/tensor/ops.h"

namespace lockstep {
namespace {

// Tapes alive on this thread (for automatic watching of variables). Per
// thread: a tape records the ops of the thread that made it, so replica
// threads each record their own step.
thread_local std::vector<GradientTape*> t_tapes;

}  // namespace

GradientTape::GradientTape(Options options) : options_(options) {
  t_tapes.push_back(this);
  detail::push_recorder(this);
}

GradientTape::~GradientTape() {
  detail::pop_recorder(this);
  auto it = std::find(t_tapes.begin(), t_tapes.end(), this);
  if (it != t_tapes.end()) t_tapes.erase(it);
}

void GradientTape::notify_variable_read(const Variable& v) {
  for (GradientTape* tape : t_tapes) {
    if (tape->options_.watch_accessed_variables && tape->stopped_ == 0) tape->watch(v);
  }
}

void GradientTape::watch(const Tensor& t) {
  check_defined(t, "GradientTape.watch", "tensor");
  LOCKSTEP_CHECK(is_floating(t.dtype()),
                 "GradientTape.watch: only float32 and bfloat16 tensors can be watched, got dtype ",
                 t.dtype(), " (shape ", t.shape(), ")");
  watched_.insert(t.id());
}

void GradientTape::watch(const Variable& v) {
  LOCKSTEP_CHECK(v.defined(), "GradientTape.watch: the variable is undefined");
  // Read the value without notifying (that would recurse into watch).
  const std::uint64_t id = v.id();
  if (watched_.insert(id).second) watched_variables_.push_back(v);
}

bool GradientTape::wants(std::span<const Tensor> inputs) const {
  if (stopped_ > 0) return false;
  for (const Tensor& t : inputs) {
    if (is_floating(t.dtype()) && watched_.count(t.id())) return true;
  }
  return false;
}

void GradientTape::record(const char* op, std::span<const Tensor> inputs, const Tensor& output,
                          const std::shared_ptr<const detail::BackwardFn>& backward) {
  Node node{op, {}, {}, {}, output.id(), backward};
  node.input_ids.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    node.input_ids.push_back(t.id());
    node.input_watched.push_back(is_floating(t.dtype()) && watched_.count(t.id()) > 0);
    node.input_shapes.push_back(t.shape());
  }
  nodes_.push_back(std::move(node));
  watched_.insert(output.id());
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           UnconnectedGradients unconnected) {
  return gradient(target, sources, unconnected, nullptr);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target, const std::vector<Tensor>& sources,
                                           UnconnectedGradients unconnected,
                                           const GradientReadyFn& on_ready) {
  check_defined(target, "GradientTape.gradient", "target");
  LOCKSTEP_CHECK(!used_,
                 "GradientTape.gradient can only be called once on a non-persistent tape. "
                 "Hint: construct it with {.persistent = true}");
  LOCKSTEP_CHECK(is_floating(target.dtype()),
                 "GradientTape.gradient: the target must be float32 or bfloat16, got dtype ",
                 target.dtype());
  for (const Tensor& source : sources) check_defined(source, "GradientTape.gradient", "a source");
  detail::RecordingPause pause;  // computing gradients records nothing

  std::unordered_map<std::uint64_t, Tensor> grads;
  auto result_for = [&](const Tensor& source) {
    auto it = grads.find(source.id());
    if (it != grads.end()) return it->second;
    return unconnected == UnconnectedGradients::kZero ? zeros_like(source) : Tensor();
  };
  // With a listener: a source's gradient is final once the walk has passed
  // the first op (in recording order) that consumed it.
  std::vector<std::vector<std::size_t>> ready_after;  // node index -> sources
  std::vector<bool> announced(sources.size(), false);
  if (on_ready) {
    std::unordered_map<std::uint64_t, std::size_t> first_use;
    for (std::size_t k = 0; k < nodes_.size(); ++k) {
      for (std::uint64_t id : nodes_[k].input_ids) first_use.try_emplace(id, k);
    }
    ready_after.resize(nodes_.size());
    for (std::size_t i = 0; i < sources.size(); ++i) {
      auto it = first_use.find(sources[i].id());
      if (it != first_use.end()) ready_after[it->second].push_back(i);
    }
  }
  auto announce = [&](std::size_t i) {
    if (announced[i]) return;
    announced[i] = true;
    on_ready(i, result_for(sources[i]));
  };

  // Memory during the walk: an op's output gradient is complete when the
  // walk reaches the op (its consumers were recorded after it), so it is
  // dropped then unless it is a source's; and a non-persistent tape drops
  // each op's backward function — with the activations it holds — once it
  // has run. Peak memory is then the forward's, not forward plus every
  // gradient (MobileNetV2, issue #19).
  std::unordered_set<std::uint64_t> source_ids;
  for (const Tensor& source : sources) source_ids.insert(source.id());
  if (watched_.count(target.id())) grads.emplace(target.id(), ones_like(target));
  for (std::size_t k = nodes_.size(); k-- > 0;) {
    Node& node = nodes_[k];
    auto it = grads.find(node.output_id);
    if (it != grads.end()) {
      const Tensor grad_output = it->second;
      if (!source_ids.contains(node.output_id)) grads.erase(it);
      detail::Grads input_grads;
      {
        detail::NeedsInputGradScope needs(node.input_watched);
        input_grads = (*node.backward)(grad_output);
      }
      LOCKSTEP_CHECK_AS(InternalError, input_grads.size() == node.input_ids.size(), "gradient of '",
                        node.op, "' returned ", input_grads.size(), " gradients for ",
                        node.input_ids.size(), " inputs");
      for (std::size_t i = 0; i < input_grads.size(); ++i) {
        if (!node.input_watched[i] || !input_grads[i].defined()) continue;
        LOCKSTEP_CHECK_AS(InternalError, input_grads[i].shape() == node.input_shapes[i],
                          "gradient of '", node.op, "' for input ", i, " has shape ",
                          input_grads[i].shape(), ", expected ", node.input_shapes[i]);
        auto [slot, inserted] = grads.emplace(node.input_ids[i], input_grads[i]);
        if (!inserted) slot->second = add(slot->second, input_grads[i]);
      }
    } else if (grads.empty() && !on_ready) {
      break;  // nothing flows back any more
    }
    if (!options_.persistent) node.backward.reset();
    if (on_ready) {
      for (std::size_t i : ready_after[k]) announce(i);
    }
  }

  std::vector<Tensor> result;
  result.reserve(sources.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    result.push_back(result_for(sources[i]));
    if (on_ready) announce(i);  // sources no op consumed
  }
  if (!options_.persistent) {
    used_ = true;
    nodes_.clear();
    nodes_.shrink_to_fit();
  }
  return result;
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& sources,
                                           UnconnectedGradients unconnected) {
  return gradient(target, sources, unconnected, nullptr);
}

std::vector<Tensor> GradientTape::gradient(const Tensor& target,
                                           const std::vector<Variable>& sources,
                                           UnconnectedGradients unconnected,
                                           const GradientReadyFn& on_ready) {
  std::vector<Tensor> values;
  values.reserve(sources.size());
  {
    StopRecording stop(*this);  // reading the variables here is not a use
    for (const Variable& v : sources) {
      LOCKSTEP_CHECK(v.defined(), "GradientTape.gradient: a source variable is undefined");
      values.push_back(v.value());
    }
  }
  return gradient(target, values, unconnected, on_ready);
}

Tensor GradientTape::gradient(const Tensor& target, const Tensor& source,
                              UnconnectedGradients unconnected) {
  return gradient(target, std::vector<Tensor>{source}, unconnected)[0];
}

std::vector<Variable> GradientTape::watched_variables() const { return watched_variables_; }

void GradientTape::reset() {
  nodes_.clear();
  watched_.clear();
  watched_variables_.clear();
  used_ = false;
}

}  // namespace lockstep
