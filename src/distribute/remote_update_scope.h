// RemoteUpdateScope: while alive, optimizers on the calling thread hand their
// gradients to `aggregator` instead of updating here (a ParameterServerStrategy
// worker's functions: the updates run on the parameter servers). Thread-local
// and nestable, as the replica context it takes precedence over. Internal to
// distribute/ (replica_context.cc owns the thread's aggregator lookup).
#pragma once

#include "lockstep/optim/aggregation.h"

namespace lockstep::distribute {

class RemoteUpdateScope {
 public:
  explicit RemoteUpdateScope(GradientAggregator* aggregator);
  ~RemoteUpdateScope();
  RemoteUpdateScope(const RemoteUpdateScope&) = delete;
  RemoteUpdateScope& operator=(const RemoteUpdateScope&) = delete;

 private:
  GradientAggregator* previous_;
};

}  // namespace lockstep::distribute
