// EinsumDense and MultiHeadAttention (nn/attention_layers.h) against float64
// loops written from Keras's equations, with finite-difference gradients
// for their inputs; the equations and settings they refuse.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "lockstep/lockstep.h"
#include "support/reference.h"

namespace lockstep::testing {
namespace {

// "abc,cde->abde": x [a, b, c], kernel [c, d, e], bias [d, e] or [e] or none.
Ref ref_project(const Ref& x, const Ref& kernel, const Ref& bias) {
  const std::int64_t a = x.dims[0], b = x.dims[1], c = x.dims[2];
  const std::int64_t d = kernel.dims[1], e = kernel.dims[2];
  Ref y({a, b, d, e});
  for (std::int64_t i = 0; i < a * b; ++i) {
    for (std::int64_t j = 0; j < d * e; ++j) {
      double s = bias.size() == d * e ? bias[j] : bias.size() == e ? bias[j % e] : 0.0;
      for (std::int64_t k = 0; k < c; ++k) s += x[i * c + k] * kernel[k * d * e + j];
      y[i * d * e + j] = s;
    }
  }
  return y;
}

// "abcd,cde->abe": x [a, b, c, d], kernel [c, d, e], bias [e].
Ref ref_combine(const Ref& x, const Ref& kernel, const Ref& bias) {
  const std::int64_t a = x.dims[0], b = x.dims[1], cd = x.dims[2] * x.dims[3];
  const std::int64_t e = kernel.dims[2];
  Ref y({a, b, e});
  for (std::int64_t i = 0; i < a * b; ++i) {
    for (std::int64_t j = 0; j < e; ++j) {
      double s = bias.size() > 0 ? bias[j] : 0.0;
      for (std::int64_t k = 0; k < cd; ++k) s += x[i * cd + k] * kernel[k * e + j];
      y[i * e + j] = s;
    }
  }
  return y;
}

TEST(AttentionLayers, EinsumDenseIsTheEquationWithItsGradients) {
  std::mt19937 rng(2);
  const Ref x = random_ref({2, 3, 4}, rng);
  for (const std::string bias : {"de", "e", ""}) {
    SCOPED_TRACE("bias_axes '" + bias + "'");
    layers::EinsumDense dense(
        "abc,cde->abde", {-1, 2, 5},
        {.bias_axes = bias, .bias_initializer = initializers::RandomNormal(0.0f, 1.0f, 4)});
    (void)dense(to_tensor(x));
    const Ref kernel = to_ref(dense->kernel().value());
    ASSERT_EQ(kernel.dims, (Dims{4, 2, 5}));
    const Ref b = bias.empty() ? Ref({0}) : to_ref(dense->bias().value());
    EXPECT_EQ(b.size(), bias == "de" ? 10 : bias == "e" ? 5 : 0);
    check_gradients(
        "einsum_dense", [&](const std::vector<Tensor>& in) { return dense(in[0]); },
        [&](const std::vector<Ref>& in) { return ref_project(in[0], kernel, b); }, {x});
  }
  layers::EinsumDense combine("abcd,cde->abe", {-1, 3}, {.bias_axes = "e", .activation = "tanh"});
  const Ref heads = random_ref({2, 3, 2, 4}, rng);
  (void)combine(to_tensor(heads));
  const Ref kernel = to_ref(combine->kernel().value()), bias = to_ref(combine->bias().value());
  check_gradients(
      "einsum_dense abcd,cde->abe", [&](const std::vector<Tensor>& in) { return combine(in[0]); },
      [&](const std::vector<Ref>& in) {
        Ref y = ref_combine(in[0], kernel, bias);
        for (double& v : y.v) v = std::tanh(v);
        return y;
      },
      {heads});
}

TEST(AttentionLayers, EinsumDenseRefusesWhatItCannotRun) {
  EXPECT_THROW(layers::EinsumDense("ab,bc", {3}), ValueError);
  EXPECT_THROW(layers::EinsumDense("abc,dc->abd", {-1, 3}), ValueError);  // kernel transposed
  EXPECT_THROW(layers::EinsumDense("...b,bc->...c", {3}), ValueError);
  EXPECT_THROW(layers::EinsumDense("abc,cd->abd", {-1, 3}, {.bias_axes = "b"}), ValueError);
  EXPECT_THROW(layers::EinsumDense("abc,cd->abd", {3}), ShapeError);
}

// Keras's attention from the layer's own weights, in float64.
// Which value steps query step i of example n sees (all when empty).
using Visible = std::function<bool(std::int64_t n, std::int64_t i, std::int64_t j)>;

Ref ref_attention(const Ref& query, const Ref& value, const Ref& key,
                  const layers::MultiHeadAttentionImpl& mha, const Visible& visible = {}) {
  auto weights = mha.weights();  // q, k, v, out: kernel and bias each
  auto w = [&](std::size_t i) { return to_ref(weights[i].value()); };
  const Ref q = ref_project(query, w(0), w(1)), k = ref_project(key, w(2), w(3)),
            v = ref_project(value, w(4), w(5));
  const std::int64_t b = query.dims[0], t = query.dims[1], s = value.dims[1];
  const std::int64_t h = mha.num_heads(), kd = mha.key_dim(), vd = mha.value_dim();
  Ref merged({b, t, h, vd});
  const double scale = 1.0 / std::sqrt(static_cast<double>(kd));
  for (std::int64_t n = 0; n < b; ++n) {
    for (std::int64_t head = 0; head < h; ++head) {
      for (std::int64_t i = 0; i < t; ++i) {
        std::vector<double> scores(static_cast<std::size_t>(s));
        double top = -1e300;
        for (std::int64_t j = 0; j < s; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < kd; ++c)
            dot +=
                q[((n * t + i) * h + head) * kd + c] * scale * k[((n * s + j) * h + head) * kd + c];
          scores[static_cast<std::size_t>(j)] = dot;
          top = std::max(top, dot);
        }
        double total = 0;
        for (std::int64_t j = 0; j < s; ++j) {
          double& e = scores[static_cast<std::size_t>(j)];
          total += (e = visible && !visible(n, i, j) ? 0.0 : std::exp(e - top));
        }
        for (std::int64_t c = 0; c < vd; ++c) {
          double o = 0;
          for (std::int64_t j = 0; j < s; ++j)
            o += scores[static_cast<std::size_t>(j)] / total * v[((n * s + j) * h + head) * vd + c];
          merged[((n * t + i) * h + head) * vd + c] = o;
        }
      }
    }
  }
  return ref_combine(merged, w(6), w(7));
}

TEST(AttentionLayers, MultiHeadAttentionIsKerasAttentionWithItsGradients) {
  std::mt19937 rng(7);
  const Ref query = random_ref({2, 3, 4}, rng), value = random_ref({2, 5, 6}, rng),
            key = random_ref({2, 5, 3}, rng);
  layers::MultiHeadAttention mha(2, 3,
                                 {.value_dim = 2,
                                  .output_dim = 5,
                                  .bias_initializer = initializers::RandomNormal(0.0f, 0.5f, 1)});
  const Tensor y = mha({to_tensor(query), to_tensor(value), to_tensor(key)}).at(0);
  EXPECT_EQ(y.shape(), Shape({2, 3, 5}));
  ASSERT_EQ(mha.weights().size(), 8u);
  EXPECT_EQ(mha.weights()[0].value().shape(),
            Shape({4, 2, 3}));  // query: [features, heads, key_dim]
  EXPECT_EQ(mha.weights()[6].value().shape(), Shape({2, 2, 5}));  // output: [heads, value_dim, out]
  check_gradients(
      "multi_head_attention", [&](const std::vector<Tensor>& in) { return mha(in).at(0); },
      [&](const std::vector<Ref>& in) {
        return ref_attention(in[0], in[1], in[2], *mha.operator->());
      },
      {query, value, key});
  // Self-attention: the key is the value.
  layers::MultiHeadAttention self(2, 2);
  (void)self({to_tensor(query), to_tensor(query)});  // builds it: the reference reads its weights
  check_gradients(
      "self-attention",
      [&](const std::vector<Tensor>& in) {
        return self({in[0], in[0]}).at(0);
      },
      [&](const std::vector<Ref>& in) {
        return ref_attention(in[0], in[0], in[0], *self.operator->());
      },
      {query});
}

// Keras masks: the value's mask hides value steps from every query, the
// query's and the causal mask hide more; the gradients reach only what is
// seen. The mask the output carries is the query's.
TEST(AttentionLayers, MultiHeadAttentionHonoursMasksWithItsGradients) {
  std::mt19937 rng(9);
  const Ref query = random_ref({2, 4, 3}, rng), value = random_ref({2, 5, 3}, rng);
  // Example 0 has 3 real value steps, example 1 all 5 but the second.
  const std::vector<std::uint8_t> value_real{1, 1, 1, 0, 0, 1, 0, 1, 1, 1};
  const Tensor value_mask = cast(Tensor::from_vector(value_real, {2, 5}), DType::kBool);
  const Tensor query_mask = Tensor::ones({2, 4}, DType::kBool);
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "use_causal_mask" : "masks");
    layers::MultiHeadAttention mha(2, 3, {.use_causal_mask = causal});
    (void)mha({to_tensor(query), to_tensor(value)});  // builds it: the reference reads its weights
    check_gradients(
        "masked attention",
        [&](const std::vector<Tensor>& in) {
          return mha->apply({in[0], in[1]}, {query_mask, value_mask}, {}).at(0);
        },
        [&](const std::vector<Ref>& in) {
          return ref_attention(in[0], in[1], in[1], *mha.operator->(),
                               [&](std::int64_t n, std::int64_t i, std::int64_t j) {
                                 const bool real = value_real[static_cast<std::size_t>(n * 5 + j)];
                                 return real && (!causal || j <= i);
                               });
        },
        {query, value});
  }
}

