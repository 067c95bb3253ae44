// The lstm op's float32 host kernel (rnn_host.h): each step one oneDNN
// product h·U and one fused pass over the batch's gates, forward and
// backward, instead of ~12 library ops a step forward and ~25 backward.
//
// The composed form (rnn_ops.cc) runs each step as the library's ops on
// [batch, units] tensors; on the LSTM workload (bench/workloads --workload
// lstm: Embedding(64) → LSTM(128), batch 64, 80 steps) perf put 56% of the
// training step in oneDNN's products and the rest in the ops around them:
// their tape records, temporaries, slices and transposes. Here a step's
// elementwise work is one loop over the rows, vectorized (sigmoid and tanh
// from exp64.h's float64 exponential, so each is within one float32
// rounding), the states live in preallocated [steps + 1, batch, units]
// buffers the products read directly, and the recurrent kernel's gradient
// is one product over every step at the end. docs/benchmarks.md has the
// step times before and after. tests/nn/recurrent_layers_test.cc checks
// this kernel against a float64 loop with finite-difference gradients and
// against the composed form.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/parallel.h"
#include "lockstep/tensor/recording.h"
#include "tensor/backend/onednn/onednn.h"
#include "tensor/ops/exp64.h"
#include "tensor/ops/rnn_host.h"

