"""PyTorch oracle for kiln model files (docs/model-files.md): builds a torch.nn.Module from the same
JSON with the format's rules written out a second time, independently of kiln's C++ (names and scopes,
default inputs, "input" references, blocks, repeats, add/concat), then writes the reference files of
export_common.export (initial weights, batch, eval/train logits and loss, gradients, BN buffers, one
SGD and one AdamW step). A test oracle only; kiln never depends on it.

  python3 model_file.py --file docs/models/residual_cnn.json --out DIR [--channels 3 --size 16 ...]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export_common  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402


class Group(nn.Module):
    """A container of the module tree ("layer1", "layer1.0"); the Graph runs the leaves."""


def join(prefix, name):
    return f"{prefix}.{name}" if prefix else name


class Parser:
    def __init__(self):
        self.entries = {}   # full name -> ("layer", spec, [refs]) or ("alias", ref)
        self.layers = []    # full names of layers, file order

    def add(self, name, entry):
        assert name not in self.entries, f"name used twice: {name}"
        self.entries[name] = entry
        if entry[0] == "layer":
            self.layers.append(name)

    # A reference: (text, scopes) resolved lexically, or ("=", full name) for exact ones.
    def expand(self, items, scopes):
        prefix = scopes[0]
        prev = ("=", prefix + "@input")
        for k, spec in enumerate(items):
            full = join(prefix, spec.get("name", str(k)))
            kind = spec["type"]
            ref = (spec["input"], scopes) if "input" in spec else prev
            if kind == "block":
                self.add(full + "@input", ("alias", ref))
                inner = [full] + scopes
                last = self.expand(spec["layers"], inner)
                self.add(full, ("alias", (spec["output"], inner) if "output" in spec else ("=", last)))
            elif kind == "repeat":
                self.add(full + "@input", ("alias", ref))
                inner = [full] + scopes
                prev_it = full + "@input"
                start = spec.get("start", 0)
                for i in range(start, start + spec["count"]):
                    it = join(full, str(i))
                    self.add(it + "@input", ("alias", ("=", prev_it)))
                    last = self.expand(spec["layers"], [it] + inner)
                    self.add(it, ("alias", ("=", last)))
                    prev_it = it
                self.add(full, ("alias", ("=", prev_it)))
            else:
                refs = [(r, scopes) for r in spec["inputs"]] if kind in ("add", "concat") else [ref]
                self.add(full, ("layer", spec, refs))
            prev = ("=", full)
        return prev[1]

    def resolve(self, ref):
        text, scopes = ref
        if text == "=":
            name = scopes
        elif text == "input":
            name = scopes[0] + "@input"
        else:
            name = next(join(s, text) for s in scopes if join(s, text) in self.entries)
        while True:
            if name == "@input":
                return None  # the model input
            e = self.entries[name]
            if e[0] == "layer":
                return name
            if e[1][0] == "=":
                name = e[1][1]
            else:
                return self.resolve(e[1])


def make_layer(spec, x, num_classes):
    """The torch module of one layer for input x (a probe batch); None for add/concat."""
    t = spec["type"]
    g = spec.get
    if t == "conv2d":
        return nn.Conv2d(x.shape[1], spec["out_channels"], spec["kernel"], g("stride", 1), g("padding", 0),
                         g("dilation", 1), g("groups", 1), g("bias", True))
    if t == "batch_norm":
        return nn.BatchNorm2d(x.shape[1], eps=g("eps", 1e-5), momentum=g("momentum", 0.1))
    if t == "relu":
        return nn.ReLU()
    if t == "leaky_relu":
        return nn.LeakyReLU(g("negative_slope", 0.01))
    if t == "gelu":
        return nn.GELU()
    if t == "sigmoid":
        return nn.Sigmoid()
    if t == "tanh":
        return nn.Tanh()
    if t == "max_pool":
        return nn.MaxPool2d(spec["kernel"], g("stride", spec["kernel"]), g("padding", 0), g("dilation", 1),
                            ceil_mode=g("ceil_mode", False))
    if t == "avg_pool":
        return nn.AvgPool2d(spec["kernel"], g("stride", spec["kernel"]), g("padding", 0), g("ceil_mode", False),
                            g("count_include_pad", True))
    if t == "adaptive_avg_pool":
        return nn.AdaptiveAvgPool2d(g("output_size", 1))
    if t == "linear":
        out = num_classes if spec["out_features"] == "num_classes" else spec["out_features"]
        return nn.Linear(x.shape[1], out, g("bias", True))
    if t == "dropout":
        return nn.Dropout(g("p", 0.5))
    if t == "flatten":
        return nn.Flatten(1)
    if t == "conv_transpose2d":
        return nn.ConvTranspose2d(x.shape[1], spec["out_channels"], spec["kernel"], g("stride", 1), g("padding", 0),
                                  g("output_padding", 0), g("groups", 1), g("bias", True), g("dilation", 1))
    if t == "upsample":
        mode = g("mode", "nearest")
        ac = g("align_corners", False) if mode == "bilinear" else None
        return nn.Upsample(size=g("size"), scale_factor=g("scale_factor"), mode=mode, align_corners=ac)
    if t in ("add", "concat"):
        return None
    raise ValueError(f"model_file.py does not know layer type {t}")


class Graph(nn.Module):
    def __init__(self, doc, channels, size, num_classes):
        super().__init__()
        p = Parser()
        last = p.expand(doc["layers"], [""])
        out = p.resolve((doc["output"], [""]) if "output" in doc else ("=", last))
        inputs = {n: [p.resolve(r) for r in p.entries[n][2]] for n in p.layers}
        order, seen = [], set()

        def visit(n):
            if n is None or n in seen:
                return
            seen.add(n)
            for q in inputs[n]:
                visit(q)
            order.append(n)
        visit(out)
        # Modules in dependency order (shapes from a probe batch), registered in file order.
        probe = {None: torch.zeros(2, channels, size, size)}
        mods = {}
        with torch.no_grad():
            for n in order:
                spec = p.entries[n][1]
                xs = [probe[q] for q in inputs[n]]
                m = make_layer(spec, xs[0], num_classes)
                mods[n] = m
                if m is not None:
                    m.eval()  # the probe must not move BN running stats
                probe[n] = self._run(spec["type"], m, xs)
                if m is not None:
                    m.train()
        for n in p.layers:
            if mods.get(n) is None:
                continue
            parts = n.split(".")
            parent = self
            for part in parts[:-1]:
                if part not in parent._modules:
                    parent.add_module(part, Group())
                parent = parent._modules[part]
            parent.add_module(parts[-1], mods[n])
        self.order = order
        self.inputs = inputs
        self.types = {n: p.entries[n][1]["type"] for n in p.layers}
        self.mods = mods  # plain dict: the same module objects as the tree's

    @staticmethod
    def _run(kind, m, xs):
        if kind == "add":
            y = xs[0]
            for x in xs[1:]:
                y = y + x
            return y
        if kind == "concat":
            return torch.cat(xs, 1)
        return m(xs[0])

    def forward(self, x):
        vals = {None: x}
        for n in self.order:
            vals[n] = self._run(self.types[n], self.mods[n], [vals[q] for q in self.inputs[n]])
        return vals[self.order[-1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", required=True, help="the model file")
    export_common.add_common_args(ap, channels=3, size=16, batch=4, classes=5)
    args = ap.parse_args()
    with open(args.file) as f:
        doc = json.load(f)
    torch.manual_seed(args.seed)
    model = Graph(doc, args.channels, args.size, args.num_classes)
    # deepcopy keeps self.mods pointing at the copy's own modules (one memo for the whole object).
    cfg = export_common.export(model, args, {"model": args.file})
    print(f"{args.file}: eval loss {cfg['eval_loss']:.6f}, train loss {cfg['train_loss']:.6f} -> {args.out}")


if __name__ == "__main__":
    main()
