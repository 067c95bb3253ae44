// EinsumDense and MultiHeadAttention (nn/attention_layers.h).
#include "lockstep/nn/attention_layers.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "lockstep/core/error.h"
#include "lockstep/nn/layers.h"
#include "lockstep/tensor/device.h"
#include "lockstep/tensor/ops.h"
#include "nn/config_helpers.h"
#include "nn/masks.h"

namespace lockstep::layers {

using nn_detail::put_initializer;
using nn_detail::put_regularizer;

namespace {

std::int64_t product(const std::vector<std::int64_t>& dims, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= dims[i];
  return p;
}

}  // namespace

// ---- EinsumDense -------------------------------------------------------------------

EinsumDenseImpl::EinsumDenseImpl(std::string equation, std::vector<std::int64_t> output_shape,
                                 EinsumDenseOptions options)
    : SingleInputLayerImpl("EinsumDense", options.name),
      equation_(std::move(equation)),
      output_shape_(std::move(output_shape)),
      options_(std::move(options)),
      activation_(get_activation(options_.activation)) {
  const std::string where = "EinsumDense '" + name() + "'";
  const auto comma = equation_.find(','), arrow = equation_.find("->");
  LOCKSTEP_CHECK(comma != std::string::npos && arrow != std::string::npos && comma < arrow &&
                     equation_.find('.') == std::string::npos,
                 where, ": the equation '", equation_,
                 "' is not of the form 'input,kernel->output' (without ellipses)");
  const std::string in = equation_.substr(0, comma),
                    ker = equation_.substr(comma + 1, arrow - comma - 1),
                    out = equation_.substr(arrow + 2);
  // The kernel starts with the input's last n axes, and the output is the
  // input's other axes followed by the kernel's.
  for (std::size_t n = std::min(in.size() - 1, ker.size()); n >= 1 && contracted_ == 0; --n) {
    if (ker.compare(0, n, in, in.size() - n, n) == 0 &&
        out == in.substr(0, in.size() - n) + ker.substr(n))
      contracted_ = n;
    if (n == 1) break;
  }
  LOCKSTEP_CHECK(contracted_ > 0 && in.size() >= 2, where, ": the equation '", equation_,
                 "' is not one Lockstep's EinsumDense takes: it contracts the input's last axes "
                 "with the kernel's first ones and keeps the rest in order (abc,cd->abd, "
                 "abc,cde->abde, abcd,cde->abe)");
  const std::size_t kernel_axes = ker.size() - contracted_;
  LOCKSTEP_CHECK_AS(ShapeError, output_shape_.size() == out.size() - 1, where, ": output_shape ",
                    Shape(output_shape_), " has ", output_shape_.size(),
                    " dimensions; the equation's output has ", out.size() - 1,
                    " besides the batch");
  kernel_out_.assign(output_shape_.end() - static_cast<std::ptrdiff_t>(kernel_axes),
                     output_shape_.end());
  for (std::int64_t d : kernel_out_)
    LOCKSTEP_CHECK(d > 0, where, ": output_shape must give the kernel's output dimensions, got ",
                   Shape(output_shape_));
  const std::string& b = options_.bias_axes;
  LOCKSTEP_CHECK(b.size() <= kernel_axes && out.compare(out.size() - b.size(), b.size(), b) == 0,
                 where, ": bias_axes '", b, "' must be a suffix of the kernel's output axes '",
                 out.substr(out.size() - kernel_axes), "'");
}

void EinsumDenseImpl::build(const std::vector<Shape>& input_shapes) {
  const Shape& s = input_shapes.at(0);
  const std::size_t rank = equation_.find(',');
  LOCKSTEP_CHECK_AS(ShapeError, static_cast<std::size_t>(s.rank()) == rank, "EinsumDense '", name(),
                    "': the equation '", equation_, "' takes inputs of rank ", rank, ", got ", s);
  std::vector<std::int64_t> kernel_shape(s.dims().end() - static_cast<std::ptrdiff_t>(contracted_),
                                         s.dims().end());
  kernel_shape.insert(kernel_shape.end(), kernel_out_.begin(), kernel_out_.end());
  kernel_ = add_weight({.name = "kernel",
                        .shape = Shape(kernel_shape),
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer});
  if (options_.bias_axes.empty()) return;
  const std::vector<std::int64_t> bias_shape(
      kernel_out_.end() - static_cast<std::ptrdiff_t>(options_.bias_axes.size()),
      kernel_out_.end());
  bias_ = add_weight({.name = "bias",
                      .shape = Shape(bias_shape),
                      .initializer = options_.bias_initializer,
                      .regularizer = options_.bias_regularizer});
}

Tensor EinsumDenseImpl::call(const Tensor& x, const CallContext&) {
  const std::vector<std::int64_t> dims = x.shape().to_vector();
  const std::size_t keep = dims.size() - contracted_;
  const std::int64_t m = product(dims, 0, keep), c = product(dims, keep, dims.size());
  const std::int64_t n = product(kernel_out_, 0, kernel_out_.size());
  const Tensor kernel = reshape(autocast(kernel_), {c, n});
  const Tensor flat = reshape(x, {m, c});
  // A bias over every kernel axis rides in the product; a shorter one broadcasts.
  const bool fused = bias_.defined() && options_.bias_axes.size() == kernel_out_.size();
  Tensor y = fused ? matmul(flat, kernel, reshape(autocast(bias_), {n})) : matmul(flat, kernel);
  std::vector<std::int64_t> out(dims.begin(), dims.begin() + static_cast<std::ptrdiff_t>(keep));
  out.insert(out.end(), kernel_out_.begin(), kernel_out_.end());
  y = reshape(y, out);
  if (bias_.defined() && !fused) y = y + autocast(bias_);
  return activation_ ? activation_(y) : y;
}

LayerConfig EinsumDenseImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("output_shape", output_shape_);
  c.set("equation", equation_);
  c.set("activation", options_.activation.empty() ? std::string("linear") : options_.activation);
  if (!options_.bias_axes.empty()) c.set("bias_axes", options_.bias_axes);
  put_initializer(c, "kernel_initializer", options_.kernel_initializer);
  put_initializer(c, "bias_initializer", options_.bias_initializer);
  put_regularizer(c, "kernel_regularizer", options_.kernel_regularizer);
  put_regularizer(c, "bias_regularizer", options_.bias_regularizer);
  return c;
}

