#!/usr/bin/python3
"""Peer of bench/bench_conv_cpu: times torch.nn.functional.conv2d forward and backward (input and
weight gradients) on the CPU for the shapes given, with a fixed thread count.

Input: --shapes "N,C,H,W,K,R,S,stride,pad;..." (one entry per shape). Output: one line per shape,
"fwd_ms bwd_ms" (median of --reps runs after one warm-up). Must stay a timing peer only: no
correctness checks, no kiln imports."""
import argparse
import time

import torch
import torch.nn.functional as F


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--shapes", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    for entry in args.shapes.split(";"):
        if not entry.strip():
            continue
        n, c, h, w, k, r, s, stride, pad = (int(v) for v in entry.split(","))
        x = torch.randn(n, c, h, w, requires_grad=True)
        wt = torch.randn(k, c, r, s, requires_grad=True)
        fwd, bwd = [], []
        for rep in range(args.reps + 1):
            t0 = time.perf_counter()
            y = F.conv2d(x, wt, None, stride, pad)
            t1 = time.perf_counter()
            dy = torch.ones_like(y)
            t2 = time.perf_counter()
            torch.autograd.grad(y, (x, wt), dy)
            t3 = time.perf_counter()
            if rep > 0:
                fwd.append((t1 - t0) * 1e3)
                bwd.append((t3 - t2) * 1e3)
        print(f"{median(fwd):.3f} {median(bwd):.3f}", flush=True)


if __name__ == "__main__":
    main()
