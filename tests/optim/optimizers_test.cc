// Optimizer updates against hand-computed steps (float64 formulas written
// here), clipping, and learning-rate schedules; FTRL against TensorFlow's
// own ApplyFtrlV2 kernel (fixtures/ftrl_apply_v2.json, make_ftrl_fixture.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lockstep/lockstep.h"

namespace lockstep {
namespace {

Variable var(std::vector<float> v) { return Variable(Tensor::from_vector<float>(v)); }
Tensor vec(std::vector<float> v) { return Tensor::from_vector<float>(v); }

TEST(Optimizers, SgdPlainMomentumNesterov) {
  Variable a = var({1.0f}), b = var({1.0f}), c = var({1.0f});
  optimizers::SGD plain({.learning_rate = 0.1});
  optimizers::SGD momentum({.learning_rate = 0.1, .momentum = 0.9});
  optimizers::SGD nesterov({.learning_rate = 0.1, .momentum = 0.9, .nesterov = true});
  for (int i = 0; i < 2; ++i) {
    plain.apply_gradients({vec({0.5f})}, {a});
    momentum.apply_gradients({vec({0.5f})}, {b});
    nesterov.apply_gradients({vec({0.5f})}, {c});
  }
  EXPECT_NEAR(a.value().item<float>(), 0.9, 1e-6);
  // m1 = -0.05, x1 = 0.95; m2 = 0.9·m1 − 0.05 = −0.095, x2 = 0.855
  EXPECT_NEAR(b.value().item<float>(), 0.855, 1e-6);
  // x1 = 1 + 0.9·m1 − 0.05 = 0.905; x2 = x1 + 0.9·m2 − 0.05 = 0.7695
  EXPECT_NEAR(c.value().item<float>(), 0.7695, 1e-6);
  EXPECT_EQ(momentum.iterations(), 2);
  EXPECT_EQ(momentum->variables().size(), 1u);  // one momentum slot
}

TEST(Optimizers, AdamBiasCorrectionOverThreeSteps) {
  Variable x = var({1.0f, -2.0f});
  optimizers::Adam adam({.learning_rate = 0.1});
  double ref[2] = {1.0, -2.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double grads[3][2] = {{0.5, -1.0}, {0.2, 0.3}, {-0.4, 0.0}};
  for (int t = 1; t <= 3; ++t) {
    adam.apply_gradients(
        {vec({static_cast<float>(grads[t - 1][0]), static_cast<float>(grads[t - 1][1])})}, {x});
    const double alpha = 0.1 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      ref[i] -= alpha * m[i] / (std::sqrt(v[i]) + 1e-7);
    }
  }
  const auto got = x.value().to_vector<float>();
  EXPECT_NEAR(got[0], ref[0], 1e-5);
  EXPECT_NEAR(got[1], ref[1], 1e-5);
  // The first step of Adam moves each weight by about the learning rate.
  Variable y = var({0.0f});
  optimizers::Adam({.learning_rate = 0.01}).apply_gradients({vec({123.0f})}, {y});
  EXPECT_NEAR(y.value().item<float>(), -0.01, 1e-6);
}

TEST(Optimizers, AdamWDecaysWeightsThenAdam) {
  Variable x = var({2.0f});
  optimizers::AdamW adamw({.learning_rate = 0.1, .weight_decay = 0.5});
  adamw.apply_gradients({vec({0.0f})}, {x});  // zero gradient: decay alone
  EXPECT_NEAR(x.value().item<float>(), 2.0 * (1 - 0.5 * 0.1), 1e-6);
}

TEST(Optimizers, RmspropAndAdagrad) {
  Variable r = var({1.0f}), c = var({1.0f}), a = var({1.0f});
  optimizers::RMSprop rms({.learning_rate = 0.01});
  optimizers::RMSprop centered({.learning_rate = 0.01, .momentum = 0.5, .centered = true});
  optimizers::Adagrad ada({.learning_rate = 0.1});
  rms.apply_gradients({vec({2.0f})}, {r});
  centered.apply_gradients({vec({2.0f})}, {c});
  ada.apply_gradients({vec({2.0f})}, {a});
  // velocity = 0.1·4 = 0.4; x −= 0.01·2/sqrt(0.4 + 1e-7)
  EXPECT_NEAR(r.value().item<float>(), 1 - 0.02 / std::sqrt(0.4 + 1e-7), 1e-6);
  // centered: avg = 0.2, denominator = 0.4 − 0.04 + 1e-7; momentum 0.5·0 + increment
  EXPECT_NEAR(c.value().item<float>(), 1 - 0.02 / std::sqrt(0.36 + 1e-7), 1e-6);
  // accumulator = 0.1 + 4; x −= 0.1·2/sqrt(4.1 + 1e-7)
  EXPECT_NEAR(a.value().item<float>(), 1 - 0.2 / std::sqrt(4.1 + 1e-7), 1e-6);
}

TEST(Optimizers, ClipValueNormAndGlobalNorm) {
  Variable a = var({0, 0, 0}), b = var({0, 0}), c = var({0}), d = var({0});
  optimizers::SGD({.learning_rate = 1.0, .clip = {.clipvalue = 0.5}})
      .apply_gradients({vec({3, -4, 0.1f})}, {a});
  EXPECT_EQ(a.value().to_vector<float>(), (std::vector<float>{-0.5f, 0.5f, -0.1f}));
  optimizers::SGD({.learning_rate = 1.0, .clip = {.clipnorm = 1.0}})
      .apply_gradients({vec({3, 4})}, {b});
  const auto bv = b.value().to_vector<float>();
  EXPECT_NEAR(bv[0], -0.6, 1e-6);
  EXPECT_NEAR(bv[1], -0.8, 1e-6);
  optimizers::SGD({.learning_rate = 1.0, .clip = {.global_clipnorm = 2.5}})
      .apply_gradients({vec({3}), vec({4})}, {c, d});  // joint norm 5 -> scale 0.5
  EXPECT_NEAR(c.value().item<float>(), -1.5, 1e-6);
  EXPECT_NEAR(d.value().item<float>(), -2.0, 1e-6);
}

TEST(Optimizers, BadInputIsNamed) {
  Variable a = var({0, 0});
  optimizers::SGD sgd;
  EXPECT_THROW(sgd.apply_gradients({vec({1})}, {a}), ShapeError);
  EXPECT_THROW(sgd.apply_gradients({}, {a}), ValueError);
  EXPECT_THROW(optimizers::SGD({.clip = {.clipnorm = 1, .global_clipnorm = 1}}), ValueError);
  // An undefined gradient (no path to the loss) leaves the variable alone.
  sgd.apply_gradients({Tensor()}, {a});
  EXPECT_EQ(a.value().to_vector<float>(), (std::vector<float>{0, 0}));
}

// compile(optimizer="adam"): each Keras identifier is the optimizer with
// Keras's defaults — three steps give bitwise the object's values.
TEST(Optimizers, KerasIdentifiersGiveTheDefaultOptimizers) {
  const std::vector<std::pair<std::vector<std::string>, Optimizer>> cases = {
      {{"sgd", "SGD"}, optimizers::SGD()},
      {{"adam", "Adam"}, optimizers::Adam()},
      {{"adamw", "AdamW"}, optimizers::AdamW()},
      {{"rmsprop", "RMSprop"}, optimizers::RMSprop()},
      {{"adagrad", "Adagrad"}, optimizers::Adagrad()},
      {{"ftrl", "Ftrl"}, optimizers::Ftrl()}};
  for (const auto& [names, reference] : cases) {
    Variable expected = var({1.0f, -2.0f, 0.5f});
    for (int i = 0; i < 3; ++i) reference.apply_gradients({vec({0.3f, -0.1f, 2.0f})}, {expected});
    for (const std::string& name : names) {
      const Optimizer by_name(name);
      EXPECT_EQ(by_name->name(), reference->name()) << name;
      EXPECT_EQ(by_name.learning_rate(), reference.learning_rate()) << name;
      Variable x = var({1.0f, -2.0f, 0.5f});
      for (int i = 0; i < 3; ++i) by_name.apply_gradients({vec({0.3f, -0.1f, 2.0f})}, {x});
      EXPECT_EQ(x.value().to_vector<float>(), expected.value().to_vector<float>()) << name;
    }
  }
  // The defaults are Keras's.
  EXPECT_EQ(Optimizer("sgd").learning_rate(), 0.01);
  EXPECT_EQ(Optimizer("adam").learning_rate(), 0.001);
  try {
    Optimizer o("adamx");
    FAIL() << "an unknown optimizer name was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown optimizer 'adamx'; known optimizers: sgd (SGD), "
                                         "adam (Adam), adamw (AdamW), rmsprop (RMSprop), adagrad "
                                         "(Adagrad), ftrl (Ftrl), nadam (Nadam), adamax (Adamax), "
                                         "adadelta (Adadelta), lion (Lion)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Schedules, KerasFormulas) {
  auto exp_decay = schedules::ExponentialDecay(0.1, 10, 0.5);
  EXPECT_NEAR(exp_decay(20), 0.025, 1e-12);
  EXPECT_NEAR(schedules::ExponentialDecay(0.1, 10, 0.5, true)(15), 0.05, 1e-12);
  auto piecewise = schedules::PiecewiseConstantDecay({100, 200}, {1.0, 0.5, 0.1});
  EXPECT_EQ(piecewise(100), 1.0);
  EXPECT_EQ(piecewise(101), 0.5);
  EXPECT_EQ(piecewise(201), 0.1);
  auto cosine = schedules::CosineDecay(1.0, 100, {.alpha = 0.1});
  EXPECT_NEAR(cosine(50), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_NEAR(cosine(1000), 0.1, 1e-12);
  auto warm = schedules::CosineDecay(0.0, 100, {.warmup_target = 1.0, .warmup_steps = 10});
  EXPECT_NEAR(warm(5), 0.5, 1e-12);
  EXPECT_NEAR(warm(10), 1.0, 1e-12);
  EXPECT_NEAR(schedules::PolynomialDecay(1.0, 10, 0.0, 2.0)(5), 0.25, 1e-12);
  auto ramp = schedules::RampUp({.start = 0.0,
                                 .max = 1.0,
                                 .min = 0.1,
                                 .rampup = 4,
                                 .sustain = 2,
                                 .decay = 0.5,
                                 .steps_per_unit = 10});
  EXPECT_NEAR(ramp(0), 0.0, 1e-12);
  EXPECT_NEAR(ramp(25), 0.5, 1e-12);              // unit 2 of a 4-unit ramp
  EXPECT_NEAR(ramp(45), 1.0, 1e-12);              // sustained
  EXPECT_NEAR(ramp(70), 0.9 * 0.5 + 0.1, 1e-12);  // one unit into the decay
  // An optimizer reads its schedule at its step count.
  Variable x = var({0.0f});
  optimizers::SGD sgd({.learning_rate = schedules::PiecewiseConstantDecay({0}, {1.0, 0.1})});
  sgd.apply_gradients({vec({1})}, {x});  // step 0: lr 1
  sgd.apply_gradients({vec({1})}, {x});  // step 1: lr 0.1
  EXPECT_NEAR(x.value().item<float>(), -1.1, 1e-6);
}

TEST(Optimizers, AnUnknownNameIsAValueError) { EXPECT_THROW(optimizers::get("adamm"), ValueError); }

// TensorFlow's ApplyFtrlV2 kernel (training_ops.cc, multiply_linear_by_lr
// false) in float64, one element: the oracle for Ftrl.
struct FtrlState {
  double var, accum, linear;
};
void ftrl_v2_reference(FtrlState& s, double grad, double lr, double l1, double l2, double shrinkage,
                       double lr_power) {
  const double grad_with_shrinkage = grad + 2 * shrinkage * s.var;
  const double new_accum = s.accum + grad * grad;
  s.linear += grad_with_shrinkage -
              (std::pow(new_accum, -lr_power) - std::pow(s.accum, -lr_power)) / lr * s.var;
  const double quadratic = std::pow(new_accum, -lr_power) / lr + 2 * l2;
  s.var = std::abs(s.linear) > l1 ? (l1 * (s.linear > 0 ? 1.0 : -1.0) - s.linear) / quadratic : 0.0;
  s.accum = new_accum;
}

nlohmann::json ftrl_fixture() {
  std::ifstream in(std::string(LOCKSTEP_SOURCE_DIR) + "/tests/optim/fixtures/ftrl_apply_v2.json");
  EXPECT_TRUE(in.good()) << "tests/optim/fixtures/ftrl_apply_v2.json";
  return nlohmann::json::parse(in);
}

// 50 steps on 6 elements, with and without L1, L2, shrinkage, beta and
// another learning-rate power: the float64 oracle above is TensorFlow's
// kernel (it reproduces what tf.raw_ops.ApplyFtrlV2 computed, to 1e-12),
// and Lockstep's float32 Ftrl stays within float32 rounding of it.
TEST(Optimizers, FtrlFollowsTensorFlowsApplyFtrlV2For50Steps) {
  const nlohmann::json fx = ftrl_fixture();
  const auto var0 = fx["var0"].get<std::vector<double>>();
  const auto grads = fx["grads"].get<std::vector<std::vector<double>>>();
  ASSERT_EQ(grads.size(), 50u);
  for (const auto& s : fx["settings"]) {
    const std::string name = s["name"];
    const double lr = s["lr"], power = s["lr_power"], init = s["init"], l1 = s["l1"], l2 = s["l2"],
                 shrinkage = s["shrinkage"], beta = s["beta"];
    // The oracle against TensorFlow's own numbers.
    std::vector<FtrlState> ref;
    for (double v : var0) ref.push_back({v, init, 0.0});
    for (const auto& g : grads) {
      for (std::size_t i = 0; i < ref.size(); ++i)
        ftrl_v2_reference(ref[i], g[i], lr, l1, l2 + beta / (2 * lr), shrinkage, power);
    }
    for (std::size_t i = 0; i < ref.size(); ++i) {
      EXPECT_NEAR(ref[i].var, s["var"][i].get<double>(), 1e-12) << name << " element " << i;
      EXPECT_NEAR(ref[i].linear, s["linear"][i].get<double>(), 1e-10) << name;
      EXPECT_NEAR(ref[i].accum, s["accum"][i].get<double>(), 1e-10) << name;
    }
    // Lockstep's Ftrl, float32, against the oracle: every step.
    optimizers::Ftrl ftrl({.learning_rate = lr,
                           .learning_rate_power = power,
                           .initial_accumulator_value = init,
                           .l1_regularization_strength = l1,
                           .l2_regularization_strength = l2,
                           .l2_shrinkage_regularization_strength = shrinkage,
                           .beta = beta});
    std::vector<float> start(var0.begin(), var0.end());
    Variable x = var(start);
    std::vector<FtrlState> step_ref;
    for (double v : var0) step_ref.push_back({v, init, 0.0});
    for (std::size_t t = 0; t < grads.size(); ++t) {
      ftrl.apply_gradients({vec(std::vector<float>(grads[t].begin(), grads[t].end()))}, {x});
      const auto got = x.value().to_vector<float>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        ftrl_v2_reference(step_ref[i], grads[t][i], lr, l1, l2 + beta / (2 * lr), shrinkage, power);
        ASSERT_NEAR(got[i], step_ref[i].var, 2e-6 * std::max(1.0, std::abs(step_ref[i].var)))
            << name << ", step " << t + 1 << ", element " << i;
      }
    }
    // Its slots are Keras's: accumulator, then linear.
    ASSERT_EQ(ftrl->variables().size(), 2u);
    const auto accum = ftrl->variables()[0].value().to_vector<float>();
    const auto linear = ftrl->variables()[1].value().to_vector<float>();
    for (std::size_t i = 0; i < accum.size(); ++i) {
      EXPECT_NEAR(accum[i], step_ref[i].accum, 1e-6 * step_ref[i].accum) << name;
      EXPECT_NEAR(linear[i], step_ref[i].linear, 1e-5 * std::max(1.0, std::abs(step_ref[i].linear)))
          << name;
    }
  }
}

// With L1 larger than any |linear| the weights are exactly zero (the
// sparsity FTRL is used for), and Keras's argument checks hold.
TEST(Optimizers, FtrlL1ZeroesWeightsAndChecksItsArguments) {
  Variable x = var({0.5f, -0.25f});
  optimizers::Ftrl ftrl({.learning_rate = 0.1, .l1_regularization_strength = 100.0});
  ftrl.apply_gradients({vec({1.0f, -3.0f})}, {x});
  EXPECT_EQ(x.value().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_THROW(optimizers::Ftrl({.learning_rate_power = 0.5}), ValueError);
  EXPECT_THROW(optimizers::Ftrl({.initial_accumulator_value = -1}), ValueError);
  EXPECT_THROW(optimizers::Ftrl({.l2_shrinkage_regularization_strength = -1}), ValueError);
  // from_config takes Keras's argument names back.
  const Optimizer o = optimizers::from_config(
      "Ftrl", {{"learning_rate", 0.3}, {"l1_regularization_strength", 0.01}, {"beta", 0.2}});
  EXPECT_EQ(o->class_name(), "Ftrl");
  EXPECT_EQ(o.learning_rate(), 0.3);
  bool found_beta = false;
  for (const auto& [k, v] : o->get_config()) {
    if (k == "beta") found_beta = std::get<double>(v) == 0.2;
  }
  EXPECT_TRUE(found_beta);
}

// An optimizer class Lockstep lacks is named, with the nearest it has.
TEST(Optimizers, AnUnknownKerasClassNamesTheNearestKnownOne) {
  try {
    optimizers::from_config("Nadamw", {});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find("unknown optimizer class 'Nadamw' (did you mean 'Nadam'?)"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// loss = Σ w² · k: its gradient 2·k·w, through the tape (as fit's).
std::vector<Tensor> scaled_grads(const Optimizer& opt, const Variable& w, float k) {
  GradientTape tape;
  const Tensor loss = mul(sum(square(w.value())), Tensor::scalar(k));
  return tape.gradient(opt.scale_loss(loss), std::vector<Variable>{w});
}

// Keras 3's rule, issue #35's acceptance: a step whose gradients overflow
// changes nothing but the scale (halved) and the count of finite steps.
TEST(LossScaleOptimizer, AnOverflowSkipsTheStepAndHalvesTheScale) {
  Variable w = var({1.0f, -2.0f});
  optimizers::LossScaleOptimizer opt(optimizers::Adam({.learning_rate = 0.1}),
                                     {.initial_scale = 0x1p120, .dynamic_growth_steps = 5});
  EXPECT_EQ(opt.dynamic_scale(), 0x1p120);
  // 2^120 · 2 · 1e18 · 2 overflows float32: the gradient is inf.
  std::vector<Tensor> g = scaled_grads(opt, w, 1e18f);
  ASSERT_FALSE(std::isfinite(g[0].to_vector<float>()[1]));
  opt.apply_gradients(g, {w});
  EXPECT_EQ(w.value().to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(opt.iterations(), 0);
  EXPECT_EQ(opt.dynamic_scale(), 0x1p119);
  EXPECT_EQ(opt.step_counter(), 0);
  EXPECT_TRUE(opt->variables().empty());  // no slot made, none moved
  // A NaN skips the same way.
  opt.apply_gradients({vec({NAN, 1.0f})}, {w});
  EXPECT_EQ(opt.dynamic_scale(), 0x1p118);
  EXPECT_EQ(opt.iterations(), 0);
  // The next finite step is Adam's first step on the true gradient.
  Variable fresh = var({1.0f, -2.0f});
  optimizers::Adam plain({.learning_rate = 0.1});
  plain.apply_gradients(scaled_grads(plain, fresh, 1.0f), {fresh});
  opt.apply_gradients(scaled_grads(opt, w, 1.0f), {w});
  EXPECT_EQ(w.value().to_vector<float>(), fresh.value().to_vector<float>());
  EXPECT_EQ(opt.iterations(), 1);
  EXPECT_EQ(opt.step_counter(), 1);
}

// Finite steps: the same bits as without scaling (a power of two in and
// out), and after dynamic_growth_steps of them the scale doubles — but
// never into inf.
TEST(LossScaleOptimizer, FiniteStepsTrainAsWithoutItAndGrowTheScale) {
  Variable a = var({0.5f, -1.5f, 3.0f}), b = var({0.5f, -1.5f, 3.0f});
  optimizers::SGD plain({.learning_rate = 0.01, .momentum = 0.9});
  optimizers::LossScaleOptimizer scaled(optimizers::SGD({.learning_rate = 0.01, .momentum = 0.9}),
                                        {.initial_scale = 1024, .dynamic_growth_steps = 3});
  for (int i = 0; i < 7; ++i) {
    plain.apply_gradients(scaled_grads(plain, a, 0.3f), {a});
    scaled.apply_gradients(scaled_grads(scaled, b, 0.3f), {b});
  }
  EXPECT_EQ(a.value().to_vector<float>(), b.value().to_vector<float>());
  EXPECT_EQ(scaled.iterations(), 7);
  EXPECT_EQ(scaled.dynamic_scale(), 4096);  // doubled after steps 3 and 6
  EXPECT_EQ(scaled.step_counter(), 1);
  // At float32's largest power of two the scale stays where Keras's turns inf.
  Variable c = var({1.0f});
  optimizers::LossScaleOptimizer top(optimizers::SGD(),
                                     {.initial_scale = 0x1p127, .dynamic_growth_steps = 1});
  top.apply_gradients({vec({1.0f})}, {c});
  EXPECT_EQ(top.dynamic_scale(), 0x1p127);
  EXPECT_EQ(top.iterations(), 1);
  // The inner handle is the same optimizer.
  EXPECT_EQ(scaled.inner_optimizer().iterations(), 7);
  EXPECT_EQ(scaled.inner_optimizer().scale_loss(Tensor::scalar(1.0f)).item<float>(), 4096.0f);
  // Without loss scaling scale_loss is the loss itself.
  EXPECT_EQ(plain.scale_loss(Tensor::scalar(3.0f)).item<float>(), 3.0f);
}

TEST(LossScaleOptimizer, ItsScaleAndCountTravelWithTheSlotsAndBadSettingsAreClearErrors) {
  Variable w = var({1.0f, 2.0f});
  optimizers::LossScaleOptimizer opt(optimizers::Adam(),
                                     {.initial_scale = 64, .dynamic_growth_steps = 4});
  opt.apply_gradients({vec({0.5f, 0.5f})}, {w});
  opt.apply_gradients({vec({INFINITY, 0.5f})}, {w});
  opt.apply_gradients({vec({0.5f, 0.5f})}, {w});
  std::map<std::string, Tensor> saved;
  for (auto& [name, t] : opt->slot_values({w})) saved.emplace(name, t);
  ASSERT_EQ(saved.count("loss_scale/dynamic_scale"), 1u);
  optimizers::LossScaleOptimizer back(optimizers::Adam(),
                                      {.initial_scale = 64, .dynamic_growth_steps = 4});
  back->restore_slot_values({w}, saved);
  EXPECT_EQ(back.dynamic_scale(), 32);
  EXPECT_EQ(back.step_counter(), 1);
  // An optimizer that does not scale refuses a saved scale.
  optimizers::Adam unscaled;
  EXPECT_THROW(unscaled->restore_slot_values({w}, saved), ValueError);
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::SGD(), {.initial_scale = 0}), ValueError);
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::SGD(), {.initial_scale = 1e39}),
               ValueError);
  EXPECT_THROW(optimizers::LossScaleOptimizer(optimizers::SGD(), {.dynamic_growth_steps = 0}),
               ValueError);
  EXPECT_THROW(optimizers::LossScaleOptimizer(static_cast<const Optimizer&>(opt)),
               ValueError);  // wrapped twice
}

}  // namespace
}  // namespace lockstep
