"""Writes keras_fixtures/stateful.keras and stateful_expected.json:
stateful recurrent layers (stateful=True) on an Input with a static batch
size, batch_shape (8, 5, 3): an LSTM returning sequences into a GRU, and a
SimpleRNN going backwards, merged into a Dense. Read by
tests/train/keras_files_test.cc (KerasFiles.StatefulLayersCarryStatesAsKeras).

Trained 3 steps (batch 8, one state carried across them), the states reset
(Keras does not save them), then Keras's outputs on a fixed batch twice —
the second call starts from the states the first left — saved, one more
step on the first 8 examples (from the states the second call left) and
the outputs after it.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_stateful_keras_fixture.py tests/interop/keras_fixtures
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


def reset(model):
    for layer in model.layers:
        if getattr(layer, "stateful", False):
            layer.reset_states()


def main(out):
    keras.utils.set_random_seed(127)
    rng = np.random.default_rng(127)
    x_in = keras.Input(batch_shape=(8, 5, 3))
    seq = layers.LSTM(6, stateful=True, return_sequences=True)(x_in)
    seq = layers.GRU(4, stateful=True)(seq)
    back = layers.SimpleRNN(3, stateful=True, go_backwards=True)(x_in)
    model = keras.Model(x_in, layers.Dense(3)(layers.Concatenate()([seq, back])))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.normal(size=(24, 5, 3)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    reset(model)
    x = rng.normal(size=(8, 5, 3)).astype("float32")
    entry = {"input_shape": list(x.shape), "input": values(x),
             "output": flat(model.predict(x, batch_size=8, verbose=0)),
             "output_again": flat(model.predict(x, batch_size=8, verbose=0))}
    model.save(os.path.join(out, "stateful.keras"))
    model.train_on_batch(x_train[:8], y_train[:8])
    entry.update({"step_x_shape": [8, 5, 3], "step_x": values(x_train[:8]),
                  "step_y": [int(v) for v in y_train[:8]],
                  "output_after_step": flat(model.predict(x, batch_size=8, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "stateful_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
