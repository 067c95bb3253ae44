"""Writes keras_fixtures/bidirectional_states.keras and its _expected.json: a
Bidirectional encoder with return_state hands its four final states (the
forward layer's h and c, then the backward's) to a Bidirectional decoder as
initial_state, which splits them in half between its two layers, as
Keras's Bidirectional.call does. Read by tests/train/keras_files_test.cc
(KerasFiles.BidirectionalStartsFromInitialStatesAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_bidirectional_states_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(107)
    rng = np.random.default_rng(107)
    sequences = keras.Input(shape=(5, 3))
    _, hf, cf, hb, cb = layers.Bidirectional(layers.LSTM(4, return_state=True))(sequences)
    y = layers.Bidirectional(layers.LSTM(4, return_sequences=True))(
        layers.Dense(2)(sequences), initial_state=[hf, cf, hb, cb])
    x = layers.GlobalAveragePooling1D()(y)
    model = keras.Model(sequences, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.normal(size=(24, 5, 3)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.normal(size=(3, 5, 3)).astype("float32")
    fit_save_and_step(model, out, "bidirectional_states", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
