"""Keras 3's own cross-entropy accuracy against float64, on batches made as
tests/nn/loss_accuracy_test.cc makes them (64 rows; 2, 10, 100 classes;
logits N(0, scale) with scale 1 or 5, optionally saturated by +30 on the
label; probabilities as the float64 softmax of those logits rounded to
float32). It prints the worst error over the batches in the test's
measures — the loss relative to max(loss, 1), the gradient's largest error
over its scale — which is the tolerance Keras itself meets and the bound
the C++ test holds Lockstep to (docs/benchmarks.md, issue #21).

    /opt/tf-venv/bin/python bench/peers/keras_loss_accuracy.py
"""
import numpy as np
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

EPS = np.float32(1e-7)
HI = np.float32(1.0) - EPS  # 0.99999988 as float32, the clip's upper bound


def batches(seed):
    rng = np.random.default_rng(seed)
    for classes in (2, 10, 100):
        for scale in (1.0, 5.0):
            for saturated in (False, True):
                labels = rng.integers(0, classes, 64)
                x = rng.normal(0, scale, (64, classes)).astype(np.float32)
                if saturated:
                    x[np.arange(64), labels] += np.float32(30)
                yield labels, x


def softmax64(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def normwise(got, want, n):
    return np.abs(got - want).max() / max(np.abs(want).max(), 1.0 / n)


def keras_grad(loss, y, out):
    out = tf.constant(out)
    with tf.GradientTape() as tape:
        tape.watch(out)
        value = loss(y, out)
    return float(value.numpy()), tape.gradient(value, out).numpy()


def oracle_sparse_logits(labels, x):
    p = softmax64(x)
    n = len(labels)
    loss = -np.log(p[np.arange(n), labels]).mean()
    g = p.copy()
    g[np.arange(n), labels] -= 1
    return loss, g / n


def oracle_categorical_probs(labels, p32):
    p = p32.astype(np.float64)
    n = len(labels)
    s = p.sum(-1, keepdims=True)
    q = p / s
    qy = q[np.arange(n), labels]
    loss = -np.log(np.clip(qy, EPS, HI)).mean()
    g = np.zeros_like(p)
    ok = (qy >= EPS) & (qy <= HI)
    onehot = np.zeros_like(p)
    onehot[np.arange(n), labels] = 1
    g = -(onehot - qy[:, None]) / (n * qy[:, None] * s)
    g[~ok] = 0
    # Rows whose exact q_y lies within 4 float32 ulps of a clip bound are
    # left out of the gradient's comparison: the clip's gradient jumps there,
    # and which side one float32 rounding of q_y lands on is arbitrary in any
    # float32 implementation.
    clear = (np.abs(qy - HI) > 4 * 2.0**-24) & (np.abs(qy - EPS) > 4 * 2.0**-24 * EPS)
    return loss, g, clear


def oracle_sparse_probs(labels, p32):
    p = p32.astype(np.float64)
    n = len(labels)
    c = np.clip(p, EPS, HI)
    s = c.sum(-1, keepdims=True)
    loss = -np.log(c[np.arange(n), labels] / s[:, 0]).mean()
    onehot = np.zeros_like(p)
    onehot[np.arange(n), labels] = 1
    g = (c / s - onehot) / (p * n)
    g[(p < EPS) | (p > HI)] = 0
    return loss, g


def main():
    worst = {}

    def note(key, loss_err, grad_err):
        a, b = worst.get(key, (0.0, 0.0))
        worst[key] = (max(a, loss_err), max(b, grad_err))

    sparse_l = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    cat_l = keras.losses.CategoricalCrossentropy(from_logits=True)
    sparse_p = keras.losses.SparseCategoricalCrossentropy()
    cat_p = keras.losses.CategoricalCrossentropy()
    for seed in range(20):
        for labels, x in batches(seed):
            n, k = x.shape
            onehot = np.eye(k, dtype=np.float32)[labels]
            want, wg = oracle_sparse_logits(labels, x)
            for name, loss, y in (("sparse logits", sparse_l, labels), ("categorical logits", cat_l, onehot)):
                got, g = keras_grad(loss, y, x)
                note(name, abs(got - want) / max(want, 1.0), normwise(g, wg, n))
            p = softmax64(x).astype(np.float32)
            got, g = keras_grad(sparse_p, labels, p)
            want, wg = oracle_sparse_probs(labels, p)
            note("sparse probabilities", abs(got - want) / max(want, 1.0), normwise(g, wg, n))
            got, g = keras_grad(cat_p, onehot, p)
            want, wg, ok = oracle_categorical_probs(labels, p)
            grad_err = normwise(g[ok], wg[ok], n) if ok.any() else 0.0
            note("categorical probabilities", abs(got - want) / max(want, 1.0), grad_err)
    for key, (l, g) in worst.items():
        print(f"keras {keras.__version__} {key}: loss {l:.2e} grad {g:.2e}")


if __name__ == "__main__":
    main()
