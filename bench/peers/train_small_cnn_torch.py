#!/usr/bin/python3
"""PyTorch peer of kiln's small-CNN training: trains the exact small CNN of
tests/support/oracle/small_cnn.py on Fashion-MNIST (IDX files, gzip or plain, read with numpy; by
default Debian's /usr/share/datasets/fashion-mnist) and prints one JSON line with the test accuracy
per epoch, wall time and images/s. It is the side-by-side reference for `kiln train`, not a test.

  PYTHON bench/peers/train_small_cnn_torch.py [--data DIR] [--epochs 2] [--batch 128]
      [--optimizer sgd|adamw] [--lr 0.05] [--momentum 0.9] [--weight-decay 0] [--threads 2] [--seed 0]
      [--limit N] [--workers 1] [--wait-policy passive|active|default] [--spin 3000]
      [--mode f32|channels_last|bf16]

PYTHON: Debian's /usr/bin/python3 (torch 1.13) or the pinned torch 2.x of bench/torch_venv.sh
(~/.cache/kiln-torch-venv/bin/python); the script runs under both. --mode: f32 (NCHW, the default and
the old behaviour); channels_last (f32, model and batches in torch.channels_last); bf16
(torch.autocast("cpu", dtype=torch.bfloat16) around forward + loss and around evaluation, backward and
step outside, f32 master weights, no GradScaler; model and batches channels_last, PyTorch's fast CPU bf16
recipe). The batch's channels_last copy is inside the timed step (kiln's --channels-last copies too).

Data: pixels / 255, then normalized with the mean and std of the training pixels; training order
reshuffled every epoch from --seed; no augmentation. Evaluation: model.eval() on the whole test
split after every epoch. images/s counts training images over training time (evaluation excluded); train_cpu_s is
the process's CPU seconds (time.process_time, all threads) over that same training time.

--data may also be a JPEG image folder (train/ and test/ or val/ of class subfolders: what
`kiln export-images` writes, the main job's data): torchvision's ImageFolder then decodes every image
each epoch with PIL in --workers DataLoader processes (kiln train --workers), as grayscale, normalized
with Fashion-MNIST's training mean and std (0.2860, 0.3530: kiln's --normalize auto computes them once
before training, outside the timed part); --limit takes N images drawn with --seed. Without torchvision (the torch 2.x venv has none: no
torchvision release matches its torch yet) the folder is read by an equivalent PIL-only dataset (the
same steps: ImageFolder's sorted classes and files, PIL open, convert("RGB"), convert("L"), /255,
normalize); the JSON line's "folder_reader" says which ran.

Threads: libgomp's default wait policy (spin, then sleep) stalls every parallel region when a core is
taken by another process: on the shared 2-core machine, batch 16 at --threads 2 ran at 26-28 img/s
against 246 img/s with OMP_WAIT_POLICY=passive in the same minute (load ~10). kiln runs with passive
(kernels/cpu/threads.h), so this peer sets the same policy before torch (and its libgomp) loads,
unless the caller set one. --wait-policy default keeps libgomp's own (the old behaviour). With a policy
set here, GOMP_SPINCOUNT is kiln's too (--spin, default 3000: a short spin before sleeping), unless the
caller set one; --spin 0 is plain passive.
"""
import argparse
import gzip
import json
import math
import os
import sys
import time

sys.path[:] = [p for p in sys.path if not p.startswith("/usr/local/lib/python3")]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "support",
                                "oracle"))

# libgomp reads OMP_WAIT_POLICY once, when torch loads it: set it before the import (see above).
_policy = "passive"
for _i, _a in enumerate(sys.argv):
    if _a == "--wait-policy" and _i + 1 < len(sys.argv):
        _policy = sys.argv[_i + 1]
    elif _a.startswith("--wait-policy="):
        _policy = _a.split("=", 1)[1]
