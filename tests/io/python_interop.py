"""Reads a Lockstep checkpoint with Python's `safetensors` (numpy flavour)
and compares every tensor with the .npy copy interop_writer wrote beside it;
then reads the TensorBoard log with TensorBoard's own EventAccumulator.

usage: python_interop.py DIR   (exit 0: equal; 1: a difference; 77: the
Python packages are not available here, so nothing was tested)
"""
import sys

try:
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
except ImportError as e:  # reported as skipped by CTest, never as passed
    print(f"SKIP: {e}")
    sys.exit(77)

d = sys.argv[1]
tensors = load_file(f"{d}/checkpoint.safetensors")
names = open(f"{d}/names.txt").read().split()
assert len(names) == len(tensors), (len(names), sorted(tensors))
for i, name in enumerate(names):
    expected = np.load(f"{d}/{i}.npy")
    got = tensors[name]
    assert got.dtype == expected.dtype and got.shape == expected.shape, (name, got.dtype, got.shape)
    assert np.array_equal(got, expected), f"{name} differs"
with safe_open(f"{d}/checkpoint.safetensors", framework="numpy") as f:
    meta = f.metadata()
assert meta["format"] == "lockstep.checkpoint", meta.get("format")
assert meta["iterations"] == "2", meta.get("iterations")
assert any(n.startswith("optimizer/") for n in names), names
print(f"{len(names)} tensors read by safetensors equal Lockstep's")

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError as e:
    print(f"SKIP: tensorboard: {e}")
    sys.exit(77)
acc = EventAccumulator(f"{d}/logs/train")
acc.Reload()
for line in open(f"{d}/scalars.txt"):
    tag, step, value = line.split()
    events = [e for e in acc.Scalars(tag) if e.step == int(step)]
    assert len(events) == 1, (tag, step, acc.Tags())
    assert events[0].value == np.float32(value), (tag, events[0].value, value)
print(f"TensorBoard read the scalars: {acc.Tags()['scalars']}")
print("PASS")
