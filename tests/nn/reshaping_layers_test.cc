// Permute, RepeatVector, Cropping2D, UpSampling2D and Dot
// (nn/reshaping_layers.h) against float64 loops, with finite-difference
// gradients, and what they refuse.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/lockstep.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

TEST(ReshapingLayers, PermuteRepeatVectorAndCroppingWithTheirGradients) {
  std::mt19937 rng(3);
  const Ref x = random_ref({2, 3, 4}, rng);
  layers::Permute permute({2, 1});
  check_gradients(
      "permute", [&](const std::vector<Tensor>& in) { return permute(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({2, 4, 3});
        for (int b = 0; b < 2; ++b)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 4; ++j) y[(b * 4 + j) * 3 + i] = in[0][(b * 3 + i) * 4 + j];
        return y;
      },
      {x});
  const Ref v = random_ref({2, 5}, rng);
  layers::RepeatVector repeat(3);
  check_gradients(
      "repeat_vector", [&](const std::vector<Tensor>& in) { return repeat(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({2, 3, 5});
        for (int b = 0; b < 2; ++b)
          for (int t = 0; t < 3; ++t)
            for (int f = 0; f < 5; ++f) y[(b * 3 + t) * 5 + f] = in[0][b * 5 + f];
        return y;
      },
      {v});
  const Ref img = random_ref({2, 5, 6, 2}, rng);
  layers::Cropping2D crop({{{1, 2}, {0, 3}}});
  check_gradients(
      "cropping2d", [&](const std::vector<Tensor>& in) { return crop(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({2, 2, 3, 2});
        for (int b = 0; b < 2; ++b)
          for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 3; ++j)
              for (int c = 0; c < 2; ++c)
                y[((b * 2 + i) * 3 + j) * 2 + c] = in[0][((b * 5 + i + 1) * 6 + j) * 2 + c];
        return y;
      },
      {img});
  EXPECT_THROW(layers::Permute({1, 1}), ValueError);
  EXPECT_THROW(layers::Cropping2D({{{3, 3}, {0, 0}}})(to_tensor(img)), ShapeError);
}

TEST(ReshapingLayers, UpSamplingRepeatsPixelsOrResizesBilinearly) {
  std::mt19937 rng(4);
  const Ref img = random_ref({1, 2, 3, 2}, rng);
  layers::UpSampling2D nearest({2, 3});
  check_gradients(
      "upsampling2d nearest", [&](const std::vector<Tensor>& in) { return nearest(in[0]); },
      [](const std::vector<Ref>& in) {
        Ref y({1, 4, 9, 2});
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 9; ++j)
            for (int c = 0; c < 2; ++c)
              y[(i * 9 + j) * 2 + c] = in[0][((i / 2) * 3 + j / 3) * 2 + c];
        return y;
      },
      {img});
  layers::UpSampling2D bilinear({2, 2}, {.interpolation = "bilinear"});
  const Tensor t = to_tensor(img);
  EXPECT_EQ(bilinear(t).to_vector<float>(),
            image::resize(t, {4, 6}, {.interpolation = "bilinear"}).to_vector<float>());
  EXPECT_THROW(layers::UpSampling2D({2, 2}, {.interpolation = "bicubic"}), ValueError);
}

TEST(ReshapingLayers, DotContractsTheAxesGivenWithItsGradients) {
  std::mt19937 rng(5);
  const Ref a = random_ref({2, 4}, rng), b = random_ref({2, 4}, rng);
  layers::Dot dot(1);
  check_gradients(
      "dot rank 2",
      [&](const std::vector<Tensor>& in) {
        return dot({in[0], in[1]}).at(0);
      },
      [](const std::vector<Ref>& in) {
        Ref y({2, 1});
        for (int r = 0; r < 2; ++r)
          for (int k = 0; k < 4; ++k) y[r] += in[0][r * 4 + k] * in[1][r * 4 + k];
        return y;
      },
      {a, b});
  layers::Dot cosine(1, {.normalize = true});
  check_gradients(
      "dot normalize",
      [&](const std::vector<Tensor>& in) {
        return cosine({in[0], in[1]}).at(0);
      },
      [](const std::vector<Ref>& in) {
        Ref y({2, 1});
        for (int r = 0; r < 2; ++r) {
          double d = 0, na = 0, nb = 0;
          for (int k = 0; k < 4; ++k) {
            d += in[0][r * 4 + k] * in[1][r * 4 + k];
            na += in[0][r * 4 + k] * in[0][r * 4 + k];
            nb += in[1][r * 4 + k] * in[1][r * 4 + k];
          }
          y[r] = d / std::sqrt(na) / std::sqrt(nb);
        }
        return y;
      },
      {a, b});
  // [2, 3, 4] · [2, 5, 4] along (2, 2) → [2, 3, 5]; (1, 1) on [2, 3, 4]·[2, 3, 5] → [2, 4, 5].
  const Ref q = random_ref({2, 3, 4}, rng), k = random_ref({2, 5, 4}, rng),
            m = random_ref({2, 3, 5}, rng);
  layers::Dot scores(std::array<int, 2>{2, 2});
  check_gradients(
      "dot (2, 2)",
      [&](const std::vector<Tensor>& in) {
        return scores({in[0], in[1]}).at(0);
      },
      [](const std::vector<Ref>& in) {
        Ref y({2, 3, 5});
        for (int n = 0; n < 2; ++n)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 5; ++j)
              for (int c = 0; c < 4; ++c)
                y[(n * 3 + i) * 5 + j] += in[0][(n * 3 + i) * 4 + c] * in[1][(n * 5 + j) * 4 + c];
        return y;
      },
      {q, k});
  layers::Dot first(std::array<int, 2>{1, 1});
  check_gradients(
      "dot (1, 1)",
      [&](const std::vector<Tensor>& in) {
        return first({in[0], in[1]}).at(0);
      },
      [](const std::vector<Ref>& in) {
        Ref y({2, 4, 5});
        for (int n = 0; n < 2; ++n)
          for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 5; ++j)
              for (int c = 0; c < 3; ++c)
                y[(n * 4 + i) * 5 + j] += in[0][(n * 3 + c) * 4 + i] * in[1][(n * 3 + c) * 5 + j];
        return y;
      },
      {q, m});
  EXPECT_THROW(layers::Dot(1)({to_tensor(q), to_tensor(k)}), ShapeError);
}

}  // namespace
}  // namespace lockstep::testing
