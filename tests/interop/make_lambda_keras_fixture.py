"""Writes keras_fixtures/lambda.keras and lambda_expected.json: a model with
a Lambda layer named "double" (x * 2, Python code), trained 3 steps and
saved, with a fixed input, Keras's outputs, one more step on a fixed batch
and the outputs after it. Read by tests/train/keras_files_test.cc
(KerasFiles.ALambdaLoadsWithTheCxxLayerRegisteredUnderItsName), which
supplies the layer in C++ with register_lambda("double", ...).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_lambda_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    inputs = keras.Input(shape=(5,))
    x = layers.Dense(4, activation="tanh")(inputs)
    x = layers.Lambda(lambda t: t * 2.0, name="double")(x)
    model = keras.Model(inputs, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.normal(size=(24, 5)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    fit_save_and_step(model, out, "lambda", x_train, y_train,
                      rng.normal(size=(4, 5)).astype("float32"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