_spin = "3000"  # as kiln (kernels/cpu/threads.h): a short spin before sleeping, GOMP_SPINCOUNT
for _i, _a in enumerate(sys.argv):
    if _a == "--spin" and _i + 1 < len(sys.argv):
        _spin = sys.argv[_i + 1]
    elif _a.startswith("--spin="):
        _spin = _a.split("=", 1)[1]
if _policy != "default":
    os.environ.setdefault("OMP_WAIT_POLICY", _policy)
    os.environ.setdefault("GOMP_SPINCOUNT", _spin)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from small_cnn import SmallCNN  # noqa: E402


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not a u8 IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError(f"{path}: {data.size} bytes of data for shape {dims}")
    return data.reshape(dims)


def find(folder, stem):
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"{folder}: no {stem}(.gz)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--schedule", choices=["none", "cosine"], default="none",
                   help="per-step learning rate: none, or cosine from lr to 0 over the run (kiln's --schedule cosine)")
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images (smoke runs)")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes for a JPEG folder")
    p.add_argument("--wait-policy", choices=["passive", "active", "default"], default="passive",
                   help="OMP_WAIT_POLICY for torch's OpenMP threads (default: libgomp's own; an OMP_WAIT_POLICY "
                        "already in the environment wins)")
    p.add_argument("--mode", choices=["f32", "channels_last", "bf16"], default="f32",
                   help="f32 (NCHW), channels_last (f32) or bf16 (CPU autocast, channels_last)")
    p.add_argument("--spin", type=int, default=3000,
                   help="GOMP_SPINCOUNT with --wait-policy passive/active (kiln's 3000; one in the environment wins)")
    args = p.parse_args()

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    if os.path.isdir(os.path.join(args.data, "train")):
        return train_folder(args, t_start)
    xtr = read_idx(find(args.data, "train-images-idx3-ubyte"))
    ytr = read_idx(find(args.data, "train-labels-idx1-ubyte"))
    xte = read_idx(find(args.data, "t10k-images-idx3-ubyte"))
    yte = read_idx(find(args.data, "t10k-labels-idx1-ubyte"))
    if args.limit:
        xtr, ytr = xtr[:args.limit], ytr[:args.limit]
    xtr = torch.from_numpy(xtr.astype(np.float32) / 255.0)
    mean, std = float(xtr.mean()), float(xtr.std())
    xtr = ((xtr - mean) / std).unsqueeze(1)                     # (N, 1, 28, 28)
    xte = ((torch.from_numpy(xte.astype(np.float32) / 255.0) - mean) / std).unsqueeze(1)
    ytr, yte = torch.from_numpy(ytr.astype(np.int64)), torch.from_numpy(yte.astype(np.int64))

    gen = torch.Generator().manual_seed(args.seed)

    def train_batches():  # one epoch, reshuffled from --seed
        order = torch.randperm(len(xtr), generator=gen)
        for i in range(0, len(order), args.batch):
            idx = order[i:i + args.batch]
            yield xtr[idx], ytr[idx]

    def test_batches():
        for i in range(0, len(xte), 1000):
            yield xte[i:i + 1000], yte[i:i + 1000]

    fit(args, t_start, 10, train_batches, (len(xtr) + args.batch - 1) // args.batch, test_batches, len(xte), {})


def fit(args, t_start, num_classes, train_batches, steps_per_epoch, test_batches, n_test, extra):
    """Trains the small CNN for --epochs over train_batches() (one epoch each call), evaluates on
    test_batches() after every epoch, and prints the JSON line (extra: more keys)."""
    model = SmallCNN(num_classes=num_classes)
    cl = args.mode in ("channels_last", "bf16")
    if cl:
        model = model.to(memory_format=torch.channels_last)

    def prep(x):  # the batch in the mode's layout
        return x.contiguous(memory_format=torch.channels_last) if cl else x

    def autocast():
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.mode == "bf16")
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    accs, losses, train_s, train_cpu_s, seen = [], [], 0.0, 0.0, 0
    total_steps, step = steps_per_epoch * args.epochs, 0
    for _ in range(args.epochs):
        model.train()
        t0, c0 = time.perf_counter(), time.process_time()
        total, n = 0.0, 0
        for x, y in train_batches():
            if args.schedule == "cosine":  # the lr of step `step`, set before it, as kiln does
                for g in opt.param_groups:
                    g["lr"] = 0.5 * args.lr * (1.0 + math.cos(math.pi * min(1.0, step / total_steps)))
            step += 1
            opt.zero_grad(set_to_none=True)
            with autocast():
                loss = F.cross_entropy(model(prep(x)), y)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(y)
            n += len(y)
        train_s += time.perf_counter() - t0
        train_cpu_s += time.process_time() - c0
        seen += n
        losses.append(total / n)
        model.eval()
        correct = 0
        with torch.no_grad(), autocast():
            for x, y in test_batches():
                correct += int((model(prep(x)).argmax(1) == y).sum())
        accs.append(correct / n_test)
    print(json.dumps({
        "peer": "torch", "torch": torch.__version__, "model": "small_cnn", "data": args.data, **extra,
        "mode": args.mode, "layout": "channels_last" if cl else "nchw", "config": vars(args), "train_loss": [round(v, 5) for v in losses], "test_acc": accs,
        "wall_s": round(time.perf_counter() - t_start, 2), "train_s": round(train_s, 2),
        "train_cpu_s": round(train_cpu_s, 3),
        "images_per_s": round(seen / train_s, 1),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT", "default")}))


def train_folder(args, t_start):
    """The JPEG-folder path: ImageFolder + DataLoader, decoding every epoch (see the module doc)."""
    test_dir = next(os.path.join(args.data, d) for d in ("test", "val") if os.path.isdir(os.path.join(args.data, d)))
    try:
        import torchvision
        import torchvision.transforms as T
        tf = T.Compose([T.Grayscale(1), T.ToTensor(), T.Normalize((0.2860,), (0.3530,))])
        train = torchvision.datasets.ImageFolder(os.path.join(args.data, "train"), transform=tf)
        test = torchvision.datasets.ImageFolder(test_dir, transform=tf)
        reader = "torchvision"
    except ImportError:
        train = GrayImageFolder(os.path.join(args.data, "train"))
        test = GrayImageFolder(test_dir)
        reader = "pil"
    if args.limit:
        pick = torch.randperm(len(train), generator=torch.Generator().manual_seed(args.seed))[:args.limit]
        train = torch.utils.data.Subset(train, pick.tolist())
    gen = torch.Generator().manual_seed(args.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch, shuffle=True, generator=gen,
                                         num_workers=args.workers, persistent_workers=args.workers > 0)
    test_loader = torch.utils.data.DataLoader(test, batch_size=1000, num_workers=args.workers)
    fit(args, t_start, len(test.classes), lambda: loader, len(loader), lambda: test_loader, len(test),
        {"folder": True, "folder_reader": reader})


class GrayImageFolder(torch.utils.data.Dataset):
    """torchvision's ImageFolder + Grayscale(1) + ToTensor + Normalize((0.2860,), (0.3530,)) with PIL
    alone: classes are the sorted subfolders, samples the sorted image files of each, decoded with
    PIL, convert("RGB") (ImageFolder's loader) then convert("L") (Grayscale), / 255, normalized."""
    EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")

    def __init__(self, root):
        self.classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
        self.samples = []
        for i, c in enumerate(self.classes):
            for dirpath, _, files in sorted(os.walk(os.path.join(root, c), followlinks=True)):
                for f in sorted(files):
                    if f.lower().endswith(self.EXTENSIONS):
                        self.samples.append((os.path.join(dirpath, f), i))
        if not self.samples:
            raise FileNotFoundError(f"{root}: no image files in class subfolders")

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        from PIL import Image
        path, label = self.samples[i]
        with open(path, "rb") as f:
            img = Image.open(f).convert("RGB").convert("L")
        x = torch.from_numpy(np.array(img, dtype=np.uint8, copy=True)).unsqueeze(0).float().div(255)
        return (x - 0.2860) / 0.3530, label


if __name__ == "__main__":
    main()
