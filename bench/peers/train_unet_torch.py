#!/usr/bin/python3
"""The PyTorch side of the main job's segmentation run: the same UNet as kiln's unet_small (base width 8,
depth 4, transposed-conv up-sampling; the module of tests/support/oracle/unet.py), the same exported data
(`kiln export-images --segmentation DIR --classes shapes`), the same recipe (AdamW, weight decay 0.01,
cosine over the steps to 0, batch 16, shuffled, cross-entropy with ignore index 255, pixels / 255, no
normalization) and kiln's metrics (one confusion matrix over the whole val split; mean IoU over the classes
present in target or prediction, background included). A benchmark peer only; no test depends on it.

  /usr/bin/python3 bench/peers/train_unet_torch.py --data DIR [--epochs 6] [--lr 5e-3] [--threads 2] [--seed 0]

Prints one line per epoch (train loss, val mIoU, per-class IoU, img/s) and a last line:
  torch unet_small: val mIoU X% after N epochs, T s (training + validation)
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "support", "oracle"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from PIL import Image  # noqa: E402
from unet import UNet  # noqa: E402


def load(split_dir):
    names = sorted(os.listdir(os.path.join(split_dir, "images")))
    x = np.stack([np.array(Image.open(os.path.join(split_dir, "images", n))) for n in names]).astype(np.float32) / 255
    y = np.stack([np.array(Image.open(os.path.join(split_dir, "masks", n))) for n in names]).astype(np.int64)
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def miou(conf):
    tp = conf.diag().double()
    union = conf.sum(0).double() + conf.sum(1).double() - tp
    present = union > 0
    iou = torch.where(present, tp / union.clamp(min=1), torch.full_like(tp, float("nan")))
    return iou[present].mean().item(), iou


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--base", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    classes = [c for c in open(os.path.join(a.data, "classes.txt")).read().split("\n") if c]
    k = len(classes)
    xt, yt = load(os.path.join(a.data, "train"))
    xv, yv = load(os.path.join(a.data, "val"))
    model = UNet(1, k, depth=4, base=a.base)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    steps = a.epochs * ((len(xt) + a.batch - 1) // a.batch)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    t0 = time.time()
    m = 0.0
    for epoch in range(1, a.epochs + 1):
        te = time.time()
        model.train()
        perm = torch.randperm(len(xt))
        total = 0.0
        for i in range(0, len(xt), a.batch):
            idx = perm[i:i + a.batch]
            loss = F.cross_entropy(model(xt[idx]), yt[idx], ignore_index=255)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
        rate = len(xt) / (time.time() - te)
        model.eval()
        conf = torch.zeros(k, k, dtype=torch.int64)
        with torch.no_grad():
            for i in range(0, len(xv), 64):
                pred = model(xv[i:i + 64]).argmax(1)
                t = yv[i:i + 64]
                keep = t != 255
                conf += torch.bincount(t[keep] * k + pred[keep], minlength=k * k).view(k, k)
        m, iou = miou(conf)
        print(f"epoch {epoch}/{a.epochs}  train loss {total / len(xt):.4f}  val mIoU {100 * m:.2f}%  IoU "
              + "/".join(f"{v:.3f}" for v in iou.tolist()) + f"  {rate:.0f} img/s", flush=True)
    print(f"torch unet_small: val mIoU {100 * m:.2f}% after {a.epochs} epochs, {time.time() - t0:.1f} s "
          f"(training + validation; torch {torch.__version__}, {a.threads} threads)")


if __name__ == "__main__":
    main()
