"""Writes keras_fixtures/optimizer_<name>.keras for Nadam, Adamax, Adadelta
and Lion, and optimizers_expected.json: for each, a small regression model
Keras 3 compiled with that optimizer (its arguments away from their
defaults), trained 3 steps and saved, with a fixed input, Keras's outputs,
one more step on a fixed batch and the outputs after it. Read by
tests/train/keras_files_test.cc (KerasFiles.NadamAdamaxAdadeltaAndLionStepAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_optimizers_keras_fixture.py tests/interop/keras_fixtures
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


OPTIMIZERS = {
    "Nadam": lambda: keras.optimizers.Nadam(learning_rate=0.01, beta_1=0.8, beta_2=0.99,
                                            epsilon=1e-6),
    "Adamax": lambda: keras.optimizers.Adamax(learning_rate=0.01, beta_1=0.8, beta_2=0.99,
                                              epsilon=1e-6),
    "Adadelta": lambda: keras.optimizers.Adadelta(learning_rate=0.5, rho=0.9, epsilon=1e-6),
    "Lion": lambda: keras.optimizers.Lion(learning_rate=0.003, beta_1=0.8, beta_2=0.95),
}


def main(out):
    expected = {}
    for name, make in OPTIMIZERS.items():
        keras.utils.set_random_seed(23)
        rng = np.random.default_rng(23)
        inputs = keras.Input(shape=(8,))
        x = layers.Dense(6, activation="tanh")(inputs)
        model = keras.Model(inputs, layers.Dense(2)(x))
        model.compile(optimizer=make(), loss="mse")
        x_train = rng.standard_normal((24, 8)).astype("float32")
        y_train = rng.standard_normal((24, 2)).astype("float32")
        model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
        x = rng.standard_normal((4, 8)).astype("float32")
        entry = {"input_shape": list(x.shape), "input": flat(x),
                 "output": flat(model.predict(x, verbose=0)),
                 "optimizer_variables": len(model.optimizer.variables)}
        model.save(os.path.join(out, f"optimizer_{name.lower()}.keras"))
        xb, yb = x_train[:8], y_train[:8]
        model.train_on_batch(xb, yb)
        entry.update({"step_x_shape": list(xb.shape), "step_x": flat(xb),
                      "step_y_shape": list(yb.shape), "step_y": flat(yb),
                      "output_after_step": flat(model.predict(x, verbose=0))})
        expected[name] = entry
    expected["keras_version"] = keras.__version__
    with open(os.path.join(out, "optimizers_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
