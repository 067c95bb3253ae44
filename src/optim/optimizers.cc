// Optimizers: clipping and weight decay in the base class, each rule as one
// fused loop over a variable's buffer (Keras 3's formulas, in float32 with
// float64 scalars).
#include "lockstep/optim/optimizers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/core/simd.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/parallel.h"
#include "optim/loss_scale.h"

namespace lockstep {

namespace {
// Work per element of an update, in the units of parallel_for (a
// few loads, stores and a square root): splits updates above ~4k elements.
constexpr std::int64_t kUpdateCostPerElement = 8;
constexpr std::size_t kMaxSlots = 4;  // the most any rule keeps (RMSprop: 3)
using detail::kLossScaleKey;
using detail::kLossScaleStepsKey;
}  // namespace

OptimizerImpl::OptimizerImpl(std::string name, LearningRate learning_rate, ClipOptions clip,
                             double weight_decay)
    : name_(std::move(name)),
      learning_rate_(std::move(learning_rate)),
      clip_(clip),
      weight_decay_(weight_decay) {
  LOCKSTEP_CHECK(clip.clipnorm >= 0 && clip.clipvalue >= 0 && clip.global_clipnorm >= 0, name_,
                 ": clipping thresholds must be >= 0");
  LOCKSTEP_CHECK(!(clip.clipnorm > 0 && clip.global_clipnorm > 0), name_,
                 ": set at most one of clipnorm and global_clipnorm");
}

std::int64_t OptimizerImpl::iterations() const {
  std::lock_guard lk(replicas_mu_);
  return replicas_.front().iterations;
}

std::int64_t OptimizerImpl::iterations_of(int replica) const {
  std::lock_guard lk(replicas_mu_);
  const auto r = static_cast<std::size_t>(replica);
  return r < replicas_.size() ? replicas_[r].iterations : replicas_.front().iterations;
}

void OptimizerImpl::set_iterations(std::int64_t iterations) {
  std::lock_guard lk(replicas_mu_);
  for (ReplicaState& rs : replicas_) rs.iterations = iterations;
}

OptimizerImpl::ReplicaState& OptimizerImpl::replica_state(int replica) {
  std::lock_guard lk(replicas_mu_);
  while (static_cast<int>(replicas_.size()) <= replica) {
    replicas_.emplace_back();
    replicas_.back().iterations = replicas_.front().iterations;
    replicas_.back().loss_scale = replicas_.front().loss_scale;
    replicas_.back().finite_steps = replicas_.front().finite_steps;
  }
  return replicas_[static_cast<std::size_t>(replica)];
}

OptimizerImpl::VarSlots& OptimizerImpl::slots_for(ReplicaState& rs, int replica,
                                                  const Variable& v) {
  auto [it, inserted] = rs.var_slots.try_emplace(v.id());
  if (inserted) {
    if (rs.recording) {
      // Made inside a recording, a slot would be made again (its initial
      // value filled in) by every replay.
      rs.var_slots.erase(it);
      throw DeviceError(
          detail::str_cat(name_, ": a recorded step would make the slots of variable '", v.name(),
                          "' (its first update): an eager step makes them"));
    }
    const std::vector<Tensor>* restored = nullptr;
    {
      std::lock_guard lk(replicas_mu_);
      auto r = restored_.find(v.id());
      if (r != restored_.end()) restored = &r->second;
    }
    for (int i = 0; i < num_slots(); ++i) {
      // On a replica thread this makes the replica's own slot, on its device.
      Tensor initial = restored ? (*restored)[static_cast<std::size_t>(i)].copy()
                                : Tensor::full(v.shape(), slot_initial_value(i));
      Variable slot = create_variable(
          initial, {.name = name_ + "/" + v.name() + "_" + slot_name(i), .trainable = false});
      it->second.slots.push_back(slot);
      // Device memory when the slot is on a GPU: only update kernels use it.
      it->second.buffers.push_back(static_cast<float*>(detail::device_pointer(slot.value())));
      if (replica == 0) slots_.push_back(slot);
    }
  }
  return it->second;
}

OptimizerImpl::VarSlots& OptimizerImpl::shared_slots_for(ReplicaState& rs, const Variable& v) {
  auto it = rs.var_slots.find(v.id());
  if (it != rs.var_slots.end()) return it->second;
  VarSlots shared;
  {
    std::lock_guard lk(shared_slots_mu_);
    MirroredCopyScope as_replica_0(0);  // the key every replica agrees on
    shared = slots_for(shared_slots_, 0, v);
  }
  return rs.var_slots.emplace(v.id(), std::move(shared)).first->second;
}

std::vector<std::pair<std::string, Tensor>> OptimizerImpl::slot_values(
    const std::vector<Variable>& vars) const {
  std::lock_guard lk(replicas_mu_);
  const ReplicaState& rs = replicas_.front();
  std::vector<std::pair<std::string, Tensor>> out;
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const Variable& v = vars[k];
    const std::string prefix = std::to_string(k) + "/";
    auto it = rs.var_slots.find(v.id());
    if (it == rs.var_slots.end()) {
      // Restored but not created yet: what was restored is the state.
      auto r = restored_.find(v.id());
      if (r == restored_.end()) continue;
      for (int i = 0; i < num_slots(); ++i)
        out.emplace_back(prefix + slot_name(i), r->second[static_cast<std::size_t>(i)]);
      continue;
    }
    for (int i = 0; i < num_slots(); ++i)
      out.emplace_back(prefix + slot_name(i),
                       it->second.slots[static_cast<std::size_t>(i)].replica_value(0));
  }
  if (loss_scaling_) {
    out.emplace_back(kLossScaleKey, Tensor::from_vector<float>({rs.loss_scale}, Shape{}));
    out.emplace_back(kLossScaleStepsKey,
                     Tensor::from_vector<std::int64_t>({rs.finite_steps}, Shape{}));
  }
  return out;
}

