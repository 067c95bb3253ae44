// The recurrent ops (simple_rnn, lstm, gru: tensor/ops/rnn_ops.cc) against
// a float64 loop written from Keras's cell formulas, with finite-difference
// gradients for every input, going forwards and backwards, with recurrent
// dropout masks, and GRU both ways of reset_after; then the layers over them
// (nn/recurrent_layers.h): SimpleRNN, LSTM and GRU give the op's sequence
// from their own weights, LSTM's unit_forget_bias, dropout that draws one
// mask per sequence, and Bidirectional as its two layers merged.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

using Act = RecurrentActivation;

double ref_act(Act a, double x) {
  switch (a) {
    case Act::kTanh:
      return std::tanh(x);
    case Act::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
    case Act::kHardSigmoid:
      return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0;
    case Act::kRelu:
      return std::max(x, 0.0);
    case Act::kLinear:
      return x;
  }
  return 0;
}

enum class Cell { kSimple, kLstm, kGru, kGruResetBefore };

std::int64_t gates_of(Cell c) { return c == Cell::kSimple ? 1 : c == Cell::kLstm ? 4 : 3; }

// Keras's cells, step by step: xw [b, t, gates·u], kernel [u, gates·u],
// bias [gates·u] (GRU reset_after) or empty, masks [gates, b, u] or empty;
// `steps_real` [b · t] (1 real, 0 masked) or empty: Keras's backend rnn
// keeps the states at a masked step and outputs the last output there, or
// zeros with o.zero_output_for_mask.
Ref ref_sequence(Cell cell, const Ref& xw, const Ref& kernel, const Ref& bias, const Ref& masks,
                 const RecurrentOptions& o, const std::vector<int>& steps_real = {},
                 const Ref& h0 = Ref({0}), const Ref& c0 = Ref({0})) {
  const std::int64_t b = xw.dims[0], steps = xw.dims[1], u = kernel.dims[0];
  const std::int64_t g = gates_of(cell), w = g * u;
  // With return_states the final h (and LSTM's c) follow the steps.
  const std::int64_t extra = o.return_states ? (cell == Cell::kLstm ? 2 : 1) : 0;
  const std::int64_t rows = steps + extra;
  Ref out({b, rows, u});
  for (std::int64_t n = 0; n < b; ++n) {
    std::vector<double> h(static_cast<std::size_t>(u), 0.0), c(h);
    for (std::int64_t j = 0; j < u; ++j) {  // the initial states, when given
      if (h0.size() > 0) h[static_cast<std::size_t>(j)] = h0[n * u + j];
      if (c0.size() > 0) c[static_cast<std::size_t>(j)] = c0[n * u + j];
    }
    for (std::int64_t s = 0; s < steps; ++s) {
      const std::int64_t t = o.go_backwards ? steps - 1 - s : s;
      const bool real =
          steps_real.empty() || steps_real[static_cast<std::size_t>(n * steps + t)] != 0;
      const std::vector<double> h_before = h, c_before = c;
      auto read = [&](std::int64_t gate, std::int64_t k) {
        const double m = masks.size() > 0 ? masks[(gate * b + n) * u + k] : 1.0;
        return h[static_cast<std::size_t>(k)] * m;
      };
      // rec[gate·u + j] = Σ_k read(gate, k) · kernel[k, gate·u + j]
      std::vector<double> rec(static_cast<std::size_t>(w), 0.0);
      for (std::int64_t gate = 0; gate < g; ++gate) {
        if (cell == Cell::kGruResetBefore && gate == 2) continue;
        for (std::int64_t j = 0; j < u; ++j) {
          for (std::int64_t k = 0; k < u; ++k)
            rec[static_cast<std::size_t>(gate * u + j)] +=
                read(gate, k) * kernel[k * w + gate * u + j];
        }
      }
      auto x = [&](std::int64_t col) { return xw[(n * steps + t) * w + col]; };
      std::vector<double> next(static_cast<std::size_t>(u));
      if (cell == Cell::kSimple) {
        for (std::int64_t j = 0; j < u; ++j)
          next[static_cast<std::size_t>(j)] =
              ref_act(o.activation, x(j) + rec[static_cast<std::size_t>(j)]);
      } else if (cell == Cell::kLstm) {
        for (std::int64_t j = 0; j < u; ++j) {
          auto z = [&](std::int64_t gate) {
            return x(gate * u + j) + rec[static_cast<std::size_t>(gate * u + j)];
          };
          const double i = ref_act(o.recurrent_activation, z(0));
          const double f = ref_act(o.recurrent_activation, z(1));
          const double cand = ref_act(o.activation, z(2));
          const double out_gate = ref_act(o.recurrent_activation, z(3));
          double& cj = c[static_cast<std::size_t>(j)];
          cj = f * cj + i * cand;
          next[static_cast<std::size_t>(j)] = out_gate * ref_act(o.activation, cj);
        }
      } else {
        const bool after = cell == Cell::kGru;
        std::vector<double> z(static_cast<std::size_t>(u)), r(z);
        for (std::int64_t j = 0; j < u; ++j) {
          auto inner = [&](std::int64_t gate) {
            return rec[static_cast<std::size_t>(gate * u + j)] +
                   (bias.size() > 0 ? bias[gate * u + j] : 0.0);
          };
          z[static_cast<std::size_t>(j)] = ref_act(o.recurrent_activation, x(j) + inner(0));
          r[static_cast<std::size_t>(j)] = ref_act(o.recurrent_activation, x(u + j) + inner(1));
        }
        for (std::int64_t j = 0; j < u; ++j) {
          double cand;
          if (after) {
            cand = r[static_cast<std::size_t>(j)] * (rec[static_cast<std::size_t>(2 * u + j)] +
                                                     (bias.size() > 0 ? bias[2 * u + j] : 0.0));
          } else {
            cand = 0;
            for (std::int64_t k = 0; k < u; ++k)
              cand += r[static_cast<std::size_t>(k)] * read(2, k) * kernel[k * w + 2 * u + j];
          }
          const double hh = ref_act(o.activation, x(2 * u + j) + cand);
          const double zj = z[static_cast<std::size_t>(j)];
          next[static_cast<std::size_t>(j)] = zj * h[static_cast<std::size_t>(j)] + (1 - zj) * hh;
        }
      }
      h = next;
      if (!real) {
        h = h_before;
        c = c_before;
      }
      for (std::int64_t j = 0; j < u; ++j) {
        out[(n * rows + s) * u + j] =
            !real && o.zero_output_for_mask ? 0.0 : h[static_cast<std::size_t>(j)];
      }
    }
    for (std::int64_t j = 0; j < u * extra; ++j)
      out[(n * rows + steps) * u + j] =
          j < u ? h[static_cast<std::size_t>(j)] : c[static_cast<std::size_t>(j - u)];
  }
  return out;
}

