#!/usr/bin/python3
"""Peer for bench_decode: PIL + torchvision, Resize(256) + CenterCrop(224) + ToTensor + Normalize.

usage: decode_pil.py LISTFILE THREADS [draft]
Prints 'images_per_s <x>'. With 'draft', PIL's JPEG draft mode (DCT scaling to >= 256 px on the
shorter side, as torchvision users can opt into) is used before the transforms."""
import sys, time
from concurrent.futures import ThreadPoolExecutor

import torch
import torchvision.transforms as T
from PIL import Image

files = [l.strip() for l in open(sys.argv[1]) if l.strip()]
threads = int(sys.argv[2])
draft = len(sys.argv) > 3 and sys.argv[3] == 'draft'
torch.set_num_threads(1)
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])


def one(path):
    im = Image.open(path)
    if draft:
        w, h = im.size
        s = 256 / min(w, h)
        im.draft('RGB', (int(w * s) + 1, int(h * s) + 1))
    return tf(im.convert('RGB'))


def work(path):
    one(path)


one(files[0])  # warm-up (imports, first allocations)
# One file per task: the pool hands the next file to whichever thread is free (dynamic, like kiln's run).
t0 = time.perf_counter()
with ThreadPoolExecutor(threads) as ex:
    list(ex.map(work, files))
dt = time.perf_counter() - t0
print(f'images_per_s {len(files) / dt:.2f}')
