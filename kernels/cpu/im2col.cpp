// im2col / col2im of one plane (see im2col.h). For each window offset (r, s) the range of output
// columns whose input column lies inside the image is computed once, so the inner loop is a
// plain copy (a memcpy at stride 1) with zero-filled borders.
// Narrow planes (output rows of at most kNarrowOW) go through a zero-padded copy of the plane on the
// stack instead: every row of the column buffer is then a strided read with no bounds and no library
// call. The general path's fill/memcpy calls per output row of 2-16 values cost more than the data
// they move (ResNet18 at 64 px: layer4's 2x2 maps make 4608 rows of 4 values per image). The narrow
// path's loops stay loops: this file is built with -fno-tree-loop-distribute-patterns (CMakeLists.txt).
#include "kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>

namespace kiln::cpu {

namespace {

// Output columns [lo, hi) read input column ow*sw + off with 0 <= that < W.
inline void valid_cols(int64_t off, int64_t sw, int64_t W, int64_t OW, int64_t* lo, int64_t* hi) {
  int64_t l = off >= 0 ? 0 : (-off + sw - 1) / sw;
  int64_t h = (W - off) <= 0 ? 0 : (W - off + sw - 1) / sw;
  h = std::min(h, OW);
  l = std::min(l, h);
  *lo = l;
  *hi = h;
}

constexpr int64_t kNarrowOW = 16;
constexpr size_t kPadBytes = 16384;

// The padded plane's size (Hp, Wp) when the narrow path applies, else false.
template <typename T>
bool narrow_plane(const Im2colGeom& g, int64_t* Hp, int64_t* Wp) {
  if (g.OW > kNarrowOW || g.pad_h < 0 || g.pad_w < 0) return false;
  // rows and columns the windows can reach: [0, (O - 1) * stride + (K - 1) * dil + 1), at least the plane
  const int64_t hp = std::max(g.H + 2 * g.pad_h, (g.OH - 1) * g.stride_h + (g.R - 1) * g.dil_h + 1);
  const int64_t wp = std::max(g.W + 2 * g.pad_w, (g.OW - 1) * g.stride_w + (g.S - 1) * g.dil_w + 1);
  if (g.OH <= 0 || g.OW <= 0 || (size_t)(hp * wp) * sizeof(T) > kPadBytes) return false;
  *Hp = hp;
  *Wp = wp;
  return true;
}

template <typename T>
void im2col_narrow(const Im2colGeom& g, const T* x, T* col, int64_t ld, int64_t Hp, int64_t Wp, int64_t oh0,
                   int64_t oh1) {
  T pad[kPadBytes / sizeof(T)];
  std::fill(pad, pad + Hp * Wp, T(0));
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t w = 0; w < g.W; ++w) pad[(h + g.pad_h) * Wp + w + g.pad_w] = x[h * g.W + w];
  const int64_t sw = g.stride_w;
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s) {
      T* row = col + (r * g.S + s) * ld;
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        const T* src = pad + (oh * g.stride_h + r * g.dil_h) * Wp + s * g.dil_w;
        T* dst = row + (oh - oh0) * g.OW;
        for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow] = src[ow * sw];
      }
    }
}

template <typename T>
void col2im_narrow(const Im2colGeom& g, const T* col, int64_t ld, T* dx, int64_t Hp, int64_t Wp) {
  T pad[kPadBytes / sizeof(T)];
  std::fill(pad, pad + Hp * Wp, T(0));
  const int64_t sw = g.stride_w;
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s) {
      const T* row = col + (r * g.S + s) * ld;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* dst = pad + (oh * g.stride_h + r * g.dil_h) * Wp + s * g.dil_w;
        const T* src = row + oh * g.OW;
        for (int64_t ow = 0; ow < g.OW; ++ow) dst[ow * sw] += src[ow];
      }
    }
  for (int64_t h = 0; h < g.H; ++h)
    for (int64_t w = 0; w < g.W; ++w) dx[h * g.W + w] = pad[(h + g.pad_h) * Wp + w + g.pad_w];
}

}  // namespace

