// Pooling kernels (see pool.h). One OpenMP task per (n, c) plane: planes are independent in both
// directions, so backward scatters need no atomics.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "kernels/common/nn_check.h"

namespace kiln::cpu {

namespace {

// One tap of the max rule below, PyTorch's: a larger value or a NaN takes the place (the last NaN
// wins); best_i starts at the window's first tap, so a window of -inf reports that tap.
template <typename T>
inline void max_tap(T v, int64_t i, T& best, int64_t& best_i) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_i = i;
  }
}

// The 2x2 stride-2 window without padding or dilation (the small CNN's pools): every tap is inside
// the plane, so no bounds tests; the taps are visited in the generic loop's order (row by row), so
// values and indices are the same as max_pool2d_forward's general path. It was 12% of a batch-16
// small-CNN step as the general loop (docs/cpu-profile.md).
template <typename T>
void max_pool2x2_s2(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  const int64_t OH = d.out_h(), OW = d.out_w(), W = d.W, planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * d.H * W;
    T* yp = y + pl * OH * OW;
    int64_t* ip = indices ? indices + pl * OH * OW : nullptr;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t r0 = 2 * oh * W, r1 = r0 + W;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t c = 2 * ow;
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_i = r0 + c;
        max_tap(xp[r0 + c], r0 + c, best, best_i);
        max_tap(xp[r0 + c + 1], r0 + c + 1, best, best_i);
        max_tap(xp[r1 + c], r1 + c, best, best_i);
        max_tap(xp[r1 + c + 1], r1 + c + 1, best, best_i);
        yp[oh * OW + ow] = best;
        if (ip) ip[oh * OW + ow] = best_i;
      }
    }
  }
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  pool2d_check(d, "max_pool2d_forward");
  if (d.kh == 2 && d.kw == 2 && d.stride_h == 2 && d.stride_w == 2 && d.pad_h == 0 && d.pad_w == 0 &&
      d.dil_h == 1 && d.dil_w == 1 && !d.ceil_mode) {
    max_pool2x2_s2(d, x, y, indices);
    return;
  }
  const int64_t OH = d.out_h(), OW = d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * d.H * d.W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * d.stride_h - d.pad_h;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * d.stride_w - d.pad_w;
        T best = -std::numeric_limits<T>::infinity();
        int64_t best_i = -1;
        for (int64_t i = 0; i < d.kh; ++i) {
          const int64_t h = h0 + i * d.dil_h;
          if (h < 0 || h >= d.H) continue;
          for (int64_t j = 0; j < d.kw; ++j) {
            const int64_t w = w0 + j * d.dil_w;
            if (w < 0 || w >= d.W) continue;
            const T v = xp[h * d.W + w];
            if (best_i < 0) best_i = h * d.W + w;  // PyTorch: index of the first tap if all are -inf
            if (v > best || std::isnan(v)) {      // PyTorch's rule: NaN propagates (last NaN wins)
              best = v;
              best_i = h * d.W + w;
            }
          }
        }
        const int64_t o = pl * OH * OW + oh * OW + ow;
        y[o] = best;
        if (indices) indices[o] = best_i;
      }
    }
  }
}

template <typename T>
void max_pool2d_backward(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx) {
  pool2d_check(d, "max_pool2d_backward");
  const int64_t OHW = d.out_h() * d.out_w(), HW = d.H * d.W, planes = d.N * d.C;
  KILN_CHECK(indices != nullptr, "max_pool2d_backward: indices from the forward are required: ", pool2d_desc_str(d));
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T* dxp = dx + pl * HW;
    std::fill(dxp, dxp + HW, T(0));
    const T* g = dy + pl * OHW;
    const int64_t* id = indices + pl * OHW;
    for (int64_t o = 0; o < OHW; ++o)
      if (id[o] >= 0 && id[o] < HW) dxp[id[o]] += g[o];
  }
}

