#!/usr/bin/python3
"""PyTorch oracle for kiln's parity tests: runs one op (or many) forward and backward in torch and
writes the results as .npy files. A test oracle only; kiln never depends on it.

Usage:  /usr/bin/python3 tests/support/oracle/oracle.py SPEC.json

SPEC is one case object, a list of case objects, or {"cases": [...]} (batch mode: one python start,
since `import torch` takes seconds). Relative paths are relative to the folder of SPEC.json.

A case:
  {
    "op": "conv2d",                 # see OPS below; other names fall back to torch.nn.functional.<op>
                                    # then torch.<op>
    "inputs": ["x.npy", "w.npy", null],
                                    # positional args, in torch's order. Each entry is
                                    #   "path.npy"                       an array file
                                    #   null                             None (e.g. no bias)
                                    #   3.5 / 2 / true                   a python scalar
                                    #   {"randn": [2, 3], "seed": 1}     generated here (float32; also
                                    #   {"rand": [...]}, {"randint": [lo, hi], "shape": [...]} int64),
                                    #   optional "dtype": "float64"; saved as OUT/input_<i>.npy
    "kwargs": {"stride": 2, "padding": 1},   # torch keyword names; lists become tuples where torch
                                    # wants them (dim, kernel_size, pad, ...)
    "grad_out": "g.npy",            # optional upstream gradient: a path, or a list (one entry per
                                    # output, null for none). Default: ones for every floating output
                                    # (i.e. the gradient of out.sum()).
    "requires_grad": [true, false], # optional; default: every floating tensor input except the
                                    # op's buffers/weights listed in NO_GRAD (batch_norm running
                                    # stats, loss class weights)
    "dtype": "float64",             # optional: cast floating inputs before running
    "out": "case0"                  # output folder (created)
  }

Written to OUT:
  out.npy                  the output (the first output when there are several)
  out_<k>.npy              every output k when the op returns several (max/min with dim: values,
                           indices; max_pool2d with return_indices)
  grad_<i>.npy             d(sum(out * grad_out)) / d input i, for each input that required grad
                           (zeros when the input did not influence the output)
  buffer_<i>.npy           inputs the op updates in place (batch_norm running_mean/var), after the op
  input_<i>.npy            generated inputs
  result.json              {"op", "outputs": [{"file","shape","dtype"}], "grads": {i: file},
                            "buffers": {i: file}, "error": null or the torch error text}
A case whose torch call fails writes result.json with "error" and does not stop the batch; the exit
status is 1 if any case failed (unless the case says "expect_error": true), else 0.
"""
import json
import os
import sys
import traceback

# Use Debian's numpy (the one python3-torch 1.13 is built against): a pip-installed numpy 2 under
# /usr/local shadows it and breaks torch's numpy bridge ("Numpy is not available").
sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.set_num_threads(int(os.environ.get("KILN_ORACLE_THREADS", "1")))

# kwargs torch wants as tuples rather than lists.
TUPLE_KWARGS = {"dim", "kernel_size", "stride", "padding", "dilation", "output_size", "pad", "dims"}


def _where(cond, a, b):
    return torch.where(cond.bool() if torch.is_tensor(cond) else cond, a, b)


def _cat(*xs, **kw):
    return torch.cat(list(xs), **kw)


def _stack(*xs, **kw):
    return torch.stack(list(xs), **kw)


def _dice_loss(logits, target, ignore_index=255, smooth=1.0, include_background=True):
    """The soft Dice loss as kiln's dice_loss documents it, in a few lines of torch (no torch
    built-in exists): softmax over dim 1, one-hot target, ignored pixels masked out of both."""
    k = logits.shape[1]
    valid = target != ignore_index
    t = F.one_hot(torch.where(valid, target, torch.zeros_like(target)), k).movedim(-1, 1).to(logits.dtype)
    t = t * valid.unsqueeze(1).to(logits.dtype)
    p = torch.where(valid.unsqueeze(1), torch.softmax(logits, 1), torch.zeros((), dtype=logits.dtype))
    dims = [0] + list(range(2, logits.dim()))
    dice = (2 * (p * t).sum(dims) + smooth) / (p.sum(dims) + t.sum(dims) + smooth)
    if not include_background:
        dice = dice[1:]
    return 1 - dice.mean()


# op name -> callable(*inputs, **kwargs). Every op in kiln's CPU op list (dropout excluded: random).
OPS = {
    # elementwise (broadcasting)
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "neg": torch.neg,
    "pow": torch.pow, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "abs": torch.abs,
    "relu": F.relu, "leaky_relu": F.leaky_relu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "clamp": torch.clamp, "where": _where,
    # reductions
    "sum": torch.sum, "mean": torch.mean, "max": torch.max, "min": torch.min, "var": torch.var,
    "argmax": torch.argmax,
    # linear algebra, conv, pools, norms
    "matmul": torch.matmul, "linear": F.linear, "conv2d": F.conv2d, "max_pool2d": F.max_pool2d,
    "avg_pool2d": F.avg_pool2d, "adaptive_avg_pool2d": F.adaptive_avg_pool2d,
    "batch_norm": F.batch_norm,
    # softmax and losses
    "softmax": F.softmax, "log_softmax": F.log_softmax, "cross_entropy": F.cross_entropy,
    "nll_loss": F.nll_loss, "mse_loss": F.mse_loss, "dice_loss": _dice_loss,
    # shape
    "cat": _cat, "stack": _stack, "pad": F.pad,
}

# Inputs that are not differentiated by default: BN running stats (updated in place), class weights.
NO_GRAD = {"batch_norm": {1, 2}, "cross_entropy": {2}, "nll_loss": {2}}
# Inputs updated in place whose new value is written as buffer_<i>.npy.
BUFFERS = {"batch_norm": [1, 2]}


