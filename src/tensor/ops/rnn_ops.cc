// The recurrent sequence ops simple_rnn, lstm and gru (ops.h), each one op
// whose backward rule is backpropagation through time.
//
// Run as a chain of primitive ops, a sequence of T steps would leave ~12 T
// records on the tape, and each step's slice of the input would send back a
// gradient as large as the whole sequence (O(T²) memory). Here the forward
// pass keeps each step's gate activations (the derivative of every
// activation this op takes follows from its output alone), and the backward
// pass walks the steps in reverse: per step two matrix products (the state's
// gradient and the gates'), and one product over all steps for the
// recurrent kernel's gradient. Every step is composed of the library's ops,
// so the op runs on every device the ops do. tests/nn/recurrent_layers_test.cc
// checks each against a float64 loop, with finite-difference gradients.
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "lockstep/core/error.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/recording.h"
#include "tensor/ops/bf16.h"
#include "tensor/ops/rnn_host.h"

namespace lockstep {
namespace {

using Act = RecurrentActivation;
using detail::Grads;

Tensor activate(Act a, const Tensor& x) {
  switch (a) {
    case Act::kTanh:
      return tanh(x);
    case Act::kSigmoid:
      return sigmoid(x);
    case Act::kHardSigmoid:
      return relu(x + 3.0f, {.max_value = 6.0f}) / 6.0f;
    case Act::kRelu:
      return relu(x);
    case Act::kLinear:
      return x;
  }
  detail::throw_error<InternalError>("recurrent op: unknown activation");
}

// The activation's derivative at the input that gave `y`.
Tensor slope(Act a, const Tensor& y) {
  switch (a) {
    case Act::kTanh:
      return Tensor::scalar(1.0f) - square(y);
    case Act::kSigmoid:
      return y * (Tensor::scalar(1.0f) - y);
    case Act::kHardSigmoid:
      return cast(greater(y, Tensor::scalar(0.0f)), y.dtype()) *
             cast(less(y, Tensor::scalar(1.0f)), y.dtype()) * (1.0f / 6.0f);
    case Act::kRelu:
      return cast(greater(y, Tensor::scalar(0.0f)), y.dtype());
    case Act::kLinear:
      return ones_like(y);
  }
  detail::throw_error<InternalError>("recurrent op: unknown activation");
}

struct Dims {
  std::int64_t batch = 0, steps = 0, units = 0;
};

Dims check(const char* op, const Tensor& projected, const Tensor& kernel, std::int64_t gates,
           const RecurrentOptions& o) {
  LOCKSTEP_CHECK(projected.defined() && kernel.defined(), op,
                 ": the projected inputs and the recurrent kernel must be defined");
  LOCKSTEP_CHECK_AS(
      ShapeError, kernel.rank() == 2 && kernel.shape()[1] == gates * kernel.shape()[0], op,
      ": expected a recurrent kernel [units, ", gates, " * units], got ", kernel.shape());
  const std::int64_t units = kernel.shape()[0];
  LOCKSTEP_CHECK_AS(ShapeError, projected.rank() == 3 && projected.shape()[2] == gates * units, op,
                    ": expected projected inputs [batch, steps, ", gates * units, "] for ", units,
                    " units, got ", projected.shape());
  LOCKSTEP_CHECK_AS(ShapeError, projected.shape()[1] >= 1, op,
                    ": a sequence needs at least one step, got ", projected.shape());
  LOCKSTEP_CHECK(projected.dtype() == DType::kFloat32 && kernel.dtype() == DType::kFloat32, op,
                 ": expected float32 (or bfloat16) operands, got ", dtype_name(projected.dtype()),
                 " and ", dtype_name(kernel.dtype()));
  const Dims d{projected.shape()[0], projected.shape()[1], units};
  for (const Tensor* state : {&o.initial_h, &o.initial_c}) {
    if (!state->defined()) continue;
    LOCKSTEP_CHECK_AS(ShapeError, state->shape() == Shape({d.batch, units}), op,
                      ": expected initial states [", d.batch, ", ", units, "] (batch, units), got ",
                      state->shape());
  }
  LOCKSTEP_CHECK(!o.initial_c.defined() || gates == 4, op,
                 ": only lstm has a cell state to start from");
  if (o.recurrent_masks.defined()) {
    const Shape want{gates, d.batch, units};
    LOCKSTEP_CHECK_AS(ShapeError, o.recurrent_masks.shape() == want, op,
                      ": expected recurrent masks ", want, ", got ", o.recurrent_masks.shape());
  }
  return d;
}

// x[:, first : first + count]
Tensor columns(const Tensor& x, std::int64_t first, std::int64_t count) {
  return slice(x, {0, first}, {x.shape()[0], count});
}

// Step t of a time-major [steps, batch, width] tensor, as [batch, width]
// (a view: the slice is along dimension 0).
Tensor step_of(const Tensor& time_major, std::int64_t t) {
  return reshape(slice(time_major, {t, 0, 0}, {1, -1, -1}),
                 {time_major.shape()[1], time_major.shape()[2]});
}

// [batch, width] per step -> [batch, steps, width].
Tensor batch_major(const std::vector<Tensor>& steps) {
  std::vector<Tensor> parts;
  parts.reserve(steps.size());
  for (const Tensor& s : steps) parts.push_back(reshape(s, {1, s.shape()[0], s.shape()[1]}));
  return transpose(concat(parts, 0), {1, 0, 2});
}

// Keras's recurrent dropout: gate g reads state * mask_g. Without masks
// every gate reads the state itself, and shares one product.
class StateReads {
 public:
  StateReads(const Tensor& masks, std::int64_t gates) {
    if (!masks.defined()) return;
    for (std::int64_t g = 0; g < gates; ++g) masks_.push_back(step_of(masks, g));
  }
  bool masked() const { return !masks_.empty(); }
  const Tensor& mask(std::size_t g) const { return masks_[g]; }
  // What each gate reads of state h: {h}, or h * mask_g per gate.
  std::vector<Tensor> of(const Tensor& h) const {
    if (masks_.empty()) return {h};
    std::vector<Tensor> out;
    for (const Tensor& m : masks_) out.push_back(h * m);
    return out;
  }
  // The state's gradient from the gradients of what the gates read.
  Tensor back(const std::vector<Tensor>& d) const {
    if (masks_.empty()) return d.at(0);
    Tensor sum = d.at(0) * masks_[0];
    for (std::size_t g = 1; g < masks_.size(); ++g) sum = sum + d.at(g) * masks_[g];
    return sum;
  }

