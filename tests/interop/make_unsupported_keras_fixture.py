"""Writes keras_fixtures/unsupported.keras: a model with layer classes
Lockstep does not have (GroupNormalization, and SpatialDropout2D inside a
nested Sequential), for `lockstep inspect`'s listing of a file it cannot rebuild
(cli/CMakeLists.txt, cli_inspect_marks_what_it_cannot_build).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_unsupported_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import keras
from keras import layers


def main(out):
    keras.utils.set_random_seed(5)
    inputs = keras.Input(shape=(8, 8, 1))
    x = layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
    x = layers.GroupNormalization(groups=2, name="groupnorm")(x)
    block = keras.Sequential([layers.SpatialDropout2D(0.2, name="dropout2d"),
                              layers.GlobalAveragePooling2D(name="pool")], name="block")
    model = keras.Model(inputs, layers.Dense(2, name="head")(block(x)))
    model.compile(optimizer="adam", loss="mse")
    model.save(os.path.join(out, "unsupported.keras"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
