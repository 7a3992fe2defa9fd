#!/usr/bin/python3
"""PyTorch oracle of tests/parity/test_parity_linear_bf16.cpp: a bf16 linear (F.linear on bf16 tensors,
PyTorch 1.13's CPU bf16 GEMM: f32 accumulation, the result rounded to bf16) forward and backward. A test
oracle only; kiln never depends on it.

Usage:  /usr/bin/python3 tests/support/oracle/linear_bf16.py DIR
Reads DIR/{x, w, dy}.npy (f32 values exact in bf16) and writes DIR/{y, dx, dw}.npy (the bf16 results as f32).
"""
import os
import sys

# Debian's numpy (the one python3-torch 1.13 is built against): see oracle.py.
sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)


def main(d):
    load = lambda n: torch.from_numpy(np.load(os.path.join(d, n + ".npy")))  # noqa: E731
    x = load("x").bfloat16().requires_grad_(True)
    w = load("w").bfloat16().requires_grad_(True)
    y = F.linear(x, w)
    assert y.dtype == torch.bfloat16
    y.backward(load("dy").bfloat16())
    for name, t in (("y", y), ("dx", x.grad), ("dw", w.grad)):
        np.save(os.path.join(d, name + ".npy"), t.detach().float().numpy())


if __name__ == "__main__":
    main(sys.argv[1])