 private:
  std::vector<Tensor> masks_;
};

// (read, d) pairs of each product group, for the kernel's gradient: one
// product over all steps per group at the end.
struct KernelGradient {
  std::map<std::pair<std::int64_t, std::int64_t>,
           std::pair<std::vector<Tensor>, std::vector<Tensor>>>
      groups;
};

// The recurrent products state·U of one sequence. Gates that read the same
// state share one product; with recurrent masks each gate reads its own.
class Recurrence {
 public:
  Recurrence(Tensor kernel, std::int64_t units) : kernel_(std::move(kernel)), units_(units) {}

  // Gates first .. first + count − 1, side by side [batch, count · units]:
  // reads[0]·U_{first..} when one read serves them all, else reads[k]·U_{first+k}.
  Tensor forward(std::int64_t first, std::int64_t count, const std::vector<Tensor>& reads) {
    if (reads.size() == 1) return matmul(reads[0], cols(first, count));
    std::vector<Tensor> parts;
    for (std::int64_t k = 0; k < count; ++k)
      parts.push_back(matmul(reads[static_cast<std::size_t>(k)], cols(first + k, 1)));
    return concat(parts, 1);
  }

  // Each read's gradient, given d [batch, count · units] of forward's result;
  // keeps (read, d) for the kernel's gradient.
  std::vector<Tensor> backward(std::int64_t first, std::int64_t count,
                               const std::vector<Tensor>& reads, const Tensor& d,
                               KernelGradient& acc) {
    std::vector<Tensor> out;
    if (reads.size() == 1) {
      keep(acc, first, count, reads[0], d);
      out.push_back(matmul(d, cols(first, count), {.transpose_b = true}));
      return out;
    }
    for (std::int64_t k = 0; k < count; ++k) {
      const Tensor dk = columns(d, k * units_, units_);
      keep(acc, first + k, 1, reads[static_cast<std::size_t>(k)], dk);
      out.push_back(matmul(dk, cols(first + k, 1), {.transpose_b = true}));
    }
    return out;
  }

