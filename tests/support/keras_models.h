// A model holding every layer class Lockstep has, for the tests that check
// each is serialized with Keras's class name and keys: Lockstep's round
// trip (tests/train/keras_files_test.cc) and Keras reading our file
// (tests/interop/keras_writer.cc). Three inputs: an 8x8x3 image, 4 token
// ids (int32) for the Embedding, and a [4, 4] attention mask of 0/1.
#pragma once

#include "lockstep/lockstep.h"

namespace lockstep::testing_support {

inline Model every_layer_model() {
  auto image = Input({8, 8, 3}, DType::kFloat32, "image");
  auto ids = Input({4}, DType::kInt32, "ids");
  auto allowed = Input({4, 4}, DType::kFloat32, "allowed");
  auto x = layers::RandomFlip("horizontal", {.seed = 3})(image);
  x = layers::RandomRotation(
      std::array<double, 2>{-0.2, 0.3},
      {.fill_mode = "constant", .interpolation = "nearest", .seed = 5, .fill_value = 1.5f})(x);
  x = layers::UpSampling2D({2, 2})(layers::Cropping2D({{{1, 1}, {0, 2}}})(x));  // [12, 12]
  x = layers::UpSampling2D({1, 1}, {.interpolation = "bilinear"})(x);
  x = layers::ZeroPadding2D({{{1, 0}, {2, 1}}})(x);
  x = layers::DepthwiseConv2D({3, 3}, {.strides = {2, 2}, .depth_multiplier = 2})(x);
  x = layers::BatchNormalization({.momentum = 0.9f, .epsilon = 1e-3f})(x);
  x = layers::ReLU({.max_value = 6.0f})(x);
  x = layers::AveragePooling2D({2, 2}, {.padding = "same"})(x);
  x = layers::Conv2D(5, {1, 1}, {.kernel_regularizer = regularizers::L2(1e-4f)})(x);
  x = layers::SeparableConv2D(5, {3, 3}, {.padding = "same", .depth_multiplier = 2})(x);
  x = layers::Conv2DTranspose(4, {2, 2}, {.strides = {2, 2}, .padding = "same"})(x);
  x = layers::MaxPooling2D({2, 2}, {.strides = {1, 1}})(x);
  x = layers::GlobalAveragePooling2D()(x);
  x = layers::Activation("tanh")(layers::Dense(6, {.activation = "gelu"})(x));
  x = layers::ELU({.alpha = 0.5f})(layers::LeakyReLU({.negative_slope = 0.2f})(x));
  x = layers::PReLU({.alpha_initializer = initializers::Constant(0.25f)})(x);
  x = layers::Maximum()({layers::Multiply()({x, x}),
                         layers::Subtract()({x, layers::Average()({x, x})}),
                         layers::Minimum()({x, x})});
  auto t = layers::Embedding(10, 3)(ids);
  // The sequence layers on the embedded ids [batch, 4, 3].
  auto seq = layers::Conv1D(4, 2, {.padding = "causal", .activation = "relu"})(t);
  seq = layers::LayerNormalization()(layers::MaxPooling1D(2, {.padding = "same"})(seq));
  seq = layers::AveragePooling1D(1)(layers::Conv1D(2, 1, {.strides = 1})(seq));
  // The recurrent and attention layers on the embedded ids.
  auto rec = layers::LSTM(3, {.return_sequences = true})(t);
  rec = layers::TimeDistributed(layers::Dense(3, {.activation = "tanh"}))(rec);
  rec =
      layers::Bidirectional(layers::GRU(2, {.return_sequences = true}), {.merge_mode = "ave"})(rec);
  auto att = layers::MultiHeadAttention(2, 2, {.value_dim = 3})({rec, t});
  att = layers::EinsumDense("abc,cd->abd", {-1, 2}, {.bias_axes = "d"})(att);
  auto last = layers::SimpleRNN(2, {.go_backwards = true})(att);
  // Masks: id 0 as padding, causal self-attention, additive Attention with
  // a scale, pooled over the real steps; and a Masking layer.
  auto masked = layers::Embedding(10, 3, {.mask_zero = true})(ids);
  masked = layers::MultiHeadAttention(1, 2, {.use_causal_mask = true})({masked, masked});
  masked = layers::Attention({.use_scale = true, .score_mode = "concat"})({masked, masked});
  // Layers with several outputs: a GRU's state (which another GRU, and a
  // Bidirectional's two, start from: initial_state), attention scores.
  const auto states = layers::GRU(2, {.return_state = true}).call_all(t);
  const auto scored =
      layers::MultiHeadAttention(1, 2, {.return_attention_scores = true}).call_all({t, t});
  // An explicit attention mask (Keras's attention_mask argument).
  auto given = layers::MultiHeadAttention(1, 2, {.attention_mask = true})({t, t, allowed});
  // Attention over several axes of the image: along its rows (axis 2),
  // and over all its positions (Keras's default on [batch, 8, 8, 3]).
  auto axial = layers::MultiHeadAttention(1, 2, {.attention_axes = {2}})({image, image});
  axial = layers::MultiHeadAttention(1, 2)({axial, image});
  auto pooled = layers::Concatenate()(
      {layers::GlobalAveragePooling1D()(seq), layers::GlobalMaxPooling1D()(seq), last,
       layers::GlobalAveragePooling1D()(masked),
       layers::GlobalAveragePooling1D()(layers::Masking(0.0)(t)), states[1],
       layers::Flatten()(scored[1]), layers::GRU(2)({t, states[1]}),
       layers::Bidirectional(layers::GRU(2))({t, states[1], states[1]}),
       layers::GlobalAveragePooling1D()(given), layers::GlobalAveragePooling2D()(axial)});
  t = layers::Flatten()(layers::Reshape({12})(t));
  auto combined = layers::Concatenate()(
      {layers::Dot(1)({x, x}), layers::Flatten()(layers::RepeatVector(2)(x)),
       layers::Flatten()(layers::Permute({2, 1})(layers::Reshape({4, 3})(t)))});
  auto joined = layers::Concatenate()({x, layers::Dropout(0.1f)(t), pooled, combined});
  auto out = layers::Softmax()(layers::Dense(3, {.activation = "linear"})(joined));
  return Model({image, ids, allowed}, {out}, "every_layer");
}

// Inputs for it: images from normal noise, ids in [0, 10), attention masks.
inline std::vector<Tensor> every_layer_inputs(std::int64_t batch, std::uint64_t seed) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * 4));
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<std::int32_t>((i * 7 + seed) % 10);
  std::vector<float> allowed(static_cast<std::size_t>(batch * 16));
  for (std::size_t i = 0; i < allowed.size(); ++i)  // each query sees its own step at least
    allowed[i] = (i % 16) / 4 == i % 4 || (i * 5 + seed) % 3 != 0 ? 1.0f : 0.0f;
  return {random::normal({batch, 8, 8, 3}, {.seed = seed}),
          Tensor::from_vector<std::int32_t>(ids, Shape({batch, 4})),
          Tensor::from_vector<float>(allowed, Shape({batch, 4, 4}))};
}

}  // namespace lockstep::testing_support
