"""Writes keras_fixtures/activations.keras and activations_expected.json: one
Dense(4) branch per activation Keras names (each by its string; not glu,
which halves the features where Keras's Dense declares 4), the LeakyReLU,
ELU and PReLU layers, concatenated under Dense(3); trained 3 steps and
saved, with a fixed input, Keras's outputs, one more step on a fixed batch
and the outputs after it. Read by tests/train/keras_files_test.cc
(KerasFiles.EveryActivationPredictsAndStepsAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_activation_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from fixture_steps import fit_save_and_step

ACTIVATIONS = [
    "relu", "leaky_relu", "relu6", "softmax", "celu", "elu", "selu", "softplus", "softsign",
    "squareplus", "soft_shrink", "sparse_plus", "silu", "gelu", "tanh", "tanh_shrink",
    "sigmoid", "sparse_sigmoid", "exponential", "hard_sigmoid", "hard_silu", "hard_tanh",
    "hard_shrink", "linear", "mish", "log_softmax", "log_sigmoid", "swish", "hard_swish",
]


def main(out):
    keras.utils.set_random_seed(41)
    rng = np.random.default_rng(41)
    inputs = keras.Input(shape=(6,))
    branches = [layers.Dense(4, activation=name, name=f"dense_{name}")(inputs)
                for name in ACTIVATIONS]
    h = layers.Dense(4, name="dense_layers")(inputs)
    branches.append(layers.LeakyReLU(negative_slope=0.1)(h))
    branches.append(layers.ELU(alpha=0.7)(h))
    branches.append(layers.PReLU(alpha_initializer=keras.initializers.Constant(0.25))(h))
    x = layers.Concatenate()(branches)
    model = keras.Model(inputs, layers.Dense(3)(x))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.standard_normal((24, 6)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.standard_normal((4, 6)).astype("float32")
    fit_save_and_step(model, out, "activations", x_train, y_train, x,
                      {"activations": ACTIVATIONS})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
