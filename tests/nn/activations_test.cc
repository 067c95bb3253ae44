// Keras's activations (nn/activations.h): each by name against its formula
// in double precision, with its gradient by finite differences, on inputs
// across both sides of its kinks; finite values and gradients far out (no
// overflow in a branch `where` does not take); the names Keras's
// keras.activations.get takes without arguments all resolve.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

double softplus_ref(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double hard_sigmoid_ref(double x) { return std::min(std::max(x + 3.0, 0.0), 6.0) / 6.0; }

struct Case {
  std::string name;
  std::function<double(double)> f;
};

std::vector<Case> cases() {
  const double pi = 3.14159265358979323846;
  const double selu_alpha = 1.6732632423543772848170429916717;
  const double selu_scale = 1.0507009873554804934193349852946;
  return {
      {"gelu", [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }},
      {"elu", [](double x) { return x > 0 ? x : std::expm1(x); }},
      {"selu", [=](double x) { return selu_scale * (x > 0 ? x : selu_alpha * std::expm1(x)); }},
      {"celu", [](double x) { return x > 0 ? x : std::expm1(x); }},
      {"softplus", softplus_ref},
      {"softsign", [](double x) { return x / (1.0 + std::fabs(x)); }},
      {"silu", [](double x) { return x / (1.0 + std::exp(-x)); }},
      {"swish", [](double x) { return x / (1.0 + std::exp(-x)); }},
      {"hard_sigmoid", hard_sigmoid_ref},
      {"hard_silu", [](double x) { return x * hard_sigmoid_ref(x); }},
      {"hard_swish", [](double x) { return x * hard_sigmoid_ref(x); }},
      {"hard_tanh", [](double x) { return std::min(std::max(x, -1.0), 1.0); }},
      {"mish", [](double x) { return x * std::tanh(softplus_ref(x)); }},
      {"leaky_relu", [](double x) { return x > 0 ? x : 0.2 * x; }},
      {"log_sigmoid", [](double x) { return -softplus_ref(-x); }},
      {"squareplus", [](double x) { return 0.5 * (x + std::sqrt(x * x + 4.0)); }},
      {"tanh_shrink", [](double x) { return x - std::tanh(x); }},
      {"soft_shrink", [](double x) { return x > 0.5 ? x - 0.5 : (x < -0.5 ? x + 0.5 : 0.0); }},
      {"hard_shrink", [](double x) { return std::fabs(x) > 0.5 ? x : 0.0; }},
      {"sparse_plus",
       [](double x) { return x <= -1 ? 0.0 : (x >= 1 ? x : 0.25 * (x + 1) * (x + 1)); }},
      {"sparse_sigmoid", [](double x) { return std::min(std::max(0.5 * (x + 1), 0.0), 1.0); }},
      {"exponential", [](double x) { return std::exp(x); }},
      {"relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); }},
      {"linear", [](double x) { return x; }},
      {"tanh", [](double x) { return std::tanh(x); }},
      {"sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }},
      {"gelu_approximate",
       [=](double x) {
         return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
       }},
  };
}

ActivationFn activation(const std::string& name) {
  if (name == "gelu_approximate")
    return [](const Tensor& x) { return activations::gelu(x, /*approximate=*/true); };
  return get_activation(name);
}

TEST(Activations, EachIsItsFormulaWithItsGradient) {
  std::mt19937 rng(17);
  for (const Case& c : cases()) {
    const ActivationFn fn = activation(c.name);
    // [-4, 4]: both sides of every kink (0, ±0.5, ±1, ±3); 2 x 1100 runs
    // the ops' parallel loops.
    for (const Dims& d : {Dims{7}, Dims{2, 1100}}) {
      check_gradients(
          c.name + " " + Shape(d).to_string(),
          [fn](const std::vector<Tensor>& x) { return fn(x[0]); },
          [f = c.f](const std::vector<Ref>& x) { return ref_unary(x[0], f); },
          {random_ref(d, rng, -4.0, 4.0)});
    }
  }
}

TEST(Activations, StayFiniteFarOut) {
  const Tensor x = Tensor::from_vector<float>({-100.0f, -30.0f, 30.0f, 80.0f});
  for (const Case& c : cases()) {
    if (c.name == "exponential") continue;  // exp(80) overflows float32, as in Keras
    const ActivationFn fn = activation(c.name);
    GradientTape tape;
    tape.watch(x);
    const Tensor y = fn(x);
    const Tensor g = tape.gradient(sum(y), x);
    for (float v : y.to_vector<float>()) EXPECT_TRUE(std::isfinite(v)) << c.name;
    for (float v : g.to_vector<float>()) EXPECT_TRUE(std::isfinite(v)) << c.name << " gradient";
  }
}

TEST(Activations, GluGatesTheFirstHalfByTheSecond) {
  std::mt19937 rng(3);
  check_gradients(
      "glu", [](const std::vector<Tensor>& x) { return activations::glu(x[0]); },
      [](const std::vector<Ref>& x) {
        const std::int64_t rows = x[0].dims[0], half = x[0].dims[1] / 2;
        Ref out({rows, half});
        for (std::int64_t i = 0; i < rows; ++i) {
          for (std::int64_t j = 0; j < half; ++j) {
            const double a = x[0][i * 2 * half + j], b = x[0][i * 2 * half + half + j];
            out[i * half + j] = a / (1.0 + std::exp(-b));
          }
        }
        return out;
      },
      {random_ref({3, 8}, rng, -2.0, 2.0)});
  EXPECT_THROW(activations::glu(Tensor::zeros({2, 3})), ShapeError);
}

// The layers: LeakyReLU and ELU with their arguments, PReLU with its alpha
// weight (shared over the axes named) and the gradient for it: the sum of
// min(x, 0) times the upstream gradient over the shared positions.
TEST(Activations, LeakyReluEluAndPreluLayers) {
  std::mt19937 rng(9);
  layers::LeakyReLU leaky({.negative_slope = 0.1f});
  layers::ELU elu({.alpha = 0.7f});
  check_gradients(
      "LeakyReLU", [&](const std::vector<Tensor>& x) { return leaky(x[0]); },
      [](const std::vector<Ref>& x) {
        return ref_unary(x[0], [](double v) { return v > 0 ? v : 0.1 * v; });
      },
      {random_ref({4, 5}, rng, -3.0, 3.0)});
  check_gradients(
      "ELU", [&](const std::vector<Tensor>& x) { return elu(x[0]); },
      [](const std::vector<Ref>& x) {
        return ref_unary(x[0], [](double v) { return v > 0 ? v : 0.7 * std::expm1(v); });
      },
      {random_ref({4, 5}, rng, -3.0, 3.0)});
  EXPECT_EQ(layers::LeakyReLU()->get_config().get<double>("negative_slope"), 0.30000001192092896)
      << "Keras 3's default slope";
  EXPECT_THROW(layers::LeakyReLU({.negative_slope = -1.0f}), ValueError);

  layers::PReLU prelu({.alpha_initializer = initializers::Constant(0.25f), .shared_axes = {1}});
  const Tensor x = to_tensor(random_ref({3, 2, 4}, rng, -2.0, 2.0));
  GradientTape tape;
  const Tensor y = prelu(x);
  const Variable alpha = prelu->alpha();
  ASSERT_EQ(alpha.shape(), Shape({1, 4})) << "axis 1 shared";
  const std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  for (std::size_t i = 0; i < xv.size(); ++i)
    EXPECT_FLOAT_EQ(yv[i], xv[i] > 0 ? xv[i] : 0.25f * xv[i]) << i;
  const std::vector<float> g =
      tape.gradient(sum(y), std::vector<Variable>{alpha})[0].to_vector<float>();
  for (std::size_t c = 0; c < 4; ++c) {
    double want = 0;
    for (std::size_t i = c; i < xv.size(); i += 4) want += std::min(xv[i], 0.0f);
    EXPECT_NEAR(g[c], want, 1e-5) << c;
  }
  EXPECT_THROW(layers::PReLU({.shared_axes = {3}})(Tensor::zeros({2, 3})), ShapeError);
}

TEST(Activations, EveryKerasNameWithoutArgumentsResolves) {
  // keras.activations.ALL_OBJECTS_DICT of Keras 3.15 and its aliases, less
  // threshold (its arguments are required) and sparsemax.
  for (const char* name :
       {"relu",         "leaky_relu",  "relu6",       "softmax",        "celu",
        "elu",          "selu",        "softplus",    "softsign",       "squareplus",
        "soft_shrink",  "sparse_plus", "silu",        "gelu",           "glu",
        "tanh",         "tanh_shrink", "sigmoid",     "sparse_sigmoid", "exponential",
        "hard_sigmoid", "hard_silu",   "hard_tanh",   "hard_shrink",    "linear",
        "mish",         "log_softmax", "log_sigmoid", "swish",          "hard_swish"}) {
    EXPECT_NO_THROW(get_activation(name)) << name;
  }
  try {
    get_activation("threshold");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("takes arguments"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lockstep::testing
