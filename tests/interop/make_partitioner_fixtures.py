"""Writes tests/distribute/fixtures/partitioners.json: what TensorFlow's
variable partitioners return, and the shard shapes ParameterServerStrategy
gives a variable split by them, for tests/distribute/partitioners_test.cc.

Run by hand, never by the build (TensorFlow 2.x on CPU):

    /opt/tf-venv/bin/python tests/interop/make_partitioner_fixtures.py \
        tests/distribute/fixtures/partitioners.json

The shard shapes come from a real ParameterServerStrategy over an in-process
cluster (one chief, one worker, two ps tasks on loopback), as the TF tutorial
"Parameter server training with ParameterServerStrategy" builds one.
"""
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import socket  # noqa: E402

import tensorflow as tf  # noqa: E402

P = tf.distribute.experimental.partitioners

CASES = [
    # (partitioner kind, its arguments, shape, dtype)
    ("fixed", {"num_shards": 5}, [13, 4], "float32"),
    ("fixed", {"num_shards": 2}, [10, 3], "float32"),
    ("fixed", {"num_shards": 4}, [3, 7], "float32"),
    ("fixed", {"num_shards": 4}, [10], "float32"),
    ("min_size", {"min_shard_bytes": 4, "max_shards": 2}, [6, 1], "float32"),
    ("min_size", {"min_shard_bytes": 4, "max_shards": 10}, [6, 1], "float32"),
    ("min_size", {"min_shard_bytes": 256 << 10, "max_shards": 8}, [784, 256], "float32"),
    ("min_size", {"min_shard_bytes": 1000, "max_shards": 3}, [7, 5], "int64"),
    ("max_size", {"max_shard_bytes": 4}, [6, 1], "float32"),
    ("max_size", {"max_shard_bytes": 4, "max_shards": 2}, [6, 1], "float32"),
    ("max_size", {"max_shard_bytes": 1024}, [6, 1], "float32"),
    ("max_size", {"max_shard_bytes": 100000}, [784, 256], "float32"),
    ("max_size", {"max_shard_bytes": 30}, [13, 3], "float32"),
]


def make(kind, args):
    if kind == "fixed":
        return P.FixedShardsPartitioner(**args)
    if kind == "min_size":
        return P.MinSizePartitioner(**args)
    return P.MaxSizePartitioner(**args)


def in_process_cluster(num_workers, num_ps):
    ports = []
    for _ in range(num_workers + num_ps + 1):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            ports.append(s.getsockname()[1])
    spec = {
        "chief": ["localhost:%d" % ports[0]],
        "worker": ["localhost:%d" % p for p in ports[1:1 + num_workers]],
        "ps": ["localhost:%d" % p for p in ports[1 + num_workers:]],
    }
    cluster = tf.train.ClusterSpec(spec)
    for job in ("worker", "ps"):
        for i in range(len(spec[job])):
            tf.distribute.Server(cluster, job_name=job, task_index=i, protocol="grpc", start=True)
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        cluster, task_type="chief", task_id=0, rpc_layer="grpc")


def main(out):
    resolver = in_process_cluster(1, 2)
    cases = []
    for kind, args, shape, dtype in CASES:
        part = make(kind, args)
        partitions = [int(n) for n in part(tf.TensorShape(shape), tf.as_dtype(dtype))]
        strategy = tf.distribute.experimental.ParameterServerStrategy(
            resolver, variable_partitioner=part)
        with strategy.scope():
            v = tf.Variable(tf.zeros(shape, dtype=dtype))
        shards = [list(s.shape) for s in getattr(v, "variables", [v])]
        cases.append({"kind": kind, "args": args, "shape": shape, "dtype": dtype,
                      "partitions": partitions, "shard_shapes": shards})
    with open(out, "w") as f:
        json.dump({"tensorflow": tf.__version__, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
