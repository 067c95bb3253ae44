"""The compare.sh workloads written for TensorFlow/Keras (tensorflow-cpu).

  python tf_workloads.py --workload mlp --batch 64 --epochs 2 [--mode mirrored|single]
  python tf_workloads.py --workload cnn --batch 64 --epochs 1 [--mode mirrored|single]
  python tf_workloads.py --workload allreduce --sizes-mib 1,4,16,64
  python tf_workloads.py --workload input --batch 64
  python tf_workloads.py --workload mobilenet --alpha 1.0 --size 224 --batch 32 [--mode single]
  python tf_workloads.py --workload lstm|transformer --batch 64 --steps 20 [--mode single]

`mirrored` is the seed guide's code: two logical CPU devices made with
tf.config.set_logical_device_configuration, MirroredStrategy over them, the
model built and compiled in its scope, `fit` on a tf.data pipeline batched
with the global batch size. Prints `RESULT {json}` (see common.py).
"""
import contextlib
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402


def make_model(workload):
    if workload == "mlp":
        inputs = keras.Input(shape=(784,))
        x = keras.layers.Dense(256, activation="relu")(inputs)
        x = keras.layers.Dense(256, activation="relu")(x)
    else:
        inputs = keras.Input(shape=(28, 28, 1))
        x = keras.layers.Conv2D(32, 3, activation="relu")(inputs)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Conv2D(64, 3, activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
        x = keras.layers.Flatten()(x)
        x = keras.layers.Dense(128, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    model.compile(optimizer=keras.optimizers.Adam(),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=[keras.metrics.SparseCategoricalAccuracy()])
    return model


def timed_fit(build, ds, strategy, args):
    """The model `build` makes, compiled with Adam on logits (in the
    strategy's scope), fit `warmup` untimed then `steps` timed steps on the
    repeated dataset; the seconds of the timed steps."""
    with strategy.scope() if strategy else contextlib.nullcontext():
        model = build()
        model.compile(optimizer=keras.optimizers.Adam(),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[keras.metrics.SparseCategoricalAccuracy()])
    model.fit(ds, steps_per_epoch=args.warmup, epochs=1, verbose=0)  # trace, warm up
    start = time.perf_counter()
    model.fit(ds, steps_per_epoch=args.steps, epochs=1, verbose=0)
    return time.perf_counter() - start


def logical_cpus():
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def main():
    args = common.parse_args(["mirrored", "single", "single-1-thread"])
    if args.mode == "single-1-thread":  # before TensorFlow starts its thread pools
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    peer = f"tensorflow {tf.__version__} / keras {keras.__version__}"
    keras.utils.set_random_seed(args.seed)
    threads = ""
    if args.threads:  # TensorFlow's own thread pools (before any op runs)
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
        threads = f", {args.threads} intra/inter-op thread{'s' if args.threads > 1 else ''}"
    devices = logical_cpus() if args.mode == "mirrored" or args.workload == "allreduce" else None
    strategy = tf.distribute.MirroredStrategy(devices) if devices else None
    mode = (f"MirroredStrategy({len(devices)} logical CPUs)" if devices else "no strategy") + threads
    if args.mode == "single-1-thread":
        mode = "no strategy, 1 intra-op and 1 inter-op thread"

    if args.workload == "allreduce":
        result = {}
        for mib in [int(s) for s in args.sizes_mib.split(",")]:
            n = mib * 1024 * 1024 // 4

            @tf.function
            def step():
                def replica_fn():
                    ctx = tf.distribute.get_replica_context()
                    value = tf.ones([n]) + tf.cast(ctx.replica_id_in_sync_group, tf.float32)
                    return ctx.all_reduce(tf.distribute.ReduceOp.SUM, value)
                return strategy.run(replica_fn)

            for _ in range(3):
                step()
            reps = max(5, 256 // mib)
            start = time.perf_counter()
            for _ in range(reps):
                out = step()
            tf.nest.map_structure(lambda t: t.numpy() if hasattr(t, "numpy") else t,
                                  strategy.experimental_local_results(out))
            result[str(mib)] = mib * 1024 * 1024 / ((time.perf_counter() - start) / reps) / 1e6
        common.report(system=peer, workload="allreduce", mode=mode, allreduce_MBps=result)
        return

    if args.workload in ("lstm", "transformer"):
        x, y = common.sequence_data(args)
        ds = tf.data.Dataset.from_tensors((x, y)).repeat()

        def build():
            tokens = keras.Input(shape=(common.SEQUENCE,), dtype="int32")
            h = keras.layers.Embedding(common.VOCABULARY, 64)(tokens)
            if args.workload == "lstm":
                h = keras.layers.LSTM(128)(h)
            else:
                a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16)(h, h)
                h = keras.layers.LayerNormalization()(keras.layers.Add()([h, a]))
                f = keras.layers.Dense(128, activation="relu")(h)
                f = keras.layers.Dense(64)(f)
                h = keras.layers.LayerNormalization()(keras.layers.Add()([h, f]))
                h = keras.layers.GlobalAveragePooling1D()(h)
            return keras.Model(tokens, keras.layers.Dense(2)(h))
        common.report_sequences(peer, mode, args, timed_fit(build, ds, strategy, args))
        return

    if args.workload == "mobilenet":
        x, y = common.mobilenet_data(args)
        ds = tf.data.Dataset.from_tensors((x, y)).repeat()

        def build():
            return keras.applications.MobileNetV2(
                input_shape=(args.size, args.size, 3), alpha=args.alpha, weights=None,
                classifier_activation=None)
        common.report_mobilenet(peer, mode, args, timed_fit(build, ds, strategy, args))
        return

    (x_train, y_train), (x_test, y_test) = common.fashion_mnist()
    shape = (-1, 784) if args.workload in ("mlp", "input") else (-1, 28, 28, 1)
    prep = lambda x: (x.astype(np.float32) / 255.0).reshape(shape)  # noqa: E731
    if args.workload == "input":
        ds = (tf.data.Dataset.from_tensor_slices((prep(x_train), y_train)).shuffle(60000)
              .batch(args.batch).prefetch(tf.data.AUTOTUNE))
        for _ in ds.take(1):
            pass
        start = time.perf_counter()
        examples = sum(int(xb.shape[0]) for xb, _ in ds)
        seconds = time.perf_counter() - start
        common.report(system=peer, workload="input", mode="tf.data", batch=args.batch,
                      seconds=seconds, examples=examples, samples_per_s=examples / seconds)
        return

    n = 50000 if args.workload == "mlp" else 60000  # the MLP holds out 10k, as the guide does
    train = (tf.data.Dataset.from_tensor_slices((prep(x_train[:n]), y_train[:n]))
             .shuffle(n).batch(args.batch).prefetch(tf.data.AUTOTUNE))
    test = tf.data.Dataset.from_tensor_slices((prep(x_test), y_test)).batch(512)
    if strategy:
        with strategy.scope():
            model = make_model(args.workload)
    else:
        model = make_model(args.workload)
    start = time.perf_counter()
    model.fit(train, epochs=args.epochs, verbose=2)
    seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(test, verbose=0)
    examples = n * args.epochs
    common.report(system=peer, workload=args.workload, mode=mode, batch=args.batch,
                  epochs=args.epochs, seconds=seconds, examples=examples,
                  samples_per_s=examples / seconds, test_accuracy=accuracy)


if __name__ == "__main__":
    main()
