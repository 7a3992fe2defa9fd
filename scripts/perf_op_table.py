#!/usr/bin/env python3
"""Sorts the samples of a `perf record --call-graph dwarf` run of a kiln CPU training step into
op / pass buckets (conv forward / backward-data / backward-filter GEMMs by their OpenBLAS entry,
im2col, col2im, batch norm, pooling, elementwise, optimizer, memset/memcpy, allocator, kernel...)
and prints one markdown table: % of the step's samples and CPU ms per step. Model initialization
(Philox, Box-Muller) is counted apart and left out of the step. Used for docs/cpu-profile.md.
It reads `perf script` text; it never runs perf or kiln itself.

  perf record -F 200 --call-graph dwarf,16384 -o r.data build/bench_train_step --no-peer \\
      --threads 1 --batch 8 --image-size 224 --steps 3 --warmup 1
  perf script -i r.data -F comm,tid,period,ip,sym > r.txt
  scripts/perf_op_table.py r.txt --hz 200 --steps 4 [more.txt ...] [--per-thread]

GEMM direction -> pass: kiln's row-major gemm(ta, tb) reaches OpenBLAS as column-major sgemm with
the operands swapped, so conv forward gemm(N, N) shows as sgemm_nn, backward-data gemm(T, N) as
sgemm_nt and backward-filter gemm(N, T) as sgemm_tn (kernels/cpu/conv2d.cpp); Linear layers'
GEMMs land in the same buckets (small in ResNet18, not in the small CNN).
"""
import argparse
import collections
import re

SETUP = ("philox_word", "random_t", "__cos_fma", "__ieee754_log_fma", "_dl_", "do_sin", "do_cos",
         "feholdsetround", "feresetround", "cos@plt", "__log", "asuint64")
GEMM_PASS = {"nn": "conv fwd GEMM (+ fc)", "nt": "conv bwd-data GEMM", "tn": "conv bwd-filter GEMM"}
ORDER = ["conv fwd GEMM (+ fc)", "conv bwd-data GEMM", "conv bwd-filter GEMM", "GEMM, caller not unwound",
         "im2col (fwd + bwd-filter)", "col2im (bwd-data)", "conv other (bias, gather)", "batch norm fwd",
         "batch norm bwd", "relu / unary elementwise", "binary elementwise (add, relu bwd, ...)",
         "pooling fwd + bwd", "reductions", "loss", "optimizer step", "memset (zero fills)", "memcpy",
         "allocator / malloc", "kiln other (autograd, dispatch, data)", "OpenMP runtime",
         "kernel (page faults, scheduling)", "other"]


def bucket(frames):
    leaf = frames[0] if frames else "?"
    if any(s in leaf for s in SETUP):
        return "setup"
    if "sgemm" in leaf or "cblas" in leaf or "gemm_one" in leaf or "gemm_parallel" in leaf:
        m = re.search(r"\bsgemm_(nn|nt|tn)\b", " ".join(frames))
        return GEMM_PASS[m.group(1)] if m else "GEMM, caller not unwound"
    rules = [("im2col", "im2col (fwd + bwd-filter)"), ("col2im", "col2im (bwd-data)"),
             ("conv2d", "conv other (bias, gather)"), ("gather_dy", "conv other (bias, gather)"),
             ("batch_norm_forward", "batch norm fwd"), ("batch_norm_backward", "batch norm bwd"),
             ("pool", "pooling fwd + bwd"), ("sgd_fused", "optimizer step"), ("adamw_fused", "optimizer step"),
             ("unary", "relu / unary elementwise"), ("strided_loop<3", "binary elementwise (add, relu bwd, ...)"),
             ("strided_loop", "relu / unary elementwise"), ("binary", "binary elementwise (add, relu bwd, ...)"),
             ("reduce", "reductions"), ("softmax", "loss"), ("cross_entropy", "loss"), ("memset", "memset (zero fills)"),
             ("memmove", "memcpy"), ("memcpy", "memcpy"), ("malloc", "allocator / malloc"),
             ("free", "allocator / malloc"), ("CachingAllocator", "allocator / malloc"), ("GOMP", "OpenMP runtime"),
             ("gomp", "OpenMP runtime"), ("kiln::", "kiln other (autograd, dispatch, data)")]
    for key, name in rules:
        if key in leaf:
            return name
    kernel = ("page", "_raw_", "irq", "task_switch", "schedule", "futex", "syscall", "folio", "memcg", "pte",
              "lru", "mm_", "_mm", "rmqueue", "__list", "charge", "percpu", "mas_", "access_error", "get_user")
    if any(k in leaf for k in kernel):
        return "kernel (page faults, scheduling)"
    return "other"


def read(path):
    """Yields (tid, frames) per sample of `perf script -F comm,tid,period,ip,sym` output."""
    tid, frames = None, []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line[0] not in " \t":
                if frames:
                    yield tid, frames
                frames = []
                if line.strip():
                    parts = line.split()
                    tid = parts[1] if len(parts) > 1 else None
                continue
            parts = line.strip().split(None, 1)
            frames.append(parts[1] if len(parts) > 1 else "?")
    if frames:
        yield tid, frames


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--hz", type=float, default=200.0, help="perf record -F (samples per CPU second)")
    p.add_argument("--steps", type=float, default=1.0, help="training steps in the recording (CPU ms per step)")
    p.add_argument("--per-thread", action="store_true", help="also print each thread's sample count")
    a = p.parse_args()
    tables = []
    for path in a.files:
        counts, threads = collections.Counter(), collections.Counter()
        for tid, frames in read(path):
            b = bucket(frames)
            counts[b] += 1
            if b != "setup":
                threads[tid] += 1
        tables.append((path, counts, threads))
    print("| op / pass | " + " | ".join(f"{path}: % / CPU ms" for path, _, _ in tables) + " |")
    print("| --- |" + " --- |" * len(tables))
    ms = 1000.0 / a.hz / a.steps
    for name in ORDER:
        cells = []
        for _, c, _ in tables:
            step = sum(v for k, v in c.items() if k != "setup") or 1
            cells.append(f"{100.0 * c[name] / step:.1f}% / {c[name] * ms:.0f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    cells = [f"{sum(v for k, v in c.items() if k != 'setup') * ms:.0f}" for _, c, _ in tables]
    print("| step, CPU ms summed over threads | " + " | ".join(cells) + " |")
    if a.per_thread:
        for path, _, threads in tables:
            print(f"{path}: samples per thread " + ", ".join(f"{t}: {n}" for t, n in threads.most_common()))


if __name__ == "__main__":
    main()
