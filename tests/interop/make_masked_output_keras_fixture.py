"""Writes keras_fixtures/masked_output_*.keras and their _expected.json:
models whose output carries a Keras mask, so that Keras weights the loss
and the metrics by it (losses.loss.apply_mask: the mean over the real
steps only). Read by tests/train/keras_files_test.cc
(KerasFiles.AMaskedOutputWeightsLossAndMetricsAsKeras).

- masked_output_tagger: a sequence tagger, Embedding(mask_zero=True) →
  LSTM(return_sequences=True) → Dense(4) logits per step, sparse
  cross-entropy per step and accuracy.
- masked_output_regression: Masking over float sequences → GRU
  (return_sequences=True) → Dense(2) per step, mean squared error and mean
  absolute error.

Each is trained 3 steps on 24 examples (batch 8, no shuffle) and saved;
the file records Keras's predictions on a fixed input, its evaluate() of
the 24 examples (batch 8), then one train_on_batch on the first 8 with the
logs it returned and the predictions after it. Labels at padded steps are
drawn like the others: Keras gives them no weight.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_masked_output_keras_fixture.py tests/interop/keras_fixtures
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


def record(model, out, name, x_train, y_train, x):
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    entry = {"input_shape": list(x.shape), "input": values(x),
             "output": flat(model.predict(x, verbose=0)),
             "train_x_shape": list(x_train.shape), "train_x": values(x_train),
             "train_y_shape": list(y_train.shape), "train_y": values(y_train),
             "evaluate": model.evaluate(x_train, y_train, batch_size=8, verbose=0,
                                        return_dict=True)}
    model.save(os.path.join(out, f"{name}.keras"))
    logs = model.train_on_batch(x_train[:8], y_train[:8], return_dict=True)
    entry.update({"step_logs": {k: float(v) for k, v in logs.items()},
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    entry["evaluate"] = {k: float(v) for k, v in entry["evaluate"].items()}
    with open(os.path.join(out, f"{name}_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


def tagger(out, rng):
    tokens = keras.Input(shape=(8,), dtype="int32")
    x = layers.Embedding(80, 6, mask_zero=True)(tokens)
    x = layers.LSTM(5, return_sequences=True)(x)
    model = keras.Model(tokens, layers.Dense(4)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    x_train = padded(rng, 24, 8, 80, first_distinct=8)
    y_train = rng.integers(0, 4, size=(24, 8)).astype("int64")
    record(model, out, "masked_output_tagger", x_train, y_train, padded(rng, 4, 8, 80))


def regression(out, rng):
    inputs = keras.Input(shape=(6, 3))
    x = layers.Masking(mask_value=0.0)(inputs)
    x = layers.GRU(4, return_sequences=True)(x)
    model = keras.Model(inputs, layers.Dense(2)(x))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse",
                  metrics=["mae"])

    def data(n):
        x = rng.normal(size=(n, 6, 3)).astype("float32")
        for i in range(n):
            x[i, int(rng.integers(2, 7)):] = 0.0
        x[0, 1] = 0.0
        return x
    x_train = data(24)
    y_train = rng.normal(size=(24, 6, 2)).astype("float32")
    record(model, out, "masked_output_regression", x_train, y_train, data(4))


def main(out):
    keras.utils.set_random_seed(101)
    rng = np.random.default_rng(101)
    tagger(out, rng)
    regression(out, rng)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
