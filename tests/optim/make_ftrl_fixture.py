"""Writes ftrl_apply_v2.json: 50 steps of TensorFlow's own ApplyFtrlV2 kernel
(tf.raw_ops, float64) on one 6-element variable, under several settings, for
tests/optim/optimizers_test.cc (FtrlFollowsTensorFlowsApplyFtrlV2).

The gradients and the starting values are float32 numbers (stored as float64),
so Lockstep's float32 Ftrl sees exactly the same inputs. `beta` is not an
argument of the kernel: Keras's Ftrl passes l2 + beta / (2 lr) as its l2,
and so does this script.

Run with TensorFlow installed: python3 make_ftrl_fixture.py > fixtures/ftrl_apply_v2.json
"""
import json

import numpy as np
import tensorflow as tf

STEPS = 50
rng = np.random.default_rng(22)
var0 = rng.normal(0, 0.5, 6).astype(np.float32).astype(np.float64)
grads = rng.normal(0, 1.0, (STEPS, 6)).astype(np.float32).astype(np.float64)

SETTINGS = [
    dict(name="plain", lr=0.2, lr_power=-0.5, init=0.1, l1=0.0, l2=0.0, shrinkage=0.0, beta=0.0),
    dict(name="l1_l2", lr=0.2, lr_power=-0.5, init=0.1, l1=0.05, l2=0.3, shrinkage=0.0, beta=0.0),
    dict(name="l1_l2_shrinkage", lr=0.1, lr_power=-0.5, init=0.1, l1=0.02, l2=0.1,
         shrinkage=0.4, beta=0.0),
    dict(name="power_beta", lr=0.05, lr_power=-0.7, init=0.3, l1=0.01, l2=0.0, shrinkage=0.2,
         beta=0.5),
    dict(name="fixed_rate", lr=0.05, lr_power=0.0, init=0.1, l1=0.0, l2=0.2, shrinkage=0.0,
         beta=0.0),
]

out = {"generator": f"tensorflow {tf.__version__} tf.raw_ops.ApplyFtrlV2, float64",
       "steps": STEPS, "var0": var0.tolist(), "grads": grads.tolist(), "settings": []}
for s in SETTINGS:
    var = tf.Variable(var0.copy(), dtype=tf.float64)
    accum = tf.Variable(np.full(6, s["init"]), dtype=tf.float64)
    linear = tf.Variable(np.zeros(6), dtype=tf.float64)
    l2 = s["l2"] + s["beta"] / (2.0 * s["lr"])
    for t in range(STEPS):
        tf.raw_ops.ResourceApplyFtrlV2(
            var=var.handle, accum=accum.handle, linear=linear.handle,
            grad=tf.constant(grads[t], tf.float64), lr=tf.constant(s["lr"], tf.float64),
            l1=tf.constant(s["l1"], tf.float64), l2=tf.constant(l2, tf.float64),
            l2_shrinkage=tf.constant(s["shrinkage"], tf.float64),
            lr_power=tf.constant(s["lr_power"], tf.float64))
    out["settings"].append(dict(s, var=var.numpy().tolist(), accum=accum.numpy().tolist(),
                                linear=linear.numpy().tolist()))
print(json.dumps(out, indent=1))
