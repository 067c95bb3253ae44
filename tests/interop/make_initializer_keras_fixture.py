"""Writes keras_fixtures/initializers.keras: one Dense(3) per Keras
initializer, each with arguments away from its defaults where it takes any,
as Keras 3 saves them. Read by tests/train/keras_files_test.cc
(KerasFiles.InitializersKeepTheirArguments): every initializer and argument
loads, and the file Lockstep saves again names them as Keras did.

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_initializer_keras_fixture.py tests/interop/keras_fixtures
"""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import keras
from keras import initializers, layers

INITIALIZERS = {
    "variance_scaling": initializers.VarianceScaling(
        scale=0.5, mode="fan_out", distribution="uniform"),
    "variance_scaling_normal": initializers.VarianceScaling(
        scale=2.0, mode="fan_avg", distribution="untruncated_normal"),
    "orthogonal": initializers.Orthogonal(gain=2.0),
    "identity": initializers.Identity(gain=0.5),
    "random_normal": initializers.RandomNormal(mean=0.1, stddev=0.3),
    "random_uniform": initializers.RandomUniform(minval=-1.0, maxval=2.0),
    "truncated_normal": initializers.TruncatedNormal(mean=0.0, stddev=0.02),
    "constant": initializers.Constant(0.7),
    "lecun_uniform": initializers.LecunUniform(),
    "lecun_normal": initializers.LecunNormal(),
    "he_uniform": initializers.HeUniform(),
    "glorot_normal": initializers.GlorotNormal(),
    "ones": initializers.Ones(),
}


def main(out):
    keras.utils.set_random_seed(5)
    inputs = keras.Input(shape=(3,))
    outputs = [layers.Dense(3, kernel_initializer=init, name=f"dense_{name}")(inputs)
               for name, init in INITIALIZERS.items()]
    model = keras.Model(inputs, layers.Add()(outputs))
    model.save(os.path.join(out, "initializers.keras"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
