// interpolate forward / backward on the CPU (see interpolate.h).
// Bilinear evaluates all four taps, zero weights included, in torch's order
// l0h * (l0w x00 + l1w x01) + l1h * (l0w x10 + l1w x11), so a NaN or inf next to a pixel reaches it
// exactly as in torch (inf * 0 = NaN).
#include "kernels/cpu/interpolate.h"

#include <algorithm>
#include <vector>

#include "kernels/common/upsample_check.h"

namespace kiln::cpu {

namespace {

// Per-axis tables, computed once per call (sizes OH and OW).
template <typename T>
struct Axes {
  std::vector<LinearTaps<T>> h, w;
  std::vector<int64_t> nh, nw;
};

template <typename T>
Axes<T> axes_of(const Interp2dDesc& d) {
  Axes<T> a;
  if (d.mode == InterpMode::nearest) {
    a.nh.resize(d.OH);
    a.nw.resize(d.OW);
    for (int64_t o = 0; o < d.OH; ++o) a.nh[o] = nearest_source_index(o, d.H, d.OH, d.scale_h);
    for (int64_t o = 0; o < d.OW; ++o) a.nw[o] = nearest_source_index(o, d.W, d.OW, d.scale_w);
  } else {
    a.h.resize(d.OH);
    a.w.resize(d.OW);
    for (int64_t o = 0; o < d.OH; ++o) a.h[o] = linear_source<T>(o, d.H, d.OH, d.align_corners, d.scale_h);
    for (int64_t o = 0; o < d.OW; ++o) a.w[o] = linear_source<T>(o, d.W, d.OW, d.align_corners, d.scale_w);
  }
  return a;
}

}  // namespace

template <typename T>
void interpolate2d_forward(const Interp2dDesc& d, const T* x, T* y) {
  interp2d_check(d, "interpolate2d_forward");
  const Axes<T> a = axes_of<T>(d);
  const int64_t planes = d.N * d.C, HW = d.H * d.W, P = d.OH * d.OW;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * HW;
    T* yp = y + pl * P;
    for (int64_t oh = 0; oh < d.OH; ++oh) {
      if (d.mode == InterpMode::nearest) {
        const T* row = xp + a.nh[oh] * d.W;
        for (int64_t ow = 0; ow < d.OW; ++ow) yp[oh * d.OW + ow] = row[a.nw[ow]];
      } else {
        const LinearTaps<T>& th = a.h[oh];
        const T* r0 = xp + th.i0 * d.W;
        const T* r1 = xp + th.i1 * d.W;
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const LinearTaps<T>& tw = a.w[ow];
          yp[oh * d.OW + ow] = th.l0 * (tw.l0 * r0[tw.i0] + tw.l1 * r0[tw.i1]) +
                               th.l1 * (tw.l0 * r1[tw.i0] + tw.l1 * r1[tw.i1]);
        }
      }
    }
  }
}

template <typename T>
void interpolate2d_backward(const Interp2dDesc& d, const T* dy, T* dx) {
  interp2d_check(d, "interpolate2d_backward");
  const Axes<T> a = axes_of<T>(d);
  const int64_t planes = d.N * d.C, HW = d.H * d.W, P = d.OH * d.OW;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T* xp = dx + pl * HW;
    const T* gp = dy + pl * P;
    std::fill(xp, xp + HW, T(0));
    for (int64_t oh = 0; oh < d.OH; ++oh) {
      if (d.mode == InterpMode::nearest) {
        T* row = xp + a.nh[oh] * d.W;
        for (int64_t ow = 0; ow < d.OW; ++ow) row[a.nw[ow]] += gp[oh * d.OW + ow];
      } else {
        const LinearTaps<T>& th = a.h[oh];
        T* r0 = xp + th.i0 * d.W;
        T* r1 = xp + th.i1 * d.W;
        for (int64_t ow = 0; ow < d.OW; ++ow) {
          const LinearTaps<T>& tw = a.w[ow];
          const T g = gp[oh * d.OW + ow];
          r0[tw.i0] += th.l0 * tw.l0 * g;
          r0[tw.i1] += th.l0 * tw.l1 * g;
          r1[tw.i0] += th.l1 * tw.l0 * g;
          r1[tw.i1] += th.l1 * tw.l1 * g;
        }
      }
    }
  }
}

#define KILN_INSTANTIATE_INTERP(T)                                                  \
  template void interpolate2d_forward<T>(const Interp2dDesc&, const T*, T*); \
  template void interpolate2d_backward<T>(const Interp2dDesc&, const T*, T*);
KILN_INSTANTIATE_INTERP(float)
KILN_INSTANTIATE_INTERP(double)
#undef KILN_INSTANTIATE_INTERP

}  // namespace kiln::cpu