EinsumDense::EinsumDense(std::string equation, std::vector<std::int64_t> output_shape,
                         EinsumDenseOptions options)
    : Layer(std::make_shared<EinsumDenseImpl>(std::move(equation), std::move(output_shape),
                                              std::move(options))) {}

// ---- MultiHeadAttention ------------------------------------------------------------

MultiHeadAttentionImpl::MultiHeadAttentionImpl(std::int64_t num_heads, std::int64_t key_dim,
                                               MultiHeadAttentionOptions options)
    : LayerImpl("MultiHeadAttention", options.name),
      num_heads_(num_heads),
      key_dim_(key_dim),
      options_(std::move(options)) {
  LOCKSTEP_CHECK(num_heads > 0 && key_dim > 0, "MultiHeadAttention '", name(),
                 "': num_heads and key_dim must be positive, got ", num_heads, " and ", key_dim);
  if (options_.value_dim == 0) options_.value_dim = key_dim;
  LOCKSTEP_CHECK(options_.value_dim > 0 && options_.output_dim >= 0, "MultiHeadAttention '", name(),
                 "': value_dim and the output's size must be positive");
  LOCKSTEP_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, "MultiHeadAttention '",
                 name(), "': dropout must be in [0, 1), got ", options_.dropout);
}

void MultiHeadAttentionImpl::build(const std::vector<Shape>& input_shapes) {
  const std::string where = "MultiHeadAttention '" + name() + "'";
  const std::size_t extra = options_.attention_mask ? 1 : 0;
  LOCKSTEP_CHECK(input_shapes.size() == 2 + extra || input_shapes.size() == 3 + extra, where,
                 ": expected {query, value} or {query, value, key}",
                 extra ? ", then the attention mask" : "", ", got ", input_shapes.size(),
                 " inputs");
  const Shape& query = input_shapes[0];
  const std::int64_t rank = query.rank();
  LOCKSTEP_CHECK_AS(ShapeError, rank >= 3, where,
                    ": expected inputs [batch, steps…, features], got a query ", query);
  // Keras's _build_attention: the default is every step axis; a negative
  // axis counts from the end of the query's shape.
  std::vector<std::int64_t>& axes = options_.attention_axes;
  if (axes.empty()) {
    for (std::int64_t a = 1; a <= rank - 2; ++a) axes.push_back(a);
  }
  for (std::int64_t& a : axes) {
    const std::int64_t given = a;
    if (a < 0) a += rank;
    LOCKSTEP_CHECK(a >= 1 && a <= rank - 2, where, ": attention_axes holds ", given,
                   ", not a step axis of the query ", query, " (1 to ", rank - 2,
                   ", or negative from the end)");
  }
  for (std::size_t i = 0; i < axes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j)
      LOCKSTEP_CHECK(axes[i] != axes[j], where, ": attention_axes names axis ", axes[i], " twice");
  }
  free_axes_.clear();
  for (std::int64_t a = 1; a <= rank - 2; ++a) {
    if (std::find(axes.begin(), axes.end(), a) == axes.end()) free_axes_.push_back(a);
  }
  for (std::size_t i = 1; i + extra < input_shapes.size(); ++i) {
    const Shape& s = input_shapes[i];
    bool same_free = s.rank() == rank;
    for (std::int64_t a : free_axes_) same_free = same_free && s[a] == query[a];
    LOCKSTEP_CHECK_AS(ShapeError, same_free, where, ": the ", i == 1 ? "value " : "key ", s,
                      " must have the query's rank and, on the axes not attended over, its "
                      "sizes; the query is ",
                      query);
  }
  const std::int64_t out = options_.output_dim > 0 ? options_.output_dim : query[rank - 1];
  auto dense = [&](const std::string& equation, std::vector<std::int64_t> shape,
                   const std::string& bias) {
    Layer l = EinsumDense(equation, std::move(shape),
                          {.bias_axes = options_.use_bias ? bias : "",
                           .kernel_initializer = options_.kernel_initializer,
                           .bias_initializer = options_.bias_initializer,
                           .kernel_regularizer = options_.kernel_regularizer,
                           .bias_regularizer = options_.bias_regularizer});
    l->set_dtype_policy(dtype_policy());
    return l;
  };
  // Keras's _build_proj_equation: for rank 3, "abc,cde->abde" into the
  // heads and "abcd,cde->abe" out of them.
  const auto r = static_cast<std::size_t>(rank);
  std::string letters;
  for (std::size_t i = 0; i <= r + 1; ++i) letters += static_cast<char>('a' + i);
  const std::string lead = letters.substr(0, r - 1);  // the batch and the steps
  const std::string in_eq = lead + letters[r - 1] + "," + letters[r - 1] + letters.substr(r, 2) +
                            "->" + lead + letters.substr(r, 2);
  const std::string out_eq = lead + letters.substr(r - 1, 2) + "," + letters.substr(r - 1, 3) +
                             "->" + lead + letters[r + 1];
  auto heads_shape = [&](std::int64_t dim) {
    std::vector<std::int64_t> shape(r - 2, -1);
    shape.insert(shape.end(), {num_heads_, dim});
    return shape;
  };
  std::vector<std::int64_t> out_shape(r - 2, -1);
  out_shape.push_back(out);
  const std::string head_bias = letters.substr(r, 2), out_bias(1, letters[r + 1]);
  // Keras's order, which its optimizer's variables follow.
  query_dense_ = track(dense(in_eq, heads_shape(key_dim_), head_bias), "query_dense");
  key_dense_ = track(dense(in_eq, heads_shape(key_dim_), head_bias), "key_dense");
  value_dense_ = track(dense(in_eq, heads_shape(options_.value_dim), head_bias), "value_dense");
  output_dense_ = track(dense(out_eq, out_shape, out_bias), "output_dense");
  softmax_ = track(Softmax(-1), "_softmax");
  DropoutOptions dropout{};
  dropout.seed = options_.seed;
  dropout_ = track(Dropout(options_.dropout, dropout), "_dropout_layer");
  for (const Layer* l : {&softmax_, &dropout_}) (*l)->set_dtype_policy(dtype_policy());
  const Shape& value = input_shapes[1];
  const Shape& key = input_shapes.size() > 2 + extra ? input_shapes[2] : value;
  query_dense_->ensure_built({query});
  key_dense_->ensure_built({key});
  value_dense_->ensure_built({value});
  std::vector<std::int64_t> merged = query.to_vector();
  merged.back() = num_heads_;
  merged.push_back(options_.value_dim);
  output_dense_->ensure_built({Shape(merged)});
}

