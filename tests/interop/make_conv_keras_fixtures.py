"""Writes keras_fixtures/separable.keras and conv_transpose.keras, each with
its NAME_expected.json: small image classifiers Keras 3 trained 3 steps and
saved, Keras's outputs on a fixed input, one more step and the outputs
after it (fixture_steps.py). Read by tests/train/keras_files_test.cc
(KerasFiles.SeparableConv2DPredictsAndStepsAsKeras and
KerasFiles.Conv2DTransposePredictsAndStepsAsKeras).

- separable: keras.layers.SeparableConv2D with strides 2, "same" padding,
  depth_multiplier 2, a ReLU and a random bias, then one on a 2×3 window
  without a bias;
- conv_transpose: keras.layers.Conv2DTranspose "same" with strides 2 and a
  ReLU, then "valid" on a 2×3 window without a bias.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_conv_keras_fixtures.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step


def separable(inputs):
    x = layers.SeparableConv2D(6, 3, strides=2, padding="same", depth_multiplier=2,
                               activation="relu", bias_initializer="random_normal")(inputs)
    return layers.SeparableConv2D(4, (2, 3), use_bias=False)(x)


def conv_transpose(inputs):
    x = layers.Conv2D(4, 3, strides=2, padding="same")(inputs)
    x = layers.Conv2DTranspose(5, 3, strides=2, padding="same", activation="relu",
                               bias_initializer="random_normal")(x)
    return layers.Conv2DTranspose(3, (2, 3), use_bias=False)(x)


def main(out):
    for name, seed, body in (("separable", 41, separable), ("conv_transpose", 43, conv_transpose)):
        keras.utils.set_random_seed(seed)
        rng = np.random.default_rng(seed)
        inputs = keras.Input(shape=(8, 8, 3))
        x = layers.GlobalAveragePooling2D()(body(inputs))
        model = keras.Model(inputs, layers.Dense(3)(x))
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x_train = rng.standard_normal((24, 8, 8, 3)).astype("float32")
        y_train = rng.integers(0, 3, 24).astype("int64")
        x = rng.standard_normal((4, 8, 8, 3)).astype("float32")
        fit_save_and_step(model, out, name, x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