// A {0, 2} mask (dropout at 0.5), as Keras's cells scale theirs.
Ref mask_ref(const Dims& dims, std::mt19937& rng) {
  Ref m(dims);
  for (std::int64_t i = 0; i < m.size(); ++i) m[i] = (rng() % 2) * 2.0;
  return m;
}

// The first `cols` entries of the last axis.
Ref first_columns(const Ref& x, std::int64_t cols) {
  Dims dims = x.dims;
  const std::int64_t w = dims.back();
  dims.back() = cols;
  Ref out(dims);
  for (std::int64_t i = 0; i < out.size(); ++i) out[i] = x[(i / cols) * w + i % cols];
  return out;
}

Tensor run_op(Cell cell, const std::vector<Tensor>& in, RecurrentOptions o) {
  if (cell == Cell::kSimple) return simple_rnn(in[0], in[1], o);
  if (cell == Cell::kLstm) return lstm(in[0], in[1], o);
  if (cell == Cell::kGru) return gru(in[0], in[1], in.size() > 2 ? in[2] : Tensor(), true, o);
  return gru(in[0], in[1], Tensor(), false, o);
}

const char* cell_name(Cell c) {
  switch (c) {
    case Cell::kSimple:
      return "simple_rnn";
    case Cell::kLstm:
      return "lstm";
    case Cell::kGru:
      return "gru";
    case Cell::kGruResetBefore:
      return "gru reset_after=false";
  }
  return "";
}