namespace {

// [1, t, s]: true where query step i may see value step j (j ≤ i), Keras's
// causal mask.
Tensor causal_mask(std::int64_t t, std::int64_t s) {
  std::vector<std::uint8_t> lower(static_cast<std::size_t>(t * s));
  for (std::int64_t i = 0; i < t; ++i) {
    for (std::int64_t j = 0; j < s; ++j) lower[static_cast<std::size_t>(i * s + j)] = j <= i;
  }
  return nn_detail::as_mask(Tensor::from_vector(lower, {1, t, s}));
}

// a AND b, either undefined (none).
Tensor both(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return nn_detail::mask_and(a, b);
}

// Where a device holds `like`, the mask goes too.
Tensor on_device_of(const Tensor& mask, const Tensor& like) {
  return !mask.defined() || mask.device().host_accessible() == like.device().host_accessible()
             ? mask
             : mask.copy_to(like.device());
}

}  // namespace

std::vector<Tensor> MultiHeadAttentionImpl::call(const std::vector<Tensor>& inputs,
                                                 const CallContext& ctx) {
  return run(inputs, {}, ctx);
}

std::vector<Tensor> MultiHeadAttentionImpl::call_masked(const std::vector<Tensor>& inputs,
                                                        const std::vector<Tensor>& masks,
                                                        const CallContext& ctx) {
  return run(inputs, masks, ctx);
}