void OptimizerImpl::restore_slot_values(const std::vector<Variable>& vars,
                                        const std::map<std::string, Tensor>& values) {
  std::unordered_map<std::uint64_t, std::vector<Tensor>> restored;
  std::size_t used = 0;
  // Loss scaling's state (saved by slot_values when it is on).
  std::optional<float> scale;
  std::optional<std::int64_t> finite_steps;
  {
    auto s = values.find(kLossScaleKey);
    auto c = values.find(kLossScaleStepsKey);
    if (s != values.end() || c != values.end()) {
      LOCKSTEP_CHECK(loss_scaling_, name_, ": the checkpoint holds a loss scale, but this ",
                     "optimizer does not scale its loss: wrap it in a LossScaleOptimizer");
      LOCKSTEP_CHECK(s != values.end() && c != values.end() && s->second.numel() == 1 &&
                         c->second.numel() == 1 && is_integral(c->second.dtype()),
                     name_, ": the checkpoint's loss scale state is incomplete or malformed");
      scale = s->second.to(DType::kFloat32).item<float>();
      finite_steps = c->second.to(DType::kInt64).item<std::int64_t>();
      LOCKSTEP_CHECK(std::isfinite(*scale) && *scale > 0 && *finite_steps >= 0, name_,
                     ": the checkpoint's loss scale ", *scale, " (after ", *finite_steps,
                     " finite steps) is not a scale");
      used += 2;
    }
  }
  for (std::size_t k = 0; k < vars.size(); ++k) {
    const Variable& v = vars[k];
    std::vector<Tensor> slots;
    for (int i = 0; i < num_slots(); ++i) {
      const std::string key = std::to_string(k) + "/" + slot_name(i);
      auto it = values.find(key);
      if (it == values.end()) break;
      LOCKSTEP_CHECK_AS(ShapeError, it->second.shape() == v.shape(), name_, ": slot '",
                        slot_name(i), "' of variable ", k, " ('", v.name(), "') has shape ",
                        it->second.shape(), " but the variable has shape ", v.shape());
      slots.push_back(it->second.to(DType::kFloat32));
    }
    if (slots.empty()) continue;
    LOCKSTEP_CHECK(static_cast<int>(slots.size()) == num_slots(), name_, ": variable ", k, " ('",
                   v.name(), "') has ", slots.size(), " of its ", num_slots(),
                   " slots in the checkpoint");
    used += slots.size();
    // A mirrored variable has one id per copy, and each replica finds its
    // slots by its own copy's id.
    for (int r = 0; r < std::max(1, v.num_replicas()); ++r) {
      MirroredCopyScope on(v.is_mirrored() ? r : current_mirrored_copy());
      restored[v.id()] = slots;
    }
  }
  LOCKSTEP_CHECK(used == values.size(), name_, ": the checkpoint holds ", values.size(),
                 " optimizer slots, of which ", used, " match this optimizer (", num_slots(),
                 " per variable, ", vars.size(), " variables): another optimizer or model");
  std::lock_guard lk(replicas_mu_);
  for (ReplicaState& rs : replicas_) {
    if (scale) {
      rs.loss_scale = *scale;
      rs.finite_steps = *finite_steps;
    }
    for (auto& [id, var_slots] : rs.var_slots) {
      auto r = restored.find(id);
      if (r == restored.end()) continue;
      for (std::size_t i = 0; i < var_slots.slots.size(); ++i) {
        detail::copy_into(var_slots.slots[i].value(), r->second[i]);
      }
    }
  }
  for (auto& [id, slots] : restored) restored_[id] = std::move(slots);
}

