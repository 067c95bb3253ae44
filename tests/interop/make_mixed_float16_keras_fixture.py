"""Writes keras_fixtures/mixed_float16.keras and mixed_float16_expected.json:
a small regression model built by Keras 3 under the mixed_float16 policy
(float16 compute, float32 variables) and compiled with plain SGD, which
Keras's compile wraps in a LossScaleOptimizer (auto_scale_loss). Targets
near 100 make the scaled loss's gradient overflow float16 in the backward at
first: Keras skips those steps and halves the scale until the gradients fit.
Trained 8 steps and saved, with the scale, the step counter and the
iterations Keras reached, each layer's policy, a fixed input, Keras's
outputs, and one more step on a fixed batch with what followed it. Read by
tests/train/keras_files_test.cc
(KerasFiles.AMixedFloat16ModelKerasSavedLoadsScaledAndStepsAsKeras).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_mixed_float16_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers

from make_loss_scale_keras_fixture import flat, state  # this folder is on sys.path


def main(out):
    keras.mixed_precision.set_global_policy("mixed_float16")
    keras.utils.set_random_seed(29)
    rng = np.random.default_rng(29)
    inputs = keras.Input(shape=(8,))
    x = layers.Dense(16, activation="relu")(inputs)
    model = keras.Model(inputs, layers.Dense(1)(x))
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e-4), loss="mse")
    opt = model.optimizer
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer), type(opt)
    x_train = rng.uniform(size=(64, 8)).astype("float32")
    y_train = (100.0 + rng.standard_normal((64, 1))).astype("float32")
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    probe = rng.uniform(size=(4, 8)).astype("float32")
    entry = {"input_shape": list(probe.shape), "input": flat(probe),
             "output": flat(model.predict(probe, verbose=0)), "saved": state(opt),
             "policies": [layer.dtype_policy.name for layer in model.layers]}
    model.save(os.path.join(out, "mixed_float16.keras"))
    xb, yb = x_train[:8], y_train[:8]
    model.train_on_batch(xb, yb)
    entry.update({"step_x_shape": list(xb.shape), "step_x": flat(xb),
                  "step_y_shape": list(yb.shape), "step_y": flat(yb),
                  "output_after_step": flat(model.predict(probe, verbose=0)),
                  "after_step": state(opt),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, "mixed_float16_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
