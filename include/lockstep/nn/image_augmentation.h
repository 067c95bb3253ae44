// Image augmentation layers (keras.layers.RandomFlip, RandomRotation): random
// transformations in training, the identity in inference.
//
//   auto x = ls::layers::RandomFlip("horizontal")(inputs);
//   x = ls::layers::RandomRotation(0.1)(x);   // up to ±36°
//
// Keras 3's semantics: each image of a batch draws its own transformation;
// RandomFlip flips an image when its draw u in [0, 1) is ≤ 0.5, and in
// "horizontal_and_vertical" mode the one draw flips both axes (so an image
// is either unchanged or turned by 180°, as Keras 3 does); RandomRotation
// turns each image about its centre by an angle uniform in [lower, upper] ×
// 360°, sampling with keras.ops.image.affine_transform (fill_mode,
// interpolation, fill_value). Outputs are float32 (Keras casts to its compute
// dtype). Inputs are [height, width, channels] or [batch, height, width,
// channels].
//
// Randomness: Lockstep's Philox streams, not TensorFlow's — a seed makes a
// run reproducible but does not give TensorFlow's draws. Each call uses the
// next stream of the layer's seed (a layer without a seed takes its own
// block of the global sequence), as Dropout does.
//
// Gradients flow to the input (a flip is a permutation; a rotation's
// bilinear sampling is linear in the pixels).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "lockstep/nn/layer.h"
#include "lockstep/tensor/random.h"

namespace lockstep::layers {

// ---- RandomFlip --------------------------------------------------------------

struct RandomFlipOptions {
  std::optional<std::uint64_t> seed{};
  std::string name{};
};

class RandomFlipImpl : public SingleInputLayerImpl {
 public:
  RandomFlipImpl(std::string mode, RandomFlipOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  const std::string& mode() const { return mode_; }

 private:
  std::string mode_;
  std::optional<std::uint64_t> explicit_seed_;
  std::uint64_t seed_ = 0;
  random::StreamCounter next_stream_;
};

// mode: "horizontal" (left-right), "vertical" (top-bottom) or
// "horizontal_and_vertical".
class RandomFlip : public Layer {
 public:
  explicit RandomFlip(std::string mode = "horizontal_and_vertical", RandomFlipOptions options = {});
  RandomFlipImpl* operator->() const { return static_cast<RandomFlipImpl*>(impl_.get()); }
};

// ---- RandomRotation ------------------------------------------------------------

struct RandomRotationOptions {
  std::string fill_mode = "reflect";       // "reflect", "wrap", "constant" or "nearest"
  std::string interpolation = "bilinear";  // or "nearest"
  std::optional<std::uint64_t> seed{};
  float fill_value = 0.0f;  // for fill_mode "constant"
  std::string name{};
};

class RandomRotationImpl : public SingleInputLayerImpl {
 public:
  RandomRotationImpl(std::array<double, 2> factor, RandomRotationOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;
  // (lower, upper), fractions of a full turn.
  const std::array<double, 2>& factor() const { return factor_; }
  // Keras's rotation matrices ([n, 8], the layout of affine_transform) for
  // angles in degrees, about the centre of h x w images.
  static Tensor rotation_matrices(const Tensor& angles_degrees, std::int64_t height,
                                  std::int64_t width);

 private:
  std::array<double, 2> factor_;
  RandomRotationOptions options_;
  std::optional<std::uint64_t> explicit_seed_;
  std::uint64_t seed_ = 0;
  random::StreamCounter next_stream_;
};

// factor: a fraction of a full turn in [-1, 1]; f turns by up to ±f × 360°,
// {lower, upper} by an angle in [lower, upper] × 360° (positive:
// counter-clockwise).
class RandomRotation : public Layer {
 public:
  explicit RandomRotation(double factor, RandomRotationOptions options = {});
  RandomRotation(std::array<double, 2> factor, RandomRotationOptions options = {});
  RandomRotationImpl* operator->() const { return static_cast<RandomRotationImpl*>(impl_.get()); }
};

}  // namespace lockstep::layers