std::string OptimizerImpl::config_json() const {
  std::ostringstream out;
  out << "{\"name\": \"" << name_ << "\", \"learning_rate\": " << learning_rate()
      << ", \"weight_decay\": " << weight_decay_ << ", \"clipnorm\": " << clip_.clipnorm
      << ", \"clipvalue\": " << clip_.clipvalue
      << ", \"global_clipnorm\": " << clip_.global_clipnorm << "}";
  return out.str();
}

void OptimizerImpl::check_gradients(const std::vector<Tensor>& grads,
                                    const std::vector<Variable>& vars) const {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    LOCKSTEP_CHECK(vars[i].defined(), name_, ".apply_gradients: variable ", i, " is undefined");
    LOCKSTEP_CHECK_AS(ShapeError, grads[i].shape() == vars[i].shape(), name_,
                      ".apply_gradients: gradient ", grads[i].shape(), " does not match variable '",
                      vars[i].name(), "' of shape ", vars[i].shape());
    LOCKSTEP_CHECK(vars[i].dtype() == DType::kFloat32, name_, ": variable '", vars[i].name(),
                   "' has dtype ", vars[i].dtype(), "; only float32 variables can be trained");
  }
}

// Clipping, as Keras: value, then per-tensor norm, or the global norm.
namespace {

// On an accelerator: g · c / max(√squares, c), tf.clip_by_norm's form, with
// `squares` the squared norm on the device — exactly g when the norm is at
// most c, and nothing read on the host (a recorded step holds it).
Tensor clipped_by_norm(const Tensor& g, const Tensor& squares, double c) {
  const Tensor limit = Tensor::scalar(static_cast<float>(c));  // made on the device
  return mul(g, div(limit, maximum(sqrt(squares), limit)));
}

}  // namespace

void OptimizerImpl::clip_gradients(std::vector<Tensor>& grads) const {
  if (clip_.clipvalue > 0) {
    const float v = static_cast<float>(clip_.clipvalue);
    for (Tensor& g : grads) {
      if (g.defined()) g = clip(g, -v, v);
    }
  }
  // Gradients the host cannot read (an accelerator's): the norms are device
  // ops, in float32 (on the host: double).
  const bool on_device = std::any_of(grads.begin(), grads.end(), [](const Tensor& g) {
    return g.defined() && !g.device().host_accessible();
  });
  if (on_device && (clip_.clipnorm > 0 || clip_.global_clipnorm > 0)) {
    if (clip_.clipnorm > 0) {
      for (Tensor& g : grads) {
        if (g.defined()) g = clipped_by_norm(g, sum(square(g)), clip_.clipnorm);
      }
    }
    if (clip_.global_clipnorm > 0) {
      Tensor squares;
      for (const Tensor& g : grads) {
        if (!g.defined()) continue;
        const Tensor part = sum(square(g));
        squares = squares.defined() ? add(squares, part) : part;
      }
      for (Tensor& g : grads) {
        if (g.defined()) g = clipped_by_norm(g, squares, clip_.global_clipnorm);
      }
    }
    return;
  }
  auto norm = [](const Tensor& g) {
    double s = 0;
    const float* p = g.data<float>();
    for (std::int64_t i = 0; i < g.numel(); ++i) s += static_cast<double>(p[i]) * p[i];
    return s;
  };
  if (clip_.clipnorm > 0) {
    for (Tensor& g : grads) {
      if (!g.defined()) continue;
      const double n = std::sqrt(norm(g));
      if (n > clip_.clipnorm) g = mul(g, Tensor::scalar(static_cast<float>(clip_.clipnorm / n)));
    }
  }
  if (clip_.global_clipnorm > 0) {
    double total = 0;
    for (const Tensor& g : grads) {
      if (g.defined()) total += norm(g);
    }
    const double n = std::sqrt(total);
    if (n > clip_.global_clipnorm) {
      const Tensor scale = Tensor::scalar(static_cast<float>(clip_.global_clipnorm / n));
      for (Tensor& g : grads) {
        if (g.defined()) g = mul(g, scale);
      }
    }
  }
}