namespace lockstep::detail {
namespace {

// sigmoid(x) and tanh(x) from e^-|x| in float64: one float32 rounding of the
// exact values. Inline and branch-free, so that the row loops vectorize.
inline float sigmoid_of(float x) {
  const double a = static_cast<double>(x);
  const double e = exp_nonpositive(-std::abs(a));
  // 1 / (1 + e^-a) for a >= 0, e^a / (1 + e^a) below: a select of the
  // numerator, so that no arithmetic hides in a branch (which GCC would not
  // vectorize).
  const double numerator = a >= 0.0 ? 1.0 : e;
  return static_cast<float>(numerator / (1.0 + e));
}
inline float tanh_of(float x) {
  const double a = static_cast<double>(x), m = std::abs(a);
  const double e = exp_nonpositive(-2.0 * m);
  const double t = (1.0 - e) / (1.0 + e);
  // Below 1e-4, tanh(m) = m to float32's precision (m³/3 < 4e-13 · m), and
  // 1 − e would lose the digits float32 keeps.
  return static_cast<float>(std::copysign(m < 1e-4 ? m : t, a));
}

// One step of one batch row, forward. z = x_t + h·U (the product's row);
// writes the activated gates (i, f, g, o: 4 · units), tanh(c), the new
// states, and the output row. Keeps the old states where the row's mask
// says the step does not count.
struct ForwardRow {
  const float* x;       // projected inputs x_t of the row, 4 · units
  const float* hu;      // h·U of the row, 4 · units
  const float* h_prev;  // units
  const float* c_prev;  // units
  float* gates;         // 4 · units
  float* ac;            // units: tanh(c_fresh)
  float* h;             // units: the state after the step
  float* c;             // units
  float* out;           // units: the step's output
};

__attribute__((target_clones("avx512f", "avx2", "default"))) void forward_row(const ForwardRow& r,
                                                                              std::int64_t u,
                                                                              bool counts,
                                                                              bool zero_output) {
  {  // every buffer is its own: restrict spares GCC's runtime overlap checks
    const float* __restrict x = r.x;
    const float* __restrict hu = r.hu;
    float* __restrict gates = r.gates;
    for (std::int64_t j = 0; j < 2 * u; ++j) gates[j] = sigmoid_of(x[j] + hu[j]);
    for (std::int64_t j = 2 * u; j < 3 * u; ++j) gates[j] = tanh_of(x[j] + hu[j]);
    for (std::int64_t j = 3 * u; j < 4 * u; ++j) gates[j] = sigmoid_of(x[j] + hu[j]);
  }
  const float* gi = r.gates;
  const float* gf = r.gates + u;
  const float* gg = r.gates + 2 * u;
  const float* go = r.gates + 3 * u;
  if (counts) {
    float* __restrict c = r.c;
    float* __restrict ac = r.ac;
    float* __restrict h = r.h;
    float* __restrict out = r.out;
    for (std::int64_t j = 0; j < u; ++j) c[j] = gf[j] * r.c_prev[j] + gi[j] * gg[j];
    for (std::int64_t j = 0; j < u; ++j) ac[j] = tanh_of(c[j]);
    for (std::int64_t j = 0; j < u; ++j) {
      h[j] = go[j] * ac[j];
      out[j] = h[j];
    }
  } else {
    // As Keras's backend: the states stay, the output repeats the last one
    // (or is zero). The gates are kept for nothing: no gradient reaches them.
    for (std::int64_t j = 0; j < u; ++j) {
      r.c[j] = r.c_prev[j];
      r.h[j] = r.h_prev[j];
      r.ac[j] = 0.0f;
      r.out[j] = zero_output ? 0.0f : r.h_prev[j];
    }
  }
}

// One step of one batch row, backward. Given the gradient of the step's
// output and of the states after it (dh_mm + dh_around: the product's part
// and what passed around masked steps; dc), writes the gates' gradient dz
// (4 · units, zero where the step does not count) and the gradients that
// pass around to the states before the step without the product (dh_around,
// dc: in place).
struct BackwardRow {
  const float* gates;   // 4 · units
  const float* ac;      // units
  const float* c_prev;  // units
  const float* d_out;   // units: the output's gradient
  const float* dh_mm;   // units: dz_next·Uᵀ
  float* dh_around;     // units, in: around the step after, out: around this one
  float* dc;            // units, in: the cell state's gradient after, out: before
  float* dz;            // 4 · units
};

__attribute__((target_clones("avx512f", "avx2", "default"))) void backward_row(const BackwardRow& r,
                                                                               std::int64_t u,
                                                                               bool counts,
                                                                               bool zero_output) {
  // Every buffer is its own (the tape's, the walk's): restrict lets the
  // loops vectorize without GCC's runtime overlap checks.
  const float* __restrict gi = r.gates;
  const float* __restrict gf = r.gates + u;
  const float* __restrict gg = r.gates + 2 * u;
  const float* __restrict go = r.gates + 3 * u;
  const float* __restrict ac = r.ac;
  const float* __restrict d_out = r.d_out;
  const float* __restrict dh_mm = r.dh_mm;
  float* __restrict dh_around = r.dh_around;
  float* __restrict dc_io = r.dc;
  float* __restrict dz = r.dz;
  if (counts) {
    const float* __restrict c_prev = r.c_prev;
    for (std::int64_t j = 0; j < u; ++j) {
      const float dh = d_out[j] + (dh_mm[j] + dh_around[j]);
      const float dc = dh * go[j] * (1.0f - ac[j] * ac[j]) + dc_io[j];
      dz[j] = dc * gg[j] * (gi[j] * (1.0f - gi[j]));
      dz[u + j] = dc * c_prev[j] * (gf[j] * (1.0f - gf[j]));
      dz[2 * u + j] = dc * gi[j] * (1.0f - gg[j] * gg[j]);
      dz[3 * u + j] = dh * ac[j] * (go[j] * (1.0f - go[j]));
      dc_io[j] = dc * gf[j];
      dh_around[j] = 0.0f;
    }
  } else {
    // Nothing reaches the step's gates; the state's gradient passes around
    // (without the output's when the output was zeros), the cell's too.
    for (std::int64_t j = 0; j < 4 * u; ++j) dz[j] = 0.0f;
    for (std::int64_t j = 0; j < u; ++j) {
      const float d_state = dh_mm[j] + dh_around[j];
      dh_around[j] = zero_output ? d_state : d_out[j] + d_state;
    }
  }
}

// True where step t of row b counts: [batch, steps] of the op's mask,
// empty without one.
std::vector<std::uint8_t> step_mask(const Tensor& mask) {
  if (!mask.defined()) return {};
  const Tensor m = mask.dtype() == DType::kFloat32 ? mask : cast(mask, DType::kFloat32);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(m.numel()));
  const float* p = m.data<float>();
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = p[i] > 0.5f ? 1 : 0;
  return out;
}

// What the backward pass reads: by step processed s, the states before it
// (h_prev: s, the state after: s + 1), the activated gates and tanh(c).
struct Tape {
  Tensor h, c;   // [steps + 1, batch, units]
  Tensor gates;  // [steps, batch, 4 · units]
  Tensor ac;     // [steps, batch, units]
  std::vector<std::uint8_t> mask;
};

backend::onednn::MatmulShape product(std::int64_t m, std::int64_t k, std::int64_t n,
                                     bool transpose_a = false, bool transpose_b = false) {
  return {.m = m, .k = k, .n = n, .transpose_a = transpose_a, .transpose_b = transpose_b};
}

}  // namespace

