// image::resize and image::affine_transform against TensorFlow's own
// outputs (tests/interop/make_image_fixtures.py: tf.image.resize and
// ImageProjectiveTransformV3, the kernel of keras.ops.image.affine_transform),
// and their refusals of bad arguments. Gradients: tests/autodiff.
#include "lockstep/tensor/image_ops.h"

#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/tensor/ops.h"
#include "support/errors.h"
#include "support/image_fixtures.h"

namespace lockstep::image {
namespace {

using testing_support::expect_error_containing;
using testing_support::ImageFixtures;
using testing_support::max_abs_difference;

// "resize/bilinear/29x31" -> {29, 31}
std::array<std::int64_t, 2> size_of(const std::string& name) {
  const std::string s = name.substr(name.rfind('/') + 1);
  const auto x = s.find('x');
  return {std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1))};
}

// Pixel values here are up to 255; 1e-5 of that is what the brief allows,
// and the kernels in fact agree with TensorFlow's to the last bit.
constexpr double kTolerance = 255 * 1e-5;

TEST(ImageResize, BilinearAndNearestEqualTensorFlowsResizeUpAndDown) {
  const auto& f = ImageFixtures::get();
  const Tensor input = f.array("resize/input");  // [13, 17, 3] in [0, 255)
  const auto names = f.names("resize/b");
  const auto nearest = f.names("resize/n");
  ASSERT_EQ(names.size(), 7u);
  ASSERT_EQ(nearest.size(), 7u);
  double worst = 0;
  for (const auto& list : {names, nearest}) {
    for (const std::string& name : list) {
      const std::string method = name.substr(7, name.find('/', 7) - 7);
      const Tensor got = resize(input, size_of(name), {.interpolation = method});
      const double d = max_abs_difference(got, f.array(name));
      EXPECT_LE(d, kTolerance) << name;
      worst = std::max(worst, d);
    }
  }
  EXPECT_EQ(worst, 0.0) << "no longer bit-exact against TensorFlow";
}

TEST(ImageResize, ABatchResizesEachImageAndUint8ReadsAsFloat) {
  const Tensor one = ImageFixtures::get().array("resize/input");
  const Tensor rounded = cast(cast(one, DType::kUInt8), DType::kFloat32);
  const Tensor batch =
      concat({reshape(rounded, {1, 13, 17, 3}), reshape(rounded * 0.5f, {1, 13, 17, 3})}, 0);
  const Tensor out = resize(batch, {5, 9});
  EXPECT_EQ(out.shape(), Shape({2, 5, 9, 3}));
  EXPECT_EQ(max_abs_difference(slice(out, {0, 0, 0, 0}, {1, -1, -1, -1}),
                               reshape(resize(rounded, {5, 9}), {1, 5, 9, 3})),
            0.0);
  EXPECT_EQ(max_abs_difference(slice(out, {1, 0, 0, 0}, {1, -1, -1, -1}),
                               reshape(resize(rounded * 0.5f, {5, 9}), {1, 5, 9, 3})),
            0.0);
  const Tensor u8 = resize(cast(one, DType::kUInt8), {5, 9});
  EXPECT_EQ(u8.dtype(), DType::kFloat32);
  EXPECT_EQ(max_abs_difference(u8, resize(rounded, {5, 9})), 0.0);
  const Tensor nearest = resize(cast(one, DType::kUInt8), {5, 9}, {.interpolation = "nearest"});
  EXPECT_EQ(nearest.dtype(), DType::kUInt8);  // as TensorFlow: nearest keeps the dtype
}

TEST(ImageAffineTransform, EveryFillModeAndInterpolationEqualsTensorFlows) {
  const auto& f = ImageFixtures::get();
  const Tensor images = f.array("affine/images");  // [2, 9, 11, 2]
  int compared = 0;
  double worst = 0;
  for (const char* kind : {"rotation", "zoom"}) {
    const Tensor transforms = f.array(std::string("affine/") + kind + "/transforms");
    for (const char* fill : {"reflect", "wrap", "constant", "nearest"}) {
      for (const char* interp : {"bilinear", "nearest"}) {
        const std::string name = std::string("affine/") + kind + "/" + fill + "/" + interp;
        const Tensor got = affine_transform(
            images, transforms, {.interpolation = interp, .fill_mode = fill, .fill_value = 7.5f});
        const double d = max_abs_difference(got, f.array(name));
        EXPECT_LE(d, 1e-5) << name;  // values are within [-3, 10]
        worst = std::max(worst, d);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 16);
  EXPECT_EQ(worst, 0.0) << "no longer bit-exact against TensorFlow";
}

TEST(ImageAffineTransform, OneTransformRowServesEveryImage) {
  const auto& f = ImageFixtures::get();
  const Tensor images = f.array("affine/images");
  const Tensor both = f.array("affine/rotation/transforms");
  const Tensor first = slice(both, {0, 0}, {1, -1});
  const Tensor shared = affine_transform(images, reshape(first, {8}));
  const Tensor each = affine_transform(images, concat({first, first}, 0));
  EXPECT_EQ(max_abs_difference(shared, each), 0.0);
}

TEST(ImageOps, BadArgumentsAreRefusedNamingWhatWasExpected) {
  const Tensor img = Tensor::zeros({2, 4, 4, 3});
  expect_error_containing<ValueError>(
      [&] {
        resize(img, {3, 3}, {.interpolation = "bicubic"});
      },
      "unknown interpolation 'bicubic'");
  expect_error_containing<ValueError>(
      [&] {
        resize(Tensor::zeros({4, 4}), {3, 3});
      },
      "[height, width, channels]");
  expect_error_containing<ValueError>([&] { resize(img, {0, 3}); }, "size must be positive");
  expect_error_containing<ValueError>(
      [&] {
        resize(Tensor::zeros({4, 4, 3}, DType::kInt32), {2, 2});
      },
      "float32 or uint8");
  expect_error_containing<ValueError>(
      [&] {
        affine_transform(img, Tensor::zeros({3, 8}));
      },
      "[2, 8] (one per image)");
  expect_error_containing<ValueError>(
      [&] { affine_transform(img, Tensor::zeros({8}), {.fill_mode = "mirror"}); },
      "unknown fill_mode 'mirror'");
  expect_error_containing<ValueError>(
      [&] { affine_transform(cast(img, DType::kUInt8), Tensor::zeros({8})); }, "float32 images");
}

}  // namespace
}  // namespace lockstep::image