void OptimizerImpl::apply_gradients(const std::vector<Tensor>& grads_in,
                                    const std::vector<Variable>& vars, ApplyOptions options) {
  LOCKSTEP_CHECK(grads_in.size() == vars.size(), name_, ".apply_gradients: got ", grads_in.size(),
                 " gradients for ", vars.size(), " variables");
  NoGradGuard no_grad;
  check_gradients(grads_in, vars);
  std::vector<Tensor> grads = grads_in;
  GradientAggregator* aggregator = current_gradient_aggregator();
  const int replica = std::max(0, current_mirrored_copy());
  // Every local replica's state is made when the first of them gets here,
  // from replica 0's step count before anyone updates (a replica made later
  // would copy a count another replica has already advanced).
  if (aggregator) replica_state(aggregator->num_local_replicas() - 1);
  ReplicaState& rs = replica_state(replica);
  if (current_mirrored_copy() < 0) {
    for (const Variable& v : vars)
      LOCKSTEP_CHECK(!v.defined() || !v.is_mirrored(), name_, ".apply_gradients: variable '",
                     v.name(), "' is mirrored; update it inside strategy.run (on every replica)");
  }
  if (aggregator && !options.skip_gradients_aggregation)
    grads = aggregator->sum_gradients(std::move(grads), vars);
  if (loss_scaling_ && !unscale_gradients(grads, rs)) return;  // skipped: not finite
  clip_gradients(grads);
  if (aggregator && aggregator->apply_elsewhere(grads, vars, *this)) {
    ++rs.iterations;
    return;
  }
  const double lr = learning_rate_.at(rs.iterations);
  const std::int64_t step = rs.iterations + 1;  // 1-based, for bias correction
  if (!vars.empty() && vars[0].defined() && !vars[0].value().device().host_accessible()) {
    apply_on_device(grads, vars, rs, replica, lr, step);
    if (!rs.recording) ++rs.iterations;  // a replay's: finish_replayed_step
    return;
  }
  // Every rule is elementwise, so the variables are laid end to end and the
  // whole update is one parallel region over the calling thread's intra-op
  // threads, each thread taking one contiguous range (which may span
  // variables). Each element's arithmetic is the same however it is split
  // (this file is compiled without FP contraction, see src/CMakeLists.txt),
  // so results do not depend on the thread count, nor on where a replica's
  // share of a shared update starts. Under a strategy each replica thread
  // has one intra-op thread and runs it alone.
  std::vector<Variable> updated;
  std::vector<Tensor> updated_grads;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    updated.push_back(vars[i]);
    updated_grads.push_back(grads[i]);
  }
  const bool shared = aggregator && aggregator->shares_update(updated);
  struct Item {
    float* var;
    const float* g;
    const std::vector<float*>* slots;
  };
  LOCKSTEP_CHECK(num_slots() <= static_cast<int>(kMaxSlots), name_, ": ", num_slots(),
                 " slots per variable; an update rule may keep at most ", kMaxSlots);
  std::vector<Item> items;
  std::vector<UpdateSpan> spans;
  items.reserve(updated.size());
  spans.reserve(updated.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < updated.size(); ++i) {
    const Tensor& value = updated[i].value();
    VarSlots& slots =
        shared ? shared_slots_for(rs, updated[i]) : slots_for(rs, replica, updated[i]);
    items.push_back(
        {static_cast<float*>(value.raw_data()), updated_grads[i].data<float>(), &slots.buffers});
    spans.push_back({total, value.numel()});
    total += value.numel();
  }
  const float decay = static_cast<float>(1.0 - weight_decay_ * lr);
  // Updates elements [begin, end) of the concatenation in this replica's copy.
  auto update_range = [&](std::int64_t begin, std::int64_t end) {
    float* slot_ptrs[kMaxSlots];
    for (std::size_t k = 0; k < items.size(); ++k) {
      const Item& item = items[k];
      const UpdateSpan& span = spans[k];
      const std::int64_t lo = std::max(begin, span.begin);
      const std::int64_t hi = std::min(end, span.begin + span.size);
      if (lo >= hi) continue;
      const std::int64_t off = lo - span.begin, n = hi - lo;
      float* var = item.var + off;
      if (weight_decay_ > 0) {  // decoupled: var -= var · wd · lr
        for (std::int64_t j = 0; j < n; ++j) var[j] *= decay;
      }
      for (std::size_t s = 0; s < item.slots->size(); ++s) slot_ptrs[s] = (*item.slots)[s] + off;
      update(var, item.g + off, n, slot_ptrs, lr, step);
    }
  };
  auto parallel_update = [&](std::int64_t begin, std::int64_t end) {
    parallel_for(end - begin, kUpdateCostPerElement,
                 [&](std::int64_t b, std::int64_t e) { update_range(begin + b, begin + e); });
  };
  if (aggregator) {
    aggregator->run_update(updated, spans, total, parallel_update);
  } else {
    parallel_update(0, total);
  }
  ++rs.iterations;
}

bool OptimizerImpl::device_update(double, std::int64_t, detail::DeviceUpdate&) const {
  return false;
}