// Keras's attention_mask argument ([batch, query steps, value steps], 0/1),
// the layer's last input: it joins the value's mask; gradients for the
// query and the value (the mask has none).
TEST(AttentionLayers, MultiHeadAttentionTakesAnAttentionMaskWithItsGradients) {
  std::mt19937 rng(10);
  const Ref query = random_ref({2, 4, 3}, rng), value = random_ref({2, 5, 3}, rng);
  const std::vector<std::uint8_t> value_real{1, 1, 1, 0, 1, 1, 0, 1, 1, 1};
  const Tensor value_mask = cast(Tensor::from_vector(value_real, {2, 5}), DType::kBool);
  const Tensor query_mask = Tensor::ones({2, 4}, DType::kBool);
  auto allowed = [](std::int64_t n, std::int64_t i, std::int64_t j) {
    return (i + j + n) % 3 != 1;  // a pattern no other mask makes
  };
  std::vector<float> given(2 * 4 * 5);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t i = 0; i < 4; ++i)
      for (std::int64_t j = 0; j < 5; ++j)
        given[static_cast<std::size_t>((n * 4 + i) * 5 + j)] = allowed(n, i, j) ? 1.0f : 0.0f;
  const Tensor attention_mask = Tensor::from_vector(given, {2, 4, 5});
  layers::MultiHeadAttention mha(2, 3, {.attention_mask = true});
  (void)mha({to_tensor(query), to_tensor(value), attention_mask});
  check_gradients(
      "attention_mask",
      [&](const std::vector<Tensor>& in) {
        return mha->apply({in[0], in[1], attention_mask}, {query_mask, value_mask, Tensor()}, {})
            .at(0);
      },
      [&](const std::vector<Ref>& in) {
        return ref_attention(in[0], in[1], in[1], *mha.operator->(),
                             [&](std::int64_t n, std::int64_t i, std::int64_t j) {
                               return value_real[static_cast<std::size_t>(n * 5 + j)] &&
                                      allowed(n, i, j);
                             });
      },
      {query, value});
  // A mask of the wrong shape names the one expected.
  EXPECT_THROW(mha({to_tensor(query), to_tensor(value), Tensor::ones({2, 4, 4})}), ShapeError);
}

