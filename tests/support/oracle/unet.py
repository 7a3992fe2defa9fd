#!/usr/bin/python3
"""The UNet of kiln's models/unet.h written in torch with the same module names (the layout of the
common PyTorch UNet, milesial/Pytorch-UNet, generalized to any depth and base width), and a reference
export for kiln's parity test: weights, a batch, logits, loss, gradients and BN buffers. A test
oracle only; kiln never depends on it.

  /usr/bin/python3 tests/support/oracle/unet.py --out DIR [--depth 2] [--base 4] [--bilinear]
      [--stride2] [--batch 2] [--channels 3] [--classes 3] [--height 20] [--width 22] [--seed 0]
      [--dtype float32|float64]

Files written to OUT:
  model.safetensors          initial state_dict (torch names; num_batches_tracked as I64)
  input.npy, labels.npy      x (N, C, H, W) (float32 or float64), y (N, H, W) int64 in [0, K), with
                             about one pixel in six set to 255 (ignored)
  forward.safetensors        eval.logits (model.eval()), train.logits (model.train()), train.loss =
                             cross_entropy(logits, y, ignore_index=255) + dice(logits, y) (dice as
                             kiln's dice_loss: softmax, ignored pixels masked out of both, smooth 1)
  grads.safetensors          d train.loss / d parameter (torch names, named_parameters order)
  train_buffers.safetensors  BN buffers after the train-mode forward
  config.json                the arguments, torch version and the losses
"""
import argparse
import copy
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_common  # noqa: E402  (also puts Debian's numpy first on sys.path)
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class DoubleConv(nn.Module):
    def __init__(self, cin, cout, mid=None, first_stride=1):
        super().__init__()
        mid = mid or cout
        self.double_conv = nn.Sequential(
            nn.Conv2d(cin, mid, 3, stride=first_stride, padding=1, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(cin, cout))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    def __init__(self, cin, cout, bilinear):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(cin, cout, cin // 2)
        else:
            self.up = nn.ConvTranspose2d(cin, cin // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(cin, cout)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        dy, dx = x2.size(2) - x1.size(2), x2.size(3) - x1.size(3)
        x1 = F.pad(x1, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return self.conv(torch.cat([x2, x1], dim=1))


class OutConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class UNet(nn.Module):
    def __init__(self, in_channels, num_classes, depth=4, base=64, bilinear=False, first_stride=1):
        super().__init__()
        f = 2 if bilinear else 1
        w = [base << i for i in range(depth + 1)]
        self.depth = depth
        self.inc = DoubleConv(in_channels, w[0], first_stride=first_stride)
        for i in range(1, depth + 1):
            setattr(self, f"down{i}", Down(w[i - 1], w[i] // f if i == depth else w[i]))
        for j in range(1, depth + 1):
            setattr(self, f"up{j}", Up(w[depth - j + 1], w[0] if j == depth else w[depth - j] // f, bilinear))
        self.outc = OutConv(w[0], num_classes)

    def forward(self, x):
        skips = [self.inc(x)]
        for i in range(1, self.depth + 1):
            skips.append(getattr(self, f"down{i}")(skips[-1]))
        y = skips[-1]
        for j in range(1, self.depth + 1):
            y = getattr(self, f"up{j}")(y, skips[self.depth - j])
        logits = self.outc(y)
        if logits.shape[-2:] != x.shape[-2:]:  # the stride-2 first conv
            logits = F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return logits


def dice_loss(logits, target, ignore_index=255, smooth=1.0):
    k = logits.shape[1]
    valid = target != ignore_index
    t = F.one_hot(torch.where(valid, target, torch.zeros_like(target)), k).movedim(-1, 1).to(logits.dtype)
    t = t * valid.unsqueeze(1).to(logits.dtype)
    p = torch.where(valid.unsqueeze(1), torch.softmax(logits, 1), torch.zeros((), dtype=logits.dtype))
    dims = [0, 2, 3]
    dice = (2 * (p * t).sum(dims) + smooth) / (p.sum(dims) + t.sum(dims) + smooth)
    return 1 - dice.mean()


def seg_loss(logits, y):
    return F.cross_entropy(logits, y, ignore_index=255) + dice_loss(logits, y)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--base", type=int, default=4)
    p.add_argument("--bilinear", action="store_true")
    p.add_argument("--stride2", action="store_true")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--channels", type=int, default=3)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--height", type=int, default=20)
    p.add_argument("--width", type=int, default=22)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = UNet(args.channels, args.classes, args.depth, args.base, args.bilinear, 2 if args.stride2 else 1)
    gen = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.channels, args.height, args.width, generator=gen)
    y = torch.randint(0, args.classes, (args.batch, args.height, args.width), generator=gen, dtype=torch.int64)
    y[torch.rand(y.shape, generator=gen) < 1 / 6] = 255
    if args.dtype == "float64":
        x, model = x.double(), model.double()
    np.save(f"{args.out}/input.npy", x.numpy())
    np.save(f"{args.out}/labels.npy", y.numpy())
    init = copy.deepcopy(model)
    export_common.write_safetensors(f"{args.out}/model.safetensors", list(init.state_dict().items()))
    with torch.no_grad():
        eval_logits = copy.deepcopy(init).eval()(x)
    m = copy.deepcopy(init).train()
    train_logits = m(x)
    loss = seg_loss(train_logits, y)
    loss.backward()
    export_common.write_safetensors(f"{args.out}/forward.safetensors", [
        ("eval.logits", eval_logits), ("train.logits", train_logits.detach()), ("train.loss", loss.detach())])
    export_common.write_safetensors(f"{args.out}/grads.safetensors", [(n, q.grad) for n, q in m.named_parameters()])
    export_common.write_safetensors(f"{args.out}/train_buffers.safetensors", list(m.named_buffers()))
    cfg = dict(vars(args))
    cfg.update({"torch": torch.__version__, "train_loss": float(loss),
                "parameters": sum(q.numel() for q in model.parameters())})
    with open(f"{args.out}/config.json", "w") as f:
        json.dump(cfg, f, indent=1)
    print(f"unet: train loss {float(loss):.6f}, {cfg['parameters']} parameters -> {args.out}")


if __name__ == "__main__":
    main()
