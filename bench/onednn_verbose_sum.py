#!/usr/bin/python3
"""Sums ONEDNN_VERBOSE=1 exec lines (oneDNN 2.x `dnnl_verbose,exec,...` and 3.x `onednn_verbose,v1,primitive,
exec,...`: kiln's oneDNN 2.6 and torch 2.x's own) per pass and role, and per ResNet18 layer shape, in ms per
step: the convolutions themselves against the reorders around them, and each pass's implementation.

  ONEDNN_VERBOSE=1 build/bench_train_step --amp bf16 --no-peer --threads 1 --batch 8 --image-size 224 \\
      --steps 2 --warmup 1 > kiln.txt
  ONEDNN_VERBOSE=1 ~/.cache/kiln-torch-venv/bin/python bench/peers/train_step_torch.py --batch 8 --size 224 \\
      --threads 1 --steps 2 --warmup 1 --mode bf16 > torch.txt
  bench/onednn_verbose_sum.py kiln.txt 3 2      # FILE STEPS_IN_FILE (warm-up included) STEPS_TO_SUM (the last)

A reorder from a plain layout (nchw / oihw / nhwc) into a blocked one is an input of the next convolution ("in
act": x or dy; "in w": weights), a reorder back to plain the output of the previous one ("out": y, dx or dw).
Above one thread kiln's split weight gradients run one oneDNN call per thread: the times are summed over the
threads (CPU time), and the per-layer attribution of reorders may mix neighbours. Benchmark tool, not a test.
"""
import collections
import re
import sys

PLAIN = re.compile(r"blocked:(abcd|acdb|abdc|ab|a):")
PASS = {"forward_training": "fwd", "backward_data": "bwd_d", "backward_weights": "bwd_w"}


def layer(prob):
    m = re.match(r"mb(\d+)_ic(\d+)oc(\d+)_ih(\d+)oh(\d+)kh(\d+)sh(\d+)", prob)
    if not m:
        return prob
    _, ic, oc, ih, _, kh, sh = map(int, m.groups())
    name = "conv1" if ic == 3 else {64: "layer1", 128: "layer2", 256: "layer3", 512: "layer4"}.get(oc, "?")
    return f"{name} {kh}x{kh}/{sh} {ic}->{oc} {ih}px"


def main():
    path, total, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ex = []
    for line in open(path):
        p = line.rstrip().split(",")
        if "exec" not in p:
            continue
        i = p.index("exec")
        ex.append((p[i + 2], p[i + 3], p[i + 4], p[i + 5], p[i + 8], float(p[-1])))
    ex = ex[len(ex) - len(ex) // total * keep:]
    by_role, per_layer, impls = collections.defaultdict(float), collections.defaultdict(float), collections.defaultdict(set)
    pending, last = [], None
    for kind, impl, prop, mds, prob, t in ex:
        if kind == "convolution":
            ps, g = PASS.get(prop, prop), layer(prob)
            by_role[(ps, "conv")] += t
            per_layer[(g, ps, "conv")] += t
            impls[(g, ps)].add(impl)
            for rt, role in pending:
                by_role[(ps, "reorder in " + role)] += rt
                per_layer[(g, ps, "reorder")] += rt
            pending, last = [], (g, ps)
        elif kind == "reorder":
            src, dst = mds.split(" ")[:2]
            if PLAIN.search(src) and not PLAIN.search(dst):
                dims = [int(v) for v in prob.split("x")] if re.fullmatch(r"[\dx]+", prob) else []
                w = len(dims) == 4 and dims[2] <= 7 and dims[3] <= 7 and dims[0] >= 64
                pending.append((t, "w" if w else "act"))
            elif last:
                by_role[(last[1], "reorder out")] += t
                per_layer[(last[0], last[1], "reorder")] += t
        else:
            by_role[(kind, impl)] += t
    total_ms = sum(by_role.values()) / keep
    print(f"# {path}: {len(ex)} exec lines in the last {keep} steps: {total_ms:.1f} ms per step in oneDNN")
    for (a, b), v in sorted(by_role.items(), key=lambda kv: -kv[1]):
        print(f"{a:8s} {b:24s} {v / keep:8.1f} ms/step")
    print("# per layer shape (all layers of the shape): conv + reorders, ms per step [implementation]")
    for g in sorted({k[0] for k in per_layer}):
        cells = []
        for ps in ("fwd", "bwd_d", "bwd_w"):
            c, r = per_layer.get((g, ps, "conv"), 0) / keep, per_layer.get((g, ps, "reorder"), 0) / keep
            cells.append(f"{ps} {c:6.1f} + {r:5.1f} [{','.join(sorted(impls.get((g, ps), [])))}]")
        print(f"{g:30s} " + " | ".join(cells))


if __name__ == "__main__":
    main()
