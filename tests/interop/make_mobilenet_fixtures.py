"""Writes the Keras fixtures of issue #19 that tests/train/applications_test.cc
reads: MobileNetV2 as Keras 3 builds it, and what Keras does when fine-tuning.

Run by hand, never by the build (Keras 3 with TensorFlow, e.g. the peers'
venv from bench/peers/install.sh):

    /opt/tf-venv/bin/python tests/interop/make_mobilenet_fixtures.py tests/interop/mobilenet_fixtures

It writes:
  - mobilenet_v2_0.35_96.weights.h5: keras.applications.MobileNetV2(alpha=0.35,
    input_shape=(96, 96, 3), include_top=False, weights=None) with seed 19,
    every BatchNormalization's gamma, beta and moving statistics then set to
    seeded random values (so inference mode depends on them); 1.6 MB.
  - input.npy (uint8 pixels [2, 96, 96, 3], a formula both sides can
    compute), preprocessed.npy (preprocess_input of them), inference.npy and
    training.npy (the model on them with training=False, and with
    training=True: batch statistics), [2, 3, 3, 1280] float32 each; and
    inference64.npy / training64.npy, the same model and weights computed by
    Keras in float64 (keras.config.set_floatx) — the exact answer both
    float32 results are measured against.
  - structure.json: per alpha / input size / top, every layer's name, class,
    output shape and parameter count, the totals, and Keras's summary()
    total lines; the moving statistics of bn_Conv1 and Conv_1_bn after the
    training call (momentum 0.999); Resizing outputs on small images.
  - finetune.json (+ finetune_*.weights.h5): the fine-tuning experiments —
    trainable recursion, a frozen BatchNormalization, a base called with
    training=False, compile's snapshot of what is trainable, partial
    freezing of MobileNetV2's first 100 layers.
"""
import io
import json
import os
import sys
from contextlib import redirect_stdout

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import numpy as np
import keras
from keras import layers
from keras.applications import mobilenet_v2


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float32).reshape(-1)]


def pixels(shape):
    """Deterministic uint8 'pixels' both sides compute exactly."""
    n = int(np.prod(shape))
    return ((np.arange(n, dtype=np.int64) * 7919 + 13) % 256).astype(np.uint8).reshape(shape)


def structure(model):
    out = []
    for layer in model.layers:
        shape = layer.output.shape
        out.append({"name": layer.name, "class_name": layer.__class__.__name__,
                    "output_shape": [d for d in shape[1:]], "params": int(layer.count_params())})
    buf = io.StringIO()
    with redirect_stdout(buf):
        model.summary(line_length=100)
    totals = [line for line in buf.getvalue().splitlines() if "params:" in line]
    return {"name": model.name, "layers": out,
            "total_params": int(model.count_params()),
            "trainable_params": int(sum(np.prod(v.shape) for v in model.trainable_weights)),
            "non_trainable_params": int(sum(np.prod(v.shape) for v in model.non_trainable_weights)),
            "summary_totals": totals}


def randomize_batch_norms(model, rng):
    for layer in model.layers:
        if isinstance(layer, layers.BatchNormalization):
            c = layer.gamma.shape[0]
            layer.gamma.assign(rng.uniform(0.5, 1.5, c).astype("float32"))
            layer.beta.assign(rng.normal(0, 0.2, c).astype("float32"))
            layer.moving_mean.assign(rng.normal(0, 0.5, c).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, c).astype("float32"))


def mobilenet(out):
    result = {"keras_version": keras.__version__, "structures": {}}
    for alpha, rows, top, pooling in [(0.35, 96, False, None), (1.0, 224, False, None),
                                      (1.0, 224, True, None), (0.35, 96, False, "avg"),
                                      (0.5, 128, False, "max"), (1.4, 224, False, None)]:
        keras.backend.clear_session()
        m = keras.applications.MobileNetV2(input_shape=(rows, rows, 3), alpha=alpha,
                                           include_top=top, weights=None, pooling=pooling)
        key = f"{alpha}_{rows}_{'top' if top else 'notop'}_{pooling or 'none'}"
        result["structures"][key] = structure(m)
    keras.backend.clear_session()
    keras.utils.set_random_seed(19)
    m = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35, include_top=False,
                                       weights=None)
    randomize_batch_norms(m, np.random.default_rng(19))
    m.save_weights(os.path.join(out, "mobilenet_v2_0.35_96.weights.h5"))
    px = pixels((2, 96, 96, 3))
    x = mobilenet_v2.preprocess_input(px.astype("float32"))
    np.save(os.path.join(out, "input.npy"), px)
    np.save(os.path.join(out, "preprocessed.npy"), np.asarray(x, dtype=np.float32))
    np.save(os.path.join(out, "inference.npy"), np.asarray(m(x, training=False), dtype=np.float32))
    np.save(os.path.join(out, "training.npy"), np.asarray(m(x, training=True), dtype=np.float32))
    # The exact answer: the same weights and input, computed in float64.
    keras.backend.clear_session()
    keras.config.set_floatx("float64")
    m64 = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35,
                                         include_top=False, weights=None)
    m64.load_weights(os.path.join(out, "mobilenet_v2_0.35_96.weights.h5"))
    x64 = np.asarray(x, dtype=np.float64)
    np.save(os.path.join(out, "inference64.npy"), np.asarray(m64(x64, training=False)))
    np.save(os.path.join(out, "training64.npy"), np.asarray(m64(x64, training=True)))
    keras.config.set_floatx("float32")
    result["moving_after_training_call"] = {
        name: {"moving_mean": flat(m.get_layer(name).moving_mean),
               "moving_variance": flat(m.get_layer(name).moving_variance)}
        for name in ["bn_Conv1", "Conv_1_bn"]}
    resizing = []
    for (h, w), (oh, ow) in [((5, 7), (3, 4)), ((4, 4), (9, 6)), ((6, 3), (6, 5))]:
        img = ((np.arange(2 * h * w * 3) * 37) % 101).astype("float32").reshape(2, h, w, 3) / 10
        resizing.append({"input_shape": [2, h, w, 3], "input": flat(img), "height": oh, "width": ow,
                         "output": flat(layers.Resizing(oh, ow)(img))})
    result["resizing"] = resizing
    with open(os.path.join(out, "structure.json"), "w") as f:
        json.dump(result, f, indent=1)