// A Ref with the same values in other dims.
Ref reshaped(const Ref& x, Dims dims) {
  Ref y(std::move(dims));
  y.v = x.v;
  EXPECT_EQ(y.size(), x.size());
  return y;
}

// [a, b, c, d] -> [a, c, b, d].
Ref swap_middle(const Ref& x) {
  const std::int64_t a = x.dims[0], b = x.dims[1], c = x.dims[2], d = x.dims[3];
  Ref y({a, c, b, d});
  for (std::int64_t i = 0; i < a; ++i)
    for (std::int64_t j = 0; j < b; ++j)
      for (std::int64_t k = 0; k < c; ++k)
        for (std::int64_t l = 0; l < d; ++l)
          y[((i * c + k) * b + j) * d + l] = x[((i * b + j) * c + k) * d + l];
  return y;
}

// attention_axes: on [batch, T1, T2, features], attention over (1, 2) is
// the one-axis layer's on the T1·T2 positions flattened; over (2,) (or
// -2), the one-axis layer's on each T1 slice; over (1,), on each T2 slice.
// The reference is the float64 loop of the one-axis layer, with the
// layer's own weights; gradients by finite differences.
TEST(AttentionLayers, MultiHeadAttentionOverSeveralAxesIsTheOneAxisLayerOnThosePositions) {
  std::mt19937 rng(12);
  const Ref query = random_ref({2, 3, 2, 4}, rng);
  struct Case {
    std::vector<std::int64_t> axes;
    Dims value;
  };
  for (const Case& c :
       {Case{{1, 2}, {2, 2, 3, 5}}, Case{{2}, {2, 3, 4, 5}}, Case{{-2}, {2, 3, 4, 5}},
        Case{{1}, {2, 4, 2, 5}}, Case{{}, {2, 1, 4, 5}}}) {
    SCOPED_TRACE("attention_axes of " + std::to_string(c.axes.size()) + " axes, value " +
                 Shape(c.value).to_string());
    const Ref value = random_ref(c.value, rng);
    layers::MultiHeadAttention mha(2, 3,
                                   {.value_dim = 2,
                                    .output_dim = 3,
                                    .bias_initializer = initializers::RandomNormal(0.0f, 0.5f, 1),
                                    .return_attention_scores = true,
                                    .attention_axes = c.axes});
    const std::vector<Tensor> out = mha({to_tensor(query), to_tensor(value)});
    const auto& layer = *mha.operator->();
    const bool both = layer.attention_axes().size() == 2,
               first = layer.attention_axes() == std::vector<std::int64_t>{1};
    EXPECT_EQ(out.at(0).shape(), Shape({2, 3, 2, 3}));
    // Keras's scores: [batch, axes not attended…, heads, query's…, key's…].
    EXPECT_EQ(out.at(1).shape(), both    ? Shape({2, 2, 3, 2, c.value[1], c.value[2]})
                                 : first ? Shape({2, 2, 2, 3, c.value[1]})
                                         : Shape({2, 3, 2, 2, c.value[2]}));
    check_gradients(
        "attention over several axes", [&](const std::vector<Tensor>& in) { return mha(in).at(0); },
        [&](const std::vector<Ref>& in) {
          const Ref& q = in[0];
          const Ref& v = in[1];
          if (both) {
            const Ref y =
                ref_attention(reshaped(q, {2, 6, 4}), reshaped(v, {2, v.dims[1] * v.dims[2], 5}),
                              reshaped(v, {2, v.dims[1] * v.dims[2], 5}), layer);
            return reshaped(y, {2, 3, 2, 3});
          }
          if (first) {
            const Ref qs = reshaped(swap_middle(q), {4, 3, 4});
            const Ref vs = reshaped(swap_middle(v), {4, v.dims[1], 5});
            return swap_middle(reshaped(ref_attention(qs, vs, vs, layer), {2, 2, 3, 3}));
          }
          const Ref vs = reshaped(v, {6, v.dims[2], 5});
          return reshaped(ref_attention(reshaped(q, {6, 2, 4}), vs, vs, layer), {2, 3, 2, 3});
        },
        {query, value});
  }
}

