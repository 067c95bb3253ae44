"""Keras's own save and load of the models bench/model_files_bench.cc times:
the seed MLP and the small CNN, compiled with Adam and trained 2 steps,
model.save("x.keras") and keras.models.load_model, the median of 10 each.
Prints `RESULT {json}` lines like the Lockstep program.

usage: keras_model_files.py [DIR]
"""
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers


def seed_mlp():
    inputs = keras.Input(shape=(784,))
    x = layers.Dense(256, activation="relu")(inputs)
    x = layers.Dense(256, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def small_cnn():
    inputs = keras.Input(shape=(28, 28, 1))
    x = layers.Conv2D(32, 3, activation="relu")(inputs)
    x = layers.MaxPooling2D()(x)
    x = layers.Conv2D(64, 3, activation="relu")(x)
    x = layers.MaxPooling2D()(x)
    x = layers.Flatten()(x)
    x = layers.Dense(128, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(10)(x))


def median_ms(f, reps=10):
    f()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        times.append((time.perf_counter() - t0) * 1e3)
    return sorted(times)[len(times) // 2]


def main(root):
    os.makedirs(root, exist_ok=True)
    for name, build in (("mlp", seed_mlp), ("cnn", small_cnn)):
        model = build()
        model.compile(optimizer="adam",
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
        shape = model.input_shape[1:]
        x = np.random.default_rng(2).random((32,) + tuple(shape), dtype=np.float32)
        y = np.arange(32) % 10
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        path = os.path.join(root, f"{name}.keras")
        save = median_ms(lambda: model.save(path))
        load = median_ms(lambda: keras.models.load_model(path))
        print("RESULT " + json.dumps({"system": f"keras {keras.__version__}", "model": name,
                                      "format": "keras", "save_ms": round(save, 3),
                                      "load_ms": round(load, 3),
                                      "bytes": os.path.getsize(path)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="keras_files_"))
