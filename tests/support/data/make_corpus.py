#!/usr/bin/python3
"""Writes kiln's image-decode parity corpus into OUTDIR, with PIL's answers next to it.

For each image NAME: the file itself and NAME.ref (raw RGB u8 HWC from PIL:
exif_transpose + convert('RGB')), listed in manifest.txt as "NAME FILE W H".
Bad files (which kiln must reject) are listed in bad.txt as "FILE". Resize and
crop references go to resize.txt / crops.txt / pipeline.txt (see below).
Used by tests/parity/test_data_parity.cpp; never by kiln itself."""
import io, os, struct, sys, zlib
import numpy as np
from PIL import Image, ImageOps

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1234)
manifest, bad = [], []


def photo(w, h, seed=0):
    """Smooth gradients + texture + noise: exercises chroma and edges."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    a = 127 + 100 * np.sin(x / 17.0 + seed) * np.cos(y / 23.0)
    b = 255 * x / max(w - 1, 1)
    c = 255 * ((x // 9 + y // 7) % 2)
    img = np.stack([a, b, 0.6 * c + 0.4 * a], -1) + r.normal(0, 12, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def ref(name, fname, arr=None):
    path = os.path.join(out, fname)
    if arr is None:
        im = ImageOps.exif_transpose(Image.open(path)).convert('RGB')
        arr = np.asarray(im)
    arr = np.ascontiguousarray(arr, dtype=np.uint8)
    arr.tofile(os.path.join(out, name + '.ref'))
    manifest.append(f"{name} {fname} {arr.shape[1]} {arr.shape[0]}")


def save(im, fname, **kw):
    im.save(os.path.join(out, fname), **kw)


base = Image.fromarray(photo(333, 251, 1))
for sub, tag in ((2, '420'), (1, '422'), (0, '444')):
    save(base, f'jpeg_{tag}.jpg', quality=90, subsampling=sub)
    ref(f'jpeg_{tag}', f'jpeg_{tag}.jpg')
save(base, 'progressive.jpg', quality=85, progressive=True)
ref('progressive', 'progressive.jpg')
save(base.convert('L'), 'gray.jpg', quality=90)
ref('gray', 'gray.jpg')
save(base.convert('CMYK'), 'cmyk.jpg', quality=95)
ref('cmyk', 'cmyk.jpg')
odd = Image.fromarray(photo(97, 61, 2))
save(odd, 'odd_size.jpg', quality=75)
ref('odd_size', 'odd_size.jpg')
for o in range(1, 9):
    ex = Image.Exif()
    ex[0x0112] = o
    save(odd, f'exif_{o}.jpg', quality=90, exif=ex.tobytes())
    ref(f'exif_{o}', f'exif_{o}.jpg')

# stb formats
rgba = np.concatenate([photo(120, 80, 3), rng.integers(0, 256, (80, 120, 1), dtype=np.uint8)], -1)
save(Image.fromarray(rgba, 'RGBA'), 'rgba.png'); ref('rgba', 'rgba.png')
save(Image.fromarray(photo(120, 80, 4)), 'rgb.png'); ref('rgb', 'rgb.png')
save(Image.fromarray(photo(120, 80, 5)).convert('L'), 'gray.png'); ref('gray_png', 'gray.png')
save(Image.fromarray(photo(120, 80, 6)).convert('LA'), 'la.png'); ref('la', 'la.png')
save(Image.fromarray(photo(120, 80, 7)).convert('P', palette=Image.ADAPTIVE, colors=37), 'palette.png')
ref('palette', 'palette.png')
save(Image.fromarray(photo(120, 80, 8)), 'rgb.bmp'); ref('bmp', 'rgb.bmp')
save(Image.fromarray(photo(120, 80, 9)).convert('P', palette=Image.ADAPTIVE, colors=64), 'pal.gif')
ref('gif', 'pal.gif')
save(Image.fromarray(photo(120, 80, 10)), 'rgb.tga'); ref('tga', 'rgb.tga')
save(Image.fromarray(photo(120, 80, 11)), 'png_named.jpg', format='PNG'); ref('wrong_ext', 'png_named.jpg')


def png_chunk(t, data):
    return struct.pack('>I', len(data)) + t + data + struct.pack('>I', zlib.crc32(t + data) & 0xffffffff)


def write_png16(fname, arr16, color_type):
    h, w = arr16.shape[:2]
    raw = b''.join(b'\x00' + arr16[y].astype('>u2').tobytes() for y in range(h))
    data = (b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', struct.pack('>IIBBBBB', w, h, 16, color_type, 0, 0, 0))
            + png_chunk(b'IDAT', zlib.compress(raw)) + png_chunk(b'IEND', b''))
    open(os.path.join(out, fname), 'wb').write(data)


# 16-bit: the reference keeps the high byte (PIL itself clips I;16 to 255 on convert, not a reduction).
a16 = rng.integers(0, 65536, (40, 50, 3), dtype=np.uint16)
write_png16('rgb16.png', a16, 2); ref('rgb16', 'rgb16.png', (a16 >> 8).astype(np.uint8))
g16 = rng.integers(0, 65536, (40, 50), dtype=np.uint16)
write_png16('gray16.png', g16, 0); ref('gray16', 'gray16.png', np.repeat((g16 >> 8).astype(np.uint8)[..., None], 3, -1))

# --- bad files
jpg = open(os.path.join(out, 'jpeg_420.jpg'), 'rb').read()
pngb = open(os.path.join(out, 'rgb.png'), 'rb').read()
bads = {
    'empty.jpg': b'',
    'text.jpg': b'this is not an image, just some text\n' * 10,
    'truncated.jpg': jpg[: len(jpg) // 2],
    'header_only.jpg': jpg[:300],
    'truncated.png': pngb[: len(pngb) // 2],
    'garbage.png': b'\x89PNG\r\n\x1a\n' + bytes(rng.integers(0, 256, 500, dtype=np.uint8)),
    'huge.png': b'\x89PNG\r\n\x1a\n' + png_chunk(b'IHDR', struct.pack('>IIBBBBB', 100000, 100000, 8, 2, 0, 0, 0))
                + png_chunk(b'IDAT', zlib.compress(b'\x00' * 100)) + png_chunk(b'IEND', b''),
}
# huge.jpg: the SOF0 marker's height/width patched to 60000 x 60000
i = 2
while jpg[i + 1] != 0xC0:  # walk the marker segments to SOF0 (0xFFC0 may also occur inside tables)
    i += 2 + struct.unpack('>H', jpg[i + 2:i + 4])[0]
bads['huge.jpg'] = jpg[: i + 5] + struct.pack('>HH', 60000, 60000) + jpg[i + 9:]
for k, v in bads.items():
    open(os.path.join(out, k), 'wb').write(v)
    bad.append(k)

# --- resize references: PIL Image.resize(BILINEAR) of resize_src.png
src = Image.fromarray(photo(301, 217, 12))
save(src, 'resize_src.png')
lines = []
for (w, h) in [(224, 224), (150, 108), (100, 72), (60, 43), (31, 17), (400, 300), (301, 100), (17, 217), (7, 5)]:
    r = np.asarray(src.resize((w, h), Image.BILINEAR))
    r.tofile(os.path.join(out, f'resize_{w}x{h}.ref'))
    lines.append(f'{w} {h}')
open(os.path.join(out, 'resize.txt'), 'w').write('\n'.join(lines) + '\n')

# --- CenterCrop geometry from torchvision: crop an index image and read where the crop starts.
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
crops = []
for (w, h, cw, ch) in [(10, 10, 5, 5), (11, 10, 4, 3), (256, 341, 224, 224), (255, 300, 224, 224), (7, 9, 3, 4),
                       (5, 5, 7, 8), (6, 4, 9, 9), (300, 257, 224, 224), (13, 13, 2, 10), (100, 50, 99, 1)]:
    idx = torch.arange(1, w * h + 1, dtype=torch.float64).reshape(1, h, w)
    c = F.center_crop(idx, [ch, cw])
    # first non-padding element gives the offset; for padded crops, find where 1 lands.
    nz = (c[0] == 1).nonzero()
    if len(nz):
        y, x = int(nz[0][0]), int(nz[0][1])
        top, left = -y, -x
    else:
        v = int(c[0, 0, 0].item()) - 1
        top, left = v // w, v % w
    crops.append(f'{w} {h} {cw} {ch} {left} {top}')
open(os.path.join(out, 'crops.txt'), 'w').write('\n'.join(crops) + '\n')

# --- torchvision eval pipeline on photo.jpg: Resize(256) + CenterCrop(224) + ToTensor + Normalize
Image.fromarray(photo(500, 375, 13)).save(os.path.join(out, 'photo.jpg'), quality=92)
Image.fromarray(photo(375, 500, 14)).save(os.path.join(out, 'photo_tall.jpg'), quality=92)
mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), T.Normalize(mean, std)])
for n in ('photo', 'photo_tall'):
    t = tf(Image.open(os.path.join(out, n + '.jpg')).convert('RGB'))
    t.numpy().astype(np.float32).tofile(os.path.join(out, n + '.pipeline.f32'))

open(os.path.join(out, 'manifest.txt'), 'w').write('\n'.join(manifest) + '\n')
open(os.path.join(out, 'bad.txt'), 'w').write('\n'.join(bad) + '\n')
print('ok')
