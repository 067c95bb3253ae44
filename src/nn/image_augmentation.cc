// The image augmentation layers RandomFlip and RandomRotation
// (nn/image_augmentation.h): Keras 3's keras/src/layers/preprocessing/
// image_preprocessing/random_flip.py and random_rotation.py, drawing from
// Lockstep's Philox streams.
#include "lockstep/nn/image_augmentation.h"

#include <cmath>
#include <numbers>

#include "lockstep/autodiff/mirrored_copy.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/device_kernels.h"
#include "lockstep/tensor/image_ops.h"
#include "lockstep/tensor/ops.h"
#include "lockstep/tensor/random.h"

namespace lockstep::layers {
namespace {

// The (seed, first stream) of a layer: its own seed, or a block of the
// global sequence (as Dropout's).
std::pair<std::uint64_t, std::uint64_t> seed_and_stream(const std::optional<std::uint64_t>& seed) {
  if (seed) return {*seed, 0};
  const auto [s, stream] = detail::next_global_random_key();
  return {s, stream << 32};
}

// x as a float32 batch [n, h, w, c] (a single image is a batch of one).
Tensor as_batch(const Tensor& x, const LayerImpl& layer) {
  LOCKSTEP_CHECK_AS(ShapeError, x.rank() == 3 || x.rank() == 4, layer.class_name(), " '",
                    layer.name(),
                    "': expected images of shape [height, width, channels] or [batch, height, "
                    "width, channels], got shape ",
                    x.shape());
  const Tensor f = x.dtype() == DType::kFloat32 ? x : cast(x, DType::kFloat32);
  return x.rank() == 4 ? f : reshape(f, {1, x.dim(0), x.dim(1), x.dim(2)});
}

Tensor like_input(const Tensor& y, const Tensor& x) {
  return x.rank() == 4 ? y : reshape(y, x.shape().to_vector());
}

// In a step recorded as a graph (fit's, on a GPU) the host's work of the
// two layers cannot run inside it: it runs before each replay instead
// (detail::before_each_replay), writing device memory the step reads.

// Images [n, h, w, c] with their width (axis 2) or height (axis 1)
// reversed, in a recorded step: the exact affine transform x ↦ w − 1 − x
// (or y ↦ h − 1 − y) sampled at the nearest pixel — integral coordinates,
// so every value is copied, the gather's bits — with its matrix written
// before the first replay (a gather of indices made on the host is refused).
Tensor reverse_recorded(const Tensor& images, int axis) {
  const auto h = static_cast<float>(images.dim(1)), w = static_cast<float>(images.dim(2));
  const std::vector<float> m = axis == 2 ? std::vector<float>{-1, 0, w - 1, 0, 1, 0, 0, 0}
                                         : std::vector<float>{1, 0, 0, 0, -1, h - 1, 0, 0};
  const Tensor transform = detail::staged_tensor({8}, DType::kFloat32);
  // A constant: written before the first replay only (no kernel of the step
  // writes staged memory).
  detail::before_each_replay([transform, m, written = false]() mutable {
    if (written) return;
    const DeviceScope on_host(host_device(), {.pin_thread = false});
    detail::copy_into(transform, Tensor::from_vector(m));
    written = true;
  });
  return image::affine_transform(images, transform, {.interpolation = "nearest"});
}

// x with dimension `axis` reversed (a gather, so its gradient is the same
// permutation of the output's).
Tensor reverse(const Tensor& x, int axis) {
  if (detail::recording_step() && x.rank() == 4 && (axis == 1 || axis == 2) &&
      x.dtype() == DType::kFloat32)
    return reverse_recorded(x, axis);
  const std::int64_t n = x.dim(axis);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) idx[static_cast<std::size_t>(i)] = n - 1 - i;
  return gather(x, Tensor::from_vector(idx), axis);
}

}  // namespace

// ---- RandomFlip -------------------------------------------------------------------

RandomFlipImpl::RandomFlipImpl(std::string mode, RandomFlipOptions options)
    : SingleInputLayerImpl("RandomFlip", options.name),
      mode_(std::move(mode)),
      explicit_seed_(options.seed) {
  LOCKSTEP_CHECK(mode_ == "horizontal" || mode_ == "vertical" || mode_ == "horizontal_and_vertical",
                 "RandomFlip: mode must be \"horizontal\", \"vertical\" or "
                 "\"horizontal_and_vertical\", got \"",
                 mode_, "\"");
  std::uint64_t first = 0;
  std::tie(seed_, first) = seed_and_stream(options.seed);
  next_stream_.reset(first);
}

Tensor RandomFlipImpl::call(const Tensor& x, const CallContext& ctx) {
  Tensor images = as_batch(x, *this);
  if (!ctx.training) return like_input(images, x);
  const std::int64_t n = images.dim(0);
  const Tensor u = random::uniform_next({n}, seed_, next_stream_.of(current_mirrored_copy()));
  const Tensor flips = reshape(less_equal(u, Tensor::scalar(0.5f)), {n, 1, 1, 1});
  if (mode_ != "vertical") images = where(flips, reverse(images, 2), images);
  if (mode_ != "horizontal") images = where(flips, reverse(images, 1), images);
  return like_input(images, x);
}

LayerConfig RandomFlipImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("mode", mode_);
  if (explicit_seed_) c.set("seed", static_cast<std::int64_t>(*explicit_seed_));
  return c;
}

RandomFlip::RandomFlip(std::string mode, RandomFlipOptions options)
    : Layer(std::make_shared<RandomFlipImpl>(std::move(mode), std::move(options))) {}