// On several axes, an attention_mask [batch, query's attended axes…,
// key's attended axes…] hides keys as on the flattened positions; the
// inputs' Keras masks and the causal mask (Keras's, for one step axis) and
// axes that are not step axes are refused.
TEST(AttentionLayers, MultiHeadAttentionOverSeveralAxesTakesAnAttentionMask) {
  std::mt19937 rng(13);
  const Ref query = random_ref({2, 3, 2, 4}, rng), value = random_ref({2, 2, 2, 4}, rng);
  auto allowed = [](std::int64_t n, std::int64_t i, std::int64_t j) {
    return (i + j + n) % 3 != 1;  // i of 6 query positions, j of 4 key positions
  };
  std::vector<float> given(2 * 6 * 4);
  for (std::int64_t n = 0; n < 2; ++n)
    for (std::int64_t i = 0; i < 6; ++i)
      for (std::int64_t j = 0; j < 4; ++j)
        given[static_cast<std::size_t>((n * 6 + i) * 4 + j)] = allowed(n, i, j) ? 1.0f : 0.0f;
  const Tensor attention_mask = Tensor::from_vector(given, {2, 3, 2, 2, 2});
  layers::MultiHeadAttention mha(2, 3, {.attention_mask = true, .attention_axes = {1, 2}});
  (void)mha({to_tensor(query), to_tensor(value), attention_mask});
  check_gradients(
      "attention_mask over two axes",
      [&](const std::vector<Tensor>& in) {
        return mha({in[0], in[1], attention_mask}).at(0);
      },
      [&](const std::vector<Ref>& in) {
        const Ref v = reshaped(in[1], {2, 4, 4});
        return reshaped(ref_attention(reshaped(in[0], {2, 6, 4}), v, v, *mha.operator->(), allowed),
                        {2, 3, 2, 4});
      },
      {query, value});
  EXPECT_THROW(mha({to_tensor(query), to_tensor(value), Tensor::ones({2, 6, 4})}), ShapeError);
  const Tensor q = to_tensor(query), v = to_tensor(value);
  layers::MultiHeadAttention causal(2, 3, {.use_causal_mask = true, .attention_axes = {1, 2}});
  EXPECT_THROW(causal({q, v}), ValueError);
  layers::MultiHeadAttention plain(2, 3, {.attention_axes = {1, 2}});
  (void)plain({q, v});
  EXPECT_THROW(plain->apply({q, v}, {Tensor::ones({2, 3, 2}, DType::kBool), Tensor()}, {}),
               ValueError);
  for (const std::vector<std::int64_t>& axes :
       {std::vector<std::int64_t>{3}, std::vector<std::int64_t>{0},
        std::vector<std::int64_t>{1, -3}}) {
    layers::MultiHeadAttention wrong(2, 3, {.attention_axes = axes});
    EXPECT_THROW(wrong({q, v}), ValueError);
  }
  // The value's size on an axis not attended over must be the query's.
  layers::MultiHeadAttention sliced(2, 3, {.attention_axes = {2}});
  EXPECT_THROW(sliced({q, v}), ShapeError);
}

