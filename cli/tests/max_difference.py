#!/usr/bin/env python3
"""The largest difference between two safetensors files' float32 tensors,
and the largest magnitude in the first: "DIFF SCALE" on one line. Plain
Python (no packages), for the elastic tests (cli/tests/elastic_test.sh,
cli/tests/netns_restart_test.sh): a job that shrank sums in another order,
so its weights equal an uninterrupted job's within float rounding.

usage: max_difference.py A.safetensors B.safetensors
"""
import json, struct, sys
from array import array
def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a = array("f")
        a.frombytes(data[t["data_offsets"][0]:t["data_offsets"][1]])
        out[name] = a
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
assert a.keys() == b.keys() and a, (sorted(a), sorted(b))
diff = max(abs(x - y) for k in a for x, y in zip(a[k], b[k]))
scale = max(abs(x) for k in a for x in a[k])
print(f"{diff:.3g} {scale:.3g}")
