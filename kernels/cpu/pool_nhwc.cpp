// Channels-last max pool (see pool_nhwc.h).
#include "kernels/cpu/pool_nhwc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::cpu {

namespace {

// Channels handled per inner loop (stack buffers of f32 best values and indices).
constexpr int64_t kRun = 256;

inline __attribute__((always_inline)) float widen(const bfloat16* p, int64_t j) {
  uint16_t h;
  std::memcpy(&h, p + j, sizeof h);
  const uint32_t u = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline __attribute__((always_inline)) float widen(const half* p, int64_t j) { return (float)p[j]; }
inline __attribute__((always_inline)) float widen(const float* p, int64_t j) { return p[j]; }
inline __attribute__((always_inline)) void narrow(bfloat16* o, int64_t j, float f) {  // engine/core/half.h's float_to_bf16_bits, branch-free
  uint32_t fb;
  std::memcpy(&fb, &f, sizeof fb);
  const uint32_t rounded = (fb + 0x7fffu + ((fb >> 16) & 1u)) >> 16, quiet = (fb >> 16) | 0x40u;
  const uint16_t h = (uint16_t)((fb & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
  std::memcpy(static_cast<void*>(o + j), &h, sizeof h);
}
inline __attribute__((always_inline)) void narrow(half* o, int64_t j, float f) { o[j] = half(f); }
inline __attribute__((always_inline)) void narrow(float* o, int64_t j, float f) { o[j] = f; }

std::string desc_str(const Pool2dDesc& d) {
  return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, ") channels-last, kernel ", d.kh, "x", d.kw,
                 ", stride ", d.stride_h, ",", d.stride_w, ", padding ", d.pad_h, ",", d.pad_w, ", dilation ", d.dil_h,
                 ",", d.dil_w);
}

// One output row (n, oh) of the forward: for each output, the window's taps over runs of channels; the
// winning tap's index within the plane (h * W + w, as I: int32 when the plane's indices fit, so the selects
// vectorize with no division per value) is kept beside the best value and widened to int64 on store.
template <typename I, typename S>
inline __attribute__((always_inline)) void forward_row(const Pool2dDesc& d, const S* x, S* y, int64_t* indices,
                                                       int64_t row) {
  const int64_t OH = d.out_h(), OW = d.out_w(), C = d.C;
  const int64_t n = row / OH, oh = row % OH;
  const S* xn = x + n * d.H * d.W * C;
  float best[kRun];
  I at[kRun];
  for (int64_t ow = 0; ow < OW; ++ow) {
    const int64_t h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
    const int64_t o = (row * OW + ow) * C;
    for (int64_t c0 = 0; c0 < C; c0 += kRun) {
      const int64_t nc = std::min(kRun, C - c0);
      bool inside = false;  // the first tap inside starts (a window of -inf reports it)
      for (int64_t j = 0; j < nc; ++j) best[j] = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < d.kh; ++i) {
        const int64_t h = h0 + i * d.dil_h;
        if (h < 0 || h >= d.H) continue;
        for (int64_t t = 0; t < d.kw; ++t) {
          const int64_t w = w0 + t * d.dil_w;
          if (w < 0 || w >= d.W) continue;
          const I e = (I)(h * d.W + w);
          const S* r = xn + (h * d.W + w) * C + c0;
          if (!inside) {
            inside = true;
            for (int64_t j = 0; j < nc; ++j) at[j] = e;
          }
          for (int64_t j = 0; j < nc; ++j) {
            const float v = widen(r, j);
            const bool m = (v > best[j]) | (v != v);
            best[j] = m ? v : best[j];
            at[j] = m ? e : at[j];
          }
        }
      }
      for (int64_t j = 0; j < nc; ++j) narrow(y + o + c0, j, best[j]);
      if (indices)
        for (int64_t j = 0; j < nc; ++j) indices[o + c0 + j] = inside ? (int64_t)at[j] : -1;
    }
  }
}

// One input row (n, h) of the backward.
template <typename S>
inline __attribute__((always_inline)) void backward_row(const Pool2dDesc& d, const S* dy, const int64_t* indices,
                                                        S* dx, int64_t row) {
  const int64_t OH = d.out_h(), OW = d.out_w(), C = d.C;
  // The outputs whose window (with dilation) can hold input index `in` along one axis: [lo, hi].
  auto range = [](int64_t in, int64_t stride, int64_t pad, int64_t k, int64_t dil, int64_t out, int64_t* lo,
                  int64_t* hi) {
    const int64_t a = in + pad - (k - 1) * dil;  // o * stride >= a
    *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
    *hi = std::min(out - 1, (in + pad) / stride);
  };
  const int64_t n = row / d.H, h = row % d.H;
  int64_t oh_lo, oh_hi;
  range(h, d.stride_h, d.pad_h, d.kh, d.dil_h, OH, &oh_lo, &oh_hi);
  float acc[kRun];
  for (int64_t w = 0; w < d.W; ++w) {
    int64_t ow_lo, ow_hi;
    range(w, d.stride_w, d.pad_w, d.kw, d.dil_w, OW, &ow_lo, &ow_hi);
    const int64_t e = h * d.W + w;
    S* out = dx + (row * d.W + w) * C;
    for (int64_t c0 = 0; c0 < C; c0 += kRun) {
      const int64_t nc = std::min(kRun, C - c0);
      for (int64_t j = 0; j < nc; ++j) acc[j] = 0.0f;
      for (int64_t oh = oh_lo; oh <= oh_hi; ++oh)
        for (int64_t ow = ow_lo; ow <= ow_hi; ++ow) {
          const int64_t o = ((n * OH + oh) * OW + ow) * C + c0;
          const S* g = dy + o;
          const int64_t* id = indices + o;
          // + 0 where the index is another input: acc never holds -0 (it starts at +0), so x + 0 == x
          for (int64_t j = 0; j < nc; ++j) acc[j] += id[j] == e ? widen(g, j) : 0.0f;
        }
      for (int64_t j = 0; j < nc; ++j) narrow(out + c0, j, acc[j]);
    }
  }
}

// The rows in the machine's best instruction set (cpu_isa.h; the same bits in each: compares, selects and
// f32 adds in one order).
template <typename S>
void forward_rows_baseline(const Pool2dDesc& d, const S* x, S* y, int64_t* ix) {
  if (d.H * d.W <= std::numeric_limits<int32_t>::max()) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int32_t>(d, x, y, ix, row);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int64_t>(d, x, y, ix, row);
  }
}
template <typename S>
void backward_rows_baseline(const Pool2dDesc& d, const S* dy, const int64_t* ix, S* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < d.N * d.H; ++row) backward_row(d, dy, ix, dx, row);
}
#if KILN_CPU_ISA_CLONES
template <typename S>
KILN_TARGET_AVX2 void forward_rows_avx2(const Pool2dDesc& d, const S* x, S* y, int64_t* ix) {
  if (d.H * d.W <= std::numeric_limits<int32_t>::max()) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int32_t>(d, x, y, ix, row);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int64_t>(d, x, y, ix, row);
  }
}
template <typename S>
KILN_TARGET_AVX2 void backward_rows_avx2(const Pool2dDesc& d, const S* dy, const int64_t* ix, S* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < d.N * d.H; ++row) backward_row(d, dy, ix, dx, row);
}
template <typename S>
KILN_TARGET_AVX512 void forward_rows_avx512(const Pool2dDesc& d, const S* x, S* y, int64_t* ix) {
  if (d.H * d.W <= std::numeric_limits<int32_t>::max()) {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int32_t>(d, x, y, ix, row);
  } else {
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < d.N * d.out_h(); ++row) forward_row<int64_t>(d, x, y, ix, row);
  }
}
template <typename S>
KILN_TARGET_AVX512 void backward_rows_avx512(const Pool2dDesc& d, const S* dy, const int64_t* ix, S* dx) {
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < d.N * d.H; ++row) backward_row(d, dy, ix, dx, row);
}
#endif

}  // namespace

