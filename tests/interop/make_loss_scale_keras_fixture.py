"""Writes keras_fixtures/loss_scale.keras and loss_scale_expected.json: a
small model that Keras 3 compiled with keras.optimizers.LossScaleOptimizer
around Adam, with an initial scale of 2^126 on inputs of scale 16 (the first
two steps overflow: Keras skips them and halves the scale each time) and
dynamic_growth_steps 2 (the finite steps after them double it twice), trained
6 steps and saved, with the scale, the step
counter and the inner optimizer's iterations Keras reached, a fixed input,
Keras's outputs, one more step on a fixed batch (which overflows again:
skipped, the scale halved) and what followed it. Read by
tests/train/keras_files_test.cc
(KerasFiles.ALossScaleOptimizerKerasSavedSkipsAndScalesAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_loss_scale_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def state(opt):
    return {"dynamic_scale": float(opt.dynamic_scale.numpy()),
            "step_counter": int(opt.step_counter.numpy()),
            "iterations": int(opt.iterations.numpy())}


def main(out):
    keras.utils.set_random_seed(23)
    rng = np.random.default_rng(23)
    inputs = keras.Input(shape=(8,))
    x = layers.Dense(6, activation="relu")(inputs)
    model = keras.Model(inputs, layers.Dense(3)(x))
    opt = keras.optimizers.LossScaleOptimizer(
        keras.optimizers.Adam(learning_rate=0.01), initial_scale=2.0**126, dynamic_growth_steps=2)
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x_train = rng.standard_normal((48, 8)).astype("float32") * 16
    y_train = rng.integers(0, 3, size=(48,)).astype("int64")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    x = rng.standard_normal((4, 8)).astype("float32")
    entry = {"input_shape": list(x.shape), "input": flat(x),
             "output": flat(model.predict(x, verbose=0)), "saved": state(opt)}
    model.save(os.path.join(out, "loss_scale.keras"))
    xb, yb = x_train[:8], y_train[:8]
    model.train_on_batch(xb, yb)
    entry.update({"step_x_shape": list(xb.shape), "step_x": flat(xb),
                  "step_y": [int(v) for v in yb],
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "after_step": state(opt),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "loss_scale_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
