// The CUDA adapter's rules for one element, plain C++ compiled twice: by
// nvcc into the adapter's kernels (kernels.cu) and by the host compiler into
// the tests' emulated adapter (tests/support/emulated_cuda), so that what
// CI runs on the emulated GPU is the GPU's own expression, in its order.
// Both builds keep float operations unfused (--fmad=false,
// -ffp-contract=off). The transcendental functions are each build's own
// (CUDA's expf is not glibc's): those results agree within rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/backend/cuda/gpu_api.h"
#include "tensor/backend/image_sampling.h"  // LOCKSTEP_HOST_DEVICE
#include "tensor/backend/philox.h"          // uniform_element, random_uniform's

namespace lockstep::backend::cuda {

// detail::BinaryKind's numbers.
template <typename T>
LOCKSTEP_HOST_DEVICE inline T arith(int kind, T x, T y) {
  switch (kind) {
    case 0:
      return x + y;
    case 1:
      return x - y;
    case 2:
      return x * y;
    case 3:
      return x / y;
    case 4:
      if constexpr (std::is_same_v<T, float>) return powf(x, y);
      return T{};
    case 5:
      return x >= y ? x : y;
    default:
      return x <= y ? x : y;
  }
}
template <typename T>
LOCKSTEP_HOST_DEVICE inline bool compare(int kind, T x, T y) {
  switch (kind) {
    case 7:
      return x == y;
    case 8:
      return x != y;
    case 9:
      return x < y;
    case 10:
      return x <= y;
    case 11:
      return x > y;
    default:
      return x >= y;
  }
}

// detail::UnaryKind's numbers.
template <typename T>
LOCKSTEP_HOST_DEVICE inline T unary_op(int kind, T v) {
  if constexpr (std::is_same_v<T, float>) {
    switch (kind) {
      case 1:
        return expf(v);
      case 2:
        return logf(v);
      case 3:
        return log1pf(v);
      case 4:
        return sqrtf(v);
      case 8:
        return 1.0f / (1.0f + expf(-v));
      case 9:
        return tanhf(v);
      case 10:
        return erff(v);
      default:
        break;
    }
  }
  switch (kind) {
    case 0:
      return static_cast<T>(-v);
    case 5:
      return static_cast<T>(v * v);
    case 6:
      if constexpr (std::is_unsigned_v<T>) {
        return v;
      } else {
        return v < T{} ? static_cast<T>(-v) : v;
      }
    case 7:
      return v > T{} ? v : T{};
    default:
      return v;
  }
}

// detail::Map2Kind's numbers, each the CPU's expression in the CPU's order.
LOCKSTEP_HOST_DEVICE inline float map2_op(int kind, float gv, float v) {
  switch (kind) {
    case 0:
      return v > 0.0f ? gv : 0.0f;
    case 1:
      return gv / (1.0f + v);
    case 2:
      return 0.5f * gv / v;
    case 3:
      return 2.0f * v * gv;
    case 4:
      return v > 0.0f ? gv : (v < 0.0f ? -gv : 0.0f);
    case 5:
      return gv * v * (1.0f - v);
    case 7:
      return gv * 1.12837916709551257390f * expf(-v * v);
    default:
      return gv * (1.0f - v * v);
  }
}

// detail::ReduceKind: 0 sum, 1 mean, 2 max, 3 min. Sums in float64.
LOCKSTEP_HOST_DEVICE inline double combine(int kind, double acc, double v) {
  if (kind <= 1) return acc + v;
  if (kind == 2) return v > acc ? v : acc;
  return v < acc ? v : acc;
}

// Softmax along one row of `n` elements `inner` apart from x[base] (the
// CPU's rule, tensor/ops/softmax_ops.cc): d_i = x_i − max in float64,
// lse = log1p(Σ_{i≠top} exp(d_i)), each output rounded once; either
// output may be null.
LOCKSTEP_HOST_DEVICE inline void softmax_row(const float* x, float* log_out, float* prob_out,
                                             std::int64_t base, std::int64_t n,
                                             std::int64_t inner) {
  const float* row = x + base;
  float m = -INFINITY;
  std::int64_t top = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (row[j * inner] > m) {
      m = row[j * inner];
      top = j;
    }
  }
  double rest = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    if (j != top) rest += exp(static_cast<double>(row[j * inner]) - m);
  }
  const double lse = log1p(rest), s = 1.0 + rest;
  for (std::int64_t j = 0; j < n; ++j) {
    const double d = static_cast<double>(row[j * inner]) - m;
    if (log_out) log_out[base + j * inner] = static_cast<float>(d - lse);
    if (prob_out) prob_out[base + j * inner] = static_cast<float>(exp(d) / s);
  }
}

