// The op library: every differentiable primitive Lockstep has.
//
// Names and semantics follow TensorFlow/NumPy: binary ops broadcast, axes may
// be negative, reductions take {.axes, .keepdims}. Each op checks its inputs
// and throws ShapeError / ValueError / IndexError naming the op and what it
// got. Each op's gradient rule sits beside its forward code, so an op used
// under a GradientTape is differentiable with nothing else to register.
//
// Heavy kernels (matmul, softmax, large transcendental elementwise) run on
// oneDNN (tensor/backend/onednn); the rest are our own vectorised loops.
//
//   auto logits = lockstep::matmul(x, w, b);                 // x·w + b
//   auto loss = lockstep::mean(lockstep::square(logits - y));
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/tensor/tensor.h"

namespace lockstep {

// ---- elementwise, broadcasting --------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
// log(1 + x), exact for small x (where log(1 + x) rounds 1 + x first).
Tensor log1p(const Tensor& x);
// The error function (std::erf): exact GELU's, 0.5·x·(1 + erf(x/√2)).
Tensor erf(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
// Keras's relu with its arguments (keras.activations.relu): min(x,
// max_value) above `threshold`, negative_slope · (x − threshold) at or below
// it — one pass forward and one backward (ReLU6 is {.max_value = 6}).
struct ReluOptions {
  float negative_slope = 0.0f;       // >= 0
  std::optional<float> max_value{};  // none: unbounded; >= 0
  float threshold = 0.0f;            // >= 0
};
Tensor relu(const Tensor& x, const ReluOptions& options);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
// Values limited to [min_value, max_value]; the gradient passes inside.
Tensor clip(const Tensor& x, float min_value, float max_value);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, float b);
Tensor operator-(const Tensor& a, float b);
Tensor operator*(const Tensor& a, float b);
Tensor operator/(const Tensor& a, float b);
Tensor operator*(float a, const Tensor& b);
// On a float32 temporary that nothing else refers to and no tape records,
// the arithmetic with a scalar writes into the temporary's own buffer:
// `cast(images, DType::kFloat32) / 255.0f` holds one copy of the data at its
// peak, not two. Same values as the forms above.
Tensor operator+(Tensor&& a, float b);
Tensor operator-(Tensor&& a, float b);
Tensor operator*(Tensor&& a, float b);
Tensor operator/(Tensor&& a, float b);

// ---- comparisons and selection (bool results; not differentiable) ---------
Tensor equal(const Tensor& a, const Tensor& b);
Tensor not_equal(const Tensor& a, const Tensor& b);
Tensor less(const Tensor& a, const Tensor& b);
Tensor less_equal(const Tensor& a, const Tensor& b);
Tensor greater(const Tensor& a, const Tensor& b);
Tensor greater_equal(const Tensor& a, const Tensor& b);
// cond ? x : y, broadcasting all three; differentiable in x and y.
Tensor where(const Tensor& cond, const Tensor& x, const Tensor& y);

// ---- reductions -------------------------------------------------------------
struct ReduceOptions {
  std::vector<int> axes{};  // empty: all axes
  bool keepdims = false;
};
Tensor sum(const Tensor& x, const ReduceOptions& options = {});
Tensor mean(const Tensor& x, const ReduceOptions& options = {});
// Max/min: the gradient is shared equally among tied maxima (as TensorFlow).
Tensor max(const Tensor& x, const ReduceOptions& options = {});
Tensor min(const Tensor& x, const ReduceOptions& options = {});
// Index of the largest value along `axis` (first on ties), as int64.
Tensor argmax(const Tensor& x, int axis = -1);

// ---- softmax ------------------------------------------------------------------
Tensor softmax(const Tensor& x, int axis = -1);
Tensor log_softmax(const Tensor& x, int axis = -1);

// ---- matrix product -----------------------------------------------------------
struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  // max(·, 0) of the product (+ bias), in the same kernel (a oneDNN post-op,
  // or a pass over the output while it is in cache): Dense's "relu".
  bool relu = false;
};
// a: [..., M, K] (or [..., K, M] transposed), b: [..., K, N]; rank 2 or 3
// (batched, equal batch sizes or a rank-2 b shared by every batch entry).
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& options = {});
// a·b + bias, with bias of shape [N], fused in one oneDNN call.
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& bias,
              const MatmulOptions& options = {});

// ---- convolution, pooling, normalisation (channels-last, NHWC) ----------------
// kExplicit: the zeros Conv2DOptions::explicit_padding names (TensorFlow's
// conv2d padding="EXPLICIT"); convolutions only.
enum class Padding { kValid, kSame, kExplicit };
struct Conv2DOptions {
  std::array<std::int64_t, 2> strides{1, 1};
  Padding padding = Padding::kValid;
  std::array<std::int64_t, 2> dilation_rate{1, 1};
  std::int64_t groups = 1;
  // With Padding::kExplicit: {{top, bottom}, {left, right}}, each >= 0. The
  // same result as a valid convolution of pad(x), without the padded copy.
  std::array<std::array<std::int64_t, 2>, 2> explicit_padding{};
};
// x [n, h, w, c], kernel [kh, kw, c / groups, out] (Keras's layout), bias [out]
// or undefined. "same" pads as TensorFlow (the extra row/column at the end).
Tensor conv2d(const Tensor& x, const Tensor& kernel, const Tensor& bias,
              const Conv2DOptions& options = {});
