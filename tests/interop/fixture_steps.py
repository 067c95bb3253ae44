"""What the make_*_keras_fixture.py scripts share: train a compiled model 3
steps on its first 24 examples (batch 8, no shuffle), record Keras's outputs
on a fixed input, save the model as NAME.keras, take one more step on the
first batch and record the outputs after it, in NAME_expected.json — what
tests/train/keras_files_test.cc's predicts_and_steps_as_keras reads.
"""
import json
import os

import numpy as np
import keras


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def values(a):
    """Integers (token ids) as integers, anything else as float32 numbers."""
    a = np.asarray(a)
    return [int(v) for v in a.reshape(-1)] if a.dtype.kind in "iu" else flat(a)


def fit_save_and_step(model, out, name, x_train, y_train, x, extra=None, file_name=None):
    """file_name: what to save the model as (default NAME.keras; NAME.h5 is
    Keras's legacy HDF5 format)."""
    model.fit(x_train, y_train, batch_size=8, epochs=1, shuffle=False, verbose=0)
    entry = {"input_shape": list(x.shape), "input": values(x),
             "output": flat(model.predict(x, verbose=0))}
    entry.update(extra or {})
    model.save(os.path.join(out, file_name or f"{name}.keras"))
    xb, yb = x_train[:8], y_train[:8]
    model.train_on_batch(xb, yb)
    entry.update({"step_x_shape": list(xb.shape), "step_x": values(xb),
                  "step_y_shape": list(yb.shape), "step_y": [float(v) for v in yb],
                  "output_after_step": flat(model.predict(x, verbose=0)),
                  "keras_version": keras.__version__})
    with open(os.path.join(out, f"{name}_expected.json"), "w") as f:
        json.dump(entry, f, indent=1)
