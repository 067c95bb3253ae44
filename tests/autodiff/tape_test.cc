// GradientTape semantics (as tf.GradientTape) and Variable behaviour.
#include <gtest/gtest.h>

#include <thread>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

Tensor vec(std::vector<float> v) { return Tensor::from_vector<float>(v); }

TEST(Tape, GradientOfReusedTensorAccumulates) {
  const Tensor x = vec({3.0f});
  GradientTape tape;
  tape.watch(x);
  const Tensor y = add(mul(x, x), x);  // x² + x: dy/dx = 2x + 1 = 7
  EXPECT_FLOAT_EQ(tape.gradient(y, x).item<float>(), 7.0f);
}

TEST(Tape, UnwatchedTensorsAreNotRecorded) {
  const Tensor x = vec({1.0f, 2.0f});
  GradientTape tape;
  const Tensor y = mul(x, x);
  EXPECT_EQ(tape.num_recorded_ops(), 0u);
  EXPECT_FALSE(tape.gradient(sum(y), x).defined());  // None, as TensorFlow
}

TEST(Tape, BackwardRulesAreToldWhichInputsGetGradients) {
  const Tensor a = vec({1.0f, 2.0f}), b = vec({3.0f, 4.0f});
  std::vector<bool> told;
  GradientTape tape;
  tape.watch(b);  // a is not watched: nobody wants its gradient
  const Tensor out = mul(a, b).copy();
  detail::record("probe", {a, b}, out, [&](const Tensor& g) {
    told = {detail::needs_input_grad(0), detail::needs_input_grad(1)};
    return detail::Grads{Tensor(), g};
  });
  tape.gradient(sum(out), b);
  EXPECT_EQ(told, (std::vector<bool>{false, true}));
  EXPECT_TRUE(detail::needs_input_grad(0));  // outside a backward call
}

// The first Dense layer of every model multiplies the input by its kernel:
// the input's gradient (a GEMM as large as the forward one) is not computed.
TEST(Tape, MatmulComputesOnlyTheGradientsTheTapeNeeds) {
  random::Generator gen(3);
  const Tensor x = gen.normal({8, 5});
  Variable w(gen.normal({5, 3}));
  Allocator& alloc = current_device().allocator();
  auto allocations_in_gradient = [&](bool watch_x) {
    GradientTape tape;
    if (watch_x) tape.watch(x);
    const Tensor loss = sum(matmul(x, w));
    const auto before = alloc.stats().allocations;
    const auto grads = tape.gradient(loss, {w.value(), x});
    EXPECT_TRUE(grads[0].defined());
    EXPECT_EQ(grads[1].defined(), watch_x);
    return alloc.stats().allocations - before;
  };
  EXPECT_EQ(allocations_in_gradient(true) - allocations_in_gradient(false), 1u);  // dx

  // And the kernel's gradient is still exact: d/dw sum(x·w) = xᵀ·1.
  GradientTape tape;
  const Tensor dw = tape.gradient(sum(matmul(x, w)), std::vector<Variable>{w})[0];
  const Tensor expected = matmul(x, Tensor::full({8, 3}, 1.0f), {.transpose_a = true});
  EXPECT_EQ(dw.to_vector<float>(), expected.to_vector<float>());
}

// `temporary * 4.0f` may write into a temporary nobody holds, but not into
// one a tape watches: the recorded op needs its own output.
TEST(Tape, ScalarArithmeticOnAWatchedTemporaryIsRecordedNotInPlace) {
  const Tensor x = vec({1.0f, 2.0f, 3.0f});
  GradientTape tape;
  Tensor watched = x.copy();
  tape.watch(watched);
  const void* buffer = watched.raw_data();
  Tensor temporary = watched;  // the tape knows it by id, not by reference
  watched = Tensor();
  Tensor product = std::move(temporary) * 4.0f;
  EXPECT_NE(product.raw_data(), buffer);
  EXPECT_EQ(tape.num_recorded_ops(), 1u);
}

