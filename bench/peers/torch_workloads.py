"""The compare.sh workloads written for PyTorch (Debian's python3-torch).

  python3 torch_workloads.py --workload mlp --batch 64 --epochs 2 [--mode single|ddp]
  python3 torch_workloads.py --workload cnn --batch 64 --epochs 1 [--mode single|ddp]
  python3 torch_workloads.py --workload allreduce --sizes-mib 1,4,16,64   (2 processes, gloo)
  python3 torch_workloads.py --workload input --batch 64
  python3 torch_workloads.py --workload mobilenet --alpha 1.0 --size 224 --batch 32

Written the way a PyTorch user would write them at their fastest: data held
as tensors, a new permutation per epoch, batches gathered by index (no
DataLoader for training), Keras's initialisation (Glorot uniform, zero bias)
and Adam (lr 1e-3, eps 1e-7) so accuracies are comparable. `single` uses
`--threads N` intra-op threads (default: one per core); `ddp` is DistributedDataParallel over gloo,
one process per core, each pinned, each with its half of every global batch.
Prints `RESULT {json}` (see common.py).
"""
import os
import socket
import sys
import time

# torch owns the threads (OpenMP, set below); a multi-threaded BLAS under it
# oversubscribes the cores: measured 6,000 samples/s with OpenBLAS's own
# threads against 16,000-18,000 without, so they are off unless asked for.
# (Before any import: numpy loads the BLAS too.)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch import nn  # noqa: E402


def make_model(workload):
    if workload == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                              nn.Linear(256, 10))
    else:
        model = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(1600, 128), nn.ReLU(), nn.Linear(128, 10))
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def load(workload):
    (x_train, y_train), (x_test, y_test) = common.fashion_mnist()
    shape = (-1, 784) if workload == "mlp" else (-1, 1, 28, 28)
    prep = lambda x: torch.from_numpy(x.astype(np.float32).reshape(shape) / 255.0)  # noqa: E731
    lab = lambda y: torch.from_numpy(y.astype(np.int64))  # noqa: E731
    n = 50000 if workload == "mlp" else 60000  # the MLP holds out 10k, as the guide does
    return prep(x_train[:n]), lab(y_train[:n]), prep(x_test), lab(y_test)


def evaluate(model, x, y):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 512):
            correct += (model(x[i:i + 512]).argmax(1) == y[i:i + 512]).sum().item()
    return correct / len(x)


def train(args, rank=0, world=1):
    """Trains; returns (seconds, steps, test accuracy or None off rank 0)."""
    torch.manual_seed(args.seed)
    x, y, x_test, y_test = load(args.workload)
    model = make_model(args.workload)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(args.seed + 1)
    n, batch = len(x), args.batch
    local = batch // world
    if world > 1:
        dist.barrier()
    start = time.perf_counter()
    steps = 0
    for _ in range(args.epochs):
        model.train()
        perm = torch.randperm(n, generator=gen)
        correct = torch.zeros((), dtype=torch.int64)
        for i in range(0, n, batch):
            idx = perm[i:i + batch][rank * local:(rank + 1) * local]
            xb, yb = x[idx], y[idx]
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            opt.step()
            correct += (out.detach().argmax(1) == yb).sum()  # the training metric Keras keeps
            steps += 1
    if world > 1:
        dist.barrier()
    seconds = time.perf_counter() - start
    net = model.module if world > 1 else model
    accuracy = evaluate(net, x_test, y_test) if rank == 0 else None
    return seconds, steps, n * args.epochs, accuracy


def train_mobilenet(args):
    """torchvision's mobilenet_v2 (width_mult = alpha, 1000 classes) trained
    the way a PyTorch user would: NCHW tensors (or channels-last with
    --mode channels-last), Adam, cross-entropy;
    returns the seconds of `steps` steps after `warmup` untimed ones."""
    import torchvision
    torch.manual_seed(args.seed)
    x, y = common.mobilenet_data(args)
    layout = torch.channels_last if args.mode == "channels-last" else torch.contiguous_format
    x = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous(memory_format=layout)
    y = torch.from_numpy(y)
    model = torchvision.models.mobilenet_v2(width_mult=args.alpha, num_classes=1000)
    model = model.to(memory_format=layout).train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    for _ in range(args.warmup):
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    return time.perf_counter() - start


def blas_library():
    """The BLAS torch calls. Debian's torch is built against the generic BLAS
    interface, so this is whatever libblas.so.3 points at: the reference
    netlib BLAS unless an optimised one (libopenblas0-pthread) is installed."""
    path = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    return "openblas" if "openblas" in path else ("blis" if "blis" in path else
                                                 "reference netlib (slow)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_worker(rank, args, port, queue):
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank % os.cpu_count()]})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    if args.workload == "allreduce":
        result = {}
        for mib in [int(s) for s in args.sizes_mib.split(",")]:
            t = torch.ones(mib * 1024 * 1024 // 4)
            for _ in range(3):
                dist.all_reduce(t)
            reps = max(5, 256 // mib)
            dist.barrier()
            start = time.perf_counter()
            for _ in range(reps):
                dist.all_reduce(t)
            seconds = (time.perf_counter() - start) / reps
            result[str(mib)] = mib * 1024 * 1024 / seconds / 1e6
        if rank == 0:
            queue.put({"allreduce_MBps": result})
    else:
        seconds, steps, examples, accuracy = train(args, rank, 2)
        if rank == 0:
            queue.put({"seconds": seconds, "steps": steps, "examples": examples,
                       "test_accuracy": accuracy})
    dist.destroy_process_group()


def main():
    args = common.parse_args(["single", "ddp", "channels-last"])
    cores = len(os.sched_getaffinity(0))
    peer = f"pytorch {torch.__version__} (BLAS: {blas_library()})"

    if args.workload == "allreduce" or args.mode == "ddp":
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        mp.spawn(ddp_worker, args=(args, free_port(), queue), nprocs=2, join=True)
        r = queue.get()
        mode = "DDP gloo, 2 processes"
    elif args.workload == "mobilenet":
        threads = args.threads or cores
        torch.set_num_threads(threads)
        layout = "channels-last" if args.mode == "channels-last" else "NCHW"
        mode = f"single process, {threads} thread{'s' if threads > 1 else ''}, {layout}"
        common.report_mobilenet(peer, mode, args, train_mobilenet(args))
        return
    elif args.workload == "input":
        torch.set_num_threads(cores)
        (x_train, y_train), _ = common.fashion_mnist()
        x = torch.from_numpy(x_train.astype(np.float32).reshape(-1, 784) / 255.0)
        y = torch.from_numpy(y_train.astype(np.int64))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                             batch_size=args.batch, shuffle=True)
        start = time.perf_counter()
        examples = sum(len(xb) for xb, _ in loader)
        r = {"seconds": time.perf_counter() - start, "examples": examples}
        mode = "DataLoader"
    else:
        threads = args.threads or cores
        torch.set_num_threads(threads)
        seconds, steps, examples, accuracy = train(args)
        r = {"seconds": seconds, "steps": steps, "examples": examples, "test_accuracy": accuracy}
        mode = f"single process, {threads} intra-op thread{'s' if threads > 1 else ''}"
    if "seconds" in r:
        r["samples_per_s"] = r["examples"] / r["seconds"]
    common.report(system=peer, workload=args.workload, mode=mode, batch=args.batch,
                  epochs=args.epochs, **r)


if __name__ == "__main__":
    main()
