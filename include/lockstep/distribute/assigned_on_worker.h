// State a training step assigns rather than trains (BatchNormalization's
// moving statistics), on a worker of a ParameterServerStrategy job: after
// each step, the variables whose value changed go back to the parameter
// servers (the last writer wins, as in TensorFlow). Used by Model::fit's
// and the Estimator's worker functions (train/ps_fit.cc,
// estimator/estimator.cc).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "lockstep/autodiff/variable.h"
#include "lockstep/distribute/cluster_coordinator.h"

namespace lockstep::distribute {

class AssignedOnWorker {
 public:
  AssignedOnWorker() = default;
  explicit AssignedOnWorker(std::vector<Variable> vars) : vars_(std::move(vars)) {
    for (const Variable& v : vars_) versions_.push_back(v.version());
  }
  // Writes those assigned since the last call (or since construction).
  void write_changed(WorkerContext& ctx) {
    std::vector<Variable> changed;
    for (std::size_t k = 0; k < vars_.size(); ++k) {
      if (vars_[k].version() == versions_[k]) continue;
      changed.push_back(vars_[k]);
      versions_[k] = vars_[k].version();
    }
    if (!changed.empty()) ctx.write_variables(changed);
  }

 private:
  std::vector<Variable> vars_;
  std::vector<std::uint64_t> versions_;
};

}  // namespace lockstep::distribute
