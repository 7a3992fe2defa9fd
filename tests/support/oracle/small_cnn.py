#!/usr/bin/python3
"""The small CNN kiln trains on (Fashion-)MNIST, defined exactly (kiln's model uses the same module
names and layout), plus the same reference export as export_resnet.py. Imported by
bench/peers/train_small_cnn_torch.py. A test oracle / peer only; kiln never depends on it.

  x: (N, 1, 28, 28)
  conv1 = Conv2d(1, 32, 3, padding=1); bn1 = BatchNorm2d(32); relu; MaxPool2d(2)   -> (N, 32, 14, 14)
  conv2 = Conv2d(32, 64, 3, padding=1); bn2 = BatchNorm2d(64); relu; MaxPool2d(2)  -> (N, 64, 7, 7)
  flatten -> (N, 3136); fc1 = Linear(3136, 128); relu; dropout = Dropout(0.25); fc2 = Linear(128, K)

  /usr/bin/python3 tests/support/oracle/small_cnn.py --out DIR [--num-classes 10] [--seed 0]
      [--batch 4] [--lr 0.1] [--momentum 0.9] [--weight-decay 1e-4] [--adamw-lr LR] [--keep-dropout]
Parameter names: conv1.weight conv1.bias bn1.weight bn1.bias bn1.running_mean bn1.running_var
bn1.num_batches_tracked conv2.* bn2.* fc1.weight fc1.bias fc2.weight fc2.bias.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_common  # noqa: E402  (also puts Debian's numpy first on sys.path)
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self, num_classes=10, in_channels=1, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):  # x: (N, 1, 28, 28)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)  # (N, 32, 14, 14)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)  # (N, 64, 7, 7)
        x = torch.flatten(x, 1)                               # (N, 3136)
        x = self.dropout(F.relu(self.fc1(x)))                 # (N, 128)
        return self.fc2(x)                                    # (N, K)


def build(num_classes, seed):
    torch.manual_seed(seed)
    return SmallCNN(num_classes)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    export_common.add_common_args(p, channels=1, size=28, batch=4, classes=10)
    args = p.parse_args()
    if args.channels != 1 or args.size != 28:
        p.error("the small CNN takes (N, 1, 28, 28) inputs")
    cfg = export_common.export(build(args.num_classes, args.seed), args, {"model": "small_cnn"})
    print(f"small_cnn: eval loss {cfg['eval_loss']:.6f}, train loss {cfg['train_loss']:.6f} -> {args.out}")


if __name__ == "__main__":
    main()
