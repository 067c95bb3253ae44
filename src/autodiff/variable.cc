// Variable: shared state, in-place updates, tape notification on read.
#include "lockstep/autodiff/variable.h"

#include <cstring>
#include <vector>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"

namespace lockstep {

struct Variable::State {
  Tensor value;
  std::string name;
  bool trainable;
};

Variable::Variable(const Tensor& initial_value, Options options) {
  check_defined(initial_value, "Variable", "initial value");
  detail::RecordingPause pause;  // creating a variable is not part of any computation
  state_ = std::make_shared<State>(
      State{initial_value.copy(), std::move(options.name), options.trainable});
}

const std::string& Variable::name() const {
  LOCKSTEP_CHECK(defined(), "Variable::name: the variable is undefined");
  return state_->name;
}

bool Variable::trainable() const {
  LOCKSTEP_CHECK(defined(), "Variable::trainable: the variable is undefined");
  return state_->trainable;
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
  return state_->value.id();
}

const Tensor& Variable::value() const {
  LOCKSTEP_CHECK(defined(), "Variable: reading an undefined variable");
  if (state_->trainable) GradientTape::notify_variable_read(*this);
  return state_->value;
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
  if (value.raw_data() != state_->value.raw_data()) {
    std::memmove(state_->value.raw_data(), value.raw_data(), value.nbytes());
  }
}

void Variable::assign_add(const Tensor& delta) {
  check_update(delta, "assign_add");
  detail::RecordingPause pause;
  assign(add(state_->value, delta));
}

void Variable::assign_sub(const Tensor& delta) {
  check_update(delta, "assign_sub");
  detail::RecordingPause pause;
  assign(sub(state_->value, delta));
}

}  // namespace lockstep

namespace lockstep {
namespace {
thread_local std::vector<VariableCreator> t_creators;
}

Variable create_variable(const Tensor& initial_value, Variable::Options options) {
  if (t_creators.empty()) return Variable(initial_value, std::move(options));
  return t_creators.back()(initial_value, std::move(options));
}

VariableCreatorScope::VariableCreatorScope(VariableCreator creator) {
  t_creators.push_back(std::move(creator));
}

VariableCreatorScope::~VariableCreatorScope() { t_creators.pop_back(); }

}  // namespace lockstep
