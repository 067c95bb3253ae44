// Nadam, Adamax, Adadelta and Lion: Keras 3's update rules, each as one
// loop over a variable's buffer in float32, with Keras's scalars rounded as
// Keras rounds them — a Python float used with a float32 tensor is rounded
// once (1 − β1 computed in float64, then float32), a hyperparameter cast
// first is float32 arithmetic (1 − float32(β1)); the two differ in the last
// bit, and tests/train/keras_files_test.cc compares our steps with Keras's.
// Clipping, weight decay and the slots' bookkeeping are the base class's
// (optim/optimizers.cc). None has a device kernel yet: on a GPU they are a
// DeviceError naming the optimizer.
#include <cmath>
#include <mutex>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/core/simd.h"
#include "lockstep/optim/optimizers.h"
#include "lockstep/tensor/tensor.h"

namespace lockstep::optimizers {
namespace {

float f32(double v) { return static_cast<float>(v); }

// Nadam's momentum schedule, as Keras computes it in float32:
// u_t = β1·(1 − 0.5·0.96^t).
float nadam_u(float beta_1, std::int64_t t) {
  return beta_1 * (1.0f - 0.5f * std::pow(0.96f, static_cast<float>(t)));
}

class NadamImpl : public OptimizerImpl {
 public:
  explicit NadamImpl(NadamOptions o)
      : OptimizerImpl("Nadam", o.learning_rate, o.clip, o.weight_decay), o_(o) {}

 protected:
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "momentum" : "velocity"; }
  OptimizerConfig own_config() const override {
    return {{"beta_1", o_.beta_1}, {"beta_2", o_.beta_2}, {"epsilon", o_.epsilon}};
  }
  std::vector<Tensor> keras_scalars(std::int64_t step) const override {
    return {Tensor::from_vector<float>({u_product(step)}, Shape{})};
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t step) override {
    // Keras: u_product ← u_product·β1·(1 − 0.5·0.96^t) before the step's
    // updates; m += (g − m)(1 − β1); v += (g² − v)(1 − β2);
    // m̂ = u_{t+1}·m / (1 − u_product·u_{t+1}) + (1 − u_t)·g / (1 − u_product);
    // v̂ = v / (1 − β2^t); var −= m̂·lr / (√v̂ + ε).
    const float b1 = f32(o_.beta_1), b2 = f32(o_.beta_2), l = f32(lr), eps = f32(o_.epsilon);
    const float u_t = nadam_u(b1, step), u_next = nadam_u(b1, step + 1);
    const float product = u_product(step), product_next = product * u_next;
    const float beta_2_power = std::pow(b2, static_cast<float>(step));
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    const float a = 1.0f - product_next, b = 1.0f - u_t, c = 1.0f - product,
                d = 1.0f - beta_2_power;
    float* m = slots[0];
    float* v = slots[1];
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      m[i] += (gi - m[i]) * c1;
      v[i] += (gi * gi - v[i]) * c2;
      const float m_hat = u_next * m[i] / a + b * gi / c;
      const float v_hat = v[i] / d;
      var[i] -= m_hat * l / (std::sqrt(v_hat) + eps);
    }
  }

 private:
  // Π_{s=1..step} u_s in float32, in Keras's order ((u·β1)·(1 − 0.5·0.96^s)),
  // remembered: updates run concurrently on disjoint ranges.
  float u_product(std::int64_t step) const {
    std::lock_guard lock(mu_);
    const float b1 = f32(o_.beta_1);
    if (products_.empty()) products_.push_back(1.0f);
    while (static_cast<std::int64_t>(products_.size()) <= step) {
      const auto s = static_cast<std::int64_t>(products_.size());
      products_.push_back(products_.back() * b1 *
                          (1.0f - 0.5f * std::pow(0.96f, static_cast<float>(s))));
    }
    return products_[static_cast<std::size_t>(step)];
  }

  NadamOptions o_;
  mutable std::mutex mu_;
  mutable std::vector<float> products_;
};

class AdamaxImpl : public OptimizerImpl {
 public:
  explicit AdamaxImpl(AdamaxOptions o)
      : OptimizerImpl("Adamax", o.learning_rate, o.clip, o.weight_decay), o_(o) {}

