// Permute, RepeatVector, Cropping2D, UpSampling2D and Dot
// (nn/reshaping_layers.h).
#include "lockstep/nn/reshaping_layers.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "lockstep/core/error.h"
#include "lockstep/tensor/image_ops.h"
#include "lockstep/tensor/ops.h"

namespace lockstep::layers {

// ---- Permute ---------------------------------------------------------------------

PermuteImpl::PermuteImpl(std::vector<std::int64_t> dims, std::string name)
    : SingleInputLayerImpl("Permute", std::move(name)), dims_(std::move(dims)) {
  std::vector<std::int64_t> sorted = dims_;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> want(dims_.size());
  std::iota(want.begin(), want.end(), 1);
  LOCKSTEP_CHECK(!dims_.empty() && sorted == want, "Permute '", this->name(), "': dims ",
                 Shape(dims_), " must be a permutation of 1 .. ", dims_.size(),
                 " (the axes after the batch, 1-based)");
}

Tensor PermuteImpl::call(const Tensor& x, const CallContext&) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == static_cast<int>(dims_.size()) + 1, "Permute '", name(),
                    "': dims ", Shape(dims_), " permute ", dims_.size(),
                    " axes after the batch; the input has shape ", x.shape());
  std::vector<int> perm{0};
  for (std::int64_t d : dims_) perm.push_back(static_cast<int>(d));
  return transpose(x, perm);
}

LayerConfig PermuteImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("dims", dims_);
  return c;
}

Permute::Permute(std::vector<std::int64_t> dims, std::string name)
    : Layer(std::make_shared<PermuteImpl>(std::move(dims), std::move(name))) {}

// ---- RepeatVector -----------------------------------------------------------------

RepeatVectorImpl::RepeatVectorImpl(std::int64_t n, std::string name)
    : SingleInputLayerImpl("RepeatVector", std::move(name)), n_(n) {
  LOCKSTEP_CHECK(n > 0, "RepeatVector '", this->name(), "': n must be positive, got ", n);
}

Tensor RepeatVectorImpl::call(const Tensor& x, const CallContext&) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 2, "RepeatVector '", name(),
                    "': expected [batch, features], got ", x.shape());
  const std::int64_t b = x.shape()[0], f = x.shape()[1];
  return broadcast_to(reshape(x, {b, 1, f}), Shape{b, n_, f});
}

LayerConfig RepeatVectorImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("n", n_);
  return c;
}

RepeatVector::RepeatVector(std::int64_t n, std::string name)
    : Layer(std::make_shared<RepeatVectorImpl>(n, std::move(name))) {}

// ---- Cropping2D --------------------------------------------------------------------

namespace {
void check_images(const Tensor& x, const LayerImpl& layer) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 4, layer.class_name(), " '", layer.name(),
                    "': expected images [batch, height, width, channels], got ", x.shape());
}
}  // namespace

Cropping2DImpl::Cropping2DImpl(std::array<std::array<std::int64_t, 2>, 2> cropping,
                               std::string name)
    : SingleInputLayerImpl("Cropping2D", std::move(name)), cropping_(cropping) {
  for (const auto& pair : cropping_) {
    for (std::int64_t v : pair)
      LOCKSTEP_CHECK(v >= 0, "Cropping2D '", this->name(), "': cropping must be >= 0, got ", v);
  }
}

Tensor Cropping2DImpl::call(const Tensor& x, const CallContext&) {
  check_images(x, *this);
  const std::int64_t h = x.shape()[1] - cropping_[0][0] - cropping_[0][1];
  const std::int64_t w = x.shape()[2] - cropping_[1][0] - cropping_[1][1];
  LOCKSTEP_CHECK_AS(ShapeError, h > 0 && w > 0, "Cropping2D '", name(), "': cropping ((",
                    cropping_[0][0], ", ", cropping_[0][1], "), (", cropping_[1][0], ", ",
                    cropping_[1][1], ")) leaves nothing of ", x.shape());
  return slice(x, {0, cropping_[0][0], cropping_[1][0], 0}, {-1, h, w, -1});
}

LayerConfig Cropping2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("cropping", std::vector<std::int64_t>{cropping_[0][0], cropping_[0][1], cropping_[1][0],
                                              cropping_[1][1]});
  return c;
}

Cropping2D::Cropping2D(std::array<std::array<std::int64_t, 2>, 2> cropping, std::string name)
    : Layer(std::make_shared<Cropping2DImpl>(cropping, std::move(name))) {}

// ---- UpSampling2D ------------------------------------------------------------------