template <typename T>
void avg_pool2d_forward(const Pool2dDesc& d, bool count_include_pad, const T* x, T* y) {
  pool2d_check(d, "avg_pool2d_forward");
  KILN_CHECK(d.dil_h == 1 && d.dil_w == 1, "avg_pool2d_forward: dilation must be 1: ", pool2d_desc_str(d));
  const int64_t OH = d.out_h(), OW = d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * d.H * d.W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const AvgWin wh = avg_win(oh, d.stride_h, d.pad_h, d.kh, d.H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const AvgWin ww = avg_win(ow, d.stride_w, d.pad_w, d.kw, d.W);
        T sum = 0;
        for (int64_t h = wh.start; h < wh.end; ++h)
          for (int64_t w = ww.start; w < ww.end; ++w) sum += xp[h * d.W + w];
        const int64_t div = count_include_pad ? wh.padded_len * ww.padded_len
                                              : (wh.end - wh.start) * (ww.end - ww.start);
        y[pl * OH * OW + oh * OW + ow] = div > 0 ? sum / (T)div : T(0);
      }
    }
  }
}

template <typename T>
void avg_pool2d_backward(const Pool2dDesc& d, bool count_include_pad, const T* dy, T* dx) {
  pool2d_check(d, "avg_pool2d_backward");
  KILN_CHECK(d.dil_h == 1 && d.dil_w == 1, "avg_pool2d_backward: dilation must be 1: ", pool2d_desc_str(d));
  const int64_t OH = d.out_h(), OW = d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T* dxp = dx + pl * d.H * d.W;
    std::fill(dxp, dxp + d.H * d.W, T(0));
    for (int64_t oh = 0; oh < OH; ++oh) {
      const AvgWin wh = avg_win(oh, d.stride_h, d.pad_h, d.kh, d.H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const AvgWin ww = avg_win(ow, d.stride_w, d.pad_w, d.kw, d.W);
        const int64_t div = count_include_pad ? wh.padded_len * ww.padded_len
                                              : (wh.end - wh.start) * (ww.end - ww.start);
        if (div <= 0) continue;
        const T g = dy[pl * OH * OW + oh * OW + ow] / (T)div;
        for (int64_t h = wh.start; h < wh.end; ++h)
          for (int64_t w = ww.start; w < ww.end; ++w) dxp[h * d.W + w] += g;
      }
    }
  }
}

template <typename T>
void adaptive_avg_pool2d_forward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                 const T* x, T* y) {
  KILN_CHECK(N >= 0 && C >= 1 && H >= 1 && W >= 1 && OH >= 1 && OW >= 1,
             "adaptive_avg_pool2d_forward: sizes must be positive: x (", N, ", ", C, ", ", H, ", ", W,
             "), output (", OH, ", ", OW, ")");
  const int64_t planes = N * C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* xp = x + pl * H * W;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
        T sum = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) sum += xp[h * W + w];
        y[pl * OH * OW + oh * OW + ow] = sum / (T)((h1 - h0) * (w1 - w0));
      }
    }
  }
}

template <typename T>
void adaptive_avg_pool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                  const T* dy, T* dx) {
  KILN_CHECK(N >= 0 && C >= 1 && H >= 1 && W >= 1 && OH >= 1 && OW >= 1,
             "adaptive_avg_pool2d_backward: sizes must be positive: x (", N, ", ", C, ", ", H, ", ", W,
             "), output (", OH, ", ", OW, ")");
  const int64_t planes = N * C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl) {
    T* dxp = dx + pl * H * W;
    std::fill(dxp, dxp + H * W, T(0));
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
        const T g = dy[pl * OH * OW + oh * OW + ow] / (T)((h1 - h0) * (w1 - w0));
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) dxp[h * W + w] += g;
      }
    }
  }
}

#define KILN_INSTANTIATE_POOL(T)                                                                          \
  template void max_pool2d_forward<T>(const Pool2dDesc&, const T*, T*, int64_t*);                       \
  template void max_pool2d_backward<T>(const Pool2dDesc&, const T*, const int64_t*, T*);                \
  template void avg_pool2d_forward<T>(const Pool2dDesc&, bool, const T*, T*);                           \
  template void avg_pool2d_backward<T>(const Pool2dDesc&, bool, const T*, T*);                          \
  template void adaptive_avg_pool2d_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,     \
                                               const T*, T*);                                           \
  template void adaptive_avg_pool2d_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,    \
                                                const T*, T*);
KILN_INSTANTIATE_POOL(float)
KILN_INSTANTIATE_POOL(double)
#undef KILN_INSTANTIATE_POOL

}  // namespace kiln::cpu