bool OptimizerImpl::stage_device_step(int replica, Device& device) {
  ReplicaState& rs = replica_state(replica);
  const double lr = learning_rate_.at(rs.iterations);
  detail::DeviceUpdate u;
  if (!device_update(lr, rs.iterations + 1, u)) return false;
  // The same floats apply_on_device passes as arguments, and scale_loss
  // multiplies by.
  const float decay = weight_decay_ > 0 ? static_cast<float>(1.0 - weight_decay_ * lr) : 1.0f;
  const auto stage = [&device](Tensor& staged, const Tensor& numbers) {
    if (!staged.defined() || &staged.device() != &device) {
      staged = numbers.copy_to(device);
    } else {
      detail::copy_into(staged, numbers);
    }
  };
  stage(rs.step_numbers, Tensor::from_vector(std::vector<float>{u.lr, u.alpha, decay}));
  if (loss_scaling_) stage(rs.device_scale, Tensor::scalar(rs.loss_scale));
  return true;
}

void OptimizerImpl::set_recording(int replica, bool recording) {
  ReplicaState& rs = replica_state(replica);
  if (recording) rs.recorded_finite = Tensor();
  rs.recording = recording;
}

bool OptimizerImpl::finish_replayed_step(int replica) {
  ReplicaState& rs = replica_state(replica);
  if (loss_scaling_) {
    // No check: the step had no gradient.
    const bool finite =
        !rs.recorded_finite.defined() || std::isfinite(rs.recorded_finite.item<float>());
    move_loss_scale(rs, finite);
    if (!finite) return false;  // the update kernels changed nothing
  }
  ++rs.iterations;
  return true;
}

void OptimizerImpl::apply_on_device(const std::vector<Tensor>& grads,
                                    const std::vector<Variable>& vars, ReplicaState& rs,
                                    int replica, double lr, std::int64_t step) {
  // Each replica updates its own copy on its device (no sharded update: the
  // copies live in separate memories), one kernel per variable.
  detail::DeviceUpdate u;
  LOCKSTEP_CHECK_AS(DeviceError, device_update(lr, step, u), name_,
                    ": this optimizer has no update kernel on ", vars[0].value().device().name(),
                    " yet (SGD, SGD with momentum, Adam, AdamW, RMSprop and Adagrad have)");
  if (weight_decay_ > 0) u.decay = static_cast<float>(1.0 - weight_decay_ * lr);
  Device& device = vars[0].value().device();
  if (rs.recording) {
    LOCKSTEP_CHECK_AS(DeviceError, rs.step_numbers.defined(), name_,
                      ": a step recorded without its numbers staged (stage_device_step)");
    u.step_numbers = static_cast<const float*>(detail::device_pointer(rs.step_numbers));
    if (loss_scaling_ && rs.recorded_finite.defined())
      u.finite = static_cast<const float*>(detail::device_pointer(rs.recorded_finite));
  }
  const detail::OnDevice on;  // the fake accelerator's: its update is the CPU's loop
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Tensor& value = vars[i].value();
    LOCKSTEP_CHECK_AS(DeviceError, &value.device() == &device, name_, ": variable '",
                      vars[i].name(), "' is on ", value.device().name(), ", the first on ",
                      device.name(), "; one replica's variables live on one device");
    VarSlots& slots = slots_for(rs, replica, vars[i]);
    const Tensor g = detail::on_current_device(grads[i]);
    auto* var = static_cast<float*>(detail::device_pointer(value));
    const auto* gp = static_cast<const float*>(detail::device_pointer(g));
    if (on.kernels()) {
      on.kernels()->apply_update(u, var, gp, slots.buffers, value.numel());
    } else {
      float* slot_ptrs[kMaxSlots];
      for (std::size_t s = 0; s < slots.buffers.size(); ++s) slot_ptrs[s] = slots.buffers[s];
      if (weight_decay_ > 0) {
        for (std::int64_t j = 0; j < value.numel(); ++j) var[j] *= u.decay;
      }
      update(var, gp, value.numel(), slot_ptrs, lr, step);
    }
  }
}

