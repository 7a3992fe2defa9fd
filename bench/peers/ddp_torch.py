#!/usr/bin/python3
"""PyTorch 1.13 peer of kiln's data-parallel training (bench/bench_data_parallel.sh): N processes on
localhost, torch.distributed with the gloo backend and DistributedDataParallel (default 25 MiB buckets),
one thread each, data in memory (x.npy (N, C, H, W) f32 and y.npy (N,) i64 from --data), SGD with
momentum. One process (--nproc 1) trains the plain model, as `kiln train` without mpirun does.

Each step cuts a global batch of nproc x --batch rows from a permutation (the same on every rank) and
rank r takes rows [r B, (r+1) B), as kiln does. --warmup steps are run first, then --steps timed steps
between two barriers; prints one JSON line: global training images/s (no evaluation).

  /usr/bin/python3 bench/peers/ddp_torch.py --model small_cnn|resnet18 --data DIR --batch 64
      [--nproc 2] [--steps 15] [--warmup 15] [--lr 0.05] [--momentum 0.9] [--seed 0] [--port 0]
Models: small_cnn = tests/support/oracle/small_cnn.py (kiln's small_cnn layout); resnet18 =
torchvision.models.resnet18(num_classes=K) (kiln's resnet18: the ImageNet stem).
"""
import argparse
import json
import os
import sys
import time

sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "support",
                                "oracle"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def build(name, num_classes, in_channels):
    if name == "small_cnn":
        from small_cnn import SmallCNN
        return SmallCNN(num_classes=num_classes, in_channels=in_channels)
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=num_classes)
    raise SystemExit(f"ddp_torch.py: unknown model {name}")


def worker(rank, args):
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    if args.nproc > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                                world_size=args.nproc)
    x = torch.from_numpy(np.load(os.path.join(args.data, "x.npy")))
    y = torch.from_numpy(np.load(os.path.join(args.data, "y.npy")).astype(np.int64))
    num_classes = int(y.max()) + 1
    model = build(args.model, num_classes, x.shape[1])
    if args.nproc > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's weights
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model.train()
    gen = torch.Generator().manual_seed(args.seed)
    global_batch = args.batch * args.nproc
    order = torch.randperm(len(x), generator=gen)

    def step(k):
        nonlocal order
        at = (k * global_batch) % len(x)
        if at + global_batch > len(x):
            order, at = torch.randperm(len(x), generator=gen), 0
        idx = order[at + rank * args.batch:at + (rank + 1) * args.batch]
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        return float(loss)

    for k in range(args.warmup):
        step(k)
    if args.nproc > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for k in range(args.warmup, args.warmup + args.steps):
        loss = step(k)
    if args.nproc > 1:
        dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"peer": "torch-ddp-gloo" if args.nproc > 1 else "torch", "torch": torch.__version__,
                          "model": args.model, "nproc": args.nproc, "batch_per_rank": args.batch,
                          "steps": args.steps, "seconds": round(seconds, 3), "loss": round(loss, 4),
                          "images_per_s": round(global_batch * args.steps / seconds, 1)}), flush=True)
    if args.nproc > 1:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=["small_cnn", "resnet18"])
    p.add_argument("--data", required=True)
    p.add_argument("--batch", type=int, default=64, help="per-rank batch")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=0, help="rendezvous port on 127.0.0.1 (0: a free one)")
    args = p.parse_args()
    if args.port == 0:  # the OS's pick, so back-to-back runs never meet a port in TIME_WAIT
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    if args.nproc == 1:
        worker(0, args)
    else:
        mp.spawn(worker, args=(args,), nprocs=args.nproc, join=True)


if __name__ == "__main__":
    main()