std::vector<Tensor> MultiHeadAttentionImpl::run(const std::vector<Tensor>& all_inputs,
                                                const std::vector<Tensor>& masks,
                                                const CallContext& ctx) {
  std::vector<Tensor> inputs = all_inputs;
  Tensor given_mask;  // Keras's attention_mask argument, the last input
  if (options_.attention_mask) {
    LOCKSTEP_CHECK(inputs.size() >= 3, "MultiHeadAttention '", name(),
                   "': expected {query, value[, key], attention_mask}, got ", inputs.size(),
                   " inputs");
    given_mask = inputs.back();
    inputs.pop_back();
  }
  const Tensor& query = inputs.at(0);
  const Tensor& value = inputs.at(1);
  const Tensor& key = inputs.size() > 2 ? inputs[2] : value;
  const std::string who = "MultiHeadAttention '" + name() + "'";
  const std::vector<std::int64_t> qd = query.shape().to_vector(), vd = value.shape().to_vector(),
                                  kd = key.shape().to_vector();
  const std::int64_t rank = static_cast<std::int64_t>(qd.size());
  const std::vector<std::int64_t>& axes = options_.attention_axes;
  bool fits = vd.size() == qd.size() && kd.size() == qd.size() && vd[0] == qd[0] && kd[0] == qd[0];
  for (std::int64_t a : free_axes_) fits = fits && vd[a] == qd[a] && kd[a] == qd[a];
  for (std::int64_t a : axes) fits = fits && kd[a] == vd[a];
  LOCKSTEP_CHECK_AS(ShapeError, fits, who, ": the query ", query.shape(), ", value ", value.shape(),
                    " and key ", key.shape(),
                    " must share the batch and the axes not attended over, and the key and value "
                    "the attended ones");
  // b examples, f positions on the axes not attended over, t query and s
  // key positions on the attended ones.
  const std::int64_t b = qd[0];
  std::int64_t f = 1, t = 1, s = 1;
  for (std::int64_t a : free_axes_) f *= qd[a];
  std::vector<std::int64_t> given_shape{b}, scores_shape{b};
  for (std::int64_t a : free_axes_) scores_shape.push_back(qd[a]);
  scores_shape.push_back(num_heads_);
  for (std::int64_t a : axes) {
    t *= qd[a];
    given_shape.push_back(qd[a]);
  }
  for (std::int64_t a : axes) {
    s *= vd[a];
    given_shape.push_back(vd[a]);
  }
  scores_shape.insert(scores_shape.end(), given_shape.begin() + 1, given_shape.end());
  // Keras's masks of the inputs and its causal mask are [batch, steps]
  // and [1, T, S]: defined for one step axis.
  const bool steps_only = rank == 3;
  if (!steps_only) {
    bool masked = false;
    for (std::size_t i = 0; i < inputs.size() && i < masks.size(); ++i)
      masked = masked || masks[i].defined();
    LOCKSTEP_CHECK(!masked && !options_.use_causal_mask, who, ": ",
                   masked ? "the Keras masks of its inputs" : "use_causal_mask",
                   " need inputs [batch, steps, features]; the query is ", query.shape(),
                   " (give an attention_mask ", Shape(given_shape), " instead)");
  }
  if (given_mask.defined()) {
    LOCKSTEP_CHECK_AS(ShapeError, given_mask.shape() == Shape(given_shape), who,
                      ": expected an attention_mask [batch, query's attended axes…, key's attended "
                      "axes…] = ",
                      Shape(given_shape), ", got ", given_mask.shape());
  }
  const std::int64_t h = num_heads_, k = key_dim_, v = options_.value_dim;
  // [batch, steps…, heads, dim] -> [batch · free · heads, attended, dim]:
  // for [batch, steps, features], [b, t, h, d] -> [b · h, t, d].
  std::vector<int> perm{0};
  for (std::int64_t a : free_axes_) perm.push_back(static_cast<int>(a));
  perm.push_back(static_cast<int>(rank - 1));
  for (std::int64_t a : axes) perm.push_back(static_cast<int>(a));
  perm.push_back(static_cast<int>(rank));
  auto grouped = [&](const Tensor& x, std::int64_t positions, std::int64_t dim) {
    return reshape(transpose(x, perm), {b * f * h, positions, dim});
  };
  const Tensor q =
      grouped(query_dense_(query, ctx) * static_cast<float>(1.0 / std::sqrt(double(k))), t, k);
  const Tensor kk = grouped(key_dense_(key, ctx), s, k);
  const Tensor vv = grouped(value_dense_(value, ctx), s, v);
  // Keras's attention mask [b, t, s]: the query's mask, the value's and
  // the key's (when the key is its own input), and the causal one.
  auto mask_of = [&](std::size_t i, std::int64_t steps, bool keys) {
    if (i >= masks.size() || !masks[i].defined()) return Tensor();
    return reshape(nn_detail::as_mask(masks[i]), keys ? std::vector<std::int64_t>{b, 1, steps}
                                                      : std::vector<std::int64_t>{b, steps, 1});
  };
  Tensor mask = both(mask_of(0, t, false), mask_of(1, s, true));
  if (inputs.size() > 2) mask = both(mask, mask_of(2, s, true));
  if (options_.use_causal_mask) mask = both(mask, causal_mask(t, s));
  if (given_mask.defined()) mask = both(mask, reshape(nn_detail::as_mask(given_mask), {b, t, s}));
  // The softmax spans every attended key position at once (Keras's
  // Softmax over its attention axes).
  Tensor scores = reshape(matmul(q, kk, {.transpose_b = true}), {b, f * h, t, s});
  Tensor probs;
  if (!mask.defined()) {
    probs = softmax_(scores, ctx);
  } else {
    mask = on_device_of(reshape(mask, {mask.shape()[0], 1, t, s}), scores);
    if (options_.dropout > 0.0f || options_.return_attention_scores || !steps_only) {
      // Keras's masked softmax (its path with dropout, the scores returned
      // or several step axes): a query position that sees no key gets zeros.
      probs = softmax_->apply({scores}, {mask}, ctx).at(0);
    } else {
      // Keras's dot_product_attention (its path for [batch, steps,
      // features] without dropout): masked scores at -1e9, so a query step
      // that sees no key attends evenly.
      probs = softmax_(where(mask, scores, Tensor::full({}, -1e9, scores.dtype())), ctx);
    }
  }
  const Tensor scores_out = reshape(probs, scores_shape);  // Keras's, before the dropout
  probs = dropout_(cast(probs, vv.dtype()), ctx);
  const Tensor heads = matmul(reshape(probs, {b * f * h, t, s}), vv);  // [b·f·h, t, v]
  std::vector<std::int64_t> heads_shape(
      scores_shape.begin(), scores_shape.end() - static_cast<std::ptrdiff_t>(axes.size()));
  heads_shape.push_back(v);
  std::vector<int> back(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    back[static_cast<std::size_t>(perm[i])] = static_cast<int>(i);
  const Tensor merged = transpose(reshape(heads, heads_shape), back);
  if (options_.return_attention_scores) return {output_dense_(merged, ctx), scores_out};
  return {output_dense_(merged, ctx)};
}

std::vector<Tensor> MultiHeadAttentionImpl::compute_mask(const std::vector<Tensor>&,
                                                         const std::vector<Tensor>& masks) const {
  // The output carries the query's mask; the scores none.
  std::vector<Tensor> out(options_.return_attention_scores ? 2 : 1);
  if (!masks.empty()) out[0] = masks[0];
  return out;
}

LayerConfig MultiHeadAttentionImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("num_heads", num_heads_);
  c.set("key_dim", key_dim_);
  c.set("value_dim", options_.value_dim);
  c.set("dropout", static_cast<double>(options_.dropout));
  c.set("use_bias", options_.use_bias);
  if (options_.output_dim > 0) c.set("output_shape", options_.output_dim);
  // Keras's None (every step axis) until built.
  if (!options_.attention_axes.empty()) c.set("attention_axes", options_.attention_axes);
  put_initializer(c, "kernel_initializer", options_.kernel_initializer);
  put_initializer(c, "bias_initializer", options_.bias_initializer);
  put_regularizer(c, "kernel_regularizer", options_.kernel_regularizer);
  put_regularizer(c, "bias_regularizer", options_.bias_regularizer);
  if (options_.seed) c.set("seed", static_cast<std::int64_t>(*options_.seed));
  return c;
}