  // [units, gates · units], from every kept pair: Σ_steps readᵀ·d per group.
  static Tensor kernel_gradient(const KernelGradient& acc) {
    std::vector<Tensor> parts;
    for (const auto& [key, pairs] : acc.groups)
      parts.push_back(
          matmul(concat(pairs.first, 0), concat(pairs.second, 0), {.transpose_a = true}));
    return parts.size() == 1 ? parts[0] : concat(parts, 1);
  }

 private:
  static void keep(KernelGradient& acc, std::int64_t first, std::int64_t count, const Tensor& read,
                   const Tensor& d) {
    auto& group = acc.groups[{first, count}];
    group.first.push_back(read);
    group.second.push_back(d);
  }
  const Tensor& cols(std::int64_t first, std::int64_t count) {
    auto [it, inserted] = cols_.try_emplace({first, count});
    if (inserted) it->second = columns(kernel_, first * units_, count * units_);
    return it->second;
  }

  Tensor kernel_;
  std::int64_t units_;
  std::map<std::pair<std::int64_t, std::int64_t>, Tensor> cols_;
};

// Keras's sequence mask (RecurrentOptions::mask), read per step. Without a
// mask every step counts and nothing here computes. Masked steps select
// with where, as Keras's backend: the state kept is bitwise the old one.
class StepMask {
 public:
  StepMask(const char* op, const RecurrentOptions& o, const Dims& d)
      : zero_output_(o.zero_output_for_mask) {
    if (!o.mask.defined()) return;
    const Shape want{d.batch, d.steps};
    LOCKSTEP_CHECK_AS(ShapeError, o.mask.shape() == want, op, ": expected a mask ", want,
                      " (batch, steps), got ", o.mask.shape());
    const Tensor m = o.mask.dtype() == DType::kFloat32 ? o.mask : cast(o.mask, DType::kFloat32);
    // [steps, batch, 1], true where the step counts.
    time_major_ =
        greater(reshape(transpose(m, {1, 0}), {d.steps, d.batch, 1}), Tensor::scalar(0.5f));
  }
  bool on() const { return time_major_.defined(); }
  // The state after step t: the step's new state where it counts, else the old.
  Tensor state(std::int64_t t, const Tensor& fresh, const Tensor& old) const {
    return on() ? where(step_of(time_major_, t), fresh, old) : fresh;
  }
  // Step t's output, given the step's new output and the state kept.
  Tensor output(std::int64_t t, const Tensor& fresh, const Tensor& kept) const {
    if (!on()) return fresh;
    return zero_output_ ? where(step_of(time_major_, t), fresh, Tensor::scalar(0.0f)) : kept;
  }
  // Backward through state(): the part of a state's gradient `d` that
  // reaches the step's new state, and the part that passes to the old one.
  Tensor to_fresh(std::int64_t t, const Tensor& d) const {
    return on() ? where(step_of(time_major_, t), d, Tensor::scalar(0.0f)) : d;
  }
  Tensor to_old(std::int64_t t, const Tensor& d) const {
    return where(step_of(time_major_, t), Tensor::scalar(0.0f), d);
  }
  // Backward through one step: the gradient of the step's new state, and
  // what passes around it to the previous state (undefined: nothing), given
  // the gradient of the step's output and of the state after it.
  std::pair<Tensor, Tensor> split(std::int64_t t, const Tensor& d_output,
                                  const Tensor& d_state) const {
    const Tensor total = d_state.defined() ? d_output + d_state : d_output;
    if (!on()) return {total, Tensor()};
    const Tensor& around = zero_output_ ? d_state : total;
    return {to_fresh(t, total), around.defined() ? to_old(t, around) : Tensor()};
  }

