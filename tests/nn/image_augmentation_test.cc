// RandomFlip and RandomRotation: Keras's outputs at a fixed angle and its
// rotation matrices (tests/interop/make_image_fixtures.py), what a flip may
// and may not do, identity in inference, gradients, and bad arguments.
#include "lockstep/nn/image_augmentation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lockstep/autodiff/gradient_tape.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"
#include "support/errors.h"
#include "support/image_fixtures.h"

namespace lockstep::layers {
namespace {

using testing_support::expect_error_containing;
using testing_support::ImageFixtures;
using testing_support::max_abs_difference;

const CallContext kTraining{.training = true};

Tensor flip_axis(const Tensor& x, int axis) {
  std::vector<std::int64_t> idx;
  for (std::int64_t i = x.dim(axis) - 1; i >= 0; --i) idx.push_back(i);
  return gather(x, Tensor::from_vector(idx), axis);
}

Tensor image(const Tensor& batch, std::int64_t i) {
  return slice(batch, {i, 0, 0, 0}, {1, -1, -1, -1});
}

TEST(RandomRotation, AtAFixedAngleEqualsKerasForEachFillModeAndInterpolation) {
  const auto& f = ImageFixtures::get();
  const Tensor images = f.array("affine/images");  // [2, 9, 11, 2], values in [-3, 10]
  const auto names = f.names("rotation/0.");
  const auto negative = f.names("rotation/-");
  ASSERT_EQ(names.size() + negative.size(), 4u);
  for (const auto& list : {names, negative}) {
    for (const std::string& name : list) {
      // rotation/<factor>/<fill>/<interp>
      const auto a = name.find('/') + 1, b = name.find('/', a), c = name.find('/', b + 1);
      const double factor = std::stod(name.substr(a, b - a));
      const std::string fill = name.substr(b + 1, c - b - 1), interp = name.substr(c + 1);
      RandomRotation layer(std::array<double, 2>{factor, factor},
                           {.fill_mode = fill,
                            .interpolation = interp,
                            .seed = 1,
                            .fill_value = fill == "constant" ? 3.0f : 0.0f});
      // Equal to the last bit on this machine; the bound leaves room for a
      // libm whose cosf/sinf differ from TensorFlow's in the last bit of the
      // matrix (pixels would move by ~1e-6 of a pixel).
      EXPECT_LE(max_abs_difference(layer(images, kTraining), f.array(name)), 1e-4) << name;
    }
  }
}

TEST(RandomRotation, RotationMatricesAreKerasComputeAffineMatrix) {
  const auto& f = ImageFixtures::get();
  const Tensor m = RandomRotationImpl::rotation_matrices(f.array("rotation/matrix/angles"), 9, 11);
  EXPECT_LE(max_abs_difference(m, f.array("rotation/matrix/9x11")), 2e-6);
}

TEST(ImageAugmentation, InInferenceBothLayersAreTheIdentityAsFloat32) {
  const Tensor x = random::uniform({3, 5, 6, 2}, {.maxval = 255.0f, .seed = 3});
  for (Layer layer : {Layer(RandomFlip()), Layer(RandomRotation(0.4))}) {
    EXPECT_EQ(max_abs_difference(layer(x), x), 0.0);
    const Tensor u8 = cast(x, DType::kUInt8);
    EXPECT_EQ(max_abs_difference(layer(u8), cast(u8, DType::kFloat32)), 0.0);
  }
}

TEST(RandomFlip, EachImageIsEitherItselfOrFlippedAboutHalfOfThemFlipped) {
  const Tensor x = random::uniform({400, 3, 4, 2}, {.seed = 5});
  for (const std::string mode : {"horizontal", "vertical", "horizontal_and_vertical"}) {
    SCOPED_TRACE(mode);
    RandomFlip layer(mode, {.seed = 9});
    const Tensor y = layer(x, kTraining);
    Tensor flipped = x;
    if (mode != "vertical") flipped = flip_axis(flipped, 2);
    if (mode != "horizontal") flipped = flip_axis(flipped, 1);
    int count = 0;
    for (std::int64_t i = 0; i < 400; ++i) {
      const bool same = max_abs_difference(image(y, i), image(x, i)) == 0.0;
      const bool flip = max_abs_difference(image(y, i), image(flipped, i)) == 0.0;
      EXPECT_TRUE(same || flip) << "image " << i << " is neither itself nor " << mode << "-flipped";
      count += flip;
    }
    EXPECT_GT(count, 150);  // Binomial(400, 0.5): 200 ± 10, so 150..250 is > 7 sigma
    EXPECT_LT(count, 250);
  }
}

TEST(RandomFlip, ASeedReproducesTheDrawsAndEachCallDrawsAgain) {
  const Tensor x = random::uniform({64, 2, 3, 1}, {.seed = 1});
  RandomFlip a("horizontal", {.seed = 4}), b("horizontal", {.seed = 4});
  const Tensor first = a(x, kTraining);
  EXPECT_EQ(max_abs_difference(first, b(x, kTraining)), 0.0);
  EXPECT_GT(max_abs_difference(first, a(x, kTraining)), 0.0);
  RandomRotation r1(0.3, {.seed = 2}), r2(0.3, {.seed = 2});
  EXPECT_EQ(max_abs_difference(r1(x, kTraining), r2(x, kTraining)), 0.0);
}

TEST(RandomRotation, AnglesStayWithinTheFactor) {
  // A one-pixel-wide bright column through the centre of 21 x 21 images,
  // turned by at most 0.05 of a turn (18°): the bright pixels of the top row
  // stay within tan(18°) * 10 = 3.2 pixels of the centre.
  Tensor x = Tensor::zeros({50, 21, 21, 1});
  float* p = x.data<float>();
  for (std::int64_t b = 0; b < 50; ++b)
    for (std::int64_t y = 0; y < 21; ++y) p[(b * 21 + y) * 21 + 10] = 1.0f;
  RandomRotation layer(0.05, {.fill_mode = "constant", .seed = 7});
  const std::vector<float> out = layer(x, kTraining).to_vector<float>();
  for (std::int64_t b = 0; b < 50; ++b)
    for (std::int64_t col = 0; col < 21; ++col)
      if (out[static_cast<std::size_t>(b * 441 + col)] > 0.01f) {
        EXPECT_LE(std::abs(col - 10), 4) << "image " << b;
      }
}

TEST(ImageAugmentation, GradientsFlowToTheInput) {
  const Tensor x = random::uniform({6, 4, 5, 2}, {.seed = 11});
  const Tensor w = random::uniform({6, 4, 5, 2}, {.minval = 0.5f, .maxval = 1.5f, .seed = 12});
  // A flip is a permutation: the gradient of sum(y * w) is w flipped back
  // where the image was flipped.
  RandomFlip flip("horizontal_and_vertical", {.seed = 3});
  Tensor y, grad;
  {
    GradientTape tape;
    tape.watch(x);
    y = flip(x, kTraining);
    grad = tape.gradient(sum(mul(y, w)), std::vector<Tensor>{x})[0];
  }
  const Tensor w_flipped = flip_axis(flip_axis(w, 1), 2);
  const Tensor x_flipped = flip_axis(flip_axis(x, 1), 2);
  for (std::int64_t i = 0; i < 6; ++i) {
    const bool flipped = max_abs_difference(image(y, i), image(x_flipped, i)) == 0.0;
    EXPECT_EQ(max_abs_difference(image(grad, i), image(flipped ? w_flipped : w, i)), 0.0) << i;
  }
  // A rotation at a fixed angle is linear in the pixels: central differences
  // of sum(y * w) are exact up to float rounding.
  RandomRotation rotate(std::array<double, 2>{0.07, 0.07}, {.fill_mode = "reflect"});
  {
    GradientTape tape;
    tape.watch(x);
    grad = tape.gradient(sum(mul(rotate(x, kTraining), w)), std::vector<Tensor>{x})[0];
  }
  const std::vector<float> g = grad.to_vector<float>();
  std::vector<float> xv = x.to_vector<float>();
  auto loss = [&](const std::vector<float>& v) {
    return sum(mul(rotate(Tensor::from_vector(v, x.shape()), kTraining), w)).item<double>();
  };
  for (std::size_t i = 0; i < xv.size(); i += 7) {
    const float x0 = xv[i];
    xv[i] = x0 + 0.25f;
    const double up = loss(xv);
    xv[i] = x0 - 0.25f;
    const double down = loss(xv);
    xv[i] = x0;
    EXPECT_NEAR(g[i], (up - down) / 0.5, 2e-4) << "element " << i;
  }
}

TEST(ImageAugmentation, BadArgumentsAreValueErrorsNamingThem) {
  expect_error_containing<ValueError>([] { RandomFlip("diagonal"); }, "got \"diagonal\"");
  expect_error_containing<ValueError>([] { RandomRotation(1.5); }, "in [-1, 1]");
  expect_error_containing<ValueError>(
      [] {
        RandomRotation(std::array<double, 2>{-0.2, 1.2});
      },
      "got (-0.2, 1.2)");
  expect_error_containing<ValueError>([] { RandomRotation(0.1, {.fill_mode = "mirror"}); },
                                      "got \"mirror\"");
  expect_error_containing<ValueError>([] { RandomRotation(0.1, {.interpolation = "bicubic"}); },
                                      "got \"bicubic\"");
  expect_error_containing<ValueError>(
      [] {
        RandomFlip()(Tensor::zeros({4, 4}), kTraining);
      },
      "got shape [4, 4]");
}

}  // namespace
}  // namespace lockstep::layers
