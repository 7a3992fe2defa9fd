// JPEG marker scan for EXIF orientation / Adobe APP14, and orientation transforms.
// Every read is bounds-checked: a malformed EXIF block must never crash the decoder.
#include "data/exif.h"

#include <cstring>

namespace kiln {
namespace {

// Reads the orientation tag out of a TIFF block (the payload of an APP1 "Exif\0\0" segment).
int tiff_orientation(const uint8_t* t, size_t n) {
  if (n < 8) return 1;
  bool le;
  if (t[0] == 'I' && t[1] == 'I') le = true;
  else if (t[0] == 'M' && t[1] == 'M') le = false;
  else return 1;
  auto u16 = [&](size_t o) -> uint32_t {
    return le ? (uint32_t)(t[o] | (t[o + 1] << 8)) : (uint32_t)((t[o] << 8) | t[o + 1]);
  };
  auto u32 = [&](size_t o) -> uint32_t {
    return le ? (uint32_t)t[o] | ((uint32_t)t[o + 1] << 8) | ((uint32_t)t[o + 2] << 16) | ((uint32_t)t[o + 3] << 24)
              : ((uint32_t)t[o] << 24) | ((uint32_t)t[o + 1] << 16) | ((uint32_t)t[o + 2] << 8) | (uint32_t)t[o + 3];
  };
  size_t ifd = u32(4);
  if (ifd + 2 > n) return 1;
  uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    size_t e = ifd + 2 + (size_t)i * 12;
    if (e + 12 > n) return 1;
    if (u16(e) == 0x0112) {
      uint32_t type = u16(e + 2);
      uint32_t v = type == 3 ? u16(e + 8) : (type == 4 ? u32(e + 8) : 1);
      return (v >= 1 && v <= 8) ? (int)v : 1;
    }
  }
  return 1;
}

}  // namespace

JpegMarkers scan_jpeg_markers(const uint8_t* d, size_t n) {
  JpegMarkers m;
  if (n < 4 || d[0] != 0xFF || d[1] != 0xD8) return m;
  size_t p = 2;
  bool have_exif = false;
  while (p + 4 <= n) {
    if (d[p] != 0xFF) return m;
    uint8_t marker = d[p + 1];
    if (marker == 0xFF) { ++p; continue; }  // fill byte
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) { p += 2; continue; }
    if (marker == 0xDA || marker == 0xD9) return m;  // start of scan / end: no more headers
    size_t len = ((size_t)d[p + 2] << 8) | d[p + 3];
    if (len < 2 || p + 2 + len > n) return m;
    const uint8_t* seg = d + p + 4;
    size_t sn = len - 2;
    if (marker == 0xE1 && !have_exif && sn >= 6 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      m.orientation = tiff_orientation(seg + 6, sn - 6);
      have_exif = true;
    } else if (marker == 0xEE && sn >= 5 && std::memcmp(seg, "Adobe", 5) == 0) {
      m.adobe = true;
    }
    p += 2 + len;
  }
  return m;
}

Image apply_orientation(const Image& im, int o) {
  if (o <= 1 || o > 8) return im;
  const bool swap = orientation_swaps_axes(o);
  Image out = im;
  out.w = swap ? im.h : im.w;
  out.h = swap ? im.w : im.h;
  const int c = im.c, W = out.w, H = out.h;
  // For each output pixel (x, y), the source pixel (sx, sy). Orientation semantics follow the
  // EXIF spec: 2 mirror horizontal, 3 rotate 180, 4 mirror vertical, 5 transpose,
  // 6 rotate 90 CW, 7 transverse, 8 rotate 90 CCW (what the display must do).
  for (int y = 0; y < H; ++y) {
    uint8_t* dst = out.row(y);
    for (int x = 0; x < W; ++x) {
      int sx, sy;
      switch (o) {
        case 2: sx = im.w - 1 - x; sy = y; break;
        case 3: sx = im.w - 1 - x; sy = im.h - 1 - y; break;
        case 4: sx = x; sy = im.h - 1 - y; break;
        case 5: sx = y; sy = x; break;
        case 6: sx = y; sy = im.h - 1 - x; break;
        case 7: sx = im.w - 1 - y; sy = im.h - 1 - x; break;
        default: sx = im.w - 1 - y; sy = x; break;  // 8
      }
      std::memcpy(dst + (size_t)x * c, im.row(sy) + (size_t)sx * c, c);
    }
  }
  return out;
}

}  // namespace kiln
