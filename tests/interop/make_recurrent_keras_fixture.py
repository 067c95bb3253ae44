"""Writes keras_fixtures/recurrent.keras and recurrent_expected.json: the
recurrent layers as Keras users stack them over an Embedding (LSTM,
TimeDistributed Dense, GRU with reset_after both ways, SimpleRNN going backwards, Bidirectional LSTM
concatenated and summed, hard_sigmoid and relu activations), trained 3 steps
and saved, with a fixed input, Keras's outputs, one more step on a fixed
batch and the outputs after it. Read by tests/train/keras_files_test.cc
(KerasFiles.RecurrentLayersPredictAndStepAsKeras).

The step's batch uses each token id at most once, for the reason
make_sequence_keras_fixture.py gives (Keras's TF-backend Adam on repeated
Embedding rows).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_recurrent_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(71)
    rng = np.random.default_rng(71)
    tokens = keras.Input(shape=(7,), dtype="int32")
    x = layers.Embedding(120, 6)(tokens)
    x = layers.LSTM(5, return_sequences=True)(x)
    x = layers.TimeDistributed(layers.Dense(4, activation="tanh"))(x)
    x = layers.GRU(4, return_sequences=True)(x)
    a = layers.GRU(3, reset_after=False, recurrent_activation="hard_sigmoid",
                   return_sequences=True)(x)
    b = layers.SimpleRNN(3, activation="relu", go_backwards=True, return_sequences=True)(x)
    x = layers.Concatenate()([a, b])
    c = layers.Bidirectional(layers.LSTM(3, return_sequences=True), merge_mode="sum")(x)
    c = layers.GlobalAveragePooling1D()(c)
    d = layers.Bidirectional(layers.GRU(2))(x)
    e = layers.SimpleRNN(2)(x)
    x = layers.Concatenate()([c, d, e])
    model = keras.Model(tokens, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.integers(0, 120, size=(24, 7)).astype("int32")
    x_train[:8] = rng.permutation(120)[:56].reshape(8, 7)  # the step's batch: no id twice
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.integers(0, 120, size=(4, 7)).astype("int32")
    fit_save_and_step(model, out, "recurrent", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
