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
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    x = (rng.standard_normal((4, 5)) * scales + offsets).astype("float32")
    entry = {"input_shape": list(x.shape), "input": flat(x),
             "output": flat(model.predict(x, verbose=0)),
             "mean": flat(normalizer.mean), "variance": flat(normalizer.variance)}
    model.save(os.path.join(out, "normalization.keras"))
    xb, yb = x_train[:8], y_train[:8]
    model.train_on_batch(xb, yb)
    entry.update({"step_x_shape": list(xb.shape), "step_x": flat(xb),
                  "step_y_shape": list(yb.shape), "step_y": [float(v) for v in yb],
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "normalization_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
