#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/seed-*): small
valid files of every format kiln parses, made with numpy and PIL, plus the training-state file
that kiln itself writes (build-asan/fuzz_checkpoint with KILN_FUZZ_WRITE_SEED). The image targets'
inputs start with one option byte (see tests/fuzz/fuzz_jpeg.cpp and friends). Deterministic.
Usage: scripts/fuzz_seeds.py [BUILD_DIR]   (BUILD_DIR: where fuzz_checkpoint is; default build-asan)
Must not overwrite the merged (non-seed) corpus files."""
import gzip
import io
import json
import os
import struct
import subprocess
import sys

import numpy as np
from PIL import Image

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
corpus = os.path.join(root, "tests", "fuzz", "corpus")
rng = np.random.default_rng(14)


def put(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors(tensors, meta=None):
    header, blob = {}, b""
    if meta:
        header["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blob


put("safetensors", "f32", safetensors([("w", "F32", (2, 3), np.arange(6, dtype="<f4").tobytes())]))
put("safetensors", "dtypes", safetensors([
    ("a", "F64", (2,), np.array([1.5, -2], "<f8").tobytes()),
    ("b", "F16", (3,), np.array([1, 2, 3], "<f2").tobytes()),
    ("c", "BF16", (2,), b"\x80\x3f\x00\x40"),
    ("d", "I32", (1, 2), np.array([7, -7], "<i4").tobytes()),
    ("e", "I64", (), np.array([9], "<i8").tobytes()),
    ("f", "U8", (0, 4), b""),
    ("g", "U8", (4,), b"\x00\x01\xfe\xff")], {"format": "pt", "note": "seed"}))
put("safetensors", "unsupported", safetensors([("b", "BOOL", (2,), b"\x00\x01")]))


def npy(a, version=None):
    f = io.BytesIO()
    if version:
        np.lib.format.write_array(f, a, version=version)
    else:
        np.save(f, a)
    return f.getvalue()


put("npy", "f4", npy(np.arange(6, dtype="<f4").reshape(2, 3)))
put("npy", "f8", npy(np.array([1.5, np.nan, -np.inf], "<f8")))
put("npy", "f2", npy(np.array([[1, 2], [3, 4]], "<f2")))
put("npy", "i8", npy(np.array(5, "<i8")))
put("npy", "i4", npy(np.zeros((0, 3), "<i4")))
put("npy", "u1", npy(rng.integers(0, 256, (2, 2, 3), dtype=np.uint8)))
put("npy", "v2", npy(np.arange(4, dtype="<f4"), version=(2, 0)))
put("npy", "v3", npy(np.arange(3, dtype="<i4"), version=(3, 0)))
put("npy", "fortran", npy(np.asfortranarray(np.arange(6, dtype="<f4").reshape(2, 3))))


def idx(a, code):
    be = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}[code]
    return bytes([0, 0, code, a.ndim]) + b"".join(struct.pack(">I", d) for d in a.shape) + a.astype(be).tobytes()


images = rng.integers(0, 256, (2, 4, 4), dtype=np.uint8)
put("idx", "u8-images", idx(images, 0x08))
put("idx", "u8-labels", idx(np.array([3, 1, 4], np.uint8), 0x08))
put("idx", "i32", idx(np.array([[1, -2], [3, 4]], np.int32), 0x0C))
put("idx", "f32", idx(np.array([0.5, -1], np.float32), 0x0D))
put("idx", "f64", idx(np.array([2.25], np.float64), 0x0E))
put("idx", "gz", gzip.compress(idx(images, 0x08), mtime=0))
put("idx", "gz-2members", gzip.compress(idx(np.array([1, 2], np.uint8), 0x08)[:6], mtime=0)
    + gzip.compress(idx(np.array([1, 2], np.uint8), 0x08)[6:], mtime=0))

put("csv", "ints", b"path,label\na.jpg,0\nsub/b.png,2\n/abs/c.jpg,1\n")
put("csv", "names", b"cat/1.jpg,cat\n\"dog, big.jpg\",dog\r\n\n\"q\"\"uote.jpg\",cat\n")
put("csv", "header", b"file,class\nx.jpg, 0 \ny.jpg,1\n")

put("alloc_conf", "all", b"round=512,small_max=1M,small_segment=2M,large_round=2M,large_segment=20M,"
    b"max_split=64M,expandable=1,granule=512K,hole_fit=25,debug,trace=1000")
put("alloc_conf", "segments", b"expandable=0,large_segment=0,max_split=4MiB,round=1k")
put("alloc_conf", "units", b" hole_fit = off , granule=1MiB, small_segment=1.5GiB, debug=true")


def jpeg(im, **kw):
    f = io.BytesIO()
    im.save(f, "JPEG", **kw)
    return f.getvalue()


def noise(w, h, mode="RGB"):
    c = {"RGB": 3, "L": 1, "CMYK": 4}[mode]
    a = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    a = (a // 2 + np.linspace(0, 127, w, dtype=np.uint8)[None, :, None]).astype(np.uint8)  # some smooth part
    return Image.fromarray(a[:, :, 0] if c == 1 else a, mode)


exif6 = Image.Exif()
exif6[0x0112] = 6
prog = [
    ("p420", jpeg(noise(24, 17), progressive=True, quality=80)),
    ("p444", jpeg(noise(16, 16), progressive=True, subsampling=0, quality=90)),
    ("p422", jpeg(noise(19, 9), progressive=True, subsampling=1, quality=70)),
    ("pgray", jpeg(noise(17, 16, "L"), progressive=True)),
]
base = [
    ("b420", jpeg(noise(24, 17), quality=80)),
    ("b444-opt", jpeg(noise(16, 8), subsampling=0, optimize=True)),
    ("gray", jpeg(noise(9, 13, "L"))),
    ("cmyk", jpeg(noise(8, 8, "CMYK"))),
    ("exif6", jpeg(noise(16, 9), exif=exif6.tobytes())),
    ("exif6-prog", jpeg(noise(33, 16), progressive=True, exif=exif6.tobytes())),
]
for i, (name, data) in enumerate(prog):
    put("jpeg_progressive", name, bytes([i & 7]) + data)
for i, (name, data) in enumerate(base + prog):
    put("jpeg", name, bytes([(i * 13) & 63 | 8]) + data)


def saved(im, fmt, **kw):
    f = io.BytesIO()
    im.save(f, fmt, **kw)
    return f.getvalue()


rgb = noise(7, 5)
put("image", "png-rgb", b"\0" + saved(rgb, "PNG"))
put("image", "png-rgba", b"\1" + saved(rgb.convert("RGBA"), "PNG"))
put("image", "png-l", b"\0" + saved(noise(6, 3, "L"), "PNG"))
put("image", "png-la", b"\1" + saved(noise(4, 4, "L").convert("LA"), "PNG"))
put("image", "png-p", b"\0" + saved(rgb.convert("P"), "PNG"))
put("image", "png-16", b"\0" + saved(Image.fromarray(rng.integers(0, 65535, (3, 4), dtype=np.uint16).astype("<u2")
                                                     .view(np.uint16), "I;16"), "PNG"))
put("image", "bmp-rgb", b"\0" + saved(rgb, "BMP"))
put("image", "bmp-p", b"\1" + saved(rgb.convert("P"), "BMP"))
put("image", "gif", b"\0" + saved(rgb.convert("P"), "GIF"))
put("image", "tga", b"\0" + saved(rgb, "TGA"))
put("image", "tga-rle", b"\1" + saved(rgb, "TGA", compression="tga_rle"))

# Segmentation masks (tests/fuzz/fuzz_png_mask.cpp, no option byte): gray, palette at 1/2/4 bits (PIL
# packs a small palette), 16-bit gray, and the refused colour types.
idx = rng.integers(0, 5, (6, 7), dtype=np.uint8)
put("png_mask", "l8", saved(Image.fromarray(idx, "L"), "PNG"))
pim = Image.fromarray(idx, "P")
pim.putpalette([v for i in range(5) for v in (40 * i, 255 - 40 * i, 9 * i)])
put("png_mask", "p8", saved(pim, "PNG"))
for bits in (1, 2, 4):
    put("png_mask", "p%d" % bits, saved(Image.fromarray(idx % (1 << bits), "P"), "PNG", bits=bits))
put("png_mask", "l16", saved(Image.fromarray(idx.astype(np.uint16) * 60, "I;16"), "PNG"))
put("png_mask", "rgb", saved(noise(3, 2), "PNG"))
put("png_mask", "la", saved(noise(3, 2, "L").convert("LA"), "PNG"))

build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build-asan")
seed = os.path.join(corpus, "checkpoint", "seed-adamw-amp")
os.makedirs(os.path.dirname(seed), exist_ok=True)
subprocess.run([os.path.join(build, "fuzz_checkpoint")], check=True,
               env=dict(os.environ, KILN_FUZZ_WRITE_SEED=seed, ASAN_OPTIONS="detect_leaks=0"))
print("seeds written under", corpus)