def resolve(op):
    if op in OPS:
        return OPS[op]
    for mod in (F, torch):
        if hasattr(mod, op):
            return getattr(mod, op)
    raise ValueError(f"unknown op '{op}'")


def load_input(entry, base, out_dir, i):
    """Returns (value, generated) where value is a tensor, None or a python scalar."""
    if entry is None or isinstance(entry, (bool, int, float)):
        return entry
    if isinstance(entry, str):
        path = entry if os.path.isabs(entry) else os.path.join(base, entry)
        return torch.from_numpy(np.load(path))
    if isinstance(entry, dict):
        gen = torch.Generator().manual_seed(int(entry.get("seed", 0)))
        if "randn" in entry or "rand" in entry:
            fn = torch.randn if "randn" in entry else torch.rand
            t = fn(tuple(entry.get("randn", entry.get("rand"))), generator=gen)
            t = t.to(getattr(torch, entry.get("dtype", "float32")))
        elif "randint" in entry:
            lo, hi = entry["randint"]
            t = torch.randint(lo, hi, tuple(entry["shape"]), generator=gen, dtype=torch.int64)
        else:
            raise ValueError(f"input {i}: unknown generator {entry}")
        np.save(os.path.join(out_dir, f"input_{i}.npy"), t.numpy())
        return t
    raise ValueError(f"input {i}: cannot interpret {entry!r}")


def to_kwargs(kw):
    out = {}
    for k, v in (kw or {}).items():
        out[k] = tuple(v) if (k in TUPLE_KWARGS and isinstance(v, list)) else v
    return out


def save(path, t):
    np.save(path, t.detach().contiguous().numpy())  # np.ascontiguousarray would make 0-d arrays 1-d


def run_case(case, base):
    op = case["op"]
    out_dir = case.get("out", op)
    out_dir = out_dir if os.path.isabs(out_dir) else os.path.join(base, out_dir)
    os.makedirs(out_dir, exist_ok=True)
    result = {"op": op, "outputs": [], "grads": {}, "buffers": {}, "error": None}
    try:
        fn = resolve(op)
        args = [load_input(e, base, out_dir, i) for i, e in enumerate(case.get("inputs", []))]
        if case.get("dtype"):
            dt = getattr(torch, case["dtype"])
            args = [a.to(dt) if torch.is_tensor(a) and a.is_floating_point() else a for a in args]
        rg = case.get("requires_grad")
        no_grad = NO_GRAD.get(op, set())
        for i, a in enumerate(args):
            if not torch.is_tensor(a):
                continue
            want = rg[i] if rg is not None and i < len(rg) else (a.is_floating_point() and i not in no_grad)
            if want:
                args[i] = a.detach().clone().requires_grad_(True)
            else:
                args[i] = a.detach().clone()
        outs = fn(*args, **to_kwargs(case.get("kwargs")))
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        for k, o in enumerate(outs):
            name = f"out_{k}.npy" if len(outs) > 1 else "out.npy"
            save(os.path.join(out_dir, name), o)
            if k == 0 and len(outs) > 1:
                save(os.path.join(out_dir, "out.npy"), o)
            result["outputs"].append({"file": name, "shape": list(o.shape), "dtype": str(o.dtype).replace("torch.", "")})
        for i in BUFFERS.get(op, []):
            if i < len(args) and torch.is_tensor(args[i]):
                save(os.path.join(out_dir, f"buffer_{i}.npy"), args[i])
                result["buffers"][str(i)] = f"buffer_{i}.npy"

        # backward: sum over floating outputs of <out_k, grad_out_k>
        g = case.get("grad_out")
        if g is not None and not isinstance(g, list):
            g = [g]
        leaves = [(i, a) for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad]
        pairs = []
        for k, o in enumerate(outs):
            if not (o.is_floating_point() and o.requires_grad):
                continue
            if g is not None:
                if k >= len(g) or g[k] is None:
                    continue
                go = load_input(g[k], base, out_dir, f"grad_out_{k}").to(o.dtype)
            else:
                go = torch.ones_like(o)
            pairs.append((o, go))
        if leaves and pairs:
            grads = torch.autograd.grad([p[0] for p in pairs], [a for _, a in leaves],
                                        grad_outputs=[p[1] for p in pairs], allow_unused=True)
            for (i, a), gr in zip(leaves, grads):
                gr = torch.zeros_like(a) if gr is None else gr
                save(os.path.join(out_dir, f"grad_{i}.npy"), gr)
                result["grads"][str(i)] = f"grad_{i}.npy"
    except Exception as e:  # noqa: BLE001 - reported per case, the batch goes on
        result["error"] = f"{type(e).__name__}: {e}"
        if not case.get("expect_error"):
            traceback.print_exc()
    with open(os.path.join(out_dir, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    spec_path = sys.argv[1]
    base = os.path.dirname(os.path.abspath(spec_path))
    with open(spec_path) as f:
        spec = json.load(f)
    cases = spec["cases"] if isinstance(spec, dict) and "cases" in spec else spec
    cases = cases if isinstance(cases, list) else [cases]
    failed = 0
    for case in cases:
        r = run_case(case, base)
        bad = (r["error"] is not None) != bool(case.get("expect_error"))
        if bad:
            failed += 1
            print(f"oracle: case '{case.get('out', case['op'])}' ({case['op']}): "
                  f"{r['error'] or 'expected an error, torch succeeded'}", file=sys.stderr)
    print(f"oracle: {len(cases) - failed}/{len(cases)} cases ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
