// Reshaping and combining layers (keras.layers): Permute, RepeatVector,
// Cropping2D, UpSampling2D and Dot, each with Keras's class name and config
// keys. They are made of the library's differentiable ops (transpose,
// broadcast, slice, resize, matmul), so their gradients are those ops'.
//
//   auto x = ls::layers::UpSampling2D({2, 2})(features);        // [n, 2h, 2w, c]
//   auto s = ls::layers::Dot({2, 2})({queries, keys});           // [n, q, k]
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

// The non-batch axes in a new order, 1-based as Keras writes them:
// Permute({2, 1}) swaps the two axes of [batch, a, b].
class PermuteImpl : public SingleInputLayerImpl {
 public:
  PermuteImpl(std::vector<std::int64_t> dims, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::vector<std::int64_t> dims_;
};
class Permute : public Layer {
 public:
  explicit Permute(std::vector<std::int64_t> dims, std::string name = "");
};

// [batch, features] → [batch, n, features].
class RepeatVectorImpl : public SingleInputLayerImpl {
 public:
  RepeatVectorImpl(std::int64_t n, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::int64_t n_;
};
class RepeatVector : public Layer {
 public:
  explicit RepeatVector(std::int64_t n, std::string name = "");
};

// Removes rows and columns of images [n, h, w, c]: ((top, bottom), (left, right)).
class Cropping2DImpl : public SingleInputLayerImpl {
 public:
  Cropping2DImpl(std::array<std::array<std::int64_t, 2>, 2> cropping, std::string name);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::array<std::array<std::int64_t, 2>, 2> cropping_;
};
class Cropping2D : public Layer {
 public:
  explicit Cropping2D(std::array<std::array<std::int64_t, 2>, 2> cropping = {{{0, 0}, {0, 0}}},
                      std::string name = "");
};

struct UpSampling2DOptions {
  std::string interpolation = "nearest";  // or "bilinear" (tf.image.resize's, half-pixel)
  std::string name{};
};
// Images [n, h, w, c] → [n, h·size_h, w·size_w, c]: each pixel repeated
// (nearest), or resized bilinearly.
class UpSampling2DImpl : public SingleInputLayerImpl {
 public:
  UpSampling2DImpl(std::array<std::int64_t, 2> size, UpSampling2DOptions options);
  Tensor call(const Tensor& x, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::array<std::int64_t, 2> size_;
  UpSampling2DOptions options_;
};
class UpSampling2D : public Layer {
 public:
  explicit UpSampling2D(std::array<std::int64_t, 2> size = {2, 2},
                        UpSampling2DOptions options = {});
};

struct DotOptions {
  bool normalize = false;  // L2-normalise along the contracted axes first: cosine similarity
  std::string name{};
};
// The dot product of two batched tensors along one axis of each (Keras's
// axes, the batch being axis 0): [b, d]·[b, d] → [b, 1]; [b, n, d]·[b, m, d]
// with axes (2, 2) → [b, n, m].
class DotImpl : public LayerImpl {
 public:
  // `one_axis`: given as one number (Keras's config then records one).
  DotImpl(std::array<int, 2> axes, DotOptions options, bool one_axis = false);
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallContext& ctx) override;
  LayerConfig get_config() const override;

 private:
  std::array<int, 2> axes_;
  DotOptions options_;
  bool one_axis_;
};
class Dot : public Layer {
 public:
  // One axis for both inputs, or one each.
  explicit Dot(int axes, DotOptions options = {});
  Dot(std::array<int, 2> axes, DotOptions options = {});
};

}  // namespace lockstep::layers
