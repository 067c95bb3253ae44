"""The GPU check's PyTorch side: the seed MLP (and the small CNN) on one GPU,
written the way a PyTorch user writes them at their fastest in eager mode.

  python3 torch_gpu.py --workload mlp --batch 64 --epochs 2 --data-dir DIR

The data is read from Fashion-MNIST's IDX files (gzip) and put on the GPU
once; every epoch draws a new permutation on the GPU and gathers batches by
index (no DataLoader, no host copies); Keras's initialisation (Glorot
uniform, zero bias), Adam (lr 1e-3, eps 1e-7, fused), TF32 off (float32 as
Lockstep runs it by default). The MLP holds out the last 10k training
images, as the guide does; the CNN is channels_last. Timing: the epochs'
wall time after a synchronize, without the warm-up epoch's first steps
(one untimed pass of 20 steps first). Prints `RESULT {json}` as the other
peers do.

  python3 torch_gpu.py --workload mobilenet --batch 64 --size 224 --precision bf16

torchvision's mobilenet_v2 (1000 classes) on one random batch, repeated, as
bench/workloads.cc's mobilenet workload: channels_last, Adam (fused),
cross-entropy; `--precision bf16` runs the forward under autocast to
bfloat16 (PyTorch's fastest mixed precision on Hopper); `warmup` untimed
steps, then `steps` timed ones between synchronizes.

  python3 torch_gpu.py --workload lstm --batch 64 --steps 20 --warmup 3

The sequence workloads of bench/workloads.cc on one batch of token ids
[batch, 80] (ids < 10,000, labels alternating over 2 classes, the same LCG
draws), repeated: lstm is Embedding(10000, 64) → nn.LSTM(64, 128) (cuDNN's
fused LSTM, PyTorch's fastest) → its last hidden state → Linear(128, 2);
transformer is Embedding → one encoder block as the Keras model builds it
(nn.MultiheadAttention(64, 4 heads of 16), Add, LayerNorm(eps 1e-3),
Linear(64, 128) + ReLU → Linear(128, 64), Add, LayerNorm) → the mean over
time → Linear(64, 2). Adam (fused), cross-entropy, TF32 off; `warmup`
untimed steps, then `steps` timed ones between synchronizes.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
from torch import nn

from torch_workloads import make_model  # the same models as the CPU peers


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def timed_steps(step, warmup, steps):
    """`warmup` untimed steps, then the seconds of `steps` steps between synchronizes."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def mobilenet(a):
    import torchvision
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True  # PyTorch users' fastest convolutions
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    rng = np.random.default_rng(a.seed)
    x = torch.from_numpy(rng.uniform(-1, 1, (a.batch, 3, a.size, a.size)).astype(np.float32))
    x = x.to(dev).contiguous(memory_format=torch.channels_last)
    y = torch.from_numpy(rng.integers(0, 1000, a.batch).astype(np.int64)).to(dev)
    model = torchvision.models.mobilenet_v2(num_classes=1000).to(dev)
    model = model.to(memory_format=torch.channels_last).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, fused=True)
    loss_fn = nn.CrossEntropyLoss()
    bf16 = a.precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    if a.profile:  # the kernels of 2 steps, by total GPU time (no timing reported)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=20,
                                        max_name_column_width=70))
        return
    seconds = timed_steps(step, 0, a.steps)
    print("RESULT " + json.dumps({
        "system": "pytorch " + torch.__version__, "workload": "mobilenet",
        "mode": "eager on " + torch.cuda.get_device_name(0) + ", " + a.precision,
        "batch": a.batch, "size": a.size, "steps": a.steps, "seconds": seconds,
        "samples_per_s": a.batch * a.steps / seconds,
        "step_ms": 1e3 * seconds / a.steps}), flush=True)


def lcg_tokens(batch, steps, seed):
    """bench/workloads.cc's token ids: state = state * a + c (mod 2^64), id = (state >> 33) % 10000."""
    ids = np.empty(batch * steps, dtype=np.int64)
    state = seed
    for i in range(ids.size):
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        ids[i] = (state >> 33) % 10000
    return ids.reshape(batch, steps)


