"""Writes keras_fixtures/attention.keras and attention_expected.json: a small
transformer encoder as Keras users write one (Embedding plus a position
embedding added, MultiHeadAttention self-attention, Add and
LayerNormalization, a gelu MLP of EinsumDense and Dense), then
cross-attention with a separate key, value_dim and output_shape given, and
EinsumDense over the heads' axes with a partial bias and without one; trained 3 steps and saved, with a fixed
input, Keras's outputs, one more step on a fixed batch and the outputs
after it. Read by tests/train/keras_files_test.cc
(KerasFiles.AttentionLayersPredictAndStepAsKeras).

The step's batch uses each token id at most once, for the reason
make_sequence_keras_fixture.py gives.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_attention_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(83)
    rng = np.random.default_rng(83)
    tokens = keras.Input(shape=(6,), dtype="int32")
    x = layers.Embedding(90, 8)(tokens)
    x = layers.Add()([x, layers.Conv1D(8, 1)(x)])  # a learned mix standing in for positions
    a = layers.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, a]))
    h = layers.EinsumDense("abc,cd->abd", output_shape=(None, 16), bias_axes="d",
                           activation="gelu")(x)
    x = layers.LayerNormalization(epsilon=1e-6)(layers.Add()([x, layers.Dense(8)(h)]))
    k = layers.Dense(5)(x)
    c = layers.MultiHeadAttention(num_heads=3, key_dim=2, value_dim=3, output_shape=7)(x, x, k)
    e = layers.EinsumDense("abc,cde->abde", output_shape=(None, 2, 3), bias_axes="e")(c)
    e = layers.EinsumDense("abcd,cde->abe", output_shape=(None, 4), activation="tanh")(e)
    x = layers.Concatenate()([layers.GlobalAveragePooling1D()(x),
                              layers.GlobalAveragePooling1D()(e)])
    model = keras.Model(tokens, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.integers(0, 90, size=(24, 6)).astype("int32")
    x_train[:8] = rng.permutation(90)[:48].reshape(8, 6)  # the step's batch: no id twice
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.integers(0, 90, size=(4, 6)).astype("int32")
    fit_save_and_step(model, out, "attention", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