// The slots an update rule reads, from the optimizer's list of them.
struct UpdateSlots {
  float *m = nullptr, *v = nullptr, *a = nullptr;
};
inline UpdateSlots update_slots(const UpdateParams& p, float* const* slots, int num_slots) {
  UpdateSlots u;
  u.m = num_slots > 0 ? slots[0] : nullptr;
  u.v = num_slots > 1 ? slots[1] : nullptr;
  u.a = num_slots > 2 ? slots[2] : nullptr;
  if (p.rule == 3) {  // RMSprop: velocity, then momentum if any, then the average gradient
    const bool momentum = p.momentum > 0;
    u.a = p.centered ? (momentum ? u.a : u.v) : nullptr;
    u.v = momentum ? u.v : nullptr;
  }
  return u;
}

// The update's numbers for this run: the step's from device memory when
// the parameters point there (UpdateParams::step).
LOCKSTEP_HOST_DEVICE inline UpdateParams with_step_numbers(UpdateParams p) {
  if (p.step != nullptr) {
    p.lr = p.step[0];
    p.alpha = p.step[1];
    p.decay = p.step[2];
  }
  return p;
}

// Whether loss scaling's check, read when the update runs, skips it (a
// step whose gradients held an inf or a NaN; UpdateParams::finite). x − x
// is 0 for every finite x and NaN for an inf or a NaN.
LOCKSTEP_HOST_DEVICE inline bool skips_update(const UpdateParams& p) {
  if (p.finite == nullptr) return false;
  const float f = *p.finite;
  return !(f - f == 0.0f);
}

// One element of an optimizer's update (optim/optimizers.cc's rules, the
// same operations in the same order, no contraction on either side, so the
// same bits). Slots as update_slots gives them: m and v (Adam); m
// (momentum); v, then m or null, then a or null (RMSprop: velocity,
// momentum, average gradient); the accumulator in m (Adagrad).
LOCKSTEP_HOST_DEVICE inline void update_element(const UpdateParams& p, std::int64_t i, float* var,
                                                const float* g, float* m, float* v, float* a) {
  if (p.decay != 1.0f) var[i] *= p.decay;
  if (p.rule == 0) {
    var[i] -= p.lr * g[i];
  } else if (p.rule == 1) {
    m[i] = p.momentum * m[i] - p.lr * g[i];
    if (p.nesterov) {
      var[i] += p.momentum * m[i] - p.lr * g[i];
    } else {
      var[i] += m[i];
    }
  } else if (p.rule == 2) {
    m[i] += (g[i] - m[i]) * p.c1;
    v[i] += (g[i] * g[i] - v[i]) * p.c2;
    var[i] -= p.alpha * m[i] / (sqrtf(v[i]) + p.epsilon);
  } else if (p.rule == 3) {
    float* velocity = m;
    velocity[i] = p.rho * velocity[i] + (1 - p.rho) * g[i] * g[i];
    float denominator = velocity[i] + p.epsilon;
    if (a != nullptr) {
      a[i] = p.rho * a[i] + (1 - p.rho) * g[i];
      denominator = velocity[i] - a[i] * a[i] + p.epsilon;
    }
    const float increment = p.lr * g[i] / sqrtf(denominator);
    if (v != nullptr) {
      v[i] = p.momentum * v[i] + increment;
      var[i] -= v[i];
    } else {
      var[i] -= increment;
    }
  } else {
    m[i] += g[i] * g[i];
    var[i] -= p.lr * g[i] / sqrtf(m[i] + p.epsilon);
  }
}

}  // namespace lockstep::backend::cuda
