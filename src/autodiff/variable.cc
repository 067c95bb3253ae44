// Variable: shared state, in-place updates, tape notification on read.
#include "lockstep/autodiff/variable.h"

#include <cstring>
#include <deque>
#include <vector>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"

namespace lockstep {

struct Variable::State {
  Tensor value;                  // a plain variable's value; copy 0 of a mirrored one
  std::vector<Tensor> replicas;  // a mirrored variable's copies (empty when plain)
  std::string name;
  bool trainable;
  VariableAggregation aggregation;
  std::vector<std::uint64_t> versions;  // assignments so far, per copy

  std::size_t current_index() const {
    const int r = current_mirrored_copy();
    return replicas.empty() || r < 0 ? 0 : static_cast<std::size_t>(r);
  }

  // The copy the calling thread works on.
  Tensor& current() {
    if (replicas.empty()) return value;
    const int r = current_mirrored_copy();
    if (r < 0) return replicas[0];
    LOCKSTEP_CHECK(r < static_cast<int>(replicas.size()), "variable '", name, "' is mirrored on ",
                   replicas.size(), " replicas, but replica ", r,
                   " read it (was it created under another strategy's scope?)");
    return replicas[static_cast<std::size_t>(r)];
  }
};

Variable::Variable(const Tensor& initial_value, Options options) {
  check_defined(initial_value, "Variable", "initial value");
  detail::RecordingPause pause;  // creating a variable is not part of any computation
  state_ = std::make_shared<State>(State{initial_value.copy(),
                                         {},
                                         std::move(options.name),
                                         options.trainable,
                                         options.aggregation,
                                         {0}});
}

Variable Variable::mirrored(std::vector<Tensor> per_replica, Options options) {
  LOCKSTEP_CHECK(!per_replica.empty(), "Variable::mirrored: no replica values");
  for (std::size_t r = 0; r < per_replica.size(); ++r) {
    check_defined(per_replica[r], "Variable::mirrored", "replica value");
    LOCKSTEP_CHECK_AS(ShapeError,
                      per_replica[r].shape() == per_replica[0].shape() &&
                          per_replica[r].dtype() == per_replica[0].dtype(),
                      "Variable::mirrored: replica ", r, " has ", per_replica[r].dtype(), " ",
                      per_replica[r].shape(), " but replica 0 has ", per_replica[0].dtype(), " ",
                      per_replica[0].shape());
  }
  Variable v;
  Tensor first = per_replica[0];
  const std::size_t n = per_replica.size();
  v.state_ = std::make_shared<State>(State{first, std::move(per_replica), std::move(options.name),
                                           options.trainable, options.aggregation,
                                           std::vector<std::uint64_t>(n, 0)});
  return v;
}

std::uint64_t Variable::version() const {
  LOCKSTEP_CHECK(defined(), "Variable::version: the variable is undefined");
  return state_->versions[state_->current_index()];
}

bool Variable::is_mirrored() const { return defined() && !state_->replicas.empty(); }

int Variable::num_replicas() const {
  LOCKSTEP_CHECK(defined(), "Variable::num_replicas: the variable is undefined");
  return state_->replicas.empty() ? 1 : static_cast<int>(state_->replicas.size());
}

const Tensor& Variable::replica_value(int replica) const {
  LOCKSTEP_CHECK(defined(), "Variable::replica_value: the variable is undefined");
  if (state_->replicas.empty()) {
    LOCKSTEP_CHECK_AS(IndexError, replica == 0, "Variable::replica_value: replica ", replica,
                      " of the plain variable '", state_->name, "'");
    return state_->value;
  }
  LOCKSTEP_CHECK_AS(IndexError, replica >= 0 && replica < num_replicas(),
                    "Variable::replica_value: replica ", replica, " of ", num_replicas());
  return state_->replicas[static_cast<std::size_t>(replica)];
}

const std::string& Variable::name() const {
  LOCKSTEP_CHECK(defined(), "Variable::name: the variable is undefined");
  return state_->name;
}

bool Variable::trainable() const {
  LOCKSTEP_CHECK(defined(), "Variable::trainable: the variable is undefined");
  return state_->trainable;
}

VariableAggregation Variable::aggregation() const {
  LOCKSTEP_CHECK(defined(), "Variable::aggregation: the variable is undefined");
  return state_->aggregation;
}

void Variable::set_trainable(bool trainable) {
  LOCKSTEP_CHECK(defined(), "Variable::set_trainable: the variable is undefined");
  state_->trainable = trainable;
}

const Shape& Variable::shape() const {
  LOCKSTEP_CHECK(defined(), "Variable::shape: the variable is undefined");
  return state_->value.shape();
}

DType Variable::dtype() const {
  LOCKSTEP_CHECK(defined(), "Variable::dtype: the variable is undefined");
  return state_->value.dtype();
}

std::uint64_t Variable::id() const {
  LOCKSTEP_CHECK(defined(), "Variable::id: the variable is undefined");
  return state_->current().id();
}

const Tensor& Variable::value() const {
  LOCKSTEP_CHECK(defined(), "Variable: reading an undefined variable");
  const Tensor& v = state_->current();
  if (state_->trainable) GradientTape::notify_variable_read(*this);
  return v;
}

void Variable::check_update(const Tensor& t, const char* op) const {
  LOCKSTEP_CHECK(defined(), op, ": the variable is undefined");
  check_defined(t, op, "value");
  LOCKSTEP_CHECK_AS(ShapeError, t.shape() == state_->value.shape(), op, " on variable '",
                    state_->name, "': expected shape ", state_->value.shape(), ", got ", t.shape());
  LOCKSTEP_CHECK(t.dtype() == state_->value.dtype(), op, " on variable '", state_->name,
                 "': expected dtype ", state_->value.dtype(), ", got ", t.dtype());
}

void Variable::assign(const Tensor& value) {
  check_update(value, "assign");
  auto write = [&](Tensor& dst) { detail::copy_into(dst, value); };
  if (!state_->replicas.empty() && current_mirrored_copy() < 0) {
    for (Tensor& copy : state_->replicas) write(copy);  // cross-replica: every copy
    for (auto& v : state_->versions) ++v;
    return;
  }
  write(state_->current());
  ++state_->versions[state_->current_index()];
}

void Variable::update_each_copy(const Tensor& delta, const char* op,
                                Tensor (*combine)(const Tensor&, const Tensor&)) {
  check_update(delta, op);
  detail::RecordingPause pause;
  if (!state_->replicas.empty() && current_mirrored_copy() < 0) {
    // Cross-replica: every copy, each from its own current value.
    for (int r = 0; r < num_replicas(); ++r) {
      MirroredCopyScope on(r);
      assign(combine(state_->current(), delta));
    }
    return;
  }
  assign(combine(state_->current(), delta));
}

void Variable::assign_add(const Tensor& delta) {
  update_each_copy(delta, "assign_add", [](const Tensor& a, const Tensor& b) { return add(a, b); });
}

void Variable::assign_sub(const Tensor& delta) {
  update_each_copy(delta, "assign_sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); });
}

}  // namespace lockstep

namespace lockstep {
namespace {
// The creator scopes open on this thread, innermost last (a strategy's
// scope makes variables mirrored). Per thread, as tf.distribute's scopes:
// another thread may build another model under another strategy meanwhile.
// A deque, because a creator may open a scope of its own while it runs
// (the Estimator's recording creator enters the strategy's scope): pushing
// onto a deque keeps the running creator where it is, where a vector's
// reallocation would free it under its own call.
thread_local std::deque<VariableCreator> t_creators;
}  // namespace

Variable create_variable(const Tensor& initial_value, Variable::Options options) {
  if (t_creators.empty()) return Variable(initial_value, std::move(options));
  return t_creators.back()(initial_value, std::move(options));
}

VariableCreatorScope::VariableCreatorScope(VariableCreator creator) {
  t_creators.push_back(std::move(creator));
}

VariableCreatorScope::~VariableCreatorScope() { t_creators.pop_back(); }

}  // namespace lockstep