namespace optimizers {
namespace {

// The update rules as plain loops over restrict pointers, one per rule, so
// each compiles to one vectorised pass (lockstep/core/simd.h picks the
// vector width).
LOCKSTEP_VECTOR_CLONES
void sgd_kernel(float* __restrict var, const float* __restrict g, std::int64_t n, float lr) {
  for (std::int64_t i = 0; i < n; ++i) var[i] -= lr * g[i];
}

LOCKSTEP_VECTOR_CLONES
void momentum_kernel(float* __restrict var, const float* __restrict g, float* __restrict m,
                     std::int64_t n, float lr, float mom, bool nesterov) {
  if (nesterov) {
    for (std::int64_t i = 0; i < n; ++i) {
      m[i] = mom * m[i] - lr * g[i];
      var[i] += mom * m[i] - lr * g[i];
    }
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      m[i] = mom * m[i] - lr * g[i];
      var[i] += m[i];
    }
  }
}

LOCKSTEP_VECTOR_CLONES
void adam_kernel(float* __restrict var, const float* __restrict g, float* __restrict m,
                 float* __restrict v, std::int64_t n, float alpha, float c1, float c2, float eps) {
  for (std::int64_t i = 0; i < n; ++i) {
    m[i] += (g[i] - m[i]) * c1;
    v[i] += (g[i] * g[i] - v[i]) * c2;
    var[i] -= alpha * m[i] / (std::sqrt(v[i]) + eps);
  }
}

LOCKSTEP_VECTOR_CLONES
void adagrad_kernel(float* __restrict var, const float* __restrict g, float* __restrict acc,
                    std::int64_t n, float lr, float eps) {
  for (std::int64_t i = 0; i < n; ++i) {
    acc[i] += g[i] * g[i];
    var[i] -= lr * g[i] / std::sqrt(acc[i] + eps);
  }
}

// TensorFlow's ApplyFtrlV2 (multiply_linear_by_lr = false) in float32; `p`
// is −learning_rate_power, `l2x2` is 2·(l2 + beta/(2·lr)), `shrink2` is
// 2·l2_shrinkage. The square root for TF's special case p = 0.5.
LOCKSTEP_VECTOR_CLONES
void ftrl_kernel(float* __restrict var, const float* __restrict g, float* __restrict acc,
                 float* __restrict linear, std::int64_t n, float lr, float p, float l1, float l2x2,
                 float shrink2) {
  const bool root = p == 0.5f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float w = var[i], grad = g[i];
    const float grad_with_shrinkage = grad + shrink2 * w;
    const float old_accum = acc[i], new_accum = old_accum + grad * grad;
    const float new_power = root ? std::sqrt(new_accum) : std::pow(new_accum, p);
    const float old_power = root ? std::sqrt(old_accum) : std::pow(old_accum, p);
    const float z = linear[i] + (grad_with_shrinkage - (new_power - old_power) / lr * w);
    const float quadratic = new_power / lr + l2x2;
    linear[i] = z;
    var[i] = std::abs(z) > l1 ? (std::copysign(l1, z) - z) / quadratic : 0.0f;
    acc[i] = new_accum;
  }
}

class SGDImpl : public OptimizerImpl {
 public:
  explicit SGDImpl(SGDOptions o)
      : OptimizerImpl("SGD", o.learning_rate, o.clip, o.weight_decay), o_(o) {
    LOCKSTEP_CHECK(o.momentum >= 0 && o.momentum <= 1, "SGD: momentum must be in [0, 1], got ",
                   o.momentum);
  }

 protected:
  int num_slots() const override { return o_.momentum > 0 ? 1 : 0; }
  const char* slot_name(int) const override { return "momentum"; }
  OptimizerConfig own_config() const override {
    return {{"momentum", o_.momentum}, {"nesterov", o_.nesterov}};
  }
  bool device_update(double lr, std::int64_t, detail::DeviceUpdate& u) const override {
    u.rule =
        o_.momentum > 0 ? detail::DeviceUpdate::Rule::kMomentum : detail::DeviceUpdate::Rule::kSgd;
    u.lr = static_cast<float>(lr);
    u.momentum = static_cast<float>(o_.momentum);
    u.nesterov = o_.nesterov;
    return true;
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    const float l = static_cast<float>(lr), mom = static_cast<float>(o_.momentum);
    if (o_.momentum <= 0) {
      sgd_kernel(var, g, n, l);
    } else {
      momentum_kernel(var, g, slots[0], n, l, mom, o_.nesterov);
    }
  }

 private:
  SGDOptions o_;
};

class AdamImpl : public OptimizerImpl {
 public:
  AdamImpl(const char* name, LearningRate lr, double b1, double b2, double eps, double wd,
           ClipOptions clip)
      : OptimizerImpl(name, std::move(lr), clip, wd), b1_(b1), b2_(b2), eps_(eps) {}