TEST(RecurrentOps, EachCellIsKerasFormulaWithItsGradients) {
  const std::int64_t b = 2, steps = 4, u = 3;
  for (Cell cell : {Cell::kSimple, Cell::kLstm, Cell::kGru, Cell::kGruResetBefore}) {
    for (bool backwards : {false, true}) {
      for (bool masked : {false, true}) {
        SCOPED_TRACE(std::string(cell_name(cell)) + (backwards ? " go_backwards" : "") +
                     (masked ? " with recurrent masks" : ""));
        std::mt19937 rng(11);
        const std::int64_t g = gates_of(cell);
        const Ref xw = random_ref({b, steps, g * u}, rng, -1.5, 1.5);
        const Ref kernel = random_ref({u, g * u}, rng, -0.8, 0.8);
        const Ref bias = cell == Cell::kGru ? random_ref({g * u}, rng, -0.5, 0.5) : Ref({0});
        const Ref masks = masked ? mask_ref({g, b, u}, rng) : Ref({0});
        std::vector<Ref> inputs{xw, kernel};
        if (cell == Cell::kGru) inputs.push_back(bias);
        RecurrentOptions o{.go_backwards = backwards};
        check_gradients(
            cell_name(cell),
            [&](const std::vector<Tensor>& in) {
              RecurrentOptions with = o;
              if (masked) with.recurrent_masks = to_tensor(masks);
              return run_op(cell, in, with);
            },
            [&](const std::vector<Ref>& in) {
              return ref_sequence(cell, in[0], in[1], in.size() > 2 ? in[2] : Ref({0}), masks, o);
            },
            inputs);
      }
    }
  }
}

// Checks `cell` under `o` over random inputs [b, steps] with `real`, the
// sequence mask [b · steps] (1 real; empty: none), against the float64
// loop, with finite-difference gradients of every input.
void check_with_mask(Cell cell, const RecurrentOptions& o, std::int64_t b, std::int64_t steps,
                     std::int64_t u, const std::vector<int>& real, std::uint32_t seed,
                     bool initial_states = false) {
  std::mt19937 rng(seed);
  const std::int64_t g = gates_of(cell);
  std::vector<Ref> inputs{random_ref({b, steps, g * u}, rng, -1.5, 1.5),
                          random_ref({u, g * u}, rng, -0.8, 0.8)};
  if (cell == Cell::kGru) inputs.push_back(random_ref({g * u}, rng, -0.5, 0.5));
  // Initial states (h, and LSTM's c) as the last inputs, with gradients.
  const std::size_t first_state = inputs.size();
  const std::size_t states = initial_states ? (cell == Cell::kLstm ? 2 : 1) : 0;
  for (std::size_t k = 0; k < states; ++k) inputs.push_back(random_ref({b, u}, rng, -0.9, 0.9));
  const std::vector<std::uint8_t> bytes(real.begin(), real.end());
  const Tensor mask =
      real.empty() ? Tensor() : cast(Tensor::from_vector(bytes, {b, steps}), DType::kBool);
  check_gradients(
      cell_name(cell),
      [&](const std::vector<Tensor>& in) {
        RecurrentOptions with = o;
        with.mask = mask;
        if (states > 0) with.initial_h = in[first_state];
        if (states > 1) with.initial_c = in[first_state + 1];
        return run_op(cell, std::vector<Tensor>(in.begin(), in.begin() + first_state), with);
      },
      [&](const std::vector<Ref>& in) {
        return ref_sequence(cell, in[0], in[1], cell == Cell::kGru ? in[2] : Ref({0}), Ref({0}), o,
                            real, states > 0 ? in[first_state] : Ref({0}),
                            states > 1 ? in[first_state + 1] : Ref({0}));
      },
      inputs);
}

