#!/usr/bin/python3
"""Peer for bench_decode: OpenCV cv2.imdecode + cv2.resize (INTER_AREA, shorter side 256) +
centre crop 224 + BGR->RGB + normalize to float32 CHW with numpy.

usage: decode_cv2.py LISTFILE THREADS   -> prints 'images_per_s <x>' or 'opencv: not installed'."""
import sys, time
from concurrent.futures import ThreadPoolExecutor

try:
    import cv2
    import numpy as np
except Exception:
    print('opencv: not installed')
    sys.exit(0)

files = [l.strip() for l in open(sys.argv[1]) if l.strip()]
threads = int(sys.argv[2])
cv2.setNumThreads(1)
mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
std = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)


def one(path):
    buf = np.fromfile(path, np.uint8)
    im = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    h, w = im.shape[:2]
    if w <= h:
        nw, nh = 256, int(256 * h / w)
    else:
        nw, nh = int(256 * w / h), 256
    im = cv2.resize(im, (nw, nh), interpolation=cv2.INTER_AREA)
    top, left = int(round((nh - 224) / 2.0)), int(round((nw - 224) / 2.0))
    im = im[top:top + 224, left:left + 224, ::-1]
    x = im.transpose(2, 0, 1).astype(np.float32) / 255.0
    return (x - mean) / std


def work(path):
    one(path)


one(files[0])
# One file per task: the pool hands the next file to whichever thread is free (dynamic, like kiln's run).
t0 = time.perf_counter()
with ThreadPoolExecutor(threads) as ex:
    list(ex.map(work, files))
dt = time.perf_counter() - t0
print(f'images_per_s {len(files) / dt:.2f}')
