"""Writes keras_fixtures/normalization.keras and normalization_expected.json:
Keras's structured-data model, a Normalization layer adapted to the training
features (Keras 3 keeps the adapted mean and variance as the layer's weights,
with a count, and null in its config) under Dense(8, relu) and Dense(3),
trained 3 steps and saved, with a fixed input, Keras's outputs, one more step
on a fixed batch and the outputs after it. Read by
tests/train/keras_files_test.cc (KerasFiles.AnAdaptedNormalizationLoadsItsStatisticsFromWeights).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_normalization_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step, flat


def main(out):
    keras.utils.set_random_seed(31)
    rng = np.random.default_rng(31)
    # Five features on very different scales, as a table's columns are.
    scales = np.array([1.0, 10.0, 1000.0, 0.01, 50.0], dtype="float32")
    offsets = np.array([0.0, -5.0, 3000.0, 0.2, 10.0], dtype="float32")
    x_train = (rng.standard_normal((24, 5)) * scales + offsets).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    normalizer = layers.Normalization()
    normalizer.adapt(x_train)
    inputs = keras.Input(shape=(5,))
    x = normalizer(inputs)
    x = layers.Dense(8, activation="relu")(x)
    model = keras.Model(inputs, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x = (rng.standard_normal((4, 5)) * scales + offsets).astype("float32")
    fit_save_and_step(model, out, "normalization", x_train, y_train, x,
                      {"mean": flat(normalizer.mean), "variance": flat(normalizer.variance)})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
