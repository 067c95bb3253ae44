"""Writes keras_fixtures/attention_mask.keras and its _expected.json:
MultiHeadAttention called with an explicit attention_mask, a model input
[batch, query steps, value steps] of 0/1 (a padding pattern per example and
a banded one), beside a masked Embedding whose padding mask joins it, and a
causal self-attention given the mask too. Read by
tests/train/keras_files_test.cc (KerasFiles.AnAttentionMaskArgumentIsKerasOwn).

Trained 3 steps (batch 8) on 24 examples, saved; Keras's outputs on fixed
inputs, one more step on the first 8 examples and the outputs after it.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_attention_mask_keras_fixture.py tests/interop/keras_fixtures
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
from make_masking_keras_fixture import padded


def attention_masks(rng, n, steps):
    """0/1 [n, steps, steps]: each example's own random band of visible
    keys, every query seeing at least its own step."""
    m = np.zeros((n, steps, steps), dtype="float32")
    for i in range(n):
        width = int(rng.integers(1, steps))
        for q in range(steps):
            m[i, q, max(0, q - width):q + width + 1] = 1.0
    return m


def main(out):
    keras.utils.set_random_seed(109)
    rng = np.random.default_rng(109)
    steps = 6
    tokens = keras.Input(shape=(steps,), dtype="int32")
    allowed = keras.Input(shape=(steps, steps))
    x = layers.Embedding(90, 8, mask_zero=True)(tokens)
    # Each MultiHeadAttention reads its own copy of x: Keras's removes the
    # masks of the tensors it is called on when the model runs (see
    # make_masking_keras_fixture.py), so a second one reading the same
    # tensor would run without the padding mask.
    q = layers.Rescaling(1.0)(x)
    a = layers.MultiHeadAttention(num_heads=2, key_dim=4)(q, q, attention_mask=allowed)
    q = layers.Rescaling(1.0)(x)
    c = layers.MultiHeadAttention(num_heads=1, key_dim=3)(
        q, q, attention_mask=allowed, use_causal_mask=True)
    x = layers.Concatenate()([layers.GlobalAveragePooling1D()(layers.Add()([x, a])),
                              layers.GlobalAveragePooling1D()(c)])
    model = keras.Model([tokens, allowed], layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = [padded(rng, 24, steps, 90, first_distinct=8), attention_masks(rng, 24, steps)]
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    x = [padded(rng, 4, steps, 90), attention_masks(rng, 4, steps)]
    entry = {"tokens_shape": list(x[0].shape), "tokens": values(x[0]),
             "allowed_shape": list(x[1].shape), "allowed": values(x[1]),
             "output": flat(model.predict(x, verbose=0))}
    model.save(os.path.join(out, "attention_mask.keras"))
    model.train_on_batch([x_train[0][:8], x_train[1][:8]], y_train[:8])
    entry.update({"step_tokens_shape": [8, steps], "step_tokens": values(x_train[0][:8]),
                  "step_allowed_shape": [8, steps, steps], "step_allowed": values(x_train[1][:8]),
                  "step_y": [int(v) for v in y_train[:8]],
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "attention_mask_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
