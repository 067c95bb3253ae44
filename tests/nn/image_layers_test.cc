// The layers MobileNetV2 and its input pipeline need (issue #19): ReLU with
// Keras's max_value / negative_slope / threshold, ZeroPadding2D,
// GlobalAveragePooling2D / GlobalMaxPooling2D, Add, Rescaling and Resizing —
// each against a float64 reference, with its input gradient by finite
// differences, its Keras config keys, and its errors.
#include <gtest/gtest.h>

#include <random>

#include "support/reference.h"

namespace lockstep::testing {
namespace {

// The layer's input gradient by finite differences of the float64 `ref`.
void check_layer(const std::string& name, const Layer& layer, const RefFn& ref,
                 const std::vector<Ref>& inputs) {
  check_gradients(
      name,
      [layer](const std::vector<Tensor>& x) {
        return x.size() == 1 ? layer(x[0], {.training = true}) : layer(x, {.training = true}).at(0);
      },
      ref, inputs);
}

TEST(ImageLayers, ReLUArgumentsGiveKerasDocstringValues) {
  // keras.activations.relu's docstring examples (Keras 3.15's outputs).
  const Tensor x = Tensor::from_vector<float>({-10, -5, 0, 5, 10});
  EXPECT_EQ(layers::ReLU()(x).to_vector<float>(), (std::vector<float>{0, 0, 0, 5, 10}));
  EXPECT_EQ(layers::ReLU({.negative_slope = 0.5f})(x).to_vector<float>(),
            (std::vector<float>{-5, -2.5f, 0, 5, 10}));
  EXPECT_EQ(layers::ReLU({.max_value = 5.0f})(x).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 5, 5}));
  EXPECT_EQ(layers::ReLU({.threshold = 5.0f})(x).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 0, 10}));
  EXPECT_THROW(layers::ReLU({.max_value = -1.0f}), ValueError);
  EXPECT_THROW(layers::ReLU({.threshold = -1.0f}), ValueError);
}

TEST(ImageLayers, ReLU6AndLeakyThresholdGradientsByFiniteDifferences) {
  std::mt19937 rng(1);
  check_layer("ReLU6", layers::ReLU({.max_value = 6.0f}),
              [](const std::vector<Ref>& x) {
                return ref_unary(x[0], [](double v) { return std::clamp(v, 0.0, 6.0); });
              },
              {random_ref({2, 3, 3, 4}, rng, -3, 9)});
  check_layer("ReLU leaky with threshold and cap",
              layers::ReLU({.max_value = 2.0f, .negative_slope = 0.25f, .threshold = 0.5f}),
              [](const std::vector<Ref>& x) {
                return ref_unary(
                    x[0], [](double v) { return v > 0.5 ? std::min(v, 2.0) : 0.25 * (v - 0.5); });
              },
              {random_ref({4, 6}, rng, -3, 3)});
}

TEST(ImageLayers, ZeroPaddingAddsZerosAroundAndPassesGradientsInside) {
  std::mt19937 rng(2);
  check_layer("ZeroPadding2D ((0, 1), (2, 1))", layers::ZeroPadding2D({{{0, 1}, {2, 1}}}),
              [](const std::vector<Ref>& in) {
                const Ref& x = in[0];
                const std::int64_t n = x.dims[0], h = x.dims[1], w = x.dims[2], c = x.dims[3];
                Ref y({n, h + 1, w + 3, c});
                for (std::int64_t i = 0; i < x.size(); ++i) {
                  const Dims d = unravel(i, x.dims);
                  y[((d[0] * (h + 1) + d[1]) * (w + 3) + d[2] + 2) * c + d[3]] = x[i];
                }
                return y;
              },
              {random_ref({2, 3, 2, 2}, rng)});
}