TEST(Tape, UnconnectedSourcesGiveNoneOrZeros) {
  const Tensor x = vec({1.0f}), z = vec({5.0f, 6.0f});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  tape.watch(z);
  const Tensor y = mul(x, x);
  auto g = tape.gradient(y, {x, z});
  EXPECT_TRUE(g[0].defined());
  EXPECT_FALSE(g[1].defined());
  g = tape.gradient(y, {x, z}, UnconnectedGradients::kZero);
  EXPECT_EQ(g[1].to_vector<float>(), (std::vector<float>{0, 0}));
}

TEST(Tape, NonPersistentTapeAnswersOnce) {
  const Tensor x = vec({2.0f});
  GradientTape tape;
  tape.watch(x);
  const Tensor y = square(x);
  EXPECT_FLOAT_EQ(tape.gradient(y, x).item<float>(), 4.0f);
  try {
    tape.gradient(y, x);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("persistent"), std::string::npos);
  }
}

TEST(Tape, PersistentTapeAnswersManyTimes) {
  const Tensor x = vec({2.0f});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  const Tensor y = square(x);
  const Tensor z = mul(y, y);  // x⁴
  EXPECT_FLOAT_EQ(tape.gradient(y, x).item<float>(), 4.0f);
  EXPECT_FLOAT_EQ(tape.gradient(z, x).item<float>(), 32.0f);
  EXPECT_FLOAT_EQ(tape.gradient(z, y).item<float>(), 8.0f);  // intermediate source
}

TEST(Tape, TrainableVariablesAreWatchedOnRead) {
  Variable w(vec({1.0f, 2.0f}), {.name = "w"});
  Variable frozen(vec({3.0f}), {.name = "frozen", .trainable = false});
  GradientTape tape({.persistent = true});
  const Tensor y = sum(mul(w, w)) * frozen.value();
  auto g = tape.gradient(y, std::vector<Variable>{w, frozen});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{6.0f, 12.0f}));  // 2·w·3
  EXPECT_FALSE(g[1].defined());  // not trainable: not watched
  const auto watched = tape.watched_variables();
  ASSERT_EQ(watched.size(), 1u);
  EXPECT_EQ(watched[0].name(), "w");
}

TEST(Tape, WatchAccessedVariablesFalseWatchesOnlyExplicitly) {
  Variable a(vec({1.0f})), b(vec({2.0f}));
  GradientTape tape({.watch_accessed_variables = false});
  tape.watch(b);
  const Tensor y = mul(a, b);
  auto g = tape.gradient(y, std::vector<Variable>{a, b});
  EXPECT_FALSE(g[0].defined());
  EXPECT_FLOAT_EQ(g[1].item<float>(), 1.0f);
}

TEST(Tape, StopGradientCutsTheGraph) {
  const Tensor x = vec({3.0f});
  GradientTape tape;
  tape.watch(x);
  const Tensor y = mul(x, stop_gradient(x));  // d/dx = stop_gradient(x) = 3
  EXPECT_FLOAT_EQ(tape.gradient(y, x).item<float>(), 3.0f);
}

TEST(Tape, StopRecordingAndNoGradGuard) {
  const Tensor x = vec({3.0f});
  GradientTape tape({.persistent = true});
  tape.watch(x);
  Tensor y;
  {
    auto pause = tape.stop_recording();
    y = mul(x, x);
  }
  EXPECT_EQ(tape.num_recorded_ops(), 0u);
  {
    NoGradGuard no_grad;
    y = mul(x, x);
  }
  EXPECT_EQ(tape.num_recorded_ops(), 0u);
  y = mul(x, x);
  EXPECT_EQ(tape.num_recorded_ops(), 1u);
}

TEST(Tape, NestedTapesRecordIndependently) {
  const Tensor x = vec({2.0f});
  GradientTape outer;
  outer.watch(x);
  const Tensor a = mul(x, x);
  Tensor inner_grad;
  {
    GradientTape inner;
    const Tensor b = mul(a, x);  // inner sees a and x only through outer's watch? No: unwatched.
    EXPECT_EQ(inner.num_recorded_ops(), 0u);
    inner.watch(a);
    const Tensor c = mul(a, a);
    inner_grad = inner.gradient(c, a);
    (void)b;
  }
  EXPECT_FLOAT_EQ(inner_grad.item<float>(), 8.0f);  // 2a, a = 4
  EXPECT_FLOAT_EQ(outer.gradient(a, x).item<float>(), 4.0f);
}

