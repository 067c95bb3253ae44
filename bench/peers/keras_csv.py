"""Keras on the CSV that `lockstep train --data FILE.csv` trains on (issue #38's
goal: the same model within 1 pp of Keras's validation accuracy).

The model and data as lockstep's --data reads them (docs/own-data.md): the
label column's classes sorted, text columns with more than 1,000 values or
more than half the rows left out, other text columns one-hot over the
training rows' sorted values, numeric columns through a Normalization layer
with the training rows' mean and variance, the last --validation-split of
the rows held out; Dense(256, relu) x 2 and Dense(classes) logits, Adam,
sparse categorical crossentropy from logits, batches of 64 shuffled each
epoch. Prints each epoch's val_accuracy and the time the reading took.

    python keras_csv.py FILE.csv LABEL [--epochs 4] [--split 0.2] [--seed 1]
"""
import argparse
import csv
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("label")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--split", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    import numpy as np
    import keras

    keras.utils.set_random_seed(a.seed)
    start = time.perf_counter()
    with open(a.path, newline="") as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    n = len(rows)
    train_rows = n - int(n * a.split)
    columns = list(zip(*rows))

    def numeric(values):
        try:
            [float(v) for v in values]
            return True
        except ValueError:
            return False

    label_index = header.index(a.label)
    classes = sorted(set(columns[label_index]))
    y = np.array([classes.index(v) for v in columns[label_index]], dtype="int32")
    parts = []
    for i, name in enumerate(header):
        if i == label_index:
            continue
        values = columns[i]
        if numeric(values):
            parts.append(np.array(values, dtype="float64")[:, None])
            continue
        distinct = set(values)
        if len(distinct) > 1000 or len(distinct) > 0.5 * n:
            continue  # an identifier or free text
        vocabulary = sorted(set(values[:train_rows]) - {""})
        index = {v: k for k, v in enumerate(vocabulary)}
        one_hot = np.zeros((n, len(vocabulary)))
        for r, v in enumerate(values):
            if v in index:
                one_hot[r, index[v]] = 1.0
        parts.append(one_hot)
    x = np.concatenate(parts, axis=1)
    mean = x[:train_rows].mean(axis=0)
    variance = x[:train_rows].var(axis=0)
    is_one_hot = np.all((x == 0) | (x == 1), axis=0) & (variance < 0.25 + 1e-9)
    mean[is_one_hot], variance[is_one_hot] = 0.0, 1.0
    read_seconds = time.perf_counter() - start
    x = x.astype("float32")

    inputs = keras.Input((x.shape[1],))
    h = keras.layers.Normalization(mean=mean.tolist(), variance=variance.tolist())(inputs)
    h = keras.layers.Dense(256, activation="relu")(h)
    h = keras.layers.Dense(256, activation="relu")(h)
    model = keras.Model(inputs, keras.layers.Dense(len(classes))(h))
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    start = time.perf_counter()
    history = model.fit(x[:train_rows], y[:train_rows], batch_size=64, epochs=a.epochs,
                        validation_data=(x[train_rows:], y[train_rows:]), verbose=0)
    fit_seconds = time.perf_counter() - start
    print(f"keras {keras.__version__}: read {n} rows in {read_seconds:.2f} s; "
          f"{a.epochs} epochs in {fit_seconds:.2f} s")
    for e, acc in enumerate(history.history["val_accuracy"], 1):
        print(f"epoch {e}: val_accuracy {acc:.4f}")


if __name__ == "__main__":
    main()
