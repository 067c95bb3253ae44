"""Writes keras_fixtures/attention_axes.keras and its _expected.json:
MultiHeadAttention over several axes (attention_axes) — over both axes of
an image [4, 3, 6] with an attention_mask input [4, 3, 4, 3], over its
second axis alone with the scores returned (Keras's own symbolic shape of
them is wrong on several axes, so no layer reads them: Keras's scores are
recorded through a second model), and
over axes (1, 3) of a rank-5 input (axis 2 batch-like). Read by
tests/train/keras_files_test.cc (KerasFiles.AttentionOverSeveralAxesIsKerasOwn).

Trained 3 steps (batch 8) on 24 examples, saved; Keras's outputs on fixed
inputs, one more step on the first 8 examples and the outputs after it.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_attention_axes_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import flat, values


def banded(rng, n):
    """0/1 [n, 4, 3, 4, 3]: each example sees the positions within its own
    random distance of the query's, so every query sees itself."""
    m = np.zeros((n, 4, 3, 4, 3), dtype="float32")
    for e in range(n):
        reach = int(rng.integers(1, 3))
        for i in range(4):
            for j in range(3):
                for k in range(4):
                    for l in range(3):
                        m[e, i, j, k, l] = abs(i - k) + abs(j - l) <= reach
    return m


def main(out):
    keras.utils.set_random_seed(113)
    rng = np.random.default_rng(113)
    image = keras.Input(shape=(4, 3, 6))
    allowed = keras.Input(shape=(4, 3, 4, 3))
    both = layers.MultiHeadAttention(num_heads=2, key_dim=4, attention_axes=(1, 2))(
        image, image, attention_mask=allowed)
    rows, scores = layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=2,
                                             attention_axes=(2,), name="rows")(
        image, image, return_attention_scores=True)
    video = layers.Reshape((2, 2, 3, 6))(image)
    skip = layers.MultiHeadAttention(num_heads=1, key_dim=2, output_shape=5,
                                     attention_axes=(1, 3))(video, video)
    x = layers.Concatenate()([
        layers.GlobalAveragePooling2D()(layers.Add()([image, both])),
        layers.Flatten()(rows), layers.Flatten()(skip)])
    model = keras.Model([image, allowed], layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = [rng.normal(size=(24, 4, 3, 6)).astype("float32"), banded(rng, 24)]
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    x = [rng.normal(size=(4, 4, 3, 6)).astype("float32"), banded(rng, 4)]
    entry = {"image_shape": list(x[0].shape), "image": values(x[0]),
             "allowed_shape": list(x[1].shape), "allowed": values(x[1]),
             "output": flat(model.predict(x, verbose=0)),
             "rows_scores_shape": [4, 4, 2, 3, 3],
             "rows_scores": flat(keras.Model(image, scores).predict(x[0], verbose=0))}
    model.save(os.path.join(out, "attention_axes.keras"))
    model.train_on_batch([x_train[0][:8], x_train[1][:8]], y_train[:8])
    entry.update({"step_image_shape": [8, 4, 3, 6], "step_image": values(x_train[0][:8]),
                  "step_allowed_shape": [8, 4, 3, 4, 3], "step_allowed": values(x_train[1][:8]),
                  "step_y": [int(v) for v in y_train[:8]],
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "attention_axes_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