TEST(Tape, TapesAreThreadLocal) {
  const Tensor x = vec({2.0f});
  GradientTape tape;
  tape.watch(x);
  std::thread other([&] { (void)mul(x, x); });  // another thread: not recorded here
  other.join();
  EXPECT_EQ(tape.num_recorded_ops(), 0u);
}

TEST(Tape, GradientChecksItsTarget) {
  GradientTape tape;
  EXPECT_THROW(tape.gradient(Tensor(), Tensor::zeros({1})), ValueError);
  EXPECT_THROW(tape.watch(Tensor::zeros({1}, DType::kInt32)), ValueError);
  EXPECT_THROW(tape.gradient(Tensor::zeros({1}, DType::kInt64), Tensor::zeros({1})), ValueError);
}

TEST(Variable, AssignKeepsIdentityAndChecksShape) {
  Variable v(vec({1.0f, 2.0f}), {.name = "kernel"});
  const std::uint64_t id = v.id();
  v.assign(vec({5.0f, 6.0f}));
  v.assign_add(vec({1.0f, 1.0f}));
  v.assign_sub(vec({0.5f, 0.5f}));
  EXPECT_EQ(v.value().to_vector<float>(), (std::vector<float>{5.5f, 6.5f}));
  EXPECT_EQ(v.id(), id);
  Variable alias = v;  // a handle: both name one variable
  alias.assign(vec({0.0f, 0.0f}));
  EXPECT_EQ(v.value().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  try {
    v.assign(vec({1.0f}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "assign on variable 'kernel': expected shape [2], got [1]");
  }
  EXPECT_THROW(v.assign(Tensor::zeros({2}, DType::kInt32)), ValueError);
}

TEST(Variable, CopiesItsInitialValue) {
  Tensor init = vec({1.0f});
  Variable v(init);
  v.assign(vec({2.0f}));
  EXPECT_EQ(init.item<float>(), 1.0f);
}

}  // namespace
TEST(GradientTape, AnnouncesEachGradientOnceAsSoonAsItIsFinalInBackwardOrder) {
  // A three-layer chain: the last layer's gradient is final first. w1 is
  // used twice, so it is announced only after both uses are walked.
  Variable w1(random::uniform({4, 4}, {.seed = 1}), {.name = "w1"});
  Variable w2(random::uniform({4, 4}, {.seed = 2}), {.name = "w2"});
  Variable w3(random::uniform({4, 1}, {.seed = 3}), {.name = "w3"});
  Variable unused(Tensor::ones({2}), {.name = "unused"});
  const Tensor x = random::uniform({3, 4}, {.seed = 4});
  std::vector<std::size_t> order;
  std::vector<Tensor> announced(4);
  std::vector<Tensor> grads;
  {
    GradientTape tape;
    Tensor h = relu(matmul(x, w1.value()));
    h = relu(matmul(h, w2.value()));
    h = add(h, matmul(x, w1.value()));
    const Tensor loss = sum(matmul(h, w3.value()));
    grads = tape.gradient(loss, std::vector<Variable>{w1, w2, w3, unused},
                          UnconnectedGradients::kNone, [&](std::size_t i, const Tensor& g) {
                            order.push_back(i);
                            announced[i] = g;
                          });
  }
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], 2u);  // w3: consumed last
  EXPECT_EQ(order[1], 1u);  // w2
  EXPECT_EQ(order[2], 0u);  // w1: its first use is the first op
  EXPECT_EQ(order[3], 3u);  // unconnected, at the end
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(announced[i].defined());
    EXPECT_EQ(announced[i].to_vector<float>(), grads[i].to_vector<float>()) << i;
  }
  EXPECT_FALSE(announced[3].defined());
  EXPECT_FALSE(grads[3].defined());
}

}  // namespace lockstep