template <typename T>
void im2col_plane(const Im2colGeom& g, const T* x, T* col, int64_t ld) {
  im2col_plane_rows(g, x, col, ld, 0, g.OH);
}

template <typename T>
void im2col_plane_rows(const Im2colGeom& g, const T* x, T* col, int64_t ld, int64_t oh0, int64_t oh1) {
  int64_t Hp, Wp;
  if (narrow_plane<T>(g, &Hp, &Wp)) return im2col_narrow(g, x, col, ld, Hp, Wp, oh0, oh1);
  for (int64_t r = 0; r < g.R; ++r) {
    for (int64_t s = 0; s < g.S; ++s) {
      T* row = col + (r * g.S + s) * ld;
      const int64_t off = s * g.dil_w - g.pad_w;
      int64_t lo, hi;
      valid_cols(off, g.stride_w, g.W, g.OW, &lo, &hi);
      for (int64_t oh = oh0; oh < oh1; ++oh) {
        T* dst = row + (oh - oh0) * g.OW;
        const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dil_h;
        if (ih < 0 || ih >= g.H) {
          std::fill(dst, dst + g.OW, T(0));
          continue;
        }
        std::fill(dst, dst + lo, T(0));
        // Input index of output column ow is base + ow*sw (in bounds for ow in [lo, hi)).
        const int64_t base = ih * g.W + off;
        if (g.stride_w == 1) {
          if (hi > lo) std::memcpy(dst + lo, x + base + lo, (size_t)(hi - lo) * sizeof(T));
        } else if (g.stride_w == 2) {  // a constant stride: the compiler vectorizes the gather
          for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = x[base + 2 * ow];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) dst[ow] = x[base + ow * g.stride_w];
        }
        std::fill(dst + hi, dst + g.OW, T(0));
      }
    }
  }
}

template <typename T>
void col2im_plane(const Im2colGeom& g, const T* col, int64_t ld, T* dx) {
  int64_t Hp, Wp;
  if (narrow_plane<T>(g, &Hp, &Wp)) return col2im_narrow(g, col, ld, dx, Hp, Wp);
  std::fill(dx, dx + g.H * g.W, T(0));
  for (int64_t r = 0; r < g.R; ++r) {
    for (int64_t s = 0; s < g.S; ++s) {
      const T* row = col + (r * g.S + s) * ld;
      const int64_t off = s * g.dil_w - g.pad_w;
      int64_t lo, hi;
      valid_cols(off, g.stride_w, g.W, g.OW, &lo, &hi);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t ih = oh * g.stride_h - g.pad_h + r * g.dil_h;
        if (ih < 0 || ih >= g.H) continue;
        const T* src = row + oh * g.OW;
        const int64_t base = ih * g.W + off;
        if (g.stride_w == 1 && hi > lo) {
          T* dst = dx + base + lo;
          for (int64_t ow = lo; ow < hi; ++ow) dst[ow - lo] += src[ow];
        } else if (g.stride_w != 1) {
          for (int64_t ow = lo; ow < hi; ++ow) dx[base + ow * g.stride_w] += src[ow];
        }
      }
    }
  }
}

template void im2col_plane<float>(const Im2colGeom&, const float*, float*, int64_t);
template void im2col_plane<double>(const Im2colGeom&, const double*, double*, int64_t);
// bf16 as its bit patterns (the copy moves values unchanged; 0 bits are +0): conv2d_bf16.cpp's weight gradient.
template void im2col_plane<uint16_t>(const Im2colGeom&, const uint16_t*, uint16_t*, int64_t);
template void im2col_plane_rows<float>(const Im2colGeom&, const float*, float*, int64_t, int64_t, int64_t);
template void im2col_plane_rows<double>(const Im2colGeom&, const double*, double*, int64_t, int64_t, int64_t);
template void col2im_plane<float>(const Im2colGeom&, const float*, int64_t, float*);
template void col2im_plane<double>(const Im2colGeom&, const double*, int64_t, double*);

}  // namespace kiln::cpu
