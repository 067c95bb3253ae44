"""Keras reads what Lockstep wrote (keras_writer.cc): each .keras file loads
with keras.models.load_model, keeps its compile settings and optimizer step,
predicts Lockstep's outputs within 1e-5 (relative, floor 1e-5), and trains
one more step (a LossScaleOptimizer with the scale and count Lockstep saved); each .weights.h5 loads into the model rebuilt from its config.

usage: keras_interop.py DIR
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import warnings
import zipfile

import numpy as np
import keras


def check_close(name, got, want, tolerance=1e-5):
    got = np.asarray(got, dtype=np.float32).reshape(-1)
    want = np.asarray(want, dtype=np.float32).reshape(-1)
    bound = tolerance * np.maximum(1.0, np.abs(want))
    worst = float(np.max(np.abs(got - want) - bound))
    if worst > 0:
        raise SystemExit(f"{name}: Keras predicts {got[:4]}..., Lockstep {want[:4]}... "
                         f"(off by {worst:.3g} beyond {tolerance:g})")


def main(root):
    expected = json.load(open(os.path.join(root, "expected.json")))
    for name, e in expected.items():
        if "inputs" in e:
            x = [np.asarray(i["values"], dtype=i["dtype"]).reshape(i["shape"]) for i in e["inputs"]]
        else:
            x = np.asarray(e["input"], dtype=np.float32).reshape(e["input_shape"])
        batch = (x[0] if isinstance(x, list) else x).shape[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = keras.models.load_model(os.path.join(root, f"{name}.keras"))
        loud = [str(w.message) for w in caught if "optimizer" in str(w.message).lower()
                or "skipping" in str(w.message).lower()]
        if loud:
            raise SystemExit(f"{name}: Keras warned while loading: {loud}")
        predicted = model.predict(x, verbose=0)
        wanted = e["outputs"] if "outputs" in e else [e["output"]]
        for i, (got, want) in enumerate(zip(predicted if "outputs" in e else [predicted], wanted)):
            check_close(f"{name}.keras output {i}", got, want, e.get("tolerance", 1e-5))
        steps = int(model.optimizer.iterations.numpy())
        if steps != e["iterations"]:
            raise SystemExit(f"{name}: Keras sees optimizer step {steps}, Lockstep saved {e['iterations']}")
        if "dynamic_scale" in e:  # a LossScaleOptimizer: its scale and count as saved
            opt = model.optimizer
            if not isinstance(opt, keras.optimizers.LossScaleOptimizer):
                raise SystemExit(f"{name}: Keras loads a {type(opt).__name__}, not a LossScaleOptimizer")
            got = (float(opt.dynamic_scale.numpy()), int(opt.step_counter.numpy()))
            if got != (e["dynamic_scale"], e["step_counter"]):
                raise SystemExit(f"{name}: Keras sees scale and count {got}, Lockstep saved "
                                 f"{(e['dynamic_scale'], e['step_counter'])}")
        if name == "mixed_float16":  # the policy each layer was saved with
            policies = {layer.dtype_policy.name for layer in model.layers}
            if policies != {"mixed_float16"}:
                raise SystemExit(f"mixed_float16: Keras loads layers with policies {policies}")
        shapes = model.output_shape if "outputs" in e else [model.output_shape]
        y = [np.zeros((batch,), dtype="int64") if s[-1] > 1 else np.zeros((batch, 1), dtype="float32")
             for s in shapes]
        logs = model.train_on_batch(x, y if "outputs" in e else y[0], return_dict=True)
        missing = [m for m in e.get("metrics", []) if m not in logs]
        if missing:  # compile's forms by output name kept
            raise SystemExit(f"{name}: Keras's logs after loading are {sorted(logs)}; no {missing}")
        if not np.isfinite(logs["loss"]):
            raise SystemExit(f"{name}: one more step in Keras gave loss {logs['loss']}")
        if name == "mlp" and "top3" not in logs:  # a metric object with settings and a name
            raise SystemExit(f"mlp: Keras's metrics after loading are {sorted(logs)}, no top3")
        with zipfile.ZipFile(os.path.join(root, f"{name}.keras")) as archive:
            config_text = archive.read("config.json").decode()
        config = json.loads(config_text)
        if config["class_name"] == "Functional":
            # Our layer order is Keras's (map_graph's): weight paths depend on it.
            ours = [layer["name"] for layer in config["config"]["layers"]]
            theirs = [layer.name for layer in model.layers]
            if ours != theirs:
                raise SystemExit(f"{name}: Lockstep orders the layers {ours}, Keras {theirs}")
        rebuilt = keras.models.model_from_json(config_text)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the file's optimizer has no home in an uncompiled model
            rebuilt.load_weights(os.path.join(root, f"{name}.weights.h5"))
        again = rebuilt.predict(x, verbose=0)
        for i, (got, want) in enumerate(zip(again if "outputs" in e else [again], wanted)):
            check_close(f"{name}.weights.h5 output {i}", got, want, e.get("tolerance", 1e-5))
        print(f"{name}: Keras {keras.__version__} loads it, predicts Lockstep's outputs, "
              f"resumes at step {steps} and trains on")
    print(f"all {len(expected)} models: Keras read them")


if __name__ == "__main__":
    main(sys.argv[1])