// keras.layers.Attention: softmax(q·kᵀ · scale) · v, the value's mask
// lowering hidden scores by 1e9, the query's zeroing the output's rows;
// and the additive score Σ tanh(q + k) · weight. Gradients for every input.
TEST(AttentionLayers, AttentionIsKerasDotAndAdditiveAttentionWithItsGradients) {
  std::mt19937 rng(13);
  const Ref q = random_ref({2, 3, 4}, rng), v = random_ref({2, 5, 2}, rng),
            k = random_ref({2, 5, 4}, rng);
  const std::vector<std::uint8_t> value_real{1, 1, 0, 1, 0, 1, 1, 1, 1, 1};
  const std::vector<std::uint8_t> query_real{1, 1, 0, 1, 1, 1};
  const Tensor value_mask = cast(Tensor::from_vector(value_real, {2, 5}), DType::kBool);
  const Tensor query_mask = cast(Tensor::from_vector(query_real, {2, 3}), DType::kBool);
  for (const char* mode : {"dot", "concat"}) {
    SCOPED_TRACE(mode);
    layers::Attention att({.use_scale = true, .score_mode = mode});
    (void)att({to_tensor(q), to_tensor(v), to_tensor(k)});
    ASSERT_EQ(att.weights().size(), std::string(mode) == "dot" ? 1u : 2u);
    att.weights()[0].assign(Tensor::scalar(0.7f));  // the scale
    const double scale = 0.7, weight = 1.0;
    check_gradients(
        "attention",
        [&](const std::vector<Tensor>& in) {
          return att->apply(in, {query_mask, value_mask, Tensor()}, {}).at(0);
        },
        [&](const std::vector<Ref>& in) {
          const Ref &qq = in[0], &vv = in[1], &kk = in[2];
          Ref out({2, 3, 2});
          for (std::int64_t n = 0; n < 2; ++n) {
            for (std::int64_t i = 0; i < 3; ++i) {
              std::vector<double> e(5);
              double top = -1e300, total = 0;
              for (std::int64_t j = 0; j < 5; ++j) {
                double score = 0;
                for (std::int64_t c = 0; c < 4; ++c) {
                  const double a = qq[(n * 3 + i) * 4 + c], b = kk[(n * 5 + j) * 4 + c];
                  score += std::string(mode) == "dot" ? a * b : std::tanh(scale * (a + b));
                }
                score *= std::string(mode) == "dot" ? scale : weight;
                if (!value_real[static_cast<std::size_t>(n * 5 + j)]) score -= 1e9;
                e[static_cast<std::size_t>(j)] = score;
                top = std::max(top, score);
              }
              for (double& x : e) total += (x = std::exp(x - top));
              for (std::int64_t c = 0; c < 2; ++c) {
                double o = 0;
                for (std::int64_t j = 0; j < 5; ++j)
                  o += e[static_cast<std::size_t>(j)] / total * vv[(n * 5 + j) * 2 + c];
                out[(n * 3 + i) * 2 + c] = query_real[static_cast<std::size_t>(n * 3 + i)] ? o : 0;
              }
            }
          }
          return out;
        },
        {q, v, k});
    EXPECT_EQ(att->compute_mask({}, {query_mask, value_mask, Tensor()}).at(0).to_vector<bool>(),
              query_mask.to_vector<bool>());
  }
}

TEST(AttentionLayers, AttentionDropoutActsInTrainingOnly) {
  std::mt19937 rng(8);
  const Ref x = random_ref({2, 4, 4}, rng);
  layers::MultiHeadAttention mha(2, 2, {.dropout = 0.5f, .seed = 3});
  const Tensor a = mha({to_tensor(x), to_tensor(x)}).at(0);
  expect_close(to_ref(a), mha({to_tensor(x), to_tensor(x)}).at(0), 0, 0, "inference is fixed");
  const Ref trained = to_ref(mha({to_tensor(x), to_tensor(x)}, {.training = true}).at(0));
  double diff = 0;
  for (std::int64_t i = 0; i < trained.size(); ++i)
    diff = std::max(diff, std::abs(trained[i] - to_ref(a)[i]));
  EXPECT_GT(diff, 1e-3) << "dropout changed nothing in training";
}

}  // namespace
}  // namespace lockstep::testing
