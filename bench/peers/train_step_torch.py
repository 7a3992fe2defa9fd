#!/usr/bin/python3
"""PyTorch peer of bench/bench_train_step.cpp: times one torchvision-architecture ResNet18
training step (forward, cross-entropy, backward, SGD momentum step) on the CPU and prints one JSON
line {"batch", "size", "threads", "steps", "step_ms": [...], "median_ms", "torch", "mode", "layout",
"cpu_capability"}.

  PYTHON bench/peers/train_step_torch.py --batch 8 --size 224 --threads 2 --steps 3 [--warmup 1]
      [--mode f32|channels_last|bf16]

PYTHON: Debian's /usr/bin/python3 (torch 1.13) or the pinned torch 2.x of bench/torch_venv.sh
(~/.cache/kiln-torch-venv/bin/python); the script runs under both. --mode:
  f32            f32, NCHW (contiguous) model and input (the default; what this peer always did)
  channels_last  f32, model and input in torch.channels_last (NHWC)
  bf16           torch.autocast("cpu", dtype=torch.bfloat16) around forward + loss, backward and the
                 SGD step outside it, f32 master weights, no GradScaler (bf16 has f32's range); model
                 and input channels_last: PyTorch's fast CPU bf16 recipe (oneDNN's bf16 convolutions
                 are blocked/NHWC)
The model is built here (BasicBlock ResNet18, torchvision's layout) so torchvision is not needed.
"""
import argparse
import json
import os
import sys
import time

sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)), inplace=True)
        y = self.bn2(self.conv2(y))
        return F.relu(y + idt, inplace=True)


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for i, c in enumerate([64, 128, 256, 512]):
            s = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(cin, c, s), BasicBlock(c, c, 1)))
            cin = c
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x)), inplace=True))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--mode", choices=["f32", "channels_last", "bf16"], default="f32")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    model = ResNet18(a.num_classes).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, a.num_classes, (a.batch,))
    layout = "nchw"
    if a.mode in ("channels_last", "bf16"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
        layout = "channels_last"
    times = []
    for i in range(a.warmup + a.steps):
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if i >= a.warmup:
            times.append((time.perf_counter() - t) * 1e3)
    s = sorted(times)
    print(json.dumps({"batch": a.batch, "size": a.size, "threads": a.threads, "steps": a.steps,
                      "step_ms": times, "median_ms": s[len(s) // 2], "torch": torch.__version__, "mode": a.mode,
                      "layout": layout, "cpu_capability": cpu_capability()}))


def cpu_capability():
    """The SIMD level torch's own CPU kernels dispatch to (torch >= 2.0), or "n/a" (1.13)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:
        return "n/a"


if __name__ == "__main__":
    main()
