// Pooling kernels (see pool.h). One OpenMP task per (n, c) plane: planes are independent in both
// directions, so backward scatters need no atomics. The bf16 max pool runs the f32 plane routines on
// per-thread f32 copies of one plane (the C++ heap, H*W floats per thread; no tensors).
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/error.h"
#include "kernels/common/nn_check.h"
#include "kernels/cpu/bf16_runs.h"

namespace kiln::cpu {

namespace {

// One output row of the 2x2 stride-2 window: rows a and b of the input (2 * OW values each), the row's
// first tap index `base` in its plane. The taps are visited in the generic loop's order (a[2o], a[2o+1],
// b[2o], b[2o+1]) with PyTorch's rule written branch-free (a larger value or a NaN takes the place, the
// last NaN wins), so values and indices equal max_pool2d_forward's general path, and the compiler
// vectorizes the loop
// (stride-2 loads and selects; the first tap needs no test: it replaces the -inf start in every case,
// and a window of -inf keeps it). The winning tap (0-3) goes through a small buffer, then to indices.
template <typename T>
inline void max_pool2x2_s2_row(const T* __restrict a, const T* __restrict b, int64_t OW, int64_t W, int64_t base,
                               T* __restrict y, int64_t* __restrict indices) {
  constexpr int64_t kChunk = 256;
  int32_t tap[kChunk];
  for (int64_t o0 = 0; o0 < OW; o0 += kChunk) {
    const int64_t n = std::min(kChunk, OW - o0);
    const T* ar = a + 2 * o0;
    const T* br = b + 2 * o0;
    T* yr = y + o0;
    for (int64_t j = 0; j < n; ++j) {
      T best = ar[2 * j];
      int32_t t = 0;
      const T v1 = ar[2 * j + 1];
      const bool m1 = (v1 > best) | (v1 != v1);
      best = m1 ? v1 : best;
      t = m1 ? 1 : t;
      const T v2 = br[2 * j];
      const bool m2 = (v2 > best) | (v2 != v2);
      best = m2 ? v2 : best;
      t = m2 ? 2 : t;
      const T v3 = br[2 * j + 1];
      const bool m3 = (v3 > best) | (v3 != v3);
      best = m3 ? v3 : best;
      t = m3 ? 3 : t;
      yr[j] = best;
      tap[j] = t;
    }
    if (indices) {
      int64_t* ir = indices + o0;
      const int64_t first = base + 2 * o0;
      for (int64_t j = 0; j < n; ++j) ir[j] = first + 2 * j + (tap[j] & 1) + (int64_t)(tap[j] >> 1) * W;
    }
  }
}

// The 2x2 stride-2 window without padding or dilation (the small CNN's pools): every tap is inside
// the plane, so no bounds tests. It was 12% of a batch-16 small-CNN step as the general loop and ~10%
// of a batch-128 one as a scalar loop with a branch per tap (docs/cpu-profile.md). Baseline SSE2 only:
// compiled for AVX2 / AVX-512 (cpu_isa.h) it took 1.2x / 2x the time on the small CNN's rows of 7 and
// 14 outputs, shorter than one wide vector (perf samples, docs/cpu-profile.md).
template <typename T>
void max_pool2x2_s2_plane(const Pool2dDesc& d, const T* xp, T* yp, int64_t* ip) {
  const int64_t OH = d.out_h(), OW = d.out_w(), W = d.W;
  for (int64_t oh = 0; oh < OH; ++oh)
    max_pool2x2_s2_row(xp + 2 * oh * W, xp + (2 * oh + 1) * W, OW, W, 2 * oh * W, yp + oh * OW,
                       ip ? ip + oh * OW : nullptr);
}

template <typename T>
void max_pool2x2_s2(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  const int64_t OH = d.out_h(), OW = d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    max_pool2x2_s2_plane(d, x + pl * d.H * d.W, y + pl * OH * OW, indices ? indices + pl * OH * OW : nullptr);
}

bool is_2x2_s2(const Pool2dDesc& d) {
  return d.kh == 2 && d.kw == 2 && d.stride_h == 2 && d.stride_w == 2 && d.pad_h == 0 && d.pad_w == 0 &&
         d.dil_h == 1 && d.dil_w == 1 && !d.ceil_mode;
}

// Outputs whose windows lie inside the plane: [oh_lo, oh_hi) x [ow_lo, ow_hi) (dilation 1 only; empty otherwise).
struct Interior {
  int64_t oh_lo = 0, oh_hi = 0, ow_lo = 0, ow_hi = 0;
};
Interior interior(const Pool2dDesc& d) {
  auto inside = [](int64_t pad, int64_t stride, int64_t k, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
    *lo = std::min(out, (pad + stride - 1) / stride);
    *hi = in + pad - k < 0 ? *lo : std::max(*lo, std::min(out, (in + pad - k) / stride + 1));
  };
  Interior r;
  if (d.dil_h == 1 && d.dil_w == 1) {
    inside(d.pad_h, d.stride_h, d.kh, d.H, d.out_h(), &r.oh_lo, &r.oh_hi);
    inside(d.pad_w, d.stride_w, d.kw, d.W, d.out_w(), &r.ow_lo, &r.ow_hi);
  }
  return r;
}

// One output of the general window: taps in row order, those outside the plane skipped; PyTorch's
// rule (a larger value or a NaN takes the place, the last NaN wins; the first tap inside starts, so
// a window of -inf reports it).
template <typename T>
inline void max_window(const Pool2dDesc& d, const T* xp, int64_t oh, int64_t ow, T* y, int64_t* index) {
  const int64_t h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
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
  *y = best;
  if (index) *index = best_i;
}

// Outputs [ow0, ow1) of row oh whose windows lie inside the plane (dilation 1): the same rule
// written branch-free, one tap at a time over a chunk of outputs (stride-s loads and selects, which
// the compiler vectorizes); the first tap starts, as in max_window. ResNet's 3x3 stride-2 stem pool
// took 5.5% of an 8x224 ResNet18 step through max_window alone (perf, 2026-12-03).
template <typename T>
void max_interior_row(const Pool2dDesc& d, const T* xp, int64_t oh, int64_t ow0, int64_t ow1, T* y, int64_t* index) {
  constexpr int64_t kChunk = 256;
  T best[kChunk];
  int32_t tap[kChunk];
  const int64_t s = d.stride_w, h0 = oh * d.stride_h - d.pad_h;
  for (int64_t o0 = ow0; o0 < ow1; o0 += kChunk) {
    const int64_t n = std::min(kChunk, ow1 - o0);
    const T* base = xp + h0 * d.W + o0 * s - d.pad_w;  // tap (0, 0) of output o0
    for (int64_t o = 0; o < n; ++o) best[o] = base[o * s], tap[o] = 0;
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = (i == 0 ? 1 : 0); j < d.kw; ++j) {
        const T* r = base + i * d.W + j;
        const int32_t t = (int32_t)(i * d.kw + j);
        for (int64_t o = 0; o < n; ++o) {
          const T v = r[o * s];
          const bool m = (v > best[o]) | (v != v);
          best[o] = m ? v : best[o];
          tap[o] = m ? t : tap[o];
        }
      }
    std::copy(best, best + n, y + o0);
    if (index) {
      const int64_t first = h0 * d.W - d.pad_w;
      for (int64_t o = 0; o < n; ++o)
        index[o0 + o] = first + (o0 + o) * s + (tap[o] / d.kw) * d.W + tap[o] % d.kw;
    }
  }
}

// One plane of the general window (in: interior(d)).
template <typename T>
void max_pool_plane(const Pool2dDesc& d, const Interior& in, const T* xp, T* yp, int64_t* ip) {
  const int64_t OH = d.out_h(), OW = d.out_w();
  for (int64_t oh = 0; oh < OH; ++oh) {
    const bool row_inside = oh >= in.oh_lo && oh < in.oh_hi && in.ow_lo < in.ow_hi;
    const int64_t a = row_inside ? in.ow_lo : OW, b = row_inside ? in.ow_hi : OW;
    for (int64_t ow = 0; ow < a; ++ow) max_window(d, xp, oh, ow, yp + oh * OW + ow, ip ? ip + oh * OW + ow : nullptr);
    if (row_inside) max_interior_row(d, xp, oh, a, b, yp + oh * OW, ip ? ip + oh * OW : nullptr);
    for (int64_t ow = b; ow < OW; ++ow) max_window(d, xp, oh, ow, yp + oh * OW + ow, ip ? ip + oh * OW + ow : nullptr);
  }
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  pool2d_check(d, "max_pool2d_forward");
  if (is_2x2_s2(d)) {
    max_pool2x2_s2(d, x, y, indices);
    return;
  }
  const int64_t OH = d.out_h(), OW = d.out_w(), planes = d.N * d.C;
  const Interior in = interior(d);
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    max_pool_plane(d, in, x + pl * d.H * d.W, y + pl * OH * OW, indices ? indices + pl * OH * OW : nullptr);
}

// bf16: each plane widened to f32 in a per-thread buffer (exact), the f32 plane routines above, the result
// rounded back (bf16_runs.h: a max is one of its inputs, so only a NaN changes, quieted as half.h does): the
// same values, indices and bits as staging the tensor through f32 copies, without those tensors.
void max_pool2d_forward_bf16(const Pool2dDesc& d, const bfloat16* x, bfloat16* y, int64_t* indices) {
  pool2d_check(d, "max_pool2d_forward_bf16");
  const int64_t HW = d.H * d.W, OHW = d.out_h() * d.out_w(), planes = d.N * d.C;
  const bool fast = is_2x2_s2(d);
  const Interior in = interior(d);
#pragma omp parallel
  {
    std::vector<float> xf(HW), yf(OHW);
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      bf16_run_to_f32(xf.data(), x + pl * HW, HW);
      int64_t* ip = indices ? indices + pl * OHW : nullptr;
      if (fast) max_pool2x2_s2_plane(d, xf.data(), yf.data(), ip);
      else max_pool_plane(d, in, xf.data(), yf.data(), ip);
      f32_run_to_bf16(y + pl * OHW, yf.data(), OHW);
    }
  }
}

// bf16: dx accumulated in an f32 plane (the f32 kernel's order) and rounded once, as the staged path.
void max_pool2d_backward_bf16(const Pool2dDesc& d, const bfloat16* dy, const int64_t* indices, bfloat16* dx) {
  pool2d_check(d, "max_pool2d_backward_bf16");
  const int64_t OHW = d.out_h() * d.out_w(), HW = d.H * d.W, planes = d.N * d.C;
  KILN_CHECK(indices != nullptr, "max_pool2d_backward_bf16: indices from the forward are required: ",
             pool2d_desc_str(d));
#pragma omp parallel
  {
    std::vector<float> df(HW);
#pragma omp for schedule(static)
    for (int64_t pl = 0; pl < planes; ++pl) {
      std::fill(df.begin(), df.end(), 0.f);
      const bfloat16* g = dy + pl * OHW;
      const int64_t* id = indices + pl * OHW;
      for (int64_t o = 0; o < OHW; ++o)
        if (id[o] >= 0 && id[o] < HW) df[id[o]] += (float)g[o];
      f32_run_to_bf16(dx + pl * HW, df.data(), HW);
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
