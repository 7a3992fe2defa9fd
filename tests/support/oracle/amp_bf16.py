#!/usr/bin/python3
"""PyTorch oracle of tests/parity/test_parity_amp_bf16.cpp: a conv + batch norm + relu + linear model, its
forward and cross-entropy loss under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch 1.13's CPU
autocast: conv2d and linear in bf16 with f32 accumulation, batch norm statistics in f32 with a bf16 output,
cross_entropy in f32), backward outside the region, gradients of the f32 master weights. A test oracle
only; kiln never depends on it.

Usage:  /usr/bin/python3 tests/support/oracle/amp_bf16.py DIR
Reads DIR/{x, y, conv_w, conv_b, bn_w, bn_b, fc_w, fc_b}.npy (f32; y i64) and writes DIR/logits.npy (the
bf16 logits as f32), DIR/loss.npy (f32 scalar), DIR/grad_<name>.npy (f32) and DIR/dtypes.txt (the dtype of
each intermediate under autocast, one "name dtype" a line).
"""
import os
import sys

# Debian's numpy (the one python3-torch 1.13 is built against): see oracle.py.
sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(1)

PARAMS = ["conv_w", "conv_b", "bn_w", "bn_b", "fc_w", "fc_b"]


def main(d):
    load = lambda n: torch.from_numpy(np.load(os.path.join(d, n + ".npy")))  # noqa: E731
    x, y = load("x"), load("y")
    p = {n: load(n).requires_grad_(True) for n in PARAMS}
    rm, rv = torch.zeros(p["bn_w"].shape[0]), torch.ones(p["bn_w"].shape[0])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        c = F.conv2d(x, p["conv_w"], p["conv_b"], padding=1)
        b = F.batch_norm(c, rm, rv, p["bn_w"], p["bn_b"], training=True)
        r = F.relu(b)
        logits = F.linear(r.flatten(1), p["fc_w"], p["fc_b"])
        loss = F.cross_entropy(logits, y)
    loss.backward()
    with open(os.path.join(d, "dtypes.txt"), "w") as f:
        for name, t in [("conv", c), ("batch_norm", b), ("relu", r), ("linear", logits), ("loss", loss)]:
            f.write(f"{name} {str(t.dtype).replace('torch.', '')}\n")
    np.save(os.path.join(d, "logits.npy"), logits.detach().float().numpy())
    np.save(os.path.join(d, "loss.npy"), loss.detach().float().numpy())
    for n in PARAMS:
        assert p[n].grad.dtype == torch.float32, n
        np.save(os.path.join(d, "grad_" + n + ".npy"), p[n].grad.numpy())


if __name__ == "__main__":
    main(sys.argv[1])