// The transposed convolution (Keras's Conv2DTranspose, TensorFlow's
// conv2d_transpose): the input gradient of conv2d, as a forward op. x [n, h,
// w, c], kernel [kh, kw, filters, c] (Keras's layout), bias [filters] or
// undefined; the output [n, oh, ow, filters] with Keras's lengths: "same"
// h·stride, "valid" h·stride + max(k_effective − stride, 0). Valid or same
// padding, groups 1.
Tensor conv2d_transpose(const Tensor& x, const Tensor& kernel, const Tensor& bias,
                        const Conv2DOptions& options = {});
struct Pool2DOptions {
  std::array<std::int64_t, 2> pool_size{2, 2};
  std::array<std::int64_t, 2> strides{0, 0};  // 0: the pool size
  Padding padding = Padding::kValid;
};
Tensor max_pool2d(const Tensor& x, const Pool2DOptions& options = {});
// Average over the window's valid positions (padding excluded, as TensorFlow).
Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& options = {});
// Batch normalisation over the last axis with batch statistics; also returns
// the batch mean and (biased) variance for the moving averages.
struct BatchNormResult {
  Tensor y, mean, variance{};
};
BatchNormResult batch_norm_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float epsilon);
// With given statistics (inference, or a frozen layer).
Tensor batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& mean, const Tensor& variance, float epsilon);
// batch_norm_training followed by relu(·, {.max_value = max_value}) in one
// op: `y` is min(max(batch_norm(x), 0), max_value), the pre-activation never
// stored, its gradient computed from the output (ReLU6: max_value 6).
BatchNormResult batch_norm_relu_training(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                         float epsilon, std::optional<float> max_value);

// Keras's moving-statistics update, moving · momentum + value · (1 − momentum),
// rounded as those two products and their sum (float32, same shapes; no
// gradient). One kernel on accelerators where the three ops were six with
// their scalars' copies (BatchNormalization's moving mean and variance).
Tensor moving_average(const Tensor& moving, const Tensor& value, float momentum);

// ---- recurrent sequences (rnn_ops.cc) -------------------------------------------
// The activations a recurrent op applies, each with a derivative that its
// output alone gives (what lets the backward pass keep outputs only).
// kHardSigmoid is Keras 3's relu6(x + 3) / 6.
enum class RecurrentActivation { kTanh, kSigmoid, kHardSigmoid, kRelu, kLinear };
struct RecurrentOptions {
  RecurrentActivation activation = RecurrentActivation::kTanh;
  RecurrentActivation recurrent_activation = RecurrentActivation::kSigmoid;
  // Processes the steps last to first; the output keeps that order (Keras's
  // go_backwards: output step 0 is the state after the last input step).
  bool go_backwards = false;
  // Keras's recurrent dropout: [gates, batch, units], gate g's recurrent
  // product reads state * masks[g]; undefined: none.
  Tensor recurrent_masks{};
  // Keras's sequence mask: [batch, steps], kBool (or 0/1 in the operands'
  // dtype), false at steps to skip; undefined: none. At a masked step the
  // states stay as they were and the output is the last output (or zeros
  // with zero_output_for_mask), as Keras's backend rnn.
  Tensor mask{};
  bool zero_output_for_mask = false;
  // Also returns the final states (Keras's return_state): after the steps'
  // outputs come the state h after the last step processed and, for lstm,
  // the cell state c: [batch, steps + 1, units] (+ 2 for lstm).
  bool return_states = false;
  // The states before the first step (Keras's initial_state), [batch,
  // units] each, with gradients; undefined: zeros. initial_c: lstm only.
  Tensor initial_h{};
  Tensor initial_c{};
};
// Whole sequences, as Keras's SimpleRNN, LSTM and GRU cells run them from a
// zero state, in one op whose backward pass is backpropagation through time:
// per step one matrix product forward and two backward, the weight gradient
// one product over all steps. `projected` is [batch, steps, gates * units],
// every step's x·kernel + bias (one product over the whole sequence, by the
// caller); `recurrent_kernel` is [units, gates * units]. Returns every step's
// output state [batch, steps, units], in the order processed.
//   simple_rnn: h = activation(projected_t + h·U)
Tensor simple_rnn(const Tensor& projected, const Tensor& recurrent_kernel,
                  const RecurrentOptions& options = {});
