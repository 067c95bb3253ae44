// Variable: a named, mutable tensor that training updates in place.
//
// A Variable is a handle, like a Python reference to a tf.Variable: copies
// share one value. Its value keeps one tensor id for the variable's whole
// life (assign writes into the same buffer), so a GradientTape can ask for
// gradients with respect to it. Reading a trainable variable while a tape is
// recording on this thread watches it automatically, as in TensorFlow.
//
// Thread-safety: reads from several threads are safe; assign while another
// thread reads is a data race (a strategy gives each replica its own copy).
//
// Mirrored variables (made by a strategy's scope) hold one copy per replica.
// On a replica thread (current_mirrored_copy() = r, autodiff/mirrored_copy.h)
// value(), id() and the assign family use copy r; elsewhere reads see copy 0
// and assign writes every copy, as tf.distribute's MirroredVariable in
// cross-replica context.
//
//   lockstep::Variable w(lockstep::random::normal({784, 10}), {.name = "dense/kernel"});
//   auto y = lockstep::matmul(x, w);       // a Variable converts to its value
//   w.assign_sub(grad * 0.01f);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

// How a strategy combines the copies of a mirrored variable that replicas
// assign separately (tf.VariableAggregation): kNone, the copies are kept
// identical by assigning the same value (weights under an optimizer);
// kMean, each replica assigns its own and after every replica step every
// copy becomes their mean, weighted by the replicas' examples
// (BatchNormalization's moving statistics; Keras makes them ON_READ / MEAN).
enum class VariableAggregation { kNone, kMean };

class Variable {
 public:
  struct Options {
    std::string name{};
    bool trainable = true;
    VariableAggregation aggregation = VariableAggregation::kNone;
  };

  // An undefined variable.
  Variable() = default;
  // Copies `initial_value` into the variable's own buffer.
  explicit Variable(const Tensor& initial_value) : Variable(initial_value, Options{}) {}
  Variable(const Tensor& initial_value, Options options);
  // A mirrored variable: copy r is `per_replica[r]` (its own buffer, which
  // the caller allocated on replica r's device). All copies must agree in
  // shape and dtype.
  static Variable mirrored(std::vector<Tensor> per_replica, Options options);

  bool is_mirrored() const;
  // 1 for a plain variable.
  int num_replicas() const;
  // How many times the calling replica's copy has been assigned (a change
  // counter; strategies use it to find updated non-trainable state).
  std::uint64_t version() const;
  // Copy r (r = 0 for a plain variable), never watched by tapes.
  const Tensor& replica_value(int replica) const;

  bool defined() const { return state_ != nullptr; }
  const std::string& name() const;
  bool trainable() const;
  void set_trainable(bool trainable);
  VariableAggregation aggregation() const;
  // Metadata reads never watch the variable.
  const Shape& shape() const;
  DType dtype() const;
  // The id of the value tensor: constant for the variable's life.
  std::uint64_t id() const;

  // The current value (watched by recording tapes if trainable).
  const Tensor& value() const;
  operator const Tensor&() const { return value(); }  // NOLINT: variables are used as tensors

  // In-place updates; `value` must have the variable's shape and dtype.
  // Never recorded on a tape.
  void assign(const Tensor& value);
  void assign_add(const Tensor& delta);
  void assign_sub(const Tensor& delta);

  friend bool operator==(const Variable& a, const Variable& b) { return a.state_ == b.state_; }

 private:
  friend class WeakVariable;
  struct State;
  void check_update(const Tensor& t, const char* op) const;
  // assign(combine(value, delta)) on the calling replica's copy, or on every
  // copy of a mirrored variable outside replicas.
  void update_each_copy(const Tensor& delta, const char* op,
                        Tensor (*combine)(const Tensor&, const Tensor&));
  std::shared_ptr<State> state_;
};

// A reference to a variable that does not keep it alive: a strategy's list
// of the variables it keeps in sync outlives the models that own them.
class WeakVariable {
 public:
  explicit WeakVariable(const Variable& v) : state_(v.state_) {}
  // The variable, or an undefined one once it is gone.
  Variable lock() const {
    Variable v;
    v.state_ = state_.lock();
    return v;
  }
  bool expired() const { return state_.expired(); }

 private:
  std::weak_ptr<Variable::State> state_;
};

}  // namespace lockstep

namespace lockstep {

// The one factory through which layers, optimizers and metrics create their
// variables, so that a strategy can intercept creation (mirrored variables)
// the way tf.variable_creator_scope does.
using VariableCreator = std::function<Variable(const Tensor& initial_value, Variable::Options)>;

// Creates a variable with the innermost VariableCreatorScope's creator on
// this thread, or a plain Variable when there is none.
Variable create_variable(const Tensor& initial_value, Variable::Options options);

// RAII, thread-local: variables created while alive go through `creator`.
// Nestable; not copyable or movable.
class VariableCreatorScope {
 public:
  explicit VariableCreatorScope(VariableCreator creator);
  ~VariableCreatorScope();
  VariableCreatorScope(const VariableCreatorScope&) = delete;
  VariableCreatorScope& operator=(const VariableCreatorScope&) = delete;
};

}  // namespace lockstep