// ---- RandomRotation -----------------------------------------------------------------

RandomRotationImpl::RandomRotationImpl(std::array<double, 2> factor, RandomRotationOptions options)
    : SingleInputLayerImpl("RandomRotation", options.name),
      factor_(factor),
      options_(std::move(options)),
      explicit_seed_(options_.seed) {
  LOCKSTEP_CHECK(factor[0] >= -1 && factor[1] <= 1 && factor[0] <= factor[1],
                 "RandomRotation: factor must be a number or a (lower, upper) pair in [-1, 1] "
                 "(fractions of a full turn), got (",
                 factor[0], ", ", factor[1], ")");
  const auto& f = options_.fill_mode;
  LOCKSTEP_CHECK(
      f == "reflect" || f == "wrap" || f == "constant" || f == "nearest",
      "RandomRotation: fill_mode must be one of reflect, wrap, constant, nearest; got \"", f, "\"");
  LOCKSTEP_CHECK(options_.interpolation == "bilinear" || options_.interpolation == "nearest",
                 "RandomRotation: interpolation must be \"bilinear\" or \"nearest\", got \"",
                 options_.interpolation, "\"");
  std::uint64_t first = 0;
  std::tie(seed_, first) = seed_and_stream(options_.seed);
  next_stream_.reset(first);
}

// BaseImagePreprocessingLayer._compute_affine_matrix with no shear, scale 1
// and no translation, in its float32 arithmetic and order.
Tensor RandomRotationImpl::rotation_matrices(const Tensor& angles_degrees, std::int64_t height,
                                             std::int64_t width) {
  const std::int64_t n = angles_degrees.dim(0);
  const std::vector<float> angles = angles_degrees.to_vector<float>();
  const auto to_radians = static_cast<float>(std::numbers::pi / 180.0);
  const float cx = 0.5f * static_cast<float>(width - 1);
  const float cy = 0.5f * static_cast<float>(height - 1);
  // Worked out on the host (the angles were drawn there), then made on the
  // current device.
  std::vector<float> m(static_cast<std::size_t>(8 * n), 0.0f);
  float* p = m.data();
  for (std::int64_t i = 0; i < n; ++i, p += 8) {
    const float theta = angles[static_cast<std::size_t>(i)] * to_radians;
    const float cos_t = std::cos(theta), sin_t = std::sin(theta);
    p[0] = cos_t;
    p[1] = -sin_t;
    p[2] = 0.0f + cx - cx * p[0] - cy * p[1];
    p[3] = sin_t;
    p[4] = cos_t;
    p[5] = 0.0f + cy - cx * p[3] - cy * p[4];
  }
  return Tensor::from_vector(m, {n, 8});
}

Tensor RandomRotationImpl::call(const Tensor& x, const CallContext& ctx) {
  const Tensor images = as_batch(x, *this);
  if (!ctx.training) return like_input(images, x);
  const std::int64_t n = images.dim(0);
  // keras.random.uniform(minval=lower * 360, maxval=upper * 360): u * span + min.
  const auto lower = static_cast<float>(factor_[0] * 360.0);
  const auto upper = static_cast<float>(factor_[1] * 360.0);
  Tensor transforms;
  if (detail::recording_step()) {
    // The angles and matrices on the host before each replay, from the
    // stream the eager step would draw: the same bits (the device draws the
    // host's, and the same float operations make the angles).
    transforms = detail::staged_tensor({n, 8}, DType::kFloat32);
    std::uint64_t* counter = &next_stream_.of(current_mirrored_copy());
    detail::before_each_replay(
        [this, counter, transforms, n, lower, upper, h = images.dim(1), w = images.dim(2)] {
          const std::uint64_t stream = (*counter)++;
          Tensor m;
          {
            const DeviceScope on_host(host_device(), {.pin_thread = false});
            const Tensor u = random::uniform({n}, {.seed = seed_, .stream = stream});
            m = rotation_matrices(u * (upper - lower) + lower, h, w);
          }
          detail::copy_into(transforms, m);
        });
  } else {
    const Tensor u = random::uniform_next({n}, seed_, next_stream_.of(current_mirrored_copy()));
    const Tensor angles = u * (upper - lower) + lower;
    transforms = rotation_matrices(angles, images.dim(1), images.dim(2));
  }
  const Tensor out = image::affine_transform(images, transforms,
                                             {.interpolation = options_.interpolation,
                                              .fill_mode = options_.fill_mode,
                                              .fill_value = options_.fill_value});
  return like_input(out, x);
}

LayerConfig RandomRotationImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("factor", std::vector<double>{factor_[0], factor_[1]});
  c.set("fill_mode", options_.fill_mode);
  c.set("fill_value", static_cast<double>(options_.fill_value));
  c.set("interpolation", options_.interpolation);
  if (explicit_seed_) c.set("seed", static_cast<std::int64_t>(*explicit_seed_));
  return c;
}

// Keras's _set_factor: one number f is (-|f|, |f|).
RandomRotation::RandomRotation(double factor, RandomRotationOptions options)
    : RandomRotation(std::array<double, 2>{-std::abs(factor), std::abs(factor)},
                     std::move(options)) {}

RandomRotation::RandomRotation(std::array<double, 2> factor, RandomRotationOptions options)
    : Layer(std::make_shared<RandomRotationImpl>(
          std::array<double, 2>{std::min(factor[0], factor[1]), std::max(factor[0], factor[1])},
          std::move(options))) {}

}  // namespace lockstep::layers