//   lstm, gates i, f, c, o (Keras's order): c = f·c + i·activation(z_c),
//   h = o·activation(c), the others through recurrent_activation.
//   On the host in float32 with tanh and sigmoid and no recurrent dropout,
//   lstm runs one fused kernel per step (the same formulas, checked
//   against the composed form below).
Tensor lstm(const Tensor& projected, const Tensor& recurrent_kernel,
            const RecurrentOptions& options = {});
namespace detail {
// lstm composed of this library's ops, as accelerators run it: the
// reference the tests hold the host's fused kernel to.
Tensor lstm_composed(const Tensor& projected, const Tensor& recurrent_kernel,
                     const RecurrentOptions& options = {});
}  // namespace detail
//   gru, gates z, r, h (Keras's order), h = z·h + (1 − z)·hh. reset_after
//   (Keras 3's default): hh = activation(x_h + r·(h·U_h + recurrent_bias_h));
//   otherwise hh = activation(x_h + (r·h)·U_h). `recurrent_bias` [3 · units]
//   is added to h·U (reset_after only; undefined: none).
Tensor gru(const Tensor& projected, const Tensor& recurrent_kernel, const Tensor& recurrent_bias,
           bool reset_after, const RecurrentOptions& options = {});

// Layer normalisation over the last axis (Keras's LayerNormalization):
// gamma · (x − mean) / sqrt(variance + epsilon) + beta per row, with the
// row's mean and biased variance; gamma and beta [features] each optional
// (undefined). float32 on the host runs oneDNN's primitive, forward and
// backward; elsewhere (bfloat16, accelerators) the same formula composed of
// this library's ops, in float32.
Tensor layer_normalization(const Tensor& x, const Tensor& gamma, const Tensor& beta, float epsilon);

// ---- shape and layout ---------------------------------------------------------
// One dimension may be -1 (inferred).
Tensor reshape(const Tensor& x, const std::vector<std::int64_t>& shape);
// Permutes dimensions; an empty `perm` reverses them.
Tensor transpose(const Tensor& x, const std::vector<int>& perm = {});
Tensor concat(const std::vector<Tensor>& tensors, int axis);
// x[begin[i] : begin[i] + size[i]] per axis; size -1 means "to the end".
// A slice along dimension 0 alone is a zero-copy view.
Tensor slice(const Tensor& x, const std::vector<std::int64_t>& begin,
             const std::vector<std::int64_t>& size);
// Pads each dimension with `value`: paddings[i] = {before, after}.
Tensor pad(const Tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& paddings,
           float value = 0.0f);
Tensor broadcast_to(const Tensor& x, const Shape& shape);
// Sums `x` down to `shape` (the inverse of broadcasting; used by gradients).
Tensor sum_to(const Tensor& x, const Shape& shape);
// Whether this CPU computes bfloat16 natively (oneDNN sees avx512_bf16 or
// AMX): then matmul, convolution and pooling run oneDNN's bfloat16 kernels
// with float32 accumulation. Without it, such an op on bfloat16 operands
// widens them to float32, runs its float32 kernel and rounds the result to
// bfloat16 (the same values, up to the order of float32 sums; slower than
// float32). Elementwise ops and batch normalisation read and write
// bfloat16 directly either way.
bool native_bfloat16();
// How bfloat16 ops run here, in words for a log or a header: "native
// bfloat16: oneDNN <its matmul implementation>" (e.g. brg:avx512_core_bf16)
// or "emulated: <why>; float32 is faster here".
std::string bfloat16_kernels();
// Changes dtype; differentiable between float32 and bfloat16 (the gradient
// is cast back). float32 -> bfloat16 rounds to nearest, ties to even.
Tensor cast(const Tensor& x, DType dtype);
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
// The same values under a new id that no tape connects to its input.
Tensor stop_gradient(const Tensor& x);

// ---- indexing -----------------------------------------------------------------
// tf.gather: params.shape[:axis] + indices.shape + params.shape[axis+1:].
// Indices must be int32, int64 or uint8 in [0, params.dim(axis)).
Tensor gather(const Tensor& params, const Tensor& indices, int axis = 0);
// numpy.take_along_axis: picks x[..., indices[...], ...] along `axis`;
// indices has x's rank. The labels op of sparse cross-entropy.
Tensor take_along_axis(const Tensor& x, const Tensor& indices, int axis);
namespace detail {
// take_along_axis on a GPU with int64 indices whose range its caller has
// had checked on the host another way (detail::check_before_each_replay,
// in a recorded step): no copy of them to the host here.
Tensor take_along_axis_checked_by_caller(const Tensor& x, const Tensor& indices, int axis);
}  // namespace detail
struct OneHotOptions {
  float on_value = 1.0f;
  float off_value = 0.0f;
};
// float32 [..., depth]; indices outside [0, depth) are an IndexError.
Tensor one_hot(const Tensor& indices, std::int64_t depth, const OneHotOptions& options = {});

}  // namespace lockstep