MultiHeadAttention::MultiHeadAttention(std::int64_t num_heads, std::int64_t key_dim,
                                       MultiHeadAttentionOptions options)
    : Layer(std::make_shared<MultiHeadAttentionImpl>(num_heads, key_dim, std::move(options))) {}

}  // namespace lockstep::layers

namespace lockstep::layers {

// ---- Attention ---------------------------------------------------------------------

AttentionImpl::AttentionImpl(AttentionOptions options)
    : LayerImpl("Attention", options.name), options_(std::move(options)) {
  LOCKSTEP_CHECK(options_.score_mode == "dot" || options_.score_mode == "concat", "Attention '",
                 name(), "': score_mode must be 'dot' or 'concat', got '", options_.score_mode,
                 "'");
  LOCKSTEP_CHECK(options_.dropout >= 0.0f && options_.dropout < 1.0f, "Attention '", name(),
                 "': dropout must be in [0, 1), got ", options_.dropout);
}

void AttentionImpl::build(const std::vector<Shape>& input_shapes) {
  const std::string where = "Attention '" + name() + "'";
  LOCKSTEP_CHECK(input_shapes.size() == 2 || input_shapes.size() == 3, where,
                 ": expected {query, value} or {query, value, key}, got ", input_shapes.size(),
                 " inputs");
  for (const Shape& s : input_shapes) {
    LOCKSTEP_CHECK_AS(ShapeError, s.rank() == 3, where,
                      ": expected inputs [batch, steps, dim], got ", s);
  }
  // Keras's order: scale, then concat_score_weight.
  if (options_.use_scale) {
    scale_ = add_weight({.name = "scale", .shape = Shape{}, .initializer = initializers::Ones()});
  }
  if (options_.score_mode == "concat") {
    concat_score_weight_ = add_weight(
        {.name = "concat_score_weight", .shape = Shape{}, .initializer = initializers::Ones()});
  }
  DropoutOptions dropout{};
  dropout.seed = options_.seed;
  dropout_ = track(Dropout(options_.dropout, dropout), "_dropout_layer");
  dropout_->set_dtype_policy(dtype_policy());
}

std::vector<Tensor> AttentionImpl::call(const std::vector<Tensor>& inputs, const CallContext& ctx) {
  return run(inputs, {}, ctx);
}

std::vector<Tensor> AttentionImpl::call_masked(const std::vector<Tensor>& inputs,
                                               const std::vector<Tensor>& masks,
                                               const CallContext& ctx) {
  return run(inputs, masks, ctx);
}

std::vector<Tensor> AttentionImpl::run(const std::vector<Tensor>& inputs,
                                       const std::vector<Tensor>& masks, const CallContext& ctx) {
  const Tensor& q = inputs.at(0);
  const Tensor& v = inputs.at(1);
  const Tensor& k = inputs.size() > 2 ? inputs[2] : v;
  const std::int64_t b = q.shape()[0], t = q.shape()[1], s = v.shape()[1];
  LOCKSTEP_CHECK_AS(
      ShapeError,
      k.shape()[0] == b && v.shape()[0] == b && k.shape()[1] == s && k.shape()[2] == q.shape()[2],
      "Attention '", name(), "': the query ", q.shape(), ", value ", v.shape(), " and key ",
      k.shape(),
      " must share the batch, the key and value their steps, and the query and key "
      "their dim");
  Tensor scores;  // [b, t, s]
  if (options_.score_mode == "dot") {
    scores = matmul(q, k, {.transpose_b = true});
    if (scale_.defined()) scores = scores * autocast(scale_);
  } else {
    const std::int64_t d = q.shape()[2];
    Tensor sum_qk = reshape(q, {b, t, 1, d}) + reshape(k, {b, 1, s, d});
    if (scale_.defined()) sum_qk = autocast(scale_) * sum_qk;
    scores = autocast(concat_score_weight_) * sum(tanh(sum_qk), {.axes = {-1}});
  }
  // Keras's: the value's mask and the causal one; hidden scores lowered by
  // 1e9 (not replaced), then the softmax.
  Tensor hide;
  if (masks.size() > 1 && masks[1].defined())
    hide = reshape(nn_detail::as_mask(masks[1]), {b, 1, s});
  if (options_.use_causal_mask) hide = both(hide, causal_mask(t, s));
  if (hide.defined()) {
    hide = on_device_of(hide, scores);
    scores = where(hide, scores, scores - 1e9f);
  }
  const Tensor weights = dropout_(softmax(scores, -1), ctx);
  Tensor out = matmul(weights, v);
  if (!masks.empty() && masks[0].defined()) {
    const Tensor keep = on_device_of(reshape(nn_detail::as_mask(masks[0]), {b, t, 1}), out);
    out = where(keep, out, Tensor::zeros({}, out.dtype()));
  }
  if (options_.return_attention_scores) return {out, weights};
  return {out};
}

std::vector<Tensor> AttentionImpl::compute_mask(const std::vector<Tensor>&,
                                                const std::vector<Tensor>& masks) const {
  std::vector<Tensor> out(options_.return_attention_scores ? 2 : 1);
  if (!masks.empty()) out[0] = masks[0];
  return out;
}

LayerConfig AttentionImpl::get_config() const {
  LayerConfig c = LayerImpl::get_config();
  c.set("use_scale", options_.use_scale);
  c.set("score_mode", options_.score_mode);
  c.set("dropout", static_cast<double>(options_.dropout));
  if (options_.seed) c.set("seed", static_cast<std::int64_t>(*options_.seed));
  return c;
}

Attention::Attention(AttentionOptions options)
    : Layer(std::make_shared<AttentionImpl>(std::move(options))) {}

}  // namespace lockstep::layers