 protected:
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "momentum" : "velocity"; }
  OptimizerConfig own_config() const override {
    return {{"beta_1", b1_}, {"beta_2", b2_}, {"epsilon", eps_}, {"amsgrad", false}};
  }
  bool device_update(double lr, std::int64_t step, detail::DeviceUpdate& u) const override {
    const double t = static_cast<double>(step);
    u.rule = detail::DeviceUpdate::Rule::kAdam;
    u.alpha = static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2_, t)) / (1.0 - std::pow(b1_, t)));
    u.c1 = static_cast<float>(1.0 - b1_);
    u.c2 = static_cast<float>(1.0 - b2_);
    u.epsilon = static_cast<float>(eps_);
    return true;
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t step) override {
    // Keras 3: alpha = lr·sqrt(1 − β2^t)/(1 − β1^t); m += (g − m)(1 − β1); v += (g² − v)(1 − β2);
    // var −= alpha·m/(sqrt(v) + ε).
    const double t = static_cast<double>(step);
    const float alpha =
        static_cast<float>(lr * std::sqrt(1.0 - std::pow(b2_, t)) / (1.0 - std::pow(b1_, t)));
    const float c1 = static_cast<float>(1.0 - b1_), c2 = static_cast<float>(1.0 - b2_),
                eps = static_cast<float>(eps_);
    adam_kernel(var, g, slots[0], slots[1], n, alpha, c1, c2, eps);
  }

 private:
  double b1_, b2_, eps_;
};

class RMSpropImpl : public OptimizerImpl {
 public:
  explicit RMSpropImpl(RMSpropOptions o)
      : OptimizerImpl("RMSprop", o.learning_rate, o.clip, o.weight_decay), o_(o) {}

 protected:
  int num_slots() const override { return 1 + (o_.momentum > 0) + o_.centered; }
  const char* slot_name(int i) const override {
    if (i == 0) return "velocity";
    return (i == 1 && o_.momentum > 0) ? "momentum" : "average_gradient";
  }
  OptimizerConfig own_config() const override {
    return {{"rho", o_.rho},
            {"momentum", o_.momentum},
            {"epsilon", o_.epsilon},
            {"centered", o_.centered}};
  }
  bool keras_slots_by_variable() const override { return false; }
  bool device_update(double lr, std::int64_t, detail::DeviceUpdate& u) const override {
    u.rule = detail::DeviceUpdate::Rule::kRMSprop;
    u.lr = static_cast<float>(lr);
    u.rho = static_cast<float>(o_.rho);
    u.epsilon = static_cast<float>(o_.epsilon);
    u.momentum = static_cast<float>(o_.momentum);
    u.centered = o_.centered;
    return true;
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    const float rho = static_cast<float>(o_.rho), l = static_cast<float>(lr),
                eps = static_cast<float>(o_.epsilon);
    const float mom = static_cast<float>(o_.momentum);
    float* vel = slots[0];
    float* m = o_.momentum > 0 ? slots[1] : nullptr;
    float* avg = o_.centered ? slots[o_.momentum > 0 ? 2 : 1] : nullptr;
    for (std::int64_t i = 0; i < n; ++i) {
      vel[i] = rho * vel[i] + (1 - rho) * g[i] * g[i];
      float denominator = vel[i] + eps;
      if (avg) {
        avg[i] = rho * avg[i] + (1 - rho) * g[i];
        denominator = vel[i] - avg[i] * avg[i] + eps;
      }
      const float increment = l * g[i] / std::sqrt(denominator);
      if (m) {
        m[i] = mom * m[i] + increment;
        var[i] -= m[i];
      } else {
        var[i] -= increment;
      }
    }
  }

 private:
  RMSpropOptions o_;
};

class AdagradImpl : public OptimizerImpl {
 public:
  explicit AdagradImpl(AdagradOptions o)
      : OptimizerImpl("Adagrad", o.learning_rate, o.clip, o.weight_decay), o_(o) {}

 protected:
  int num_slots() const override { return 1; }
  const char* slot_name(int) const override { return "accumulator"; }
  OptimizerConfig own_config() const override {
    return {{"initial_accumulator_value", o_.initial_accumulator_value}, {"epsilon", o_.epsilon}};
  }
  float slot_initial_value(int) const override {
    return static_cast<float>(o_.initial_accumulator_value);
  }
  bool device_update(double lr, std::int64_t, detail::DeviceUpdate& u) const override {
    u.rule = detail::DeviceUpdate::Rule::kAdagrad;
    u.lr = static_cast<float>(lr);
    u.epsilon = static_cast<float>(o_.epsilon);
    return true;
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    const float l = static_cast<float>(lr), eps = static_cast<float>(o_.epsilon);
    adagrad_kernel(var, g, slots[0], n, l, eps);
  }

 private:
  AdagradOptions o_;
};

