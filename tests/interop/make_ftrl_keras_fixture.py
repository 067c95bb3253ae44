"""Writes keras_fixtures/ftrl.keras and ftrl_expected.json: a small model that
Keras 3 compiled with keras.optimizers.Ftrl (every argument away from its
default), trained 3 steps and saved, with a fixed input, Keras's outputs, one
more step on a fixed batch and the outputs after it. Read by
tests/train/keras_files_test.cc (KerasFiles.AnFtrlModelKerasSavedStepsAsKerasStepped).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_ftrl_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def main(out):
    keras.utils.set_random_seed(22)
    rng = np.random.default_rng(22)
    inputs = keras.Input(shape=(8,))
    x = layers.Dense(6, activation="relu")(inputs)
    model = keras.Model(inputs, layers.Dense(1)(x))
    model.compile(optimizer=keras.optimizers.Ftrl(
        learning_rate=0.05, learning_rate_power=-0.6, initial_accumulator_value=0.2,
        l1_regularization_strength=0.001, l2_regularization_strength=0.01,
        l2_shrinkage_regularization_strength=0.02, beta=0.1), loss="mse")
    x_train = rng.standard_normal((24, 8)).astype("float32")
    y_train = rng.standard_normal((24, 1)).astype("float32")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    x = rng.standard_normal((4, 8)).astype("float32")
    entry = {"input_shape": list(x.shape), "input": flat(x),
             "output": flat(model.predict(x, verbose=0))}
    model.save(os.path.join(out, "ftrl.keras"))
    xb, yb = x_train[:8], y_train[:8]
    model.train_on_batch(xb, yb)
    entry.update({"step_x_shape": list(xb.shape), "step_x": flat(xb),
                  "step_y_shape": list(yb.shape), "step_y": flat(yb),
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "ftrl_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