// Keras's sequence masks (Embedding's mask_zero): a masked step keeps the
// states, and outputs the last output or zeros; padding at the end, at the
// start and inside, forwards and backwards, with the gradients of every
// input (a masked step's input gets none).
TEST(RecurrentOps, SequenceMasksSkipStepsAsKeras) {
  // Row 0 padded at the end, row 1 with a hole and padded at the start,
  // row 2 all real.
  const std::vector<int> real{1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 1};
  for (Cell cell : {Cell::kSimple, Cell::kLstm, Cell::kGru, Cell::kGruResetBefore}) {
    for (bool backwards : {false, true}) {
      for (bool zero_output : {false, true}) {
        SCOPED_TRACE(std::string(cell_name(cell)) + (backwards ? " go_backwards" : "") +
                     (zero_output ? " zero_output_for_mask" : ""));
        check_with_mask(cell, {.go_backwards = backwards, .zero_output_for_mask = zero_output}, 3,
                        5, 2, real, 23);
      }
    }
  }
}

// Keras's return_state: the final states after the outputs, with their
// gradients (which reach every step through the recurrence), under a mask
// (the states kept at padded steps) and going backwards.
TEST(RecurrentOps, FinalStatesWithTheirGradients) {
  const std::vector<int> real{1, 1, 1, 0, 0, 1, 1, 1};
  for (Cell cell : {Cell::kSimple, Cell::kLstm, Cell::kGru, Cell::kGruResetBefore}) {
    for (bool masked : {false, true}) {
      SCOPED_TRACE(std::string(cell_name(cell)) + (masked ? " masked, go_backwards" : ""));
      check_with_mask(cell, {.go_backwards = masked, .return_states = true}, 2, 4, 2,
                      masked ? real : std::vector<int>{}, 29);
    }
  }
}

// Keras's initial_state: the recurrence starts from given states (an
// encoder's, in a sequence-to-sequence model), which get their gradients;
// with the final states returned too, and under a mask whose first steps
// are padding (the initial states carried through them).
TEST(RecurrentOps, InitialStatesWithTheirGradients) {
  const std::vector<int> real{0, 1, 1, 1, 1, 1, 0, 1};
  for (Cell cell : {Cell::kSimple, Cell::kLstm, Cell::kGru, Cell::kGruResetBefore}) {
    for (bool masked : {false, true}) {
      SCOPED_TRACE(std::string(cell_name(cell)) + (masked ? " masked" : ""));
      check_with_mask(cell, {.return_states = masked}, 2, 4, 2, masked ? real : std::vector<int>{},
                      31, true);
    }
  }
}

