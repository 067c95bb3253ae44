// StepGraph: fit's step recorded once and replayed (step_graph.h).
#include "step_graph.h"

#include <cmath>

#include "lockstep/core/log.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/random.h"

namespace lockstep::detail {

bool StepGraph::turn_off(std::string why) {
  state_ = State::kOff;
  reason_ = std::move(why);
  x_.clear();
  y_.clear();
  checks_.clear();
  stages_.clear();
  graph_.reset();
  update_metrics_ = nullptr;
  if (says_why_)
    log(LogLevel::kInfo,
        str_cat("fit: the step runs eagerly, not recorded as a graph: ", reason_, "\n"));
  return false;
}

bool StepGraph::same_shapes(const Batch& b) const {
  if (b.x.size() != x_.size() || b.y.size() != y_.size()) return false;
  for (std::size_t i = 0; i < x_.size(); ++i) {
    if (b.x[i].shape() != x_[i].shape() || b.x[i].dtype() != x_[i].dtype()) return false;
  }
  for (std::size_t i = 0; i < y_.size(); ++i) {
    if (b.y[i].shape() != y_[i].shape() || b.y[i].dtype() != y_[i].dtype()) return false;
  }
  return true;
}

bool StepGraph::adopt_checks(std::vector<HostCheck> checks) {
  for (HostCheck& c : checks) {
    Check mine{.shape = c.shape, .check = std::move(c.check)};
    bool found = false;
    for (std::size_t i = 0; i < x_.size() + y_.size() && !found; ++i) {
      const Tensor& t = i < x_.size() ? x_[i] : y_[i - x_.size()];
      if (device_pointer(t) == c.input && t.numel() == c.shape.numel()) {
        mine.of_y = i >= x_.size();
        mine.index = mine.of_y ? i - x_.size() : i;
        found = true;
      }
    }
    if (!found) return false;
    checks_.push_back(std::move(mine));
  }
  return true;
}

void StepGraph::run_checks(const Batch& b) const {
  for (const Check& c : checks_) {
    const Tensor& input = c.of_y ? b.y.at(c.index) : b.x.at(c.index);
    c.check(reshape(input.cpu(), c.shape.to_vector()));
  }
}

void StepGraph::feed(const Batch& b) {
  if (x_.empty() && y_.empty()) {
    for (const Tensor& t : b.x) x_.push_back(Tensor::empty_on(*device_, t.shape(), t.dtype()));
    for (const Tensor& t : b.y) y_.push_back(Tensor::empty_on(*device_, t.shape(), t.dtype()));
  }
  for (std::size_t i = 0; i < x_.size(); ++i) copy_into(x_[i], b.x[i]);
  for (std::size_t i = 0; i < y_.size(); ++i) copy_into(y_[i], b.y[i]);
}

void StepGraph::replay(const Step& s) {
  for (const ReplayStage& stage : stages_) stage();
  graph_->replay();
  ++replays_;
  s.optimizer.finish_replayed_step(s.replica);  // counts it, unless loss scaling skipped it
  update_metrics_();
}

bool StepGraph::step(const Step& s, const Batch& b) {
  switch (state_) {
    case State::kOff:
      return false;
    case State::kFirst: {
      // The first step eagerly: it builds what a recording must find made.
      Device& device = current_device();
      if (device.kernels() == nullptr || !device.kernels()->can_capture()) {
        state_ = State::kOff;  // a CPU or the fake accelerator: nothing to say
        return false;
      }
      if (s.run_eagerly) return turn_off("compile's run_eagerly is set");
      if (!s.own_train_step)
        return turn_off("the model is a subclass (its train_step may need the host each step)");
      device_ = &device;
      random_fills_ = random_fills_on_this_thread();
      eager_count_ = s.optimizer.iterations_of(s.replica);
      state_ = State::kReady;
      return false;
    }
    case State::kReady: {
      if (random_fills_on_this_thread() != random_fills_)
        return turn_off(
            "the step draws random numbers of a fixed stream (random::uniform with its stream "
            "given: each replay would draw the same; a layer's own counter, "
            "random::uniform_next, is recorded)");
      if (&current_device() != device_) return turn_off("the device changed between steps");
      // The optimizer makes its slots in its first update: an eager step
      // that loss scaling skipped made none, so this one runs eagerly too.
      if (s.optimizer.iterations_of(s.replica) == eager_count_) return false;
      if (!s.optimizer.stage_device_step(s.replica, *device_))
        return turn_off(
            str_cat(s.optimizer.class_name(), ": its update has no kernel on ", device_->name()));
      feed(b);
      DeviceKernels& kernels = *device_->kernels();
      std::vector<HostCheck> checks;
      std::vector<ReplayStage> stages;
      // The step's host code runs while it is recorded; the optimizer then
      // counts nothing and moves no loss scale (each replay's
      // finish_replayed_step does).
      struct Recording {
        Recording(OptimizerImpl& o, int r) : optimizer(o), replica(r) {
          optimizer.set_recording(replica, true);
        }
        ~Recording() { optimizer.set_recording(replica, false); }
        Recording(const Recording&) = delete;
        Recording& operator=(const Recording&) = delete;
        OptimizerImpl& optimizer;
        int replica;
      };
      std::vector<std::uint64_t> versions;
      if (s.synced != nullptr)
        for (const Variable& v : *s.synced) versions.push_back(v.version());
      try {
        const Recording recording(s.optimizer, s.replica);
        const RecordingStepScope recording_checks(checks, stages);
        graph_ = kernels.capture(*device_, [&] { update_metrics_ = s.body(x_, y_); });
      } catch (const DeviceError& e) {
        // Nothing recorded ran, and nothing of this step.
        return turn_off(str_cat("recording the step stopped: ", e.what()));
      }
      stages_ = std::move(stages);
      for (std::size_t i = 0; i < versions.size(); ++i) {
        const Variable& v = (*s.synced)[i];
        if (v.version() != versions[i])
          return turn_off(str_cat("the step changes '", v.name(),
                                  "', which the replicas average on the host after each step (a "
                                  "replay would change it unseen)"));
      }
      if (!adopt_checks(std::move(checks)))
        return turn_off("an op checks on the host a value the step computes");
      run_checks(b);  // a bad label: the error the eager step gives, before anything ran
      // The recording ran nothing: its first replay is this step.
      log(LogLevel::kInfo,
          str_cat("fit: the step is recorded as a graph on ", device_->name(),
                  " and replayed for each batch of ", b.x.at(0).dim(0), " examples (it holds ",
                  std::round(static_cast<double>(graph_->bytes()) / 1e5) / 10,
                  " MB of device memory)\n"));
      replay(s);
      state_ = State::kRecorded;
      return true;
    }
    case State::kRecorded: {
      if (!same_shapes(b)) return false;  // a partial batch: eagerly
      if (&current_device() != device_) return false;
      if (!s.optimizer.stage_device_step(s.replica, *device_))
        return turn_off(
            str_cat(s.optimizer.class_name(), ": its update has no kernel on ", device_->name()));
      run_checks(b);
      feed(b);
      replay(s);
      return true;
    }
  }
  return false;
}

}  // namespace lockstep::detail
