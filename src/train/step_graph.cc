// StepGraph: fit's step recorded once and replayed (step_graph.h).
#include "step_graph.h"

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
  graph_.reset();
  update_metrics_ = nullptr;
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
      state_ = State::kReady;
      return false;
    }
    case State::kReady: {
      if (random_fills_on_this_thread() != random_fills_)
        return turn_off(
            "the step draws random numbers (Dropout, augmentation layers: drawn on the host each "
            "step)");
      if (&current_device() != device_) return turn_off("the device changed between steps");
      if (!s.optimizer.stage_device_step(0, *device_))
        return turn_off(str_cat(s.optimizer.class_name(),
                                ": its step reads the host (loss scaling, gradient clipping) or "
                                "has no update kernel on ",
                                device_->name()));
      feed(b);
      DeviceKernels& kernels = *device_->kernels();
      std::vector<HostCheck> checks;
      // The step's host code runs while it is recorded, and counts the
      // optimizer's step: put back when the recording is not kept (the
      // caller then runs the step eagerly, which counts it).
      const std::int64_t count = s.optimizer.iterations();
      const auto not_kept = [&](std::string why) {
        s.optimizer.set_recording(false);
        s.optimizer.set_iterations(count);
        return turn_off(std::move(why));
      };
      try {
        s.optimizer.set_recording(true);
        const RecordingStepScope recording(checks);
        graph_ = kernels.capture(*device_, [&] { update_metrics_ = s.body(x_, y_); });
      } catch (const DeviceError& e) {
        // Nothing recorded ran, and nothing of this step.
        return not_kept(str_cat("recording the step stopped: ", e.what()));
      } catch (...) {
        s.optimizer.set_recording(false);
        s.optimizer.set_iterations(count);
        throw;
      }
      if (!adopt_checks(std::move(checks)))
        return not_kept("an op checks on the host a value the step computes");
      s.optimizer.set_recording(false);
      try {
        run_checks(b);  // a bad label: the error the eager step gives, before it counts
      } catch (...) {
        s.optimizer.set_iterations(count);
        throw;
      }
      // The recording ran nothing: its first replay is this step (whose
      // host code, the optimizer's count included, ran while recording).
      log(LogLevel::kInfo,
          str_cat("fit: the step is recorded as a graph on ", device_->name(),
                  " and replayed for each batch of ", b.x.at(0).dim(0), " examples\n"));
      graph_->replay();
      ++replays_;
      state_ = State::kRecorded;
      update_metrics_();
      return true;
    }
    case State::kRecorded: {
      if (!same_shapes(b)) return false;  // a partial batch: eagerly
      if (&current_device() != device_) return false;
      if (!s.optimizer.stage_device_step(0, *device_))
        return turn_off(str_cat(s.optimizer.class_name(),
                                ": its settings changed (loss scaling "
                                "or gradient clipping)"));
      run_checks(b);
      feed(b);
      graph_->replay();
      ++replays_;
      s.optimizer.count_replayed_step(0);
      update_metrics_();
      return true;
    }
  }
  return false;
}

}  // namespace lockstep::detail