bool lstm_runs_fused(const Tensor& projected, const RecurrentOptions& o) {
  const detail::OnDevice on;
  const auto float32 = [](const Tensor& t) { return !t.defined() || t.dtype() == DType::kFloat32; };
  return on.kernels() == nullptr && projected.defined() && projected.rank() == 3 &&
         projected.dtype() == DType::kFloat32 && projected.shape()[0] > 0 && float32(o.initial_h) &&
         float32(o.initial_c) && !o.recurrent_masks.defined() &&
         o.activation == RecurrentActivation::kTanh &&
         o.recurrent_activation == RecurrentActivation::kSigmoid;
}

Tensor lstm_fused(const Tensor& projected, const Tensor& kernel, const RecurrentOptions& o,
                  const std::vector<Tensor>& inputs) {
  const detail::OnDevice on;  // a device that runs host kernels: its scope
  const std::int64_t batch = projected.shape()[0], steps = projected.shape()[1];
  const std::int64_t u = kernel.shape()[0], w = 4 * u;
  const bool recording = should_record(inputs);
  const bool zero_output = o.zero_output_for_mask;
  const std::int64_t extra = o.return_states ? 2 : 0;

  auto tape = std::make_shared<Tape>();
  tape->mask = step_mask(o.mask);
  // The states: every step's when recording, else two rows that alternate.
  const std::int64_t kept = recording ? steps + 1 : 2;
  tape->h = Tensor::empty({kept, batch, u});
  tape->c = Tensor::empty({kept, batch, u});
  tape->gates = Tensor::empty({recording ? steps : 1, batch, w});
  tape->ac = Tensor::empty({recording ? steps : 1, batch, u});
  float* hs = tape->h.data<float>();
  float* cs = tape->c.data<float>();
  const std::int64_t bu = batch * u;
  if (o.initial_h.defined()) {
    std::memcpy(hs, o.initial_h.data<float>(), sizeof(float) * static_cast<std::size_t>(bu));
  } else {
    std::fill(hs, hs + bu, 0.0f);
  }
  if (o.initial_c.defined()) {
    std::memcpy(cs, o.initial_c.data<float>(), sizeof(float) * static_cast<std::size_t>(bu));
  } else {
    std::fill(cs, cs + bu, 0.0f);
  }

  Tensor out = Tensor::empty({batch, steps + extra, u});
  Tensor hu = Tensor::empty({batch, w});
  const float* x = projected.data<float>();
  const float* ker = kernel.data<float>();
  float* po = out.data<float>();
  float* phu = hu.data<float>();
  float* pg = tape->gates.data<float>();
  float* pac = tape->ac.data<float>();
  const std::vector<std::uint8_t>& mask = tape->mask;
  for (std::int64_t s = 0; s < steps; ++s) {
    const std::int64_t t = o.go_backwards ? steps - 1 - s : s;
    const std::int64_t before = recording ? s : s % 2, after = recording ? s + 1 : (s + 1) % 2;
    const float* h_prev = hs + before * bu;
    backend::onednn::matmul(product(batch, u, w), h_prev, ker, nullptr, phu);
    const std::int64_t at = recording ? s : 0;
    parallel_for(batch, 60 * w, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        const bool counts = mask.empty() || mask[static_cast<std::size_t>(b * steps + t)];
        forward_row({.x = x + (b * steps + t) * w,
                     .hu = phu + b * w,
                     .h_prev = h_prev + b * u,
                     .c_prev = cs + before * bu + b * u,
                     .gates = pg + (at * batch + b) * w,
                     .ac = pac + (at * batch + b) * u,
                     .h = hs + after * bu + b * u,
                     .c = cs + after * bu + b * u,
                     .out = po + (b * (steps + extra) + s) * u},
                    u, counts, zero_output);
      }
    });
  }
  if (o.return_states) {
    const std::int64_t last = recording ? steps : steps % 2;
    for (std::int64_t b = 0; b < batch; ++b) {
      float* row = po + (b * (steps + extra) + steps) * u;
      std::memcpy(row, hs + last * bu + b * u, sizeof(float) * static_cast<std::size_t>(u));
      std::memcpy(row + u, cs + last * bu + b * u, sizeof(float) * static_cast<std::size_t>(u));
    }
  }
  if (!recording) return out;

  record("lstm", inputs, out, [tape, kernel, o, batch, steps, u, w, extra](const Tensor& grad) {
    const detail::OnDevice on;
    const std::int64_t bu = batch * u;
    const float* g = grad.data<float>();
    const float* ker = kernel.data<float>();
    Tensor dz_all = Tensor::empty({steps, batch, w});
    Tensor dh_mm = Tensor::zeros({batch, u}), dh_around = Tensor::zeros({batch, u});
    Tensor dc = Tensor::zeros({batch, u});
    float* pdz = dz_all.data<float>();
    float* pmm = dh_mm.data<float>();
    float* paround = dh_around.data<float>();
    float* pdc = dc.data<float>();
    if (o.return_states) {  // the final states' gradients start the walk back
      for (std::int64_t b = 0; b < batch; ++b) {
        const float* row = g + (b * (steps + extra) + steps) * u;
        std::memcpy(paround + b * u, row, sizeof(float) * static_cast<std::size_t>(u));
        std::memcpy(pdc + b * u, row + u, sizeof(float) * static_cast<std::size_t>(u));
      }
    }
    const float* pg = tape->gates.data<float>();
    const float* pac = tape->ac.data<float>();
    const float* cs = tape->c.data<float>();
    const std::vector<std::uint8_t>& mask = tape->mask;
    const bool zero_output = o.zero_output_for_mask;
    for (std::int64_t s = steps - 1; s >= 0; --s) {
      const std::int64_t t = o.go_backwards ? steps - 1 - s : s;
      parallel_for(batch, 20 * w, [&](std::int64_t b0, std::int64_t b1) {
        for (std::int64_t b = b0; b < b1; ++b) {
          const bool counts = mask.empty() || mask[static_cast<std::size_t>(b * steps + t)];
          backward_row({.gates = pg + (s * batch + b) * w,
                        .ac = pac + (s * batch + b) * u,
                        .c_prev = cs + s * bu + b * u,
                        .d_out = g + (b * (steps + extra) + s) * u,
                        .dh_mm = pmm + b * u,
                        .dh_around = paround + b * u,
                        .dc = pdc + b * u,
                        .dz = pdz + (s * batch + b) * w},
                       u, counts, zero_output);
        }
      });
      backend::onednn::matmul(product(batch, w, u, false, true), pdz + s * batch * w, ker, nullptr,
                              pmm);
    }
    // dprojected[b, t] = dz of step s; dU = Σ_s h_prevᵀ · dz, one product.
    Tensor dx = Tensor::empty({batch, steps, w});
    float* pdx = dx.data<float>();
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t t = o.go_backwards ? steps - 1 - s : s;
      for (std::int64_t b = 0; b < batch; ++b)
        std::memcpy(pdx + (b * steps + t) * w, pdz + (s * batch + b) * w,
                    sizeof(float) * static_cast<std::size_t>(w));
    }
    Tensor dkernel = Tensor::empty({u, w});
    backend::onednn::matmul(product(u, steps * batch, w, true), tape->h.data<float>(), pdz, nullptr,
                            dkernel.data<float>());
    Grads grads{dx, dkernel};
    if (o.initial_h.defined()) {
      for (std::int64_t i = 0; i < bu; ++i) pmm[i] += paround[i];
      grads.push_back(dh_mm);
    }
    if (o.initial_c.defined()) grads.push_back(dc);
    return grads;
  });
  return out;
}

}  // namespace lockstep::detail
