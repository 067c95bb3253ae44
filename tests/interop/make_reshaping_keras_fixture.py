"""Writes keras_fixtures/reshaping.keras and reshaping_expected.json:
Keras's reshaping and combining layers in one model — Cropping2D,
UpSampling2D (nearest and bilinear), Permute, RepeatVector and Dot (with
axes and normalize) — trained 3 steps and saved, with a fixed input, Keras's
outputs, one more step on a fixed batch and the outputs after it. Read by
tests/train/keras_files_test.cc (KerasFiles.ReshapingLayersPredictAndStepAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_reshaping_keras_fixture.py tests/interop/keras_fixtures
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
    keras.utils.set_random_seed(101)
    rng = np.random.default_rng(101)
    image = keras.Input(shape=(6, 6, 2))
    x = layers.Conv2D(3, 3, padding="same", activation="tanh")(image)
    x = layers.Cropping2D(((1, 0), (0, 2)))(x)                          # [5, 4, 3]
    a = layers.UpSampling2D((2, 1))(x)                                   # [10, 4, 3]
    b = layers.UpSampling2D(2, interpolation="bilinear")(x)              # [10, 8, 3]
    a = layers.Permute((2, 1, 3))(a)                                     # [4, 10, 3]
    a = layers.Reshape((4, 30))(a)
    b = layers.Reshape((10, 24))(b)
    v = layers.Dense(5, activation="tanh")(layers.GlobalAveragePooling2D()(x))
    r = layers.RepeatVector(4)(v)                                        # [4, 5]
    s = layers.Dot(axes=(1, 1))([r, layers.Dense(5)(a)])                 # [5, 5]
    c = layers.Dot(axes=2, normalize=True)([layers.Dense(6)(a), layers.Dense(6)(b)])  # [4, 10]
    u = layers.Dot(axes=1)([v, layers.Dense(5)(v)])                      # [1]
    merged = layers.Concatenate()([layers.Flatten()(s), layers.Flatten()(c), u])
    model = keras.Model(image, layers.Dense(3)(merged))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.standard_normal((24, 6, 6, 2)).astype("float32")
    y_train = rng.integers(0, 3, size=(24,)).astype("int64")
    x = rng.standard_normal((4, 6, 6, 2)).astype("float32")
    fit_save_and_step(model, out, "reshaping", x_train, y_train, x)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