class SequenceModel(nn.Module):
    def __init__(self, workload):
        super().__init__()
        self.workload = workload
        self.embedding = nn.Embedding(10000, 64)
        if workload == "lstm":
            self.lstm = nn.LSTM(64, 128, batch_first=True)
            self.head = nn.Linear(128, 2)
        else:
            self.attention = nn.MultiheadAttention(64, 4, batch_first=True)
            self.norm1 = nn.LayerNorm(64, eps=1e-3)
            self.ff1 = nn.Linear(64, 128)
            self.ff2 = nn.Linear(128, 64)
            self.norm2 = nn.LayerNorm(64, eps=1e-3)
            self.head = nn.Linear(64, 2)

    def forward(self, tokens):
        x = self.embedding(tokens)
        if self.workload == "lstm":
            _, (h, _) = self.lstm(x)
            return self.head(h[-1])
        a, _ = self.attention(x, x, x, need_weights=False)
        x = self.norm1(x + a)
        x = self.norm2(x + self.ff2(torch.relu(self.ff1(x))))
        return self.head(x.mean(dim=1))


def sequences(a):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    steps = 80
    x = torch.from_numpy(lcg_tokens(a.batch, steps, a.seed)).to(dev)
    y = (torch.arange(a.batch, device=dev) % 2).to(torch.int64)
    model = SequenceModel(a.workload).to(dev).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, fused=True)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    seconds = timed_steps(step, a.warmup, a.steps)
    print("RESULT " + json.dumps({
        "system": "pytorch " + torch.__version__, "workload": a.workload,
        "mode": "eager on " + torch.cuda.get_device_name(0), "batch": a.batch,
        "sequence": steps, "steps": a.steps, "seconds": seconds,
        "samples_per_s": a.batch * a.steps / seconds,
        "step_ms": 1e3 * seconds / a.steps}), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", default="mlp",
                   choices=["mlp", "cnn", "mobilenet", "lstm", "transformer"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data-dir")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--precision", default="float32", choices=["float32", "bf16"])
    p.add_argument("--profile", action="store_true", help="mobilenet: print its kernels' times")
    a = p.parse_args()
    if a.workload == "mobilenet":
        mobilenet(a)
        return
    if a.workload in ("lstm", "transformer"):
        sequences(a)
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    d = a.data_dir
    x = idx(os.path.join(d, "train-images-idx3-ubyte.gz"))
    y = idx(os.path.join(d, "train-labels-idx1-ubyte.gz"))
    xt = idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"))
    yt = idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"))
    n = 50000 if a.workload == "mlp" else 60000
    shape = (-1, 784) if a.workload == "mlp" else (-1, 1, 28, 28)

    def prep(images):
        t = torch.from_numpy(images.astype(np.float32).reshape(shape) / 255.0).to(dev)
        return t.contiguous(memory_format=torch.channels_last) if a.workload == "cnn" else t

    x, y = prep(x[:n]), torch.from_numpy(y[:n].astype(np.int64)).to(dev)
    xt, yt = prep(xt), torch.from_numpy(yt.astype(np.int64)).to(dev)
    model = make_model(a.workload).to(dev)
    if a.workload == "cnn":
        model = model.to(memory_format=torch.channels_last)
    # fused: one kernel for the whole update, PyTorch's fastest eager Adam on CUDA.
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, fused=True)
    loss_fn = nn.CrossEntropyLoss()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    model.train()
    for i in range(20):  # warm-up: cuBLAS handles, kernels' first launches
        step(x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch])
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    gen = torch.Generator(device=dev).manual_seed(a.seed + 1)
    for _ in range(a.epochs):
        perm = torch.randperm(n, device=dev, generator=gen)
        for i in range(0, n, a.batch):
            b = perm[i:i + a.batch]
            step(x[b], y[b])
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        correct = sum((model(xt[i:i + 512]).argmax(1) == yt[i:i + 512]).sum().item()
                      for i in range(0, len(xt), 512))
    print("RESULT " + json.dumps({
        "system": "pytorch " + torch.__version__, "workload": a.workload,
        "mode": "eager on " + torch.cuda.get_device_name(0), "batch": a.batch,
        "epochs": a.epochs, "seconds": seconds, "samples_per_s": n * a.epochs / seconds,
        "test_accuracy": correct / len(xt)}), flush=True)


if __name__ == "__main__":
    main()