// The host's fused LSTM kernel (tensor/ops/lstm_host.cc) against the
// composed form accelerators run, on a shape with vector tails (19 units)
// and saturating inputs: forward and every gradient, going either way,
// under a mask with and without zero outputs, from initial states and
// returning the final ones.
TEST(RecurrentOps, FusedHostLstmIsTheComposedForm) {
  const std::int64_t b = 5, steps = 7, u = 19;
  std::mt19937 rng(37);
  const Tensor xw = to_tensor(random_ref({b, steps, 4 * u}, rng, -6.0, 6.0));
  const Tensor kernel = to_tensor(random_ref({u, 4 * u}, rng, -0.6, 0.6));
  const Tensor h0 = to_tensor(random_ref({b, u}, rng, -0.9, 0.9));
  const Tensor c0 = to_tensor(random_ref({b, u}, rng, -2.0, 2.0));
  std::vector<std::uint8_t> real(static_cast<std::size_t>(b * steps), 1);
  for (std::size_t i = 0; i < real.size(); i += 3) real[i] = 0;
  const Tensor mask = cast(Tensor::from_vector(real, {b, steps}), DType::kBool);
  struct Case {
    const char* name;
    RecurrentOptions o;
    bool states = false;
  };
  const std::vector<Case> cases{
      {"plain", {}},
      {"go_backwards", {.go_backwards = true}},
      {"masked", {.mask = mask}},
      {"masked, zero outputs, backwards",
       {.go_backwards = true, .mask = mask, .zero_output_for_mask = true}},
      {"initial and final states, masked", {.mask = mask, .return_states = true}, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> xs{xw, kernel};
    if (c.states) xs.insert(xs.end(), {h0, c0});
    const Tensor w =
        to_tensor(random_ref({b, steps + (c.o.return_states ? 2 : 0), u}, rng, 0.5, 1.5));
    auto run = [&](bool fused) {
      GradientTape tape;
      for (const Tensor& x : xs) tape.watch(x);
      RecurrentOptions o = c.o;
      if (c.states) {
        o.initial_h = xs[2];
        o.initial_c = xs[3];
      }
      const Tensor y = fused ? lstm(xs[0], xs[1], o) : detail::lstm_composed(xs[0], xs[1], o);
      std::vector<Tensor> out{y};
      for (const Tensor& g : tape.gradient(sum(mul(y, w)), xs)) out.push_back(g);
      return out;
    };
    const std::vector<Tensor> fused = run(true), composed = run(false);
    for (std::size_t k = 0; k < fused.size(); ++k) {
      SCOPED_TRACE(k == 0 ? "output" : "gradient of input " + std::to_string(k - 1));
      expect_close(to_ref(composed[k]), fused[k], 2e-6, 2e-5, c.name);
    }
  }
}

// A mask of every step real is no mask: bitwise the same sequence.
TEST(RecurrentOps, AnAllRealMaskChangesNothing) {
  std::mt19937 rng(3);
  const Tensor xw = to_tensor(random_ref({2, 4, 8}, rng, -1.0, 1.0));
  const Tensor kernel = to_tensor(random_ref({2, 8}, rng, -0.5, 0.5));
  const Tensor plain = lstm(xw, kernel);
  const Tensor masked = lstm(xw, kernel, {.mask = Tensor::ones({2, 4}, DType::kBool)});
  EXPECT_EQ(plain.to_vector<float>(), masked.to_vector<float>());
}

TEST(RecurrentOps, AMaskOfTheWrongShapeIsRefused) {
  const Tensor xw = Tensor::zeros({2, 4, 8}), kernel = Tensor::zeros({2, 8});
  try {
    lstm(xw, kernel, {.mask = Tensor::ones({2, 3}, DType::kBool)});
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a mask [2, 4]"), std::string::npos) << e.what();
  }
}

TEST(RecurrentOps, EveryActivationTheOpsTake) {
  // hard_sigmoid and relu have kinks: forward values, and gradients where
  // the finite differences stay off them (linear, and the smooth pairs).
  std::mt19937 rng(5);
  const std::int64_t b = 2, steps = 3, u = 2;
  for (Act a : {Act::kTanh, Act::kSigmoid, Act::kHardSigmoid, Act::kRelu, Act::kLinear}) {
    for (Act ra : {Act::kSigmoid, Act::kHardSigmoid, Act::kTanh}) {
      const Ref xw = random_ref({b, steps, 4 * u}, rng, -1.0, 1.0);
      const Ref kernel = random_ref({u, 4 * u}, rng, -0.5, 0.5);
      const RecurrentOptions o{.activation = a, .recurrent_activation = ra};
      for (Cell cell : {Cell::kSimple, Cell::kLstm, Cell::kGru}) {
        SCOPED_TRACE(std::string(cell_name(cell)) + " activations " +
                     std::to_string(static_cast<int>(a)) + "/" +
                     std::to_string(static_cast<int>(ra)));
        const std::int64_t g = gates_of(cell);
        const Ref x = first_columns(xw, g * u), k = first_columns(kernel, g * u);
        const Ref expected = ref_sequence(cell, x, k, Ref({0}), Ref({0}), o);
        expect_close(expected, run_op(cell, {to_tensor(x), to_tensor(k)}, o), 1e-5, 1e-4,
                     "forward");
      }
    }
  }
}

// x·kernel + bias of every step, [b, t, w].
Ref ref_projection(const Ref& x, const Ref& kernel, const Ref& bias) {
  const std::int64_t b = x.dims[0], steps = x.dims[1], f = x.dims[2], w = kernel.dims[1];
  Ref out({b, steps, w});
  for (std::int64_t r = 0; r < b * steps; ++r) {
    for (std::int64_t j = 0; j < w; ++j) {
      double s = bias.size() > 0 ? bias[j] : 0.0;
      for (std::int64_t k = 0; k < f; ++k) s += x[r * f + k] * kernel[k * w + j];
      out[r * w + j] = s;
    }
  }
  return out;
}

Ref last_step(const Ref& seq) {
  const std::int64_t b = seq.dims[0], steps = seq.dims[1], u = seq.dims[2];
  Ref out({b, u});
  for (std::int64_t n = 0; n < b; ++n) {
    for (std::int64_t j = 0; j < u; ++j) out[n * u + j] = seq[(n * steps + steps - 1) * u + j];
  }
  return out;
}

TEST(RecurrentLayers, EachLayerRunsItsCellOverItsOwnWeights) {
  std::mt19937 rng(3);
  const Ref x = random_ref({2, 5, 3}, rng);
  const layers::RecurrentLayerOptions o{
      .bias_initializer = initializers::RandomUniform(-0.3f, 0.3f), .return_sequences = true};
  struct Case {
    Layer layer;
    Cell cell;
  };
  layers::RecurrentLayerOptions before = o;
  before.reset_after = false;
  for (const Case& c :
       {Case{layers::SimpleRNN(4, o), Cell::kSimple}, Case{layers::LSTM(4, o), Cell::kLstm},
        Case{layers::GRU(4, o), Cell::kGru}, Case{layers::GRU(4, before), Cell::kGruResetBefore}}) {
    SCOPED_TRACE(cell_name(c.cell));
    const Tensor y = c.layer(to_tensor(x));
    const std::vector<Variable> w = c.layer.weights();
    ASSERT_EQ(w.size(), 3u);
    EXPECT_EQ(w[1].value().shape(), Shape({4, gates_of(c.cell) * 4}));
    Ref bias = to_ref(w[2].value()), recurrent_bias({0});
    if (c.cell == Cell::kGru) {  // [2, 12]: input, then recurrent
      ASSERT_EQ(w[2].value().shape(), Shape({2, 12}));
      Ref input({12});
      recurrent_bias = Ref({12});
      for (int j = 0; j < 12; ++j) input[j] = bias[j], recurrent_bias[j] = bias[12 + j];
      bias = input;
    }
    const Ref seq = ref_sequence(c.cell, ref_projection(x, to_ref(w[0].value()), bias),
                                 to_ref(w[1].value()), recurrent_bias, Ref({0}), {});
    expect_close(seq, y, 1e-5, 1e-4, "sequences");
    layers::RecurrentLayerOptions last = o;
    last.return_sequences = false;
    last.reset_after = c.cell != Cell::kGruResetBefore;
    auto* impl = dynamic_cast<layers::RecurrentImpl*>(c.layer.impl().get());
    Layer again(std::make_shared<layers::RecurrentImpl>(impl->class_name(), 4, last));
    (void)again(to_tensor(x));
    for (std::size_t i = 0; i < 3; ++i) again.weights()[i].assign(w[i].value());
    expect_close(last_step(seq), again(to_tensor(x)), 1e-5, 1e-4, "last step");
  }
}

TEST(RecurrentLayers, LstmStartsItsForgetGateBiasAtOne) {
  layers::LSTM lstm(3);
  (void)lstm(Tensor::zeros({1, 2, 2}));
  const std::vector<float> bias = lstm->bias().value().to_vector<float>();
  ASSERT_EQ(bias.size(), 12u);
  for (int j = 0; j < 12; ++j) EXPECT_EQ(bias[j], j >= 3 && j < 6 ? 1.0f : 0.0f) << j;
  layers::LSTM plain(3, {.unit_forget_bias = false});
  (void)plain(Tensor::zeros({1, 2, 2}));
  for (float v : plain->bias().value().to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(RecurrentLayers, DropoutDrawsOneMaskPerSequenceInTrainingOnly) {
  // Identity kernel, no recurrence: the output is the dropped input itself.
  layers::SimpleRNN rnn(6, {.activation = "linear",
                            .use_bias = false,
                            .kernel_initializer = initializers::Identity(),
                            .recurrent_initializer = initializers::Zeros(),
                            .dropout = 0.5f,
                            .seed = 9,
                            .return_sequences = true});
  std::mt19937 rng(4);
  const Ref x = random_ref({4, 5, 6}, rng, 0.5, 1.5);
  expect_close(x, rnn(to_tensor(x)), 1e-6, 1e-6, "inference keeps every input");
  const std::vector<float> y = rnn(to_tensor(x), {.training = true}).to_vector<float>();
  int dropped = 0, kept = 0;
  for (int n = 0; n < 4; ++n) {
    for (int f = 0; f < 6; ++f) {
      const double ratio = y[(n * 5) * 6 + f] / x[(n * 5) * 6 + f];
      EXPECT_TRUE(std::abs(ratio) < 1e-6 || std::abs(ratio - 2.0) < 1e-5) << ratio;
      (ratio < 1 ? dropped : kept)++;
      for (int t = 1; t < 5; ++t)
        EXPECT_NEAR(y[(n * 5 + t) * 6 + f] / x[(n * 5 + t) * 6 + f], ratio, 1e-5)
            << "the mask changed between steps";
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept, 0);
}

TEST(RecurrentLayers, BidirectionalMergesItsTwoLayers) {
  std::mt19937 rng(6);
  const Ref x = random_ref({2, 4, 3}, rng);
  for (bool sequences : {true, false}) {
    SCOPED_TRACE(sequences ? "return_sequences" : "last step");
    layers::Bidirectional bi(layers::LSTM(2, {.return_sequences = sequences, .name = "enc"}));
    const Tensor y = bi(to_tensor(x));
    EXPECT_EQ(bi->forward_layer().name(), "forward_enc");
    EXPECT_EQ(bi->backward_layer().name(), "backward_enc");
    EXPECT_TRUE(bi->backward_layer().options().go_backwards);
    EXPECT_EQ(bi.weights().size(), 6u);
    Ref f = to_ref(bi->forward_layer().apply({to_tensor(x)}, {}).at(0));
    Ref b = to_ref(bi->backward_layer().apply({to_tensor(x)}, {}).at(0));
    const std::int64_t steps = sequences ? 4 : 1;
    Ref expected({2, steps, 4});
    for (std::int64_t n = 0; n < 2; ++n) {
      for (std::int64_t t = 0; t < steps; ++t) {
        for (std::int64_t j = 0; j < 2; ++j) {
          expected[(n * steps + t) * 4 + j] = f[(n * steps + t) * 2 + j];
          // The backward layer's outputs come back in time order.
          expected[(n * steps + t) * 4 + 2 + j] = b[(n * steps + (steps - 1 - t)) * 2 + j];
        }
      }
    }
    if (!sequences) expected.dims = {2, 4};
    expect_close(expected, y, 1e-6, 1e-6, "concat");
  }
  EXPECT_THROW(layers::Bidirectional(layers::Dense(2)), ValueError);
  EXPECT_THROW(layers::Bidirectional(layers::LSTM(2), {.merge_mode = "max"}), ValueError);
}

// Keras's Bidirectional(layer)(x, initial_state=[...]): the first half of
// the states starts the forward layer, the second half the backward one
// (GRU: h each; LSTM: h, c each); a count that does not split is refused.
TEST(RecurrentLayers, BidirectionalSplitsItsInitialStatesInHalf) {
  std::mt19937 rng(8);
  const Tensor x = to_tensor(random_ref({2, 4, 3}, rng));
  auto state = [&] { return to_tensor(random_ref({2, 2}, rng)); };
  for (bool lstm : {false, true}) {
    SCOPED_TRACE(lstm ? "LSTM" : "GRU");
    layers::Bidirectional bi(lstm ? Layer(layers::LSTM(2)) : Layer(layers::GRU(2)),
                             {.merge_mode = "sum"});
    std::vector<Tensor> states;
    for (int i = 0; i < (lstm ? 4 : 2); ++i) states.push_back(state());
    std::vector<Tensor> inputs{x};
    inputs.insert(inputs.end(), states.begin(), states.end());
    const Tensor y = bi(inputs).at(0);
    const std::size_t half = states.size() / 2;
    std::vector<Tensor> f_in{x}, b_in{x};
    f_in.insert(f_in.end(), states.begin(), states.begin() + static_cast<std::ptrdiff_t>(half));
    b_in.insert(b_in.end(), states.begin() + static_cast<std::ptrdiff_t>(half), states.end());
    const Tensor f = bi->forward_layer().apply(f_in, {}).at(0);
    const Tensor b = bi->backward_layer().apply(b_in, {}).at(0);
    expect_close(to_ref(f + b), y, 1e-6, 1e-6, "sum of the two layers from their states");
    // Without states the result differs: the states were used.
    EXPECT_GT(max(abs(bi(x) - y)).item<float>(), 1e-3f);
    inputs.pop_back();
    EXPECT_THROW(bi(inputs), ValueError);
  }
}

// stateful = true: row i of a batch continues row i of the batch before,
// so two calls are one call on their steps joined; no gradient reaches the
// earlier batch; reset_states() starts from zeros; a batch of another size
// is refused; the probe that builds a graph leaves no state.
TEST(RecurrentLayers, StatefulLayersContinueEachRowFromThePreviousBatch) {
  std::mt19937 rng(11);
  const Ref a = random_ref({3, 4, 2}, rng), b = random_ref({3, 5, 2}, rng);
  Ref ab({3, 9, 2});
  for (std::int64_t n = 0; n < 3; ++n)
    for (std::int64_t t = 0; t < 9; ++t)
      for (std::int64_t f = 0; f < 2; ++f)
        ab[(n * 9 + t) * 2 + f] = t < 4 ? a[(n * 4 + t) * 2 + f] : b[(n * 5 + t - 4) * 2 + f];
  for (const std::string cls : {"SimpleRNN", "LSTM", "GRU"}) {
    SCOPED_TRACE(cls);
    auto make = [&](bool stateful) -> Layer {
      const layers::RecurrentLayerOptions o{.return_sequences = true, .stateful = stateful};
      if (cls == "LSTM") return layers::LSTM(3, o);
      if (cls == "GRU") return layers::GRU(3, o);
      return layers::SimpleRNN(3, o);
    };
    Layer kept = make(true), plain = make(false);
    auto* impl = static_cast<layers::RecurrentImpl*>(kept.impl().get());
    const Tensor first = kept(to_tensor(a));
    EXPECT_EQ(impl->states().size(), cls == "LSTM" ? 2u : 1u);
    const Tensor second = kept(to_tensor(b));
    (void)plain(to_tensor(ab));
    for (std::size_t i = 0; i < 3; ++i) plain->weights()[i].assign(kept->weights()[i].value());
    const Tensor whole = plain(to_tensor(ab));
    expect_close(to_ref(slice(whole, {0, 0, 0}, {3, 4, 3})), first, 1e-6, 1e-6, "first batch");
    expect_close(to_ref(slice(whole, {0, 4, 0}, {3, 5, 3})), second, 1e-6, 1e-6,
                 "second batch, from the first one's states");
    // The previous batch is a constant to the next one.
    kept->reset_states();
    EXPECT_TRUE(impl->states().empty());
    {
      const Tensor at = to_tensor(a), bt = to_tensor(b);
      GradientTape tape;
      tape.watch(at);
      tape.watch(bt);
      (void)kept(at);
      const Tensor y = kept(bt);
      const auto g = tape.gradient(sum(y), {at, bt}, UnconnectedGradients::kZero);
      EXPECT_EQ(max(abs(g[0])).item<float>(), 0.0f);
      EXPECT_GT(max(abs(g[1])).item<float>(), 0.0f);
    }
    kept->reset_states();
    EXPECT_EQ(kept(to_tensor(a)).to_vector<float>(), first.to_vector<float>());
    EXPECT_THROW(kept(to_tensor(random_ref({2, 4, 2}, rng))), ValueError);
    kept->reset_states();  // a new batch size after a reset
    EXPECT_EQ(kept(to_tensor(random_ref({2, 4, 2}, rng))).shape(), Shape({2, 4, 3}));
  }
  // Building a graph runs the layer on one example of zeros: no state.
  layers::LSTM lstm(2, {.stateful = true});
  (void)lstm(Input({4, 2}));
  EXPECT_TRUE(lstm->states().empty());
  EXPECT_TRUE(lstm->stateful());
}

}  // namespace
}  // namespace lockstep::testing