def small_base(name="base"):
    inp = keras.Input(shape=(6, 6, 2))
    x = layers.Conv2D(3, 3, name="conv")(inp)
    x = layers.BatchNormalization(name="bn")(x)
    x = layers.Dropout(0.5, name="drop")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inp, x, name=name)


def counts(model):
    return {"trainable_weights": len(model.trainable_weights),
            "non_trainable_weights": len(model.non_trainable_weights),
            "trainable_params": int(sum(np.prod(v.shape) for v in model.trainable_weights))}


def finetune(out):
    rng = np.random.default_rng(5)
    keras.utils.set_random_seed(5)
    keras.backend.clear_session()
    result = {}
    x = rng.standard_normal((4, 6, 6, 2)).astype("float32")
    y = rng.standard_normal((4, 1)).astype("float32")
    np.save(os.path.join(out, "finetune_x.npy"), x)
    np.save(os.path.join(out, "finetune_y.npy"), y)

    # A base called with training=False inside a model trained with training=True.
    base = small_base()
    randomize_batch_norms(base, rng)
    inputs = keras.Input(shape=(6, 6, 2))
    model = keras.Model(inputs, layers.Dense(1, name="head")(base(inputs, training=False)))
    model.save_weights(os.path.join(out, "finetune_inference_base.weights.h5"))
    result["inference_base"] = {
        "training_output": flat(model(x, training=True)),
        "moving_mean_after": flat(base.get_layer("bn").moving_mean)}

    # A frozen BatchNormalization runs in inference mode even with training=True.
    bn_model = small_base("frozen_bn")
    randomize_batch_norms(bn_model, rng)
    bn_model.get_layer("drop").rate = 0.0
    bn_model.get_layer("bn").trainable = False
    bn_model.save_weights(os.path.join(out, "finetune_frozen_bn.weights.h5"))
    result["frozen_bn"] = {
        "training_output": flat(bn_model(x, training=True)),
        "inference_output": flat(bn_model(x, training=False)),
        "moving_mean_after": flat(bn_model.get_layer("bn").moving_mean)}

    # trainable set on a nested model reaches every layer inside it, both ways.
    base = small_base()
    inputs = keras.Input(shape=(6, 6, 2))
    model = keras.Model(inputs, layers.Dense(1, name="head")(base(inputs)))
    rec = {"initial": counts(model)}
    base.trainable = False
    rec["base_frozen"] = counts(model)
    rec["conv_trainable_after_freeze"] = base.get_layer("conv").trainable
    base.trainable = True
    rec["base_unfrozen"] = counts(model)
    base.get_layer("bn").trainable = False
    rec["bn_frozen"] = counts(model)
    model.trainable = False
    model.trainable = True
    rec["model_toggled"] = counts(model)
    rec["bn_trainable_after_toggle"] = base.get_layer("bn").trainable
    result["recursion"] = rec

    # compile takes its snapshot of what is trainable: which weights an
    # epoch of 1 step moves, before and after changing trainable, with and
    # without compiling again.
    keras.utils.set_random_seed(6)
    base = small_base()
    inputs = keras.Input(shape=(6, 6, 2))
    model = keras.Model(inputs, layers.Dense(1, name="head")(base(inputs)))
    model.save_weights(os.path.join(out, "finetune_snapshot.weights.h5"))

    def moved(step):
        before = {v.path: np.array(v) for v in model.weights}
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
        changed = {path: bool(np.any(np.array(v) != before[v.path])) for v in model.weights
                   for path in [v.path]}
        return {"step": step, "changed": changed}

    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    steps = [moved("compiled")]
    base.trainable = False
    steps.append(moved("base frozen, not recompiled"))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    steps.append(moved("recompiled"))
    base.trainable = True
    steps.append(moved("base unfrozen, not recompiled"))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    steps.append(moved("recompiled again"))
    result["compile_snapshot"] = steps

    # Partial freezing: the first 100 of base.layers.
    keras.backend.clear_session()
    base = keras.applications.MobileNetV2(input_shape=(96, 96, 3), alpha=0.35,
                                          include_top=False, weights=None)
    base.trainable = True
    for layer in base.layers[:100]:
        layer.trainable = False
    inputs = keras.Input(shape=(96, 96, 3))
    model = keras.Model(inputs, layers.Dense(1)(layers.GlobalAveragePooling2D()(base(inputs))))
    result["partial_freeze"] = {"num_layers": len(base.layers),
                                "layer_100": base.layers[100].name,
                                "base": counts(base), "model": counts(model)}
    with open(os.path.join(out, "finetune.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/interop/mobilenet_fixtures"
    os.makedirs(out, exist_ok=True)
    mobilenet(out)
    finetune(out)