TEST(ImageLayers, GlobalPoolingTakesMeanOrMaxOverPositions) {
  std::mt19937 rng(3);
  for (bool keepdims : {false, true}) {
    for (bool max : {false, true}) {
      const layers::GlobalPoolingOptions o{.keepdims = keepdims};
      const Layer layer =
          max ? Layer(layers::GlobalMaxPooling2D(o)) : Layer(layers::GlobalAveragePooling2D(o));
      check_layer(std::string(max ? "GlobalMaxPooling2D" : "GlobalAveragePooling2D") +
                      (keepdims ? " keepdims" : ""),
                  layer,
                  [=](const std::vector<Ref>& in) {
                    const Ref& x = in[0];
                    const std::int64_t n = x.dims[0], positions = x.dims[1] * x.dims[2],
                                       c = x.dims[3];
                    Ref y(keepdims ? Dims{n, 1, 1, c} : Dims{n, c});
                    for (std::int64_t b = 0; b < n; ++b)
                      for (std::int64_t ch = 0; ch < c; ++ch) {
                        double acc = max ? -1e300 : 0.0;
                        for (std::int64_t p = 0; p < positions; ++p) {
                          const double v = x[(b * positions + p) * c + ch];
                          acc = max ? std::max(acc, v) : acc + v;
                        }
                        y[b * c + ch] = max ? acc : acc / static_cast<double>(positions);
                      }
                    return y;
                  },
                  {random_ref({2, 3, 4, 5}, rng)});
      EXPECT_EQ(layer->get_config().get<bool>("keepdims"), keepdims);
    }
  }
  EXPECT_EQ(layers::GlobalMaxPooling2D().name().rfind("global_max_pooling2d", 0), 0u);
  EXPECT_THROW(layers::GlobalMaxPooling2D()(Tensor::ones({2, 3})), ShapeError);
}

TEST(ImageLayers, AddSumsItsInputsAndGivesEachTheGradient) {
  std::mt19937 rng(4);
  check_layer("Add of three", layers::Add(),
              [](const std::vector<Ref>& in) {
                return ref_binary(ref_binary(in[0], in[1], std::plus<>()), in[2], std::plus<>());
              },
              {random_ref({2, 3, 3, 2}, rng), random_ref({2, 3, 3, 2}, rng),
               random_ref({2, 3, 3, 2}, rng)});
}

// Keras's other merging layers: elementwise over their inputs, each input
// getting its share of the gradient (ties of Maximum/Minimum do not occur
// with random inputs); Subtract takes exactly two.
TEST(ImageLayers, MergeLayersAreElementwiseWithTheirGradients) {
  std::mt19937 rng(5);
  const std::vector<Ref> three{random_ref({2, 5}, rng), random_ref({2, 5}, rng),
                               random_ref({2, 5}, rng)};
  auto fold = [](const std::function<double(double, double)>& f) {
    return [f](const std::vector<Ref>& in) {
      Ref out = in[0];
      for (std::size_t i = 1; i < in.size(); ++i) out = ref_binary(out, in[i], f);
      return out;
    };
  };
  check_layer("Multiply", layers::Multiply(), fold(std::multiplies<>()), three);
  check_layer("Maximum", layers::Maximum(), fold([](double a, double b) { return std::max(a, b); }),
              three);
  check_layer("Minimum", layers::Minimum(), fold([](double a, double b) { return std::min(a, b); }),
              three);
  check_layer(
      "Average", layers::Average(),
      [&](const std::vector<Ref>& in) {
        Ref out = fold(std::plus<>())(in);
        for (double& v : out.v) v /= 3.0;
        return out;
      },
      three);
  check_layer("Subtract", layers::Subtract(), fold(std::minus<>()), {three[0], three[1]});
  const Tensor x = Tensor::ones({2, 5});
  EXPECT_THROW(layers::Subtract()({x, x, x}), ValueError);
  EXPECT_THROW(layers::Multiply()({x, Tensor::ones({2, 4})}), ShapeError);
  EXPECT_EQ(layers::Maximum().name().rfind("maximum", 0), 0u);
}

TEST(ImageLayers, RescalingMapsBytesToMinusOneToOne) {
  // MobileNetV2's preprocessing as a layer: Rescaling(1 / 127.5, offset -1).
  layers::Rescaling to_unit(1.0f / 127.5f, {.offset = -1.0f});
  const Tensor bytes = Tensor::from_vector<std::uint8_t>({0, 255, 51}, {1, 3});
  const std::vector<float> got = to_unit(bytes).to_vector<float>();
  EXPECT_EQ(got[0], -1.0f);
  EXPECT_EQ(got[1], 1.0f);
  EXPECT_NEAR(got[2], 51.0 / 127.5 - 1.0, 1e-7);
  EXPECT_EQ(to_unit->get_config().get<double>("offset"), -1.0);
  std::mt19937 rng(5);
  check_layer("Rescaling", layers::Rescaling(0.5f, {.offset = 2.0f}),
              [](const std::vector<Ref>& x) {
                return ref_unary(x[0], [](double v) { return v * 0.5 + 2; });
              },
              {random_ref({3, 4}, rng)});
}

