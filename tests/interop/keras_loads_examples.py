"""Keras loads what the examples saved (examples/text_classifier.cc and
examples/transformer_classifier.cc) and evaluates it on their test sets to
the loss and accuracy Lockstep reported (within 1e-5).

usage: keras_loads_examples.py DIR (the examples' output folder)
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras


def check(root, name, x, y):
    want = json.load(open(os.path.join(root, f"{name}.json")))
    model = keras.models.load_model(os.path.join(root, f"{name}.keras"))
    got = model.evaluate(x, y, batch_size=64, verbose=0, return_dict=True)
    for key in ("loss", "accuracy"):
        if abs(got[key] - want[key]) > 1e-5 * max(1.0, abs(want[key])):
            raise SystemExit(f"{name}: Keras evaluates {key} = {got[key]}, Lockstep {want[key]}")
    print(f"{name}: Keras {keras.__version__} loads it and evaluates loss {got['loss']:.6f}, "
          f"accuracy {got['accuracy']:.4f}, as Lockstep did")


def main(root):
    load = lambda f: np.load(os.path.join(root, f))  # noqa: E731
    check(root, "text_classifier", load("x_test.npy"), load("y_test.npy"))
    check(root, "transformer_classifier", [load("t_tokens.npy"), load("t_positions.npy")],
          load("t_labels.npy"))


if __name__ == "__main__":
    main(sys.argv[1])
