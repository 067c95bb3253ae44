"""Writes keras_fixtures/multi_output_dict.keras, multi_output_list.keras and
multi_output_expected.json: a two-output model (class logits "cls", a
regression "reg") Keras 3 compiled with its forms by output — losses,
loss_weights and metrics as dicts by output name in one file; losses as a
list and metrics as a list with one entry per output in the other — trained
3 steps and saved, with Keras's evaluate() on a fixed batch (every metric
by name). Read by tests/train/keras_files_test.cc
(KerasFiles.CompileFormsByOutputEvaluateAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_multi_output_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import flat


def model_with_two_outputs():
    inputs = keras.Input(shape=(8,))
    h = layers.Dense(16, activation="relu", name="trunk")(inputs)
    return keras.Model(inputs, [layers.Dense(3, name="cls")(h), layers.Dense(1, name="reg")(h)])


FORMS = {
    "dict": dict(
        loss={"cls": keras.losses.SparseCategoricalCrossentropy(from_logits=True), "reg": "mse"},
        loss_weights={"cls": 1.0, "reg": 0.5},
        metrics={"cls": ["accuracy"], "reg": ["mae", "mse"]}),
    "list": dict(
        loss=[keras.losses.SparseCategoricalCrossentropy(from_logits=True), "mae"],
        metrics=["accuracy", ["mse", "mae"]]),
}


def main(out):
    rng = np.random.default_rng(31)
    x_train = rng.standard_normal((24, 8)).astype("float32")
    yc_train = rng.integers(0, 3, 24).astype("int64")
    yr_train = rng.standard_normal((24, 1)).astype("float32")
    x = rng.standard_normal((16, 8)).astype("float32")
    yc = rng.integers(0, 3, 16).astype("int64")
    yr = rng.standard_normal((16, 1)).astype("float32")
    expected = {"x_shape": list(x.shape), "x": flat(x), "y_cls": [int(v) for v in yc],
                "y_reg": flat(yr), "keras_version": keras.__version__}
    for form, compile_args in FORMS.items():
        keras.utils.set_random_seed(31)
        model = model_with_two_outputs()
        model.compile(optimizer=keras.optimizers.Adam(0.01), **compile_args)
        model.fit(x_train, [yc_train, yr_train], batch_size=8, epochs=1, shuffle=False, verbose=0)
        expected[form] = {k: float(v) for k, v in
                          model.evaluate(x, [yc, yr], batch_size=16, verbose=0,
                                         return_dict=True).items()}
        model.save(os.path.join(out, f"multi_output_{form}.keras"))
    with open(os.path.join(out, "multi_output_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