UpSampling2DImpl::UpSampling2DImpl(std::array<std::int64_t, 2> size, UpSampling2DOptions options)
    : SingleInputLayerImpl("UpSampling2D", options.name),
      size_(size),
      options_(std::move(options)) {
  LOCKSTEP_CHECK(size_[0] > 0 && size_[1] > 0, "UpSampling2D '", name(),
                 "': size must be positive, got (", size_[0], ", ", size_[1], ")");
  LOCKSTEP_CHECK(options_.interpolation == "nearest" || options_.interpolation == "bilinear",
                 "UpSampling2D '", name(), "': interpolation '", options_.interpolation,
                 "' is not one Lockstep has (nearest, bilinear)");
}

Tensor UpSampling2DImpl::call(const Tensor& x, const CallContext&) {
  check_images(x, *this);
  const std::int64_t n = x.shape()[0], h = x.shape()[1], w = x.shape()[2], c = x.shape()[3];
  if (options_.interpolation == "bilinear")
    return image::resize(x, {h * size_[0], w * size_[1]}, {.interpolation = "bilinear"});
  // Each pixel repeated: [n, h, 1, w, 1, c] broadcast and merged.
  const Tensor grid =
      broadcast_to(reshape(x, {n, h, 1, w, 1, c}), Shape{n, h, size_[0], w, size_[1], c});
  return reshape(grid, {n, h * size_[0], w * size_[1], c});
}

LayerConfig UpSampling2DImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("size", std::vector<std::int64_t>{size_[0], size_[1]});
  c.set("interpolation", options_.interpolation);
  return c;
}

UpSampling2D::UpSampling2D(std::array<std::int64_t, 2> size, UpSampling2DOptions options)
    : Layer(std::make_shared<UpSampling2DImpl>(size, std::move(options))) {}

// ---- Dot ---------------------------------------------------------------------------

DotImpl::DotImpl(std::array<int, 2> axes, DotOptions options, bool one_axis)
    : LayerImpl("Dot", options.name),
      axes_(axes),
      options_(std::move(options)),
      one_axis_(one_axis) {}

std::vector<Tensor> DotImpl::call(const std::vector<Tensor>& inputs, const CallContext&) {
  LOCKSTEP_CHECK(inputs.size() == 2, "Dot '", name(), "': expected 2 inputs, got ", inputs.size());
  Tensor x = inputs[0], y = inputs[1];
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == y.rank() && (x.rank() == 2 || x.rank() == 3), "Dot '",
                    name(), "': Lockstep's Dot takes two inputs of rank 2 or 3 alike, got ",
                    x.shape(), " and ", y.shape());
  const int r = x.rank();
  const int ax = axes_[0] < 0 ? axes_[0] + r : axes_[0];
  const int ay = axes_[1] < 0 ? axes_[1] + r : axes_[1];
  LOCKSTEP_CHECK(ax >= 1 && ax < r && ay >= 1 && ay < r, "Dot '", name(), "': axes (", axes_[0],
                 ", ", axes_[1], ") must name axes after the batch of rank-", r, " inputs");
  LOCKSTEP_CHECK_AS(ShapeError, x.shape()[ax] == y.shape()[ay], "Dot '", name(), "': axis ", ax,
                    " of ", x.shape(), " and axis ", ay, " of ", y.shape(), " differ in size");
  if (options_.normalize) {  // Keras's l2_normalize: x / sqrt(max(Σx², 1e-12))
    auto l2 = [](const Tensor& t, int axis) {
      const Tensor norm2 = sum(square(t), {.axes = {axis}, .keepdims = true});
      return t / sqrt(maximum(norm2, Tensor::scalar(1e-12f)));
    };
    x = l2(x, ax);
    y = l2(y, ay);
  }
  if (r == 2) return {sum(x * y, {.axes = {1}, .keepdims = true})};
  // [b, n, d]·[b, d, m]: x's contracted axis last, y's first after the batch.
  if (ax == 1) x = transpose(x, {0, 2, 1});
  if (ay == 2) y = transpose(y, {0, 2, 1});
  return {matmul(x, y)};
}

LayerConfig DotImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  if (one_axis_) {
    c.set("axes", std::int64_t{axes_[0]});
  } else {
    c.set("axes", std::vector<std::int64_t>{axes_[0], axes_[1]});
  }
  c.set("normalize", options_.normalize);
  return c;
}

Dot::Dot(int axes, DotOptions options)
    : Layer(std::make_shared<DotImpl>(std::array<int, 2>{axes, axes}, std::move(options), true)) {}
Dot::Dot(std::array<int, 2> axes, DotOptions options)
    : Layer(std::make_shared<DotImpl>(axes, std::move(options))) {}

}  // namespace lockstep::layers
