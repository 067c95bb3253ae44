"""Writes keras_fixtures/recurrent_legacy.h5 and recurrent_legacy_expected.json:
the recurrent layers in Keras's legacy HDF5 format (`model.save("x.h5")`),
whose model_config names no modules, so that the operations that made
Embedding(mask_zero=True)'s mask (NotEqual) look like layers, and whose
weights sit under each cell's name (lstm/lstm_cell/kernel,
bidirectional/forward_gru/gru_cell/bias). Read by
tests/train/keras_files_test.cc (KerasFiles.RecurrentLayersLoadFromALegacyH5).

Trained 3 steps with SGD (no optimizer state to carry) on padded token
sequences, saved; a fixed input, Keras's outputs, one more step on a
fixed batch and the outputs after it.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_legacy_recurrent_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step
from make_masking_keras_fixture import padded


def main(out):
    keras.utils.set_random_seed(103)
    rng = np.random.default_rng(103)
    tokens = keras.Input(shape=(7,), dtype="int32")
    x = layers.Embedding(80, 6, mask_zero=True)(tokens)
    x = layers.LSTM(5, return_sequences=True)(x)
    x = layers.Bidirectional(layers.GRU(3))(x)
    model = keras.Model(tokens, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = padded(rng, 24, 7, 80, first_distinct=8)
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    fit_save_and_step(model, out, "recurrent_legacy", x_train, y_train, padded(rng, 4, 7, 80),
                      file_name="recurrent_legacy.h5")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
