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
// from a float32 exponential, within a few float32 roundings), the states live in preallocated
// [steps + 1, batch, units] buffers the products read directly, and the recurrent kernel's gradient
// is one product over every step at the end. docs/benchmarks.md has the
// step times before and after. tests/nn/recurrent_layers_test.cc checks
// this kernel against a float64 loop with finite-difference gradients and
// against the composed form.
#include <algorithm>
#include <bit>
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
#include "tensor/ops/rnn_host.h"

namespace lockstep::detail {
namespace {

// e^x − 1 for |x| <= ln2/2 in float32, from its Taylor polynomial to
// degree 7 (the first term left out, x^8/8!, is below 6e-9 of the result).
inline float expm1_small(float x) {
  float p = 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  p = p * x + 1.0f;
  return p * x;
}

// e^x for x <= 0 in float32: x = k·ln2 + r with |r| <= ln2/2 (ln2 in two
// parts, Cody and Waite: k·C1 is exact), 1 + expm1_small(r), scaled by 2^k
// through the exponent bits. Below −87 (e^−87 is near float32's smallest
// normal) the result is e^−87.
inline float exp_nonpositive_f(float x) {
  constexpr float kLog2e = 1.44269504f;
  constexpr float kC1 = 0.693359375f;      // ln2's first 9 bits
  constexpr float kC2 = -2.12194440e-4f;   // the rest
  constexpr float kShifter = 12582912.0f;  // 1.5 · 2^23: rounds to an integer
  x = std::max(x, -87.0f);
  const float shifted = x * kLog2e + kShifter;
  const float k = shifted - kShifter;  // round(x / ln2), in [−126, 0]
  const float r = (x - k * kC1) - k * kC2;
  const std::int32_t k_bits =
      std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kShifter);
  return (1.0f + expm1_small(r)) * std::bit_cast<float>((k_bits + 127) << 23);
}

// sigmoid(x) and tanh(x) in float32, within a few float32 roundings of the
// exact values (the fused kernel is held to the composed form, which runs
// oneDNN's, by tests/nn/recurrent_layers_test.cc). Branch-free selects, so
// that the row loops vectorize; twice as many lanes as float64's, which
// made the forward pass's activations a third of its time (perf).
inline float sigmoid_of(float x) {
  const float e = exp_nonpositive_f(-std::abs(x));
  // 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below.
  const float numerator = x >= 0.0f ? 1.0f : e;
  return numerator / (1.0f + e);
}
inline float tanh_of(float x) {
  const float m = std::abs(x);
  // (1 − e^−2m) / (1 + e^−2m); below m = ln2/4, 1 − e^−2m would lose
  // digits to cancellation, and −q / (2 + q) with q = e^−2m − 1 taken
  // directly keeps them.
  const float e = exp_nonpositive_f(-2.0f * m);
  const float q = expm1_small(-2.0f * m);
  const float r = m < 0.1732868f ? -q / (2.0f + q) : (1.0f - e) / (1.0f + e);
  return std::copysign(r, x);
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

// What the backward pass reads. By time position t (batch-major, as the
// gates' gradients are written: the recurrent kernel's gradient is then one
// product of the two): h[b, t], the state the step at position t read. By
// step processed s: the cell state before it (c[s]; after it: s + 1), the
// activated gates and tanh(c).
struct Tape {
  Tensor h;      // [batch, steps, units]
  Tensor c;      // [steps + 1, batch, units]
  Tensor gates;  // [steps, batch, 4 · units]
  Tensor ac;     // [steps, batch, units]
  std::vector<std::uint8_t> mask;
};

// A's rows `lda` apart (0: contiguous).
backend::onednn::MatmulShape product(std::int64_t m, std::int64_t k, std::int64_t n,
                                     bool transpose_a = false, bool transpose_b = false,
                                     std::int64_t lda = 0) {
  return {
      .m = m, .k = k, .n = n, .transpose_a = transpose_a, .transpose_b = transpose_b, .lda = lda};
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
  const std::int64_t u = kernel.shape()[0], w = 4 * u, bu = batch * u;
  const bool recording = should_record(inputs);
  const bool zero_output = o.zero_output_for_mask;
  const std::int64_t extra = o.return_states ? 2 : 0;
  auto position = [&](std::int64_t s) { return o.go_backwards ? steps - 1 - s : s; };

  auto tape = std::make_shared<Tape>();
  tape->mask = step_mask(o.mask);
  // h: recording, every step's read state at its position ([batch, steps,
  // units], rows `steps · units` apart within a step) and the last state
  // alone; else two [batch, units] buffers that alternate. c: every step's
  // when recording, else two that alternate.
  const std::int64_t c_kept = recording ? steps + 1 : 2;
  tape->h = Tensor::empty(recording ? Shape{batch, steps, u} : Shape{2, batch, u});
  Tensor h_last = Tensor::empty({batch, u});
  tape->c = Tensor::empty({c_kept, batch, u});
  tape->gates = Tensor::empty({recording ? steps : 1, batch, w});
  tape->ac = Tensor::empty({recording ? steps : 1, batch, u});
  float* hs = tape->h.data<float>();
  float* cs = tape->c.data<float>();
  float* pl = h_last.data<float>();
  // Row b of the state step s reads, and of the one it writes.
  const std::int64_t h_stride = recording ? steps * u : u;
  auto h_read = [&](std::int64_t s) {
    return recording ? hs + position(s) * u : hs + (s % 2) * bu;
  };
  auto h_written = [&](std::int64_t s) {
    if (!recording) return hs + ((s + 1) % 2) * bu;
    return s + 1 < steps ? hs + position(s + 1) * u : pl;
  };
  const std::int64_t written_stride_last = recording ? u : h_stride;
  {
    const float* h0 = o.initial_h.defined() ? o.initial_h.data<float>() : nullptr;
    float* first = h_read(0);
    for (std::int64_t b = 0; b < batch; ++b) {
      float* row = first + b * h_stride;
      if (h0) {
        std::memcpy(row, h0 + b * u, sizeof(float) * static_cast<std::size_t>(u));
      } else {
        std::fill(row, row + u, 0.0f);
      }
    }
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
    const std::int64_t t = position(s);
    const std::int64_t before = recording ? s : s % 2, after = recording ? s + 1 : (s + 1) % 2;
    const float* h_prev = h_read(s);
    float* h_next = h_written(s);
    const std::int64_t next_stride = recording && s + 1 == steps ? written_stride_last : h_stride;
    backend::onednn::matmul(product(batch, u, w, false, false, h_stride), h_prev, ker, nullptr,
                            phu);
    const std::int64_t at = recording ? s : 0;
    parallel_for(batch, 30 * w, [&](std::int64_t b0, std::int64_t b1) {
      for (std::int64_t b = b0; b < b1; ++b) {
        const bool counts = mask.empty() || mask[static_cast<std::size_t>(b * steps + t)];
        forward_row({.x = x + (b * steps + t) * w,
                     .hu = phu + b * w,
                     .h_prev = h_prev + b * h_stride,
                     .c_prev = cs + before * bu + b * u,
                     .gates = pg + (at * batch + b) * w,
                     .ac = pac + (at * batch + b) * u,
                     .h = h_next + b * next_stride,
                     .c = cs + after * bu + b * u,
                     .out = po + (b * (steps + extra) + s) * u},
                    u, counts, zero_output);
      }
    });
  }
  if (o.return_states) {
    const float* last_h = recording ? pl : hs + (steps % 2) * bu;
    const float* last_c = cs + (recording ? steps : steps % 2) * bu;
    for (std::int64_t b = 0; b < batch; ++b) {
      float* row = po + (b * (steps + extra) + steps) * u;
      std::memcpy(row, last_h + b * u, sizeof(float) * static_cast<std::size_t>(u));
      std::memcpy(row + u, last_c + b * u, sizeof(float) * static_cast<std::size_t>(u));
    }
  }
  if (!recording) return out;

  record("lstm", inputs, out, [tape, kernel, o, batch, steps, u, w, extra](const Tensor& grad) {
    const detail::OnDevice on;
    const std::int64_t bu = batch * u;
    const float* g = grad.data<float>();
    const float* ker = kernel.data<float>();
    // The gates' gradients, straight into the projected inputs' gradient
    // [batch, steps, 4 · units]: step s's rows are `steps · 4 · units` apart.
    Tensor dx = Tensor::empty({batch, steps, w});
    Tensor dh_mm = Tensor::zeros({batch, u}), dh_around = Tensor::zeros({batch, u});
    Tensor dc = Tensor::zeros({batch, u});
    float* pdx = dx.data<float>();
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
                        .dz = pdx + (b * steps + t) * w},
                       u, counts, zero_output);
        }
      });
      backend::onednn::matmul(product(batch, w, u, false, true, steps * w), pdx + t * w, ker,
                              nullptr, pmm);
    }
    // dU = Σ over (b, t) of h[b, t]ᵀ · dz[b, t]: one product, the rows of
    // the state tape and of dx matching.
    Tensor dkernel = Tensor::empty({u, w});
    backend::onednn::matmul(product(u, batch * steps, w, true), tape->h.data<float>(), pdx, nullptr,
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