 private:
  bool zero_output_;
  Tensor time_major_;
};

Tensor plus(const Tensor& a, const Tensor& b) { return b.defined() ? a + b : a; }

// What a recurrent op records as its inputs: the given ones, then the
// initial states it starts from (those given).
std::vector<Tensor> recorded_inputs(std::vector<Tensor> inputs, const RecurrentOptions& o) {
  for (const Tensor* state : {&o.initial_h, &o.initial_c}) {
    if (state->defined()) inputs.push_back(*state);
  }
  return inputs;
}

// The gradients of the initial states (those given), after the others: what
// reached the state before the first step.
void add_initial_state_grads(Grads& grads, const RecurrentOptions& o, const Tensor& dh,
                             const Tensor& dc) {
  if (o.initial_h.defined()) grads.push_back(dh);
  if (o.initial_c.defined()) grads.push_back(dc);
}

bool half_operands(const Tensor& a, const Tensor& b) { return detail::any_half({&a, &b}); }
Tensor widened(const Tensor& x) { return detail::widen(x); }
RecurrentOptions widened(RecurrentOptions o) {
  o.recurrent_masks = widened(o.recurrent_masks);
  o.initial_h = widened(o.initial_h);
  o.initial_c = widened(o.initial_c);
  return o;
}

// ---- SimpleRNN ----------------------------------------------------------------

struct SimpleRnnStep {
  std::vector<Tensor> reads;
  Tensor h;
};

}  // namespace

Tensor simple_rnn(const Tensor& projected, const Tensor& recurrent_kernel,
                  const RecurrentOptions& options) {
  if (half_operands(projected, recurrent_kernel))
    return cast(simple_rnn(widened(projected), widened(recurrent_kernel), widened(options)),
                projected.dtype());
  const Dims d = check("simple_rnn", projected, recurrent_kernel, 1, options);
  const std::vector<Tensor> inputs = recorded_inputs({projected, recurrent_kernel}, options);
  const bool recording = detail::should_record(inputs);
  auto rec = std::make_shared<Recurrence>(recurrent_kernel, d.units);
  auto steps = std::make_shared<std::vector<SimpleRnnStep>>();
  const StateReads reads(options.recurrent_masks, 1);
  const StepMask masked("simple_rnn", options, d);
  Tensor out;
  {
    detail::RecordingPause pause;
    const Tensor time_major = transpose(projected, {1, 0, 2});
    Tensor h = options.initial_h.defined() ? options.initial_h : zeros_like(step_of(time_major, 0));
    std::vector<Tensor> outs;
    for (std::int64_t s = 0; s < d.steps; ++s) {
      const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
      std::vector<Tensor> r = reads.of(h);
      const Tensor fresh =
          activate(options.activation, step_of(time_major, t) + rec->forward(0, 1, r));
      h = masked.state(t, fresh, h);
      outs.push_back(masked.output(t, fresh, h));
      if (recording) steps->push_back({std::move(r), fresh});
    }
    if (options.return_states) outs.push_back(h);
    out = batch_major(outs);
  }
  if (recording) {
    detail::record("simple_rnn", inputs, out,
                   [rec, steps, reads, masked, d, options](const Tensor& grad) {
                     const Tensor g = transpose(grad, {1, 0, 2});
                     std::vector<Tensor> dx(static_cast<std::size_t>(d.steps));
                     KernelGradient acc;
                     // The final state's gradient, when it is an output.
                     Tensor dh_next = options.return_states ? step_of(g, d.steps) : Tensor();
                     for (std::int64_t s = d.steps - 1; s >= 0; --s) {
                       const SimpleRnnStep& st = (*steps)[static_cast<std::size_t>(s)];
                       const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
                       const auto [dh, around] = masked.split(t, step_of(g, s), dh_next);
                       const Tensor da = dh * slope(options.activation, st.h);
                       dx[static_cast<std::size_t>(t)] = da;
                       dh_next = plus(reads.back(rec->backward(0, 1, st.reads, da, acc)), around);
                     }
                     Grads grads{batch_major(dx), Recurrence::kernel_gradient(acc)};
                     add_initial_state_grads(grads, options, dh_next, Tensor());
                     return grads;
                   });
  }
  return out;
}

// ---- LSTM ---------------------------------------------------------------------

namespace {
struct LstmStep {
  std::vector<Tensor> reads;
  Tensor i, f, g, o, c_prev, ac;  // gates, the cell before, activation(cell)
};
}  // namespace

Tensor lstm(const Tensor& projected, const Tensor& recurrent_kernel,
            const RecurrentOptions& options) {
  if (half_operands(projected, recurrent_kernel))
    return cast(lstm(widened(projected), widened(recurrent_kernel), widened(options)),
                projected.dtype());
  if (!detail::lstm_runs_fused(projected, options))
    return detail::lstm_composed(projected, recurrent_kernel, options);
  const Dims d = check("lstm", projected, recurrent_kernel, 4, options);
  (void)StepMask("lstm", options, d);  // checks the mask's shape
  return detail::lstm_fused(projected, recurrent_kernel, options,
                            recorded_inputs({projected, recurrent_kernel}, options));
}

Tensor detail::lstm_composed(const Tensor& projected, const Tensor& recurrent_kernel,
                             const RecurrentOptions& options) {
  if (half_operands(projected, recurrent_kernel))
    return cast(lstm_composed(widened(projected), widened(recurrent_kernel), widened(options)),
                projected.dtype());
  const Dims d = check("lstm", projected, recurrent_kernel, 4, options);
  const std::int64_t u = d.units;
  const std::vector<Tensor> inputs = recorded_inputs({projected, recurrent_kernel}, options);
  const bool recording = detail::should_record(inputs);
  auto rec = std::make_shared<Recurrence>(recurrent_kernel, u);
  auto steps = std::make_shared<std::vector<LstmStep>>();
  const StateReads reads(options.recurrent_masks, 4);
  const StepMask masked("lstm", options, d);
  Tensor out;
  {
    detail::RecordingPause pause;
    const Tensor time_major = transpose(projected, {1, 0, 2});
    const Tensor zeros = zeros_like(columns(step_of(time_major, 0), 0, u));
    Tensor h = options.initial_h.defined() ? options.initial_h : zeros;
    Tensor c = options.initial_c.defined() ? options.initial_c : zeros;
    std::vector<Tensor> outs;
    for (std::int64_t s = 0; s < d.steps; ++s) {
      const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
      std::vector<Tensor> r = reads.of(h);
      const Tensor z = step_of(time_major, t) + rec->forward(0, 4, r);
      LstmStep st{std::move(r),
                  activate(options.recurrent_activation, columns(z, 0, u)),
                  activate(options.recurrent_activation, columns(z, u, u)),
                  activate(options.activation, columns(z, 2 * u, u)),
                  activate(options.recurrent_activation, columns(z, 3 * u, u)),
                  c,
                  {}};
      const Tensor c_fresh = st.f * c + st.i * st.g;
      st.ac = activate(options.activation, c_fresh);
      const Tensor h_fresh = st.o * st.ac;
      c = masked.state(t, c_fresh, c);
      h = masked.state(t, h_fresh, h);
      outs.push_back(masked.output(t, h_fresh, h));
      if (recording) steps->push_back(std::move(st));
    }
    if (options.return_states) {
      outs.push_back(h);
      outs.push_back(c);
    }
    out = batch_major(outs);
  }
  if (recording) {
    detail::record(
        "lstm", inputs, out, [rec, steps, reads, masked, d, options](const Tensor& grad) {
          const Tensor g = transpose(grad, {1, 0, 2});
          std::vector<Tensor> dz(static_cast<std::size_t>(d.steps));
          KernelGradient acc;
          // The final states' gradients, when they are outputs.
          Tensor dh_next, dc_next;
          if (options.return_states) {
            dh_next = step_of(g, d.steps);
            dc_next = step_of(g, d.steps + 1);
          }
          const Act act = options.activation, ract = options.recurrent_activation;
          for (std::int64_t s = d.steps - 1; s >= 0; --s) {
            const LstmStep& st = (*steps)[static_cast<std::size_t>(s)];
            const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
            const auto [dh, around] = masked.split(t, step_of(g, s), dh_next);
            Tensor dc = dh * st.o * slope(act, st.ac);
            Tensor dc_around;
            if (dc_next.defined()) {
              dc = dc + masked.to_fresh(t, dc_next);
              if (masked.on()) dc_around = masked.to_old(t, dc_next);
            }
            const Tensor di = dc * st.g * slope(ract, st.i);
            const Tensor df = dc * st.c_prev * slope(ract, st.f);
            const Tensor dg = dc * st.i * slope(act, st.g);
            const Tensor dout = dh * st.ac * slope(ract, st.o);
            dc_next = plus(dc * st.f, dc_around);
            const Tensor step_grad = concat({di, df, dg, dout}, 1);
            dz[static_cast<std::size_t>(t)] = step_grad;
            dh_next = plus(reads.back(rec->backward(0, 4, st.reads, step_grad, acc)), around);
          }
          Grads grads{batch_major(dz), Recurrence::kernel_gradient(acc)};
          add_initial_state_grads(grads, options, dh_next, dc_next);
          return grads;
        });
  }
  return out;
}

// ---- GRU ----------------------------------------------------------------------

namespace {
struct GruStep {
  std::vector<Tensor> reads;
  Tensor z, r, hh, h_prev;
  // reset_after: the candidate's recurrent term h·U_h + b_h; otherwise the
  // state the candidate's product read, r · read_h.
  Tensor candidate_read;
};
}  // namespace

Tensor gru(const Tensor& projected, const Tensor& recurrent_kernel, const Tensor& recurrent_bias,
           bool reset_after, const RecurrentOptions& options) {
  if (half_operands(projected, recurrent_kernel))
    return cast(gru(widened(projected), widened(recurrent_kernel), widened(recurrent_bias),
                    reset_after, widened(options)),
                projected.dtype());
  const Dims d = check("gru", projected, recurrent_kernel, 3, options);
  const std::int64_t u = d.units;
  const bool has_bias = recurrent_bias.defined();
  LOCKSTEP_CHECK(!has_bias || reset_after,
                 "gru: a recurrent bias is added with reset_after only (Keras's GRU without it has "
                 "one bias, on the inputs)");
  if (has_bias) {
    LOCKSTEP_CHECK_AS(ShapeError, recurrent_bias.shape() == Shape{3 * u},
                      "gru: expected a "
                      "recurrent bias [",
                      3 * u, "], got ", recurrent_bias.shape());
  }
  std::vector<Tensor> given{projected, recurrent_kernel};
  if (has_bias) given.push_back(recurrent_bias);
  const std::vector<Tensor> inputs = recorded_inputs(std::move(given), options);
  const bool recording = detail::should_record(inputs);
  auto rec = std::make_shared<Recurrence>(recurrent_kernel, u);
  auto steps = std::make_shared<std::vector<GruStep>>();
  const StateReads reads(options.recurrent_masks, 3);
  const StepMask masked("gru", options, d);
  Tensor out;
  {
    detail::RecordingPause pause;
    const Tensor time_major = transpose(projected, {1, 0, 2});
    Tensor h = options.initial_h.defined() ? options.initial_h
                                           : zeros_like(columns(step_of(time_major, 0), 0, u));
    std::vector<Tensor> outs;
    for (std::int64_t s = 0; s < d.steps; ++s) {
      const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
      const Tensor x = step_of(time_major, t);
      GruStep st{reads.of(h), {}, {}, {}, h, {}};
      const Tensor& read_h = st.reads.size() == 1 ? st.reads[0] : st.reads[2];
      Tensor candidate;
      if (reset_after) {
        Tensor inner = rec->forward(0, 3, st.reads);
        if (has_bias) inner = inner + recurrent_bias;
        st.z = activate(options.recurrent_activation, columns(x, 0, u) + columns(inner, 0, u));
        st.r = activate(options.recurrent_activation, columns(x, u, u) + columns(inner, u, u));
        st.candidate_read = columns(inner, 2 * u, u);
        candidate = st.r * st.candidate_read;
      } else {
        const std::vector<Tensor> zr_reads =
            reads.masked() ? std::vector<Tensor>{st.reads[0], st.reads[1]} : st.reads;
        const Tensor inner = rec->forward(0, 2, zr_reads);
        st.z = activate(options.recurrent_activation, columns(x, 0, u) + columns(inner, 0, u));
        st.r = activate(options.recurrent_activation, columns(x, u, u) + columns(inner, u, u));
        st.candidate_read = st.r * read_h;
        candidate = rec->forward(2, 1, {st.candidate_read});
      }
      st.hh = activate(options.activation, columns(x, 2 * u, u) + candidate);
      const Tensor fresh = st.z * h + (Tensor::scalar(1.0f) - st.z) * st.hh;
      h = masked.state(t, fresh, h);
      outs.push_back(masked.output(t, fresh, h));
      if (recording) steps->push_back(std::move(st));
    }
    if (options.return_states) outs.push_back(h);
    out = batch_major(outs);
  }
  if (!recording) return out;
  detail::record(
      "gru", inputs, out,
      [rec, steps, reads, masked, d, options, reset_after, has_bias](const Tensor& grad) {
        const Tensor g = transpose(grad, {1, 0, 2});
        std::vector<Tensor> dx(static_cast<std::size_t>(d.steps));
        KernelGradient acc;
        // The final state's gradient, when it is an output.
        Tensor dh_next = options.return_states ? step_of(g, d.steps) : Tensor();
        Tensor dbias;
        const Act act = options.activation, ract = options.recurrent_activation;
        for (std::int64_t s = d.steps - 1; s >= 0; --s) {
          const GruStep& st = (*steps)[static_cast<std::size_t>(s)];
          const std::int64_t t = options.go_backwards ? d.steps - 1 - s : s;
          const auto [dh, around] = masked.split(t, step_of(g, s), dh_next);
          const Tensor da_h = dh * (Tensor::scalar(1.0f) - st.z) * slope(act, st.hh);
          const Tensor da_z = dh * (st.h_prev - st.hh) * slope(ract, st.z);
          Tensor dh_prev = dh * st.z;
          Tensor da_r;
          if (reset_after) {
            da_r = da_h * st.candidate_read * slope(ract, st.r);
            const Tensor d_inner = concat({da_z, da_r, da_h * st.r}, 1);
            if (has_bias) {
              const Tensor db = sum(d_inner, {.axes = {0}});
              dbias = dbias.defined() ? dbias + db : db;
            }
            dh_prev = dh_prev + reads.back(rec->backward(0, 3, st.reads, d_inner, acc));
          } else {
            const Tensor d_read_r = rec->backward(2, 1, {st.candidate_read}, da_h, acc)[0];
            const Tensor& read_h = st.reads.size() == 1 ? st.reads[0] : st.reads[2];
            da_r = d_read_r * read_h * slope(ract, st.r);
            const Tensor d_read_h = d_read_r * st.r;
            const std::vector<Tensor> zr_reads =
                reads.masked() ? std::vector<Tensor>{st.reads[0], st.reads[1]} : st.reads;
            std::vector<Tensor> d_reads =
                rec->backward(0, 2, zr_reads, concat({da_z, da_r}, 1), acc);
            if (reads.masked()) {
              d_reads.push_back(d_read_h);
            } else {
              d_reads[0] = d_reads[0] + d_read_h;
            }
            dh_prev = dh_prev + reads.back(d_reads);
          }
          dx[static_cast<std::size_t>(t)] = concat({da_z, da_r, da_h}, 1);
          dh_next = plus(dh_prev, around);
        }
        Grads grads{batch_major(dx), Recurrence::kernel_gradient(acc)};
        if (has_bias) grads.push_back(dbias);
        add_initial_state_grads(grads, options, dh_next, Tensor());
        return grads;
      });
  return out;
}

}  // namespace lockstep
