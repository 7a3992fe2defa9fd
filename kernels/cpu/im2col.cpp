// im2col / col2im of one plane (see im2col.h). For each window offset (r, s) the range of output
// columns whose input column lies inside the image is computed once, so the inner loop is a
// plain copy (a memcpy at stride 1) with zero-filled borders.
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

}  // namespace

template <typename T>
void im2col_plane(const Im2colGeom& g, const T* x, T* col, int64_t ld) {
  for (int64_t r = 0; r < g.R; ++r) {
    for (int64_t s = 0; s < g.S; ++s) {
      T* row = col + (r * g.S + s) * ld;
      const int64_t off = s * g.dil_w - g.pad_w;
      int64_t lo, hi;
      valid_cols(off, g.stride_w, g.W, g.OW, &lo, &hi);
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        T* dst = row + oh * g.OW;
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
template void col2im_plane<float>(const Im2colGeom&, const float*, int64_t, float*);
template void col2im_plane<double>(const Im2colGeom&, const double*, int64_t, double*);

}  // namespace kiln::cpu
