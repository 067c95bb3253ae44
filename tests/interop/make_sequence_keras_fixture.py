"""Writes keras_fixtures/sequence.keras and sequence_expected.json: a small
text classifier of the kind Keras users have (Embedding, Conv1D with causal
and same padding and dilation, MaxPooling1D, AveragePooling1D,
LayerNormalization, GlobalAveragePooling1D and GlobalMaxPooling1D, Dense),
trained 3 steps and saved, with a fixed input, Keras's outputs, one more
step on a fixed batch and the outputs after it. Read by
tests/train/keras_files_test.cc (KerasFiles.ASequenceModelPredictsAndStepsAsKeras).

The step's batch uses each token id at most once: with the TensorFlow
backend Keras 3's Adam squares each looked-up row of an Embedding's
gradient separately (its IndexedSlices), so a row looked up twice gets the
sum of the squares as its second moment, not the square of the sum that
Keras on JAX or PyTorch, TF's own Adam and Lockstep use (docs/models.md).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_sequence_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(53)
    rng = np.random.default_rng(53)
    tokens = keras.Input(shape=(12,), dtype="int32")
    x = layers.Embedding(200, 8)(tokens)
    x = layers.Conv1D(6, 3, padding="causal", activation="relu")(x)
    x = layers.MaxPooling1D(2)(x)
    x = layers.LayerNormalization(epsilon=1e-5)(x)
    x = layers.Conv1D(5, 2, padding="same", dilation_rate=2, activation="gelu")(x)
    x = layers.AveragePooling1D(2, strides=1, padding="same")(x)
    x = layers.Concatenate()([layers.GlobalAveragePooling1D()(x), layers.GlobalMaxPooling1D()(x)])
    model = keras.Model(tokens, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.integers(0, 200, size=(24, 12)).astype("int32")
    x_train[:8] = rng.permutation(200)[:96].reshape(8, 12)  # the step's batch: no id twice
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.integers(0, 200, size=(4, 12)).astype("int32")
    fit_save_and_step(model, out, "sequence", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