 protected:
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override { return i == 0 ? "momentum" : "norm"; }
  OptimizerConfig own_config() const override {
    return {{"beta_1", o_.beta_1}, {"beta_2", o_.beta_2}, {"epsilon", o_.epsilon}};
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t step) override {
    // Keras: m += (g − m)(1 − β1); u = max(β2·u, |g|);
    // var −= lr·m / ((1 − β1^t)(u + ε)).
    const float l = f32(lr), c1 = f32(1.0 - o_.beta_1), b2 = f32(o_.beta_2), eps = f32(o_.epsilon);
    const float correction = 1.0f - std::pow(f32(o_.beta_1), static_cast<float>(step));
    float* m = slots[0];
    float* u = slots[1];
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      m[i] += (gi - m[i]) * c1;
      u[i] = std::max(b2 * u[i], std::abs(gi));
      var[i] -= l * m[i] / (correction * (u[i] + eps));
    }
  }

 private:
  AdamaxOptions o_;
};

class AdadeltaImpl : public OptimizerImpl {
 public:
  explicit AdadeltaImpl(AdadeltaOptions o)
      : OptimizerImpl("Adadelta", o.learning_rate, o.clip, o.weight_decay), o_(o) {}

 protected:
  int num_slots() const override { return 2; }
  const char* slot_name(int i) const override {
    return i == 0 ? "accumulated_grad" : "accumulated_delta_var";
  }
  OptimizerConfig own_config() const override { return {{"rho", o_.rho}, {"epsilon", o_.epsilon}}; }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    // Keras: E[g²] = ρ·E[g²] + (1 − ρ)·g²; Δ = −√(E[Δ²] + ε)·g / √(E[g²] + ε);
    // E[Δ²] = ρ·E[Δ²] + (1 − ρ)·Δ²; var += lr·Δ.
    const float l = f32(lr), rho = f32(o_.rho), c = f32(1.0 - o_.rho), eps = f32(o_.epsilon);
    float* acc_g = slots[0];
    float* acc_delta = slots[1];
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      acc_g[i] = rho * acc_g[i] + c * (gi * gi);
      const float delta = -(std::sqrt(acc_delta[i] + eps) * gi / std::sqrt(acc_g[i] + eps));
      acc_delta[i] = rho * acc_delta[i] + c * (delta * delta);
      var[i] += l * delta;
    }
  }

 private:
  AdadeltaOptions o_;
};

class LionImpl : public OptimizerImpl {
 public:
  explicit LionImpl(LionOptions o)
      : OptimizerImpl("Lion", o.learning_rate, o.clip, o.weight_decay), o_(o) {
    // Keras's check, with its words.
    LOCKSTEP_CHECK(o.beta_1 > 0 && o.beta_1 <= 1,
                   "Lion: argument beta_1 must be in the [0, 1] range. Otherwise, the optimizer "
                   "degenerates to SignSGD. Received: beta_1=",
                   o.beta_1);
  }

 protected:
  int num_slots() const override { return 1; }
  const char* slot_name(int) const override { return "momentum"; }
  OptimizerConfig own_config() const override {
    return {{"beta_1", o_.beta_1}, {"beta_2", o_.beta_2}};
  }
  void update(float* var, const float* g, std::int64_t n, float** slots, double lr,
              std::int64_t) override {
    // Keras: var −= lr·sign(β1·m + (1 − β1)·g); m = β2·m + (1 − β2)·g.
    const float l = f32(lr), b1 = f32(o_.beta_1), b2 = f32(o_.beta_2);
    const float c1 = 1.0f - b1, c2 = 1.0f - b2;
    float* m = slots[0];
    for (std::int64_t i = 0; i < n; ++i) {
      const float gi = g[i];
      const float direction = m[i] * b1 + gi * c1;
      const float sign = direction > 0.0f ? 1.0f : (direction < 0.0f ? -1.0f : direction);
      var[i] -= l * sign;
      m[i] = m[i] * b2 + gi * c2;
    }
  }

 private:
  LionOptions o_;
};

}  // namespace

Nadam::Nadam(NadamOptions o) : Optimizer(std::make_shared<NadamImpl>(o)) {}
Adamax::Adamax(AdamaxOptions o) : Optimizer(std::make_shared<AdamaxImpl>(o)) {}
Adadelta::Adadelta(AdadeltaOptions o) : Optimizer(std::make_shared<AdadeltaImpl>(o)) {}
Lion::Lion(LionOptions o) : Optimizer(std::make_shared<LionImpl>(o)) {}

}  // namespace lockstep::optimizers