template <typename S>
void max_pool2d_forward_nhwc(const Pool2dDesc& d, const S* x, S* y, int64_t* indices) {
  KILN_CHECK(d.N >= 0 && d.C >= 1 && d.out_h() > 0 && d.out_w() > 0, "max_pool2d_forward_nhwc: bad sizes, ",
             desc_str(d));
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512: return forward_rows_avx512(d, x, y, indices);
    case CpuIsa::avx2: return forward_rows_avx2(d, x, y, indices);
    default: break;
  }
#endif
  forward_rows_baseline(d, x, y, indices);
}

template <typename S>
void max_pool2d_backward_nhwc(const Pool2dDesc& d, const S* dy, const int64_t* indices, S* dx) {
  KILN_CHECK(indices != nullptr, "max_pool2d_backward_nhwc: indices from the forward are required: ", desc_str(d));
#if KILN_CPU_ISA_CLONES
  switch (cpu_isa_vector(cpu_isa())) {
    case CpuIsa::avx512: return backward_rows_avx512(d, dy, indices, dx);
    case CpuIsa::avx2: return backward_rows_avx2(d, dy, indices, dx);
    default: break;
  }
#endif
  backward_rows_baseline(d, dy, indices, dx);
}

#define KILN_INSTANTIATE_POOL_NHWC(S)                                                                     \
  template void max_pool2d_forward_nhwc<S>(const Pool2dDesc&, const S*, S*, int64_t*);                     \
  template void max_pool2d_backward_nhwc<S>(const Pool2dDesc&, const S*, const int64_t*, S*);
KILN_INSTANTIATE_POOL_NHWC(bfloat16)
KILN_INSTANTIATE_POOL_NHWC(half)
KILN_INSTANTIATE_POOL_NHWC(float)
#undef KILN_INSTANTIATE_POOL_NHWC

}  // namespace kiln::cpu