class FtrlImpl : public OptimizerImpl {
 public:
  explicit FtrlImpl(FtrlOptions o)
      : OptimizerImpl("Ftrl", o.learning_rate, o.clip, o.weight_decay), o_(o) {
    // Keras's checks, with its words.
    LOCKSTEP_CHECK(o.initial_accumulator_value >= 0,
                   "Ftrl: initial_accumulator_value needs to be positive or zero, got ",
                   o.initial_accumulator_value);
    LOCKSTEP_CHECK(o.learning_rate_power <= 0,
                   "Ftrl: learning_rate_power needs to be negative or zero, got ",
                   o.learning_rate_power);
    LOCKSTEP_CHECK(o.l1_regularization_strength >= 0 && o.l2_regularization_strength >= 0 &&
                       o.l2_shrinkage_regularization_strength >= 0,
                   "Ftrl: l1_regularization_strength (", o.l1_regularization_strength,
                   "), l2_regularization_strength (", o.l2_regularization_strength,
                   ") and l2_shrinkage_regularization_strength (",
                   o.l2_shrinkage_regularization_strength, ") need to be positive or zero");
  }

 protected:
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "accumulator" : "linear"; }
  float slot_initial_value(int i) const override {
    return i == 0 ? static_cast<float>(o_.initial_accumulator_value) : 0.0f;
  }
  OptimizerConfig own_config() const override {
    return {{"learning_rate_power", o_.learning_rate_power},
            {"initial_accumulator_value", o_.initial_accumulator_value},
            {"l1_regularization_strength", o_.l1_regularization_strength},
            {"l2_regularization_strength", o_.l2_regularization_strength},
            {"l2_shrinkage_regularization_strength", o_.l2_shrinkage_regularization_strength},
            {"beta", o_.beta}};
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    const double l2 = o_.l2_regularization_strength + o_.beta / (2.0 * lr);
    ftrl_kernel(var, g, slots[0], slots[1], n, static_cast<float>(lr),
                static_cast<float>(-o_.learning_rate_power),
                static_cast<float>(o_.l1_regularization_strength), static_cast<float>(2.0 * l2),
                static_cast<float>(2.0 * o_.l2_shrinkage_regularization_strength));
  }

 private:
  FtrlOptions o_;
};

}  // namespace

SGD::SGD(SGDOptions o) : Optimizer(std::make_shared<SGDImpl>(o)) {}
Adam::Adam(AdamOptions o)
    : Optimizer(std::make_shared<AdamImpl>("Adam", o.learning_rate, o.beta_1, o.beta_2, o.epsilon,
                                           o.weight_decay, o.clip)) {}
AdamW::AdamW(AdamWOptions o)
    : Optimizer(std::make_shared<AdamImpl>("AdamW", o.learning_rate, o.beta_1, o.beta_2, o.epsilon,
                                           o.weight_decay, o.clip)) {}
RMSprop::RMSprop(RMSpropOptions o) : Optimizer(std::make_shared<RMSpropImpl>(o)) {}
Adagrad::Adagrad(AdagradOptions o) : Optimizer(std::make_shared<AdagradImpl>(o)) {}
Ftrl::Ftrl(FtrlOptions o) : Optimizer(std::make_shared<FtrlImpl>(o)) {}

Optimizer get(const std::string& name) {
  struct Known {
    const char* name;
    const char* class_name;
    Optimizer (*make)();
  };
  static constexpr Known known[] = {
      {"sgd", "SGD", [] { return Optimizer(SGD()); }},
      {"adam", "Adam", [] { return Optimizer(Adam()); }},
      {"adamw", "AdamW", [] { return Optimizer(AdamW()); }},
      {"rmsprop", "RMSprop", [] { return Optimizer(RMSprop()); }},
      {"adagrad", "Adagrad", [] { return Optimizer(Adagrad()); }},
      {"ftrl", "Ftrl", [] { return Optimizer(Ftrl()); }},
      {"nadam", "Nadam", [] { return Optimizer(Nadam()); }},
      {"adamax", "Adamax", [] { return Optimizer(Adamax()); }},
      {"adadelta", "Adadelta", [] { return Optimizer(Adadelta()); }},
      {"lion", "Lion", [] { return Optimizer(Lion()); }},
  };
  std::string all;
  for (const Known& k : known) {
    if (name == k.name || name == k.class_name) return k.make();
    all += (all.empty() ? "" : ", ") + std::string(k.name) + " (" + k.class_name + ")";
  }
  detail::throw_error<ValueError>("unknown optimizer '", name, "'; known optimizers: ", all);
}

}  // namespace optimizers

Optimizer::Optimizer(const char* name) : Optimizer(optimizers::get(name)) {}
Optimizer::Optimizer(const std::string& name) : Optimizer(optimizers::get(name)) {}
}  // namespace lockstep
