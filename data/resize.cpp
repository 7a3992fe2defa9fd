// Antialiased bilinear resampling (PIL's algorithm, own implementation; see resize.h).
// Per axis: for output index i, center = box0 + (i + 0.5) * scale; with fs = max(scale, 1) the
// filter has support fs source pixels on each side and weight tri((x + 0.5 - center) / fs) for
// source pixel x; weights are normalized then quantized to 22 fractional bits.
#include "data/resize.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace kiln {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // leaves headroom for 255 * sum(weights) in int32

struct Taps {
  int ksize = 0;               // taps per output (max)
  std::vector<int> start, n;   // first source index and tap count per output
  std::vector<int32_t> w;      // out_size x ksize fixed-point weights
};

Taps make_taps(double in0, double in1, int lo, int hi, int out_size) {
  const double scale = (in1 - in0) / out_size;
  const double fs = std::max(scale, 1.0);
  const double support = 1.0 * fs;  // the triangle's half-width is 1 input pixel, stretched by fs
  Taps t;
  t.ksize = (int)std::ceil(support) * 2 + 1;
  t.start.resize(out_size);
  t.n.resize(out_size);
  t.w.assign((size_t)out_size * t.ksize, 0);
  std::vector<double> k(t.ksize);
  const double inv = 1.0 / fs;
  for (int i = 0; i < out_size; ++i) {
    const double center = in0 + (i + 0.5) * scale;
    int xmin = (int)(center - support + 0.5);  // truncation as C does, then clamped
    int xmax = (int)(center + support + 0.5);
    if (center - support + 0.5 < 0) xmin = 0;
    xmin = std::max(xmin, lo);
    xmax = std::min(xmax, hi);
    int cnt = std::max(xmax - xmin, 0);
    cnt = std::min(cnt, t.ksize);
    double sum = 0;
    for (int j = 0; j < cnt; ++j) {
      double x = std::fabs((j + xmin - center + 0.5) * inv);
      double v = x < 1.0 ? 1.0 - x : 0.0;
      k[j] = v;
      sum += v;
    }
    int32_t* wq = &t.w[(size_t)i * t.ksize];
    for (int j = 0; j < cnt; ++j) {
      double v = sum != 0.0 ? k[j] / sum : 0.0;
      wq[j] = (int32_t)(v * (1 << kPrecisionBits) + (v < 0 ? -0.5 : 0.5));
    }
    t.start[i] = xmin;
    t.n[i] = cnt;
  }
  return t;
}

inline uint8_t clip8(int32_t acc) {
  int32_t v = acc >> kPrecisionBits;
  return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v));
}

template <int C>
void horizontal(const uint8_t* src, size_t stride, int y0, int rows, const Taps& t, int dw, uint8_t* dst) {
  for (int r = 0; r < rows; ++r) {
    const uint8_t* s = src + (size_t)(y0 + r) * stride;
    uint8_t* d = dst + (size_t)r * dw * C;
    for (int i = 0; i < dw; ++i) {
      const int32_t* w = &t.w[(size_t)i * t.ksize];
      const uint8_t* p = s + (size_t)t.start[i] * C;
      int32_t acc[C];
      for (int ch = 0; ch < C; ++ch) acc[ch] = 1 << (kPrecisionBits - 1);
      for (int j = 0, n = t.n[i]; j < n; ++j, p += C)
        for (int ch = 0; ch < C; ++ch) acc[ch] += p[ch] * w[j];
      for (int ch = 0; ch < C; ++ch) d[i * C + ch] = clip8(acc[ch]);
    }
  }
}

// src rows are relative to row_base (the first row the horizontal pass produced).
void vertical(const uint8_t* src, int row_base, int width_elems, const Taps& t, int dh, uint8_t* dst) {
  std::vector<int32_t> acc((size_t)width_elems);
  for (int i = 0; i < dh; ++i) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* w = &t.w[(size_t)i * t.ksize];
    for (int j = 0, n = t.n[i]; j < n; ++j) {
      const uint8_t* s = src + (size_t)(t.start[i] + j - row_base) * width_elems;
      const int32_t wj = w[j];
      for (int x = 0; x < width_elems; ++x) acc[x] += s[x] * wj;
    }
    uint8_t* d = dst + (size_t)i * width_elems;
    for (int x = 0; x < width_elems; ++x) d[x] = clip8(acc[x]);
  }
}

}  // namespace

void resample_bilinear_u8(const uint8_t* src, int sw, int sh, int c, size_t src_stride, const ResampleBox& b,
                          uint8_t* dst, int dw, int dh) {
  KILN_CHECK(sw > 0 && sh > 0 && dw > 0 && dh > 0, "resize: empty image (", sw, "x", sh, " -> ", dw, "x", dh, ")");
  KILN_CHECK(c == 1 || c == 3 || c == 4, "resize: unsupported channel count ", c);
  KILN_CHECK(b.cx0 >= 0 && b.cy0 >= 0 && b.cx1 <= sw && b.cy1 <= sh && b.cx0 < b.cx1 && b.cy0 < b.cy1,
             "resize: window [", b.cx0, ",", b.cx1, ")x[", b.cy0, ",", b.cy1, ") outside the ", sw, "x", sh, " image");
  KILN_CHECK(b.x1 > b.x0 && b.y1 > b.y0, "resize: empty box");
  Taps tx = make_taps(b.x0, b.x1, b.cx0, b.cx1, dw);
  Taps ty = make_taps(b.y0, b.y1, b.cy0, b.cy1, dh);
  // Only the rows the vertical filter reads go through the horizontal pass.
  int r0 = sh, r1 = 0;
  for (int i = 0; i < dh; ++i) {
    if (ty.n[i] == 0) continue;
    r0 = std::min(r0, ty.start[i]);
    r1 = std::max(r1, ty.start[i] + ty.n[i]);
  }
  if (r1 <= r0) r0 = r1 = b.cy0;  // degenerate: no taps (cannot happen with a valid box)
  std::vector<uint8_t> tmp((size_t)std::max(r1 - r0, 1) * dw * c);
  switch (c) {
    case 1: horizontal<1>(src, src_stride, r0, r1 - r0, tx, dw, tmp.data()); break;
    case 3: horizontal<3>(src, src_stride, r0, r1 - r0, tx, dw, tmp.data()); break;
    default: horizontal<4>(src, src_stride, r0, r1 - r0, tx, dw, tmp.data()); break;
  }
  vertical(tmp.data(), r0, dw * c, ty, dh, dst);
}

void resample_source_window(const ResampleBox& b, int dw, int dh, int* x0, int* y0, int* x1, int* y1) {
  auto span = [](const Taps& t, int* lo, int* hi) {
    *lo = INT32_MAX;
    *hi = INT32_MIN;
    for (size_t i = 0; i < t.n.size(); ++i) {
      if (t.n[i] == 0) continue;
      *lo = std::min(*lo, t.start[i]);
      *hi = std::max(*hi, t.start[i] + t.n[i]);
    }
    if (*hi < *lo) *lo = *hi = 0;
  };
  span(make_taps(b.x0, b.x1, b.cx0, b.cx1, dw), x0, x1);
  span(make_taps(b.y0, b.y1, b.cy0, b.cy1, dh), y0, y1);
}

void resize_bilinear_u8(const uint8_t* src, int sw, int sh, int c, uint8_t* dst, int dw, int dh) {
  ResampleBox b{0, 0, (double)sw, (double)sh, 0, 0, sw, sh};
  resample_bilinear_u8(src, sw, sh, c, (size_t)sw * c, b, dst, dw, dh);
}

}  // namespace kiln