TEST(ImageLayers, ResizingIsBilinearWithHalfPixelCentres) {
  // A 2x2 image to 4x4: half-pixel centres sample at -0.25, 0.25, 0.75,
  // 1.25 along each axis (clamped at the edges), so the corners keep their
  // values and the inner rows are 3:1 blends.
  const Tensor image = Tensor::from_vector<float>({0, 4, 8, 12}, {1, 2, 2, 1});
  const std::vector<float> want = {0, 1, 3, 4,  2, 3, 5,  6,  //
                                   6, 7, 9, 10, 8, 9, 11, 12};
  EXPECT_EQ(layers::Resizing(4, 4)(image).to_vector<float>(), want);
  // One image without a batch dimension, and bytes, as Keras takes them.
  const Tensor one = Tensor::from_vector<std::uint8_t>({0, 4, 8, 12}, {2, 2, 1});
  const Tensor resized = layers::Resizing(4, 4)(one);
  EXPECT_EQ(resized.shape(), (Shape{4, 4, 1}));
  EXPECT_EQ(resized.dtype(), DType::kFloat32);
  EXPECT_EQ(resized.to_vector<float>(), want);
  std::mt19937 rng(6);
  check_layer(
      "Resizing 3x5 -> 4x2", layers::Resizing(4, 2),
      [](const std::vector<Ref>& in) {
        // Reference weights for 3 -> 4 rows and 5 -> 2 columns, by hand:
        // rows sample at 0.75 i - 0.125 (clamped at 0), columns at 2.5 j + 0.75.
        const Ref& x = in[0];
        Ref y({1, 4, 2, 1});
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 2; ++j) {
            const double py = std::max(0.0, (i + 0.5) * 0.75 - 0.5), px = (j + 0.5) * 2.5 - 0.5;
            const int y0 = static_cast<int>(std::floor(py)), x0 = static_cast<int>(std::floor(px));
            const int y1 = std::min(y0 + 1, 2), x1 = std::min(x0 + 1, 4);
            const double wy = py - y0, wx = px - x0;
            auto v = [&](int r, int c) { return x[r * 5 + c]; };
            y[i * 2 + j] = (1 - wy) * ((1 - wx) * v(y0, x0) + wx * v(y0, x1)) +
                           wy * ((1 - wx) * v(y1, x0) + wx * v(y1, x1));
          }
        return y;
      },
      {random_ref({1, 3, 5, 1}, rng)});
  EXPECT_THROW(layers::Resizing(4, 4, {.interpolation = "bicubic"}), ValueError);
  EXPECT_THROW(layers::Resizing(4, 4, {.crop_to_aspect_ratio = true}), ValueError);
  EXPECT_THROW(layers::Resizing(4, 4)(Tensor::ones({4, 4})), ShapeError);
}

TEST(ImageLayers, ConfigsRebuildTheSameLayers) {
  for (const Layer& made :
       {Layer(layers::ReLU({.max_value = 6.0f, .name = "Conv1_relu"})),
        Layer(layers::ReLU({.negative_slope = 0.1f, .threshold = 0.5f})),
        Layer(layers::GlobalMaxPooling2D({.keepdims = true})),
        Layer(layers::Rescaling(1.0f / 255.0f, {.offset = 0.5f})), Layer(layers::Resizing(7, 9)),
        Layer(layers::ZeroPadding2D({{{0, 1}, {0, 1}}}, "block_1_pad"))}) {
    const Layer rebuilt = layer_from_config(made->class_name(), made->get_config());
    EXPECT_EQ(rebuilt->class_name(), made->class_name());
    EXPECT_EQ(rebuilt.name(), made.name());
    const auto a = made->get_config().entries(), b = rebuilt->get_config().entries();
    EXPECT_EQ(a, b) << made->class_name();
  }
  // An unbounded ReLU has no max_value (Keras writes null).
  EXPECT_FALSE(layers::ReLU()->get_config().has("max_value"));
}

}  // namespace
}  // namespace lockstep::testing
