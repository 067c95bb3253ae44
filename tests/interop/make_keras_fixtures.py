"""Writes the Keras fixtures that tests/train/keras_files_test.cc reads.

Run by hand in a scratch venv, never by the build:

    python3 -m venv /tmp/kvenv && /tmp/kvenv/bin/pip install tensorflow-cpu
    /tmp/kvenv/bin/python tests/interop/make_keras_fixtures.py tests/interop/keras_fixtures

For each small model it writes what Keras 3 itself saves (`<name>.keras`,
`<name>.weights.h5`, and for the MLP a legacy Keras 2 `mlp_legacy.h5` from
Keras's legacy saver), and `expected.json` with a fixed input, the outputs
Keras computes on it, and, for the trained MLP, one more training step on a
fixed batch and the outputs after it (so a loader that drops the optimizer's
state is caught). Models are kept small (a few KiB each) so the fixtures can
be committed; their shapes follow the seed models (the MLP of the guide, the
small CNN with BatchNormalization and Dropout, a base model inside a head).
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers


def mlp():
    inputs = keras.Input(shape=(64,))
    x = layers.Dense(32, activation="relu")(inputs)
    x = layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def cnn():
    inputs = keras.Input(shape=(12, 12, 1))
    x = layers.Conv2D(4, 3, activation="relu")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Dropout(0.25)(x)
    x = layers.Flatten()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def nested():
    base_in = keras.Input(shape=(16,))
    b = layers.Dense(8, activation="relu")(base_in)
    b = layers.BatchNormalization()(b)
    base = keras.Model(base_in, b, name="base")
    inputs = keras.Input(shape=(16,))
    x = base(inputs)
    x = layers.Dense(4, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(1)(x), name="head")


def sequential():
    return keras.Sequential(
        [keras.Input(shape=(8,)), layers.Dense(6, activation="tanh"), layers.Dense(3, activation="softmax")]
    )


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def main(out):
    os.makedirs(out, exist_ok=True)
    keras.utils.set_random_seed(7)
    rng = np.random.default_rng(7)
    expected = {"keras_version": keras.__version__}
    cases = {
        "mlp": (mlp, (64,), 10, "sparse_categorical_crossentropy", "adam"),
        "cnn": (cnn, (12, 12, 1), 10, "sparse_categorical_crossentropy", "sgd"),
        "nested": (nested, (16,), None, "mse", "rmsprop"),
        "sequential": (sequential, (8,), 3, "sparse_categorical_crossentropy", "adam"),
    }
    for name, (build, shape, classes, loss, optimizer) in cases.items():
        model = build()
        metrics = ["accuracy"] if classes else ["mae"]
        if name == "mlp":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            optimizer = keras.optimizers.Adam(learning_rate=0.01)
        model.compile(optimizer=optimizer, loss=loss, metrics=metrics)
        x_train = rng.standard_normal((24,) + shape).astype("float32")
        if classes:
            y_train = rng.integers(0, classes, size=(24,)).astype("int64")
        else:
            y_train = rng.standard_normal((24, 1)).astype("float32")
        # 3 steps, so the optimizer's variables exist and have moved.
        model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
        x = rng.standard_normal((4,) + shape).astype("float32")
        y = model.predict(x, verbose=0)
        model.save(os.path.join(out, f"{name}.keras"))
        model.save_weights(os.path.join(out, f"{name}.weights.h5"))
        entry = {
            "input_shape": list(x.shape), "input": flat(x),
            "output_shape": list(y.shape), "output": flat(y),
        }
        # One more step from the saved state, on a fixed batch.
        xb, yb = x_train[:8], y_train[:8]
        model.train_on_batch(xb, yb)
        entry.update({
            "step_x_shape": list(xb.shape), "step_x": flat(xb),
            "step_y_shape": list(yb.shape), "step_y": [float(v) for v in yb.reshape(-1)],
            "step_y_dtype": str(yb.dtype),
            "output_after_step": flat(model.predict(x, verbose=0)),
        })
        expected[name] = entry
        if name == "mlp":
            # Keras 3 writes a path ending in .h5 with its legacy (Keras 2) saver.
            reloaded = keras.models.load_model(os.path.join(out, "mlp.keras"))
            reloaded.save(os.path.join(out, "mlp_legacy.h5"))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
