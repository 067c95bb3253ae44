"""Writes keras_fixtures/metrics_binary.keras, metrics_topk.keras,
metrics_auc_pr.keras and metrics_expected.json: compiled models whose
metrics carry settings (BinaryAccuracy's threshold, AUC's num_thresholds,
Precision's and Recall's thresholds, a cross-entropy's label_smoothing, a
top-k's k and a name of its own), with a fixed evaluation set and Keras's
evaluate() on it; and one with AUC(curve="PR"), which Lockstep refuses by
name. Read by tests/train/keras_files_test.cc
(KerasFiles.MetricSettingsSurviveLoadingAndSaving).

Run by hand, never by the build (see make_keras_fixtures.py for the venv):

    python3 tests/interop/make_metrics_keras_fixture.py tests/interop/keras_fixtures
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers, metrics


def main(out):
    keras.utils.set_random_seed(97)
    rng = np.random.default_rng(97)
    x = rng.standard_normal((64, 4)).astype("float32")
    y_bin = (x[:, :1] + 0.3 * rng.standard_normal((64, 1)) > 0).astype("float32")
    y_cls = rng.integers(0, 5, size=(64,)).astype("int64")

    inputs = keras.Input(shape=(4,))
    hidden = layers.Dense(6, activation="tanh")(inputs)
    binary = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(hidden))
    binary.compile(optimizer="adam", loss="binary_crossentropy",
                   metrics=[metrics.BinaryAccuracy(threshold=0.7), metrics.AUC(num_thresholds=50),
                            metrics.Precision(thresholds=0.6), metrics.Recall(name="rec"),
                            metrics.BinaryCrossentropy(label_smoothing=0.1)])
    binary.fit(x, y_bin, epochs=2, batch_size=16, verbose=0)
    binary.save(os.path.join(out, "metrics_binary.keras"))

    inputs = keras.Input(shape=(4,))
    topk = keras.Model(inputs, layers.Dense(5, activation="softmax")(inputs))
    topk.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                 metrics=[metrics.SparseTopKCategoricalAccuracy(k=2, name="top2"),
                          metrics.SparseCategoricalAccuracy()])
    topk.fit(x, y_cls, epochs=2, batch_size=16, verbose=0)
    topk.save(os.path.join(out, "metrics_topk.keras"))

    pr = keras.Model(inputs, layers.Dense(1, activation="sigmoid")(inputs))
    pr.compile(optimizer="adam", loss="binary_crossentropy", metrics=[metrics.AUC(curve="PR")])
    pr.save(os.path.join(out, "metrics_auc_pr.keras"))

    expected = {
        "x": [float(v) for v in x.reshape(-1)], "x_shape": list(x.shape),
        "y_binary": [float(v) for v in y_bin.reshape(-1)], "y_classes": [int(v) for v in y_cls],
        "binary": {k: float(v) for k, v in
                   binary.evaluate(x, y_bin, batch_size=64, verbose=0, return_dict=True).items()},
        "topk": {k: float(v) for k, v in
                 topk.evaluate(x, y_cls, batch_size=64, verbose=0, return_dict=True).items()},
        "keras_version": keras.__version__,
    }
    with open(os.path.join(out, "metrics_expected.json"), "w") as f:
        json.dump(expected, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/interop/keras_fixtures")
