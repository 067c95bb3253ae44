"""Shared by the peer benchmarks: Fashion-MNIST loading and the result line.

Every workload program (Lockstep's bench/workloads and the peers here) prints
one line `RESULT {json}` that bench/compare.sh reads; everything else they
print is for people.
"""
import argparse
import gzip
import json
import os
import resource
import struct

import numpy as np

DATA_DIR = os.environ.get("LOCKSTEP_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def _read_idx(name):
    path = os.path.join(DATA_DIR, name)
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist():
    """(x_train, y_train), (x_test, y_test) as uint8 arrays, as Keras returns them."""
    return ((_read_idx("train-images-idx3-ubyte.gz"), _read_idx("train-labels-idx1-ubyte.gz")),
            (_read_idx("t10k-images-idx3-ubyte.gz"), _read_idx("t10k-labels-idx1-ubyte.gz")))


def peak_rss_mib():
    """Peak resident memory of this process or of the largest child it waited
    for (the worker processes of a multi-process run)."""
    return max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
               resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024.0


def report(**fields):
    fields.setdefault("peak_rss_mib", round(peak_rss_mib(), 1))
    print("RESULT " + json.dumps(fields), flush=True)


def parse_args(modes):
    """The workload flags every peer takes (bench/workloads.cc's too);
    `modes`: this peer's --mode choices, the first the default."""
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=["mlp", "cnn", "allreduce", "input", "mobilenet",
                                          "lstm", "transformer"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--mode", choices=modes, default=modes[0])
    p.add_argument("--sizes-mib", default="1,4,16,64")
    p.add_argument("--seed", type=int, default=42, help="initialisation and shuffling")
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads of a single-process run (0: one per core)")
    # mobilenet: MobileNetV2(alpha) with its top (1000 classes, logits) on
    # random size x size x 3 images, `steps` timed training steps after
    # `warmup` untimed ones.
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    return p.parse_args()


def mobilenet_data(args):
    """The random images (in [-1, 1]) and labels of the mobilenet workload."""
    rng = np.random.default_rng(args.seed)
    x = rng.uniform(-1, 1, (args.batch, args.size, args.size, 3)).astype(np.float32)
    y = rng.integers(0, 1000, args.batch).astype(np.int64)
    return x, y


SEQUENCE = 80  # lstm and transformer: token ids per example
VOCABULARY = 10000


def sequence_data(args):
    """The lstm and transformer workloads' batch: token ids [batch, 80] and
    alternating labels (bench/workloads.cc draws its own ids the same way)."""
    rng = np.random.default_rng(args.seed)
    x = rng.integers(0, VOCABULARY, (args.batch, SEQUENCE)).astype(np.int32)
    y = (np.arange(args.batch) % 2).astype(np.int64)
    return x, y


def report_sequences(system, mode, args, seconds):
    examples = args.batch * args.steps
    report(system=system, workload=args.workload, mode=mode, batch=args.batch, sequence=SEQUENCE,
           steps=args.steps, seconds=seconds, examples=examples, samples_per_s=examples / seconds,
           step_ms=1e3 * seconds / args.steps)


def report_mobilenet(system, mode, args, seconds):
    examples = args.batch * args.steps
    report(system=system, workload="mobilenet", mode=mode, batch=args.batch, alpha=args.alpha,
           size=args.size, steps=args.steps, seconds=seconds, examples=examples,
           samples_per_s=examples / seconds, step_ms=1e3 * seconds / args.steps)
