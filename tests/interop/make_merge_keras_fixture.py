"""Writes keras_fixtures/merge.keras and merge_expected.json: Keras's merging
layers (Multiply, Subtract, Average, Maximum, Minimum) over three Dense
branches, concatenated under Dense(3); trained 3 steps and saved, with a
fixed input, Keras's outputs, one more step on a fixed batch and the outputs
after it. Read by tests/train/keras_files_test.cc
(KerasFiles.MergeLayersPredictAndStepAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_merge_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step


def main(out):
    keras.utils.set_random_seed(61)
    rng = np.random.default_rng(61)
    inputs = keras.Input(shape=(5,))
    a, b, c = (layers.Dense(4, activation="tanh")(inputs) for _ in range(3))
    merged = [layers.Multiply()([a, b]), layers.Subtract()([a, c]), layers.Average()([a, b, c]),
              layers.Maximum()([b, c]), layers.Minimum()([a, b, c])]
    model = keras.Model(inputs, layers.Dense(3)(layers.Concatenate()(merged)))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.standard_normal((24, 5)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.standard_normal((4, 5)).astype("float32")
    fit_save_and_step(model, out, "merge", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
