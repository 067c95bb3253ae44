// The seed models (train/zoo.h).
#include "lockstep/train/zoo.h"

#include "lockstep/nn/conv_layers.h"
#include "lockstep/nn/layers.h"

namespace lockstep::zoo {

Model seed_mlp() {
  auto inputs = Input({784});
  auto x = layers::Dense(256, {.activation = "relu"})(inputs);
  x = layers::Dense(256, {.activation = "relu"})(x);
  return Model(inputs, layers::Dense(10)(x));
}

Model small_cnn() {
  auto inputs = Input({28, 28, 1});
  auto x = layers::Conv2D(32, {3, 3}, {.activation = "relu"})(inputs);
  x = layers::MaxPooling2D()(x);
  x = layers::Conv2D(64, {3, 3}, {.activation = "relu"})(x);
  x = layers::MaxPooling2D()(x);
  x = layers::Flatten()(x);
  x = layers::Dense(128, {.activation = "relu"})(x);
  return Model(inputs, layers::Dense(10)(x));
}

}  // namespace lockstep::zoo
