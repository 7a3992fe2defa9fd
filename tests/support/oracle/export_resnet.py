#!/usr/bin/python3
"""Exports a torchvision ResNet (18, 34, 50 or 101) and PyTorch reference results for kiln's model
parity tests (logits and loss in train and eval mode, gradients, and the weights after one
SGD-momentum step and after one AdamW step). A test oracle only; kiln never depends on it.

  /usr/bin/python3 tests/support/oracle/export_resnet.py --out DIR [--arch resnet18|resnet34|resnet50|resnet101]
      [--num-classes 10] [--seed 0] [--batch 2] [--channels 3] [--size 64] [--small-stem]
      [--lr 0.1] [--momentum 0.9] [--weight-decay 1e-4] [--adamw-lr LR] [--threads 1]
      [--dtype float32|float64] [--layout-only]

--small-stem replaces the stem with kiln's small-image variant (conv1 = 3x3 stride 1 padding 1, no
bias; no max-pool), keeping every parameter name. The files written are listed in export_common.py.
--layout-only writes just layout.json: the state_dict's names, shapes and dtypes in order, the
parameter count, and per parameter the mean and standard deviation of its initial values (for
checking names, shapes and initialisation without computing anything).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_common  # noqa: E402  (also puts Debian's numpy first on sys.path)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torchvision  # noqa: E402


def build(arch, num_classes, seed, small_stem):
    torch.manual_seed(seed)
    model = getattr(torchvision.models, arch)(weights=None, num_classes=num_classes)
    if small_stem:
        model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
    return model


def write_layout(model, args):
    os.makedirs(args.out, exist_ok=True)
    params = dict(model.named_parameters())
    entries = []
    for name, t in model.state_dict().items():
        e = {"name": name, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
             "parameter": name in params}
        if t.is_floating_point():
            e["mean"] = float(t.double().mean())
            e["std"] = float(t.double().std(unbiased=False))
        entries.append(e)
    layout = {"model": args.arch + ("_small" if args.small_stem else ""), "torch": torch.__version__,
              "torchvision": torchvision.__version__,
              "parameter_count": sum(p.numel() for p in model.parameters()), "state": entries}
    with open(f"{args.out}/config.json", "w") as f:
        json.dump(layout, f, indent=1)
    print(f"{layout['model']}: {len(entries)} state entries, {layout['parameter_count']} parameters -> {args.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=["resnet18", "resnet34", "resnet50", "resnet101"], default="resnet18")
    p.add_argument("--small-stem", action="store_true")
    p.add_argument("--layout-only", action="store_true", help="write config.json with the state layout only")
    export_common.add_common_args(p, channels=3, size=64, batch=2, classes=10)
    args = p.parse_args()
    model = build(args.arch, args.num_classes, args.seed, args.small_stem)
    if args.layout_only:
        write_layout(model, args)
        return
    cfg = export_common.export(model, args, {"model": args.arch + ("_small" if args.small_stem else "")})
    print(f"{cfg['model']}: eval loss {cfg['eval_loss']:.6f}, train loss {cfg['train_loss']:.6f} -> {args.out}")


if __name__ == "__main__":
    main()
