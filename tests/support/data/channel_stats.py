#!/usr/bin/python3
"""Writes a small image folder of mixed sizes and modes into OUTDIR (OUTDIR/a/*, OUTDIR/b/*) and
numpy's per-channel statistics of it into OUTDIR/stats.txt: line 1 the mean and std over every
decoded pixel stacked together (PIL exif_transpose + convert('RGB'), on [0, 1], np.std's ddof=0);
line 2 the mean of per-image means (the wrong definition, to show the folder tells them apart).
Used by tests/parity/test_channel_stats.cpp; never by kiln itself."""
import os, sys
import numpy as np
from PIL import Image, ImageOps

out = sys.argv[1]
rng = np.random.default_rng(7)
files = []


def save(arr, rel, **kw):
    path = os.path.join(out, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(arr).save(path, **kw)
    files.append(path)


def noise(h, w, lo, hi, c=3):
    shape = (h, w, c) if c > 1 else (h, w)
    return rng.integers(lo, hi, shape, dtype=np.uint8)


# Large dark images and small bright ones: per-image averaging is far from the pixel mean.
save(noise(48, 64, 0, 60), 'a/dark_big.png')
save(noise(40, 56, 10, 80), 'a/dark.jpg', quality=95, subsampling=0)
save(noise(6, 8, 200, 256), 'a/bright_small.png')
save(noise(30, 20, 0, 256, c=1), 'b/gray.png')  # mode L: RGB by replicating the channel
save(noise(5, 7, 180, 256), 'b/bright_tiny.bmp')
save(noise(33, 17, 20, 140), 'b/odd.png')

pix, per_image = [], []
for p in files:
    a = np.asarray(ImageOps.exif_transpose(Image.open(p)).convert('RGB'), dtype=np.float64) / 255.0
    pix.append(a.reshape(-1, 3))
    per_image.append(a.reshape(-1, 3).mean(axis=0))
allpix = np.concatenate(pix)
with open(os.path.join(out, 'stats.txt'), 'w') as f:
    f.write(' '.join('%.12f' % v for v in list(allpix.mean(axis=0)) + list(allpix.std(axis=0))) + '\n')
    f.write(' '.join('%.12f' % v for v in np.mean(per_image, axis=0)) + '\n')
