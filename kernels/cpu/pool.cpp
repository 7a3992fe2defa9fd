// Pooling kernels (see pool.h). One OpenMP task per (n, c) plane: planes are independent in both
// directions, so backward scatters need no atomics. Max pool also runs on 16-bit data (bf16, f16): values
// widen to f32 on load (exact), compare in f32 and store the winner rounded back (exact: it is one of the
// inputs; a NaN comes out quieted, as f32 staging gives), the bits of the f32 kernel on the widened data.
// The bf16 2x2 stride-2 window has an AVX-512 loop of its own (no staging; same bits and indices).
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "kernels/common/nn_check.h"
#include "kernels/cpu/bf16_runs.h"
#include "kernels/cpu/cpu_isa.h"

namespace kiln::cpu {

namespace {

// The type max pool compares in: f32 for 16-bit storage, else the storage type.
template <typename S>
using MaxVal = std::conditional_t<std::is_same_v<S, bfloat16> || std::is_same_v<S, half>, float, S>;

// 16-bit <-> f32 runs for the staged planes below: bf16 by bf16_runs.h's branch-free runs (half.h's
// formulas, NaN quieted, round to nearest even), compiled per instruction set (cpu_isa.h: SSE2 narrows bf16
// poorly) with the same bits at every level; f16 by its conversions.
void widen_bf16_baseline(float* o, const bfloat16* x, int64_t n) { bf16_run_to_f32(o, x, n); }
void narrow_bf16_baseline(bfloat16* o, const float* x, int64_t n) { f32_run_to_bf16(o, x, n); }
#if KILN_CPU_ISA_CLONES
KILN_TARGET_AVX2 void widen_bf16_avx2(float* o, const bfloat16* x, int64_t n) { bf16_run_to_f32(o, x, n); }
KILN_TARGET_AVX2 void narrow_bf16_avx2(bfloat16* o, const float* x, int64_t n) { f32_run_to_bf16(o, x, n); }
KILN_TARGET_AVX512 void widen_bf16_avx512(float* o, const bfloat16* x, int64_t n) { bf16_run_to_f32(o, x, n); }
KILN_TARGET_AVX512 void narrow_bf16_avx512(bfloat16* o, const float* x, int64_t n) { f32_run_to_bf16(o, x, n); }
#endif

template <typename S>
inline void widen_run(CpuIsa isa, float* o, const S* x, int64_t n) {
  if constexpr (std::is_same_v<S, bfloat16>) {
#if KILN_CPU_ISA_CLONES
    if (isa == CpuIsa::avx512) return widen_bf16_avx512(o, x, n);
    if (isa == CpuIsa::avx2) return widen_bf16_avx2(o, x, n);
#endif
    (void)isa;
    widen_bf16_baseline(o, x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = (float)x[i];
  }
}
template <typename S>
inline void narrow_run(CpuIsa isa, S* o, const float* x, int64_t n) {
  if constexpr (std::is_same_v<S, bfloat16>) {
#if KILN_CPU_ISA_CLONES
    if (isa == CpuIsa::avx512) return narrow_bf16_avx512(o, x, n);
    if (isa == CpuIsa::avx2) return narrow_bf16_avx2(o, x, n);
#endif
    (void)isa;
    narrow_bf16_baseline(o, x, n);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = S(x[i]);
  }
}

// The 16-bit staging happens per plane in kStage f32 values on the stack (64 KiB: ResNet's 112x112 stem
// plane fits), in cache, instead of through whole f32 copies of the tensors.
constexpr int64_t kStage = 16384;

// One output row of the 2x2 stride-2 window: rows a and b of the input (2 * OW values each), the row's
// first tap index `base` in its plane. The taps are visited in the generic loop's order (a[2o], a[2o+1],
// b[2o], b[2o+1]) with PyTorch's rule written branch-free (a larger value or a NaN takes the place, the
// last NaN wins), so values and indices equal max_pool2d_forward's general path, and the compiler
// vectorizes the loop
// (stride-2 loads and selects; the first tap needs no test: it replaces the -inf start in every case,
// and a window of -inf keeps it). The winning tap (0-3) goes through a small buffer, then to indices.
template <typename S>
inline void max_pool2x2_s2_row(const S* __restrict a, const S* __restrict b, int64_t OW, int64_t W, int64_t base,
                               S* __restrict y, int64_t* __restrict indices) {
  using T = MaxVal<S>;
  constexpr int64_t kChunk = 256;
  int32_t tap[kChunk];
  for (int64_t o0 = 0; o0 < OW; o0 += kChunk) {
    const int64_t n = std::min(kChunk, OW - o0);
    const S* ar = a + 2 * o0;
    const S* br = b + 2 * o0;
    S* yr = y + o0;
    for (int64_t j = 0; j < n; ++j) {
      T best = (T)ar[2 * j];
      int32_t t = 0;
      const T v1 = (T)ar[2 * j + 1];
      const bool m1 = (v1 > best) | (v1 != v1);
      best = m1 ? v1 : best;
      t = m1 ? 1 : t;
      const T v2 = (T)br[2 * j];
      const bool m2 = (v2 > best) | (v2 != v2);
      best = m2 ? v2 : best;
      t = m2 ? 2 : t;
      const T v3 = (T)br[2 * j + 1];
      const bool m3 = (v3 > best) | (v3 != v3);
      best = m3 ? v3 : best;
      t = m3 ? 3 : t;
      yr[j] = S(best);
      tap[j] = t;
    }
    if (indices) {
      int64_t* ir = indices + o0;
      const int64_t first = base + 2 * o0;
      for (int64_t j = 0; j < n; ++j) ir[j] = first + 2 * j + (tap[j] & 1) + (int64_t)(tap[j] >> 1) * W;
    }
  }
}

// (max_plane below) The 2x2 stride-2 window without padding or dilation (the small CNN's pools): every
// tap is inside the plane, so no bounds tests. It was 12% of a batch-16 small-CNN step as the general loop and ~10%
// of a batch-128 one as a scalar loop with a branch per tap (docs/cpu-profile.md). Baseline SSE2 only:
// compiled for AVX2 / AVX-512 (cpu_isa.h) it took 1.2x / 2x the time on the small CNN's rows of 7 and
// 14 outputs, shorter than one wide vector (perf samples, docs/cpu-profile.md). bf16 on AVX-512 takes
// max_pool2x2_s2_bf16_avx512 below instead (masked 16-output chunks: a short row costs one vector).

// One output of the general window: taps in row order, those outside the plane skipped; PyTorch's
// rule (a larger value or a NaN takes the place, the last NaN wins; the first tap inside starts, so
// a window of -inf reports it).
template <typename S>
inline void max_window(const Pool2dDesc& d, const S* xp, int64_t oh, int64_t ow, S* y, int64_t* index) {
  using T = MaxVal<S>;
  const int64_t h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
  T best = -std::numeric_limits<T>::infinity();
  int64_t best_i = -1;
  for (int64_t i = 0; i < d.kh; ++i) {
    const int64_t h = h0 + i * d.dil_h;
    if (h < 0 || h >= d.H) continue;
    for (int64_t j = 0; j < d.kw; ++j) {
      const int64_t w = w0 + j * d.dil_w;
      if (w < 0 || w >= d.W) continue;
      const T v = (T)xp[h * d.W + w];
      if (best_i < 0) best_i = h * d.W + w;  // PyTorch: index of the first tap if all are -inf
      if (v > best || std::isnan(v)) {      // PyTorch's rule: NaN propagates (last NaN wins)
        best = v;
        best_i = h * d.W + w;
      }
    }
  }
  *y = S(best);
  if (index) *index = best_i;
}

// Outputs [ow0, ow1) of row oh whose windows lie inside the plane (dilation 1): the same rule
// written branch-free, one tap at a time over a chunk of outputs (stride-s loads and selects, which
// the compiler vectorizes); the first tap starts, as in max_window. ResNet's 3x3 stride-2 stem pool
// took 5.5% of an 8x224 ResNet18 step through max_window alone (perf, 2026-12-03).
template <typename S>
void max_interior_row(const Pool2dDesc& d, const S* xp, int64_t oh, int64_t ow0, int64_t ow1, S* y, int64_t* index) {
  using T = MaxVal<S>;
  constexpr int64_t kChunk = 256;
  T best[kChunk];
  int32_t tap[kChunk];
  const int64_t s = d.stride_w, h0 = oh * d.stride_h - d.pad_h;
  for (int64_t o0 = ow0; o0 < ow1; o0 += kChunk) {
    const int64_t n = std::min(kChunk, ow1 - o0);
    const S* base = xp + h0 * d.W + o0 * s - d.pad_w;  // tap (0, 0) of output o0
    for (int64_t o = 0; o < n; ++o) best[o] = (T)base[o * s], tap[o] = 0;
    for (int64_t i = 0; i < d.kh; ++i)
      for (int64_t j = (i == 0 ? 1 : 0); j < d.kw; ++j) {
        const S* r = base + i * d.W + j;
        const int32_t t = (int32_t)(i * d.kw + j);
        for (int64_t o = 0; o < n; ++o) {
          const T v = (T)r[o * s];
          const bool m = (v > best[o]) | (v != v);
          best[o] = m ? v : best[o];
          tap[o] = m ? t : tap[o];
        }
      }
    for (int64_t o = 0; o < n; ++o) y[o0 + o] = S(best[o]);
    if (index) {
      const int64_t first = h0 * d.W - d.pad_w;
      for (int64_t o = 0; o < n; ++o)
        index[o0 + o] = first + (o0 + o) * s + (tap[o] / d.kw) * d.W + tap[o] % d.kw;
    }
  }
}

}  // namespace

namespace {

// Which outputs of a plane take which loop: the 2x2 stride-2 rows, or per output row the windows inside the
// plane, [ow_lo, ow_hi) of rows [oh_lo, oh_hi) (dilation 1 only; empty otherwise), and the general window.
struct MaxPlan {
  bool two_by_two = false;
  int64_t oh_lo = 0, oh_hi = 0, ow_lo = 0, ow_hi = 0;
};
MaxPlan max_plan(const Pool2dDesc& d) {
  MaxPlan p;
  p.two_by_two = d.kh == 2 && d.kw == 2 && d.stride_h == 2 && d.stride_w == 2 && d.pad_h == 0 && d.pad_w == 0 &&
                 d.dil_h == 1 && d.dil_w == 1 && !d.ceil_mode;
  auto inside = [](int64_t pad, int64_t stride, int64_t k, int64_t in, int64_t out, int64_t* lo, int64_t* hi) {
    *lo = std::min(out, (pad + stride - 1) / stride);
    *hi = in + pad - k < 0 ? *lo : std::max(*lo, std::min(out, (in + pad - k) / stride + 1));
  };
  if (d.dil_h == 1 && d.dil_w == 1) {
    inside(d.pad_h, d.stride_h, d.kh, d.H, d.out_h(), &p.oh_lo, &p.oh_hi);
    inside(d.pad_w, d.stride_w, d.kw, d.W, d.out_w(), &p.ow_lo, &p.ow_hi);
  }
  return p;
}

// One (n, c) plane: xp (H, W) -> yp (OH, OW), ip (OH, OW) or null.
template <typename T>
void max_plane(const Pool2dDesc& d, const MaxPlan& p, const T* xp, T* yp, int64_t* ip) {
  const int64_t OH = d.out_h(), OW = d.out_w(), W = d.W;
  if (p.two_by_two) {
    for (int64_t oh = 0; oh < OH; ++oh)
      max_pool2x2_s2_row(xp + 2 * oh * W, xp + (2 * oh + 1) * W, OW, W, 2 * oh * W, yp + oh * OW,
                         ip ? ip + oh * OW : nullptr);
    return;
  }
  for (int64_t oh = 0; oh < OH; ++oh) {
    const bool row_inside = oh >= p.oh_lo && oh < p.oh_hi && p.ow_lo < p.ow_hi;
    const int64_t a = row_inside ? p.ow_lo : OW, b = row_inside ? p.ow_hi : OW;
    for (int64_t ow = 0; ow < a; ++ow) max_window(d, xp, oh, ow, yp + oh * OW + ow, ip ? ip + oh * OW + ow : nullptr);
    if (row_inside) max_interior_row(d, xp, oh, a, b, yp + oh * OW, ip ? ip + oh * OW : nullptr);
    for (int64_t ow = b; ow < OW; ++ow) max_window(d, xp, oh, ow, yp + oh * OW + ow, ip ? ip + oh * OW + ow : nullptr);
  }
}

#if KILN_CPU_ISA_CLONES
// The 2x2 stride-2 window on bf16 planes with AVX-512, no staging (the small CNN's pools: rows of 14 and 7
// outputs, which the staged path's SSE2 loop and f32 widening ran one short row at a time; 3.7 ms of a
// 128x28 step). Per output row, chunks of 16 outputs: a row's 2 * 16 inputs load as 16 u32 pairs (masked
// at the row's end), the pair's two bf16 widen exactly by shift / mask, and the taps take
// max_pool2x2_s2_row's rule in its order (a larger value or a NaN takes the place), so y is the winner's bits
// (a NaN quieted, bit 0x40, as the f32 round trip gives) and the index the same tap: the bits and indices of
// the staged path. Indices as i32 lanes widened to i64 (a plane's index < 2^31: the caller's kStage bound).
// (GCC 12 warns that the shift intrinsics' _mm512_undefined_epi32() operand "may be used uninitialized" once
// they are inlined into the OpenMP body: a false positive of the header, silenced for this function only.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// One plane: xp (H, W) -> yp (OH, OW), ip (OH, OW) or null. (Its own function with the target, called from the
// OpenMP loop below: clang does not give an OpenMP body its function's target, and AVX-512 intrinsics need it.)
KILN_TARGET_AVX512 __attribute__((noinline)) void max_pool2x2_s2_bf16_plane_avx512(const Pool2dDesc& d,
                                                                                  const uint16_t* xp, uint16_t* yp,
                                                                                  int64_t* ip) {
  const int64_t OH = d.out_h(), OW = d.out_w(), W = d.W;
  {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u), quiet = _mm512_set1_epi32(0x40);
    const __m512i iota2 = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2), three = _mm512_set1_epi32(3);
    const __m512i wv = _mm512_set1_epi32((int)W);
    for (int64_t oh = 0; oh < OH; ++oh) {
      const uint16_t* a = xp + 2 * oh * W;
      const uint16_t* b = a + W;
      for (int64_t o0 = 0; o0 < OW; o0 += 16) {
        const int64_t n = std::min<int64_t>(16, OW - o0);
        const __mmask16 k = (__mmask16)((1u << n) - 1u);
        const __m512i ua = _mm512_maskz_loadu_epi32(k, a + 2 * o0), ub = _mm512_maskz_loadu_epi32(k, b + 2 * o0);
        const __m512 v1 = _mm512_castsi512_ps(_mm512_and_si512(ua, hi_mask));
        const __m512 v2 = _mm512_castsi512_ps(_mm512_slli_epi32(ub, 16));
        const __m512 v3 = _mm512_castsi512_ps(_mm512_and_si512(ub, hi_mask));
        __m512 best = _mm512_castsi512_ps(_mm512_slli_epi32(ua, 16));  // tap 0
        __m512i t = _mm512_setzero_si512();
        __mmask16 m = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, m, v1), t = _mm512_mask_mov_epi32(t, m, one);
        m = _mm512_cmp_ps_mask(v2, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v2, v2, _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, m, v2), t = _mm512_mask_mov_epi32(t, m, two);
        m = _mm512_cmp_ps_mask(v3, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v3, v3, _CMP_UNORD_Q);
        best = _mm512_mask_mov_ps(best, m, v3), t = _mm512_mask_mov_epi32(t, m, three);
        const __mmask16 nan = _mm512_cmp_ps_mask(best, best, _CMP_UNORD_Q);
        __m512i yb = _mm512_srli_epi32(_mm512_castps_si512(best), 16);
        yb = _mm512_mask_or_epi32(yb, nan, yb, quiet);
        _mm512_mask_cvtepi32_storeu_epi16(yp + oh * OW + o0, k, yb);
        if (ip) {
          // index = 2 * oh * W + 2 * (o0 + j) + (t & 1) + (t >> 1) * W
          const __m512i first = _mm512_set1_epi32((int)(2 * oh * W + 2 * o0));
          __m512i iv = _mm512_add_epi32(_mm512_add_epi32(first, iota2), _mm512_and_si512(t, one));
          iv = _mm512_add_epi32(iv, _mm512_mullo_epi32(_mm512_srli_epi32(t, 1), wv));
          int64_t* ir = ip + oh * OW + o0;
          _mm512_mask_storeu_epi64(ir, (__mmask8)(k & 0xff), _mm512_cvtepi32_epi64(_mm512_castsi512_si256(iv)));
          _mm512_mask_storeu_epi64(ir + 8, (__mmask8)(k >> 8),
                                   _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(iv, 1)));
        }
      }
    }
  }
}
void max_pool2x2_s2_bf16_avx512(const Pool2dDesc& d, const bfloat16* x, bfloat16* y, int64_t* indices) {
  const int64_t HW = d.H * d.W, OHW = d.out_h() * d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    max_pool2x2_s2_bf16_plane_avx512(d, reinterpret_cast<const uint16_t*>(x) + pl * HW,
                                     reinterpret_cast<uint16_t*>(y) + pl * OHW, indices ? indices + pl * OHW : nullptr);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  pool2d_check(d, "max_pool2d_forward");
  const int64_t HW = d.H * d.W, OHW = d.out_h() * d.out_w(), planes = d.N * d.C;
  const MaxPlan p = max_plan(d);
  if constexpr (!std::is_same_v<MaxVal<T>, T>) {
    if (HW <= kStage && OHW <= kStage) {
#if KILN_CPU_ISA_CLONES
      if constexpr (std::is_same_v<T, bfloat16>) {
        if (p.two_by_two && cpu_isa_vector(cpu_isa()) == CpuIsa::avx512)
          return max_pool2x2_s2_bf16_avx512(d, x, y, indices);
      }
#endif
      // 16-bit: each plane widened to f32 on the stack, the f32 plane loop, y rounded back (the staged bits)
      const CpuIsa isa = cpu_isa_vector(cpu_isa());
#pragma omp parallel for schedule(static)
      for (int64_t pl = 0; pl < planes; ++pl) {
        float xb[kStage], yb[kStage];
        widen_run(isa, xb, x + pl * HW, HW);
        max_plane<float>(d, p, xb, yb, indices ? indices + pl * OHW : nullptr);
        narrow_run(isa, y + pl * OHW, yb, OHW);
      }
      return;
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    max_plane(d, p, x + pl * HW, y + pl * OHW, indices ? indices + pl * OHW : nullptr);
}

namespace {

// The f32 / f64 backward: a scatter per plane.
template <typename T>
void max_pool2d_backward_f(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx) {
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

// The 16-bit backward: the f32 kernel's scatter (dx32[id[o]] += dy32[o], o increasing, from +0) into an
// f32 band of kStage values of the plane, rounded once to S: the same sums in the same order, so the bits of
// the staged path. A plane larger than a band is scattered band by band (each scans all the plane's outputs).
// One (n, c) plane: g (OH, OW), id (OH, OW) -> dxp (H, W).
template <typename S>
void max_pool2d_backward_16_plane(const Pool2dDesc& d, CpuIsa isa, const S* g, const int64_t* id, S* dxp) {
  const int64_t OHW = d.out_h() * d.out_w(), HW = d.H * d.W;
  float acc[kStage];
  for (int64_t e0 = 0; e0 < HW; e0 += kStage) {
    const int64_t nb = std::min(kStage, HW - e0);
    std::fill(acc, acc + nb, 0.0f);
    for (int64_t o = 0; o < OHW; ++o) {
      const int64_t e = id[o] - e0;
      if (e >= 0 && e < nb) acc[e] += (float)g[o];
    }
    narrow_run(isa, dxp + e0, acc, nb);
  }
}

#if KILN_CPU_ISA_CLONES
// The bf16 2x2 stride-2 backward with AVX-512 (the small CNN's pools), per plane: when every output's index lies
// in its own window (as the forward makes them), the windows are disjoint, so each input receives at most one
// gradient and dx[i] = bf16(0.0f + dy[o]) where i is o's index, else +0: the f32 scatter's bits (-0 becomes +0, a
// NaN is quieted, the sum in f32 as the scatter's, in the same MXCSR). Per output row, chunks of 16 outputs
// write both input rows as 16 u32 pairs (masked). A plane with any other index (a caller's arbitrary
// indices) is redone by the general scatter above, which writes all of it. Returns nothing; never allocates.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// One plane: gp (OH, OW), ip (OH, OW) -> xp (H, W); false (xp partly written) when an index is outside its window.
KILN_TARGET_AVX512 __attribute__((noinline)) bool max_pool2x2_s2_backward_bf16_plane_avx512(const Pool2dDesc& d,
                                                                                           const uint16_t* gp,
                                                                                           const int64_t* ip,
                                                                                           uint16_t* xp) {
  const int64_t OH = d.out_h(), OW = d.out_w(), W = d.W, H = d.H;
  {
    const __m512i iota2 = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i c1 = _mm512_set1_epi64(1), cw = _mm512_set1_epi64(W), cw1 = _mm512_set1_epi64(W + 1);
    const __m512i quiet = _mm512_set1_epi32(0x40);
    bool ok = true;
    for (int64_t oh = 0; oh < OH && ok; ++oh) {
      uint16_t* a = xp + 2 * oh * W;
      uint16_t* b = a + W;
      for (int64_t o0 = 0; o0 < OW; o0 += 16) {
        const int64_t n = std::min<int64_t>(16, OW - o0);
        const __mmask16 k = (__mmask16)((1u << n) - 1u);
        const __mmask8 klo = (__mmask8)(k & 0xff), khi = (__mmask8)(k >> 8);
        const int64_t* ir = ip + oh * OW + o0;
        // rel = index - the window's first tap: 0, 1, W or W + 1 inside the window
        const __m512i base = _mm512_add_epi64(_mm512_set1_epi64(2 * oh * W + 2 * o0), iota2);
        const __m512i rlo = _mm512_sub_epi64(_mm512_maskz_loadu_epi64(klo, ir), base);
        const __m512i rhi = _mm512_sub_epi64(_mm512_maskz_loadu_epi64(khi, ir + 8),
                                             _mm512_add_epi64(base, _mm512_set1_epi64(16)));
        const __m512i zero = _mm512_setzero_si512();
        const __mmask16 m0 = (__mmask16)(_mm512_cmpeq_epi64_mask(rlo, zero) |
                                         ((unsigned)_mm512_cmpeq_epi64_mask(rhi, zero) << 8));
        const __mmask16 m1 = (__mmask16)(_mm512_cmpeq_epi64_mask(rlo, c1) |
                                         ((unsigned)_mm512_cmpeq_epi64_mask(rhi, c1) << 8));
        const __mmask16 mw = (__mmask16)(_mm512_cmpeq_epi64_mask(rlo, cw) |
                                         ((unsigned)_mm512_cmpeq_epi64_mask(rhi, cw) << 8));
        const __mmask16 mw1 = (__mmask16)(_mm512_cmpeq_epi64_mask(rlo, cw1) |
                                          ((unsigned)_mm512_cmpeq_epi64_mask(rhi, cw1) << 8));
        if ((__mmask16)((m0 | m1 | mw | mw1) & k) != k) {
          ok = false;
          break;
        }
        // g = bf16(0.0f + dy) as the low 16 bits of u32 lanes
        const __m512i gw = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, gp + oh * OW + o0)), 16);
        const __m512 sum = _mm512_add_ps(_mm512_setzero_ps(), _mm512_castsi512_ps(gw));
        __m512i gb = _mm512_srli_epi32(_mm512_castps_si512(sum), 16);
        gb = _mm512_mask_or_epi32(gb, _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q), gb, quiet);
        const __m512i gh = _mm512_slli_epi32(gb, 16);
        const __m512i ra = _mm512_or_si512(_mm512_maskz_mov_epi32(m0, gb), _mm512_maskz_mov_epi32(m1, gh));
        const __m512i rb = _mm512_or_si512(_mm512_maskz_mov_epi32(mw, gb), _mm512_maskz_mov_epi32(mw1, gh));
        _mm512_mask_storeu_epi32(a + 2 * o0, k, ra);
        _mm512_mask_storeu_epi32(b + 2 * o0, k, rb);
      }
      if (W & 1) a[W - 1] = 0, b[W - 1] = 0;  // the last column no window reads
    }
    if (!ok) return false;
    if (H & 1) std::memset(xp + (H - 1) * W, 0, (size_t)W * sizeof(uint16_t));  // the last row no window reads
  }
  return true;
}
void max_pool2x2_s2_backward_bf16_avx512(const Pool2dDesc& d, const bfloat16* dy, const int64_t* indices,
                                         bfloat16* dx) {
  const int64_t HW = d.H * d.W, OHW = d.out_h() * d.out_w(), planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    if (!max_pool2x2_s2_backward_bf16_plane_avx512(d, reinterpret_cast<const uint16_t*>(dy) + pl * OHW,
                                                   indices + pl * OHW, reinterpret_cast<uint16_t*>(dx) + pl * HW))
      max_pool2d_backward_16_plane(d, CpuIsa::avx512, dy + pl * OHW, indices + pl * OHW, dx + pl * HW);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// The 16-bit backward: bf16 2x2 stride-2 windows on AVX-512 by the loop above, else the scatter per plane.
template <typename S>
void max_pool2d_backward_16(const Pool2dDesc& d, const S* dy, const int64_t* indices, S* dx) {
  const int64_t OHW = d.out_h() * d.out_w(), HW = d.H * d.W, planes = d.N * d.C;
  const CpuIsa isa = cpu_isa_vector(cpu_isa());
#if KILN_CPU_ISA_CLONES
  if constexpr (std::is_same_v<S, bfloat16>) {
    if (isa == CpuIsa::avx512 && max_plan(d).two_by_two) return max_pool2x2_s2_backward_bf16_avx512(d, dy, indices, dx);
  }
#endif
#pragma omp parallel for schedule(static)
  for (int64_t pl = 0; pl < planes; ++pl)
    max_pool2d_backward_16_plane(d, isa, dy + pl * OHW, indices + pl * OHW, dx + pl * HW);
}

}  // namespace

template <typename T>
void max_pool2d_backward(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx) {
  pool2d_check(d, "max_pool2d_backward");
  if constexpr (!std::is_same_v<MaxVal<T>, T>) {
    KILN_CHECK(indices != nullptr, "max_pool2d_backward: indices from the forward are required: ",
               pool2d_desc_str(d));
    max_pool2d_backward_16(d, dy, indices, dx);
  } else {
    max_pool2d_backward_f(d, dy, indices, dx);
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
// CPU only: max pool on 16-bit data (engine/ops/nn_pool.cpp calls these directly, not through KILN_DISPATCH).
template void max_pool2d_forward<bfloat16>(const Pool2dDesc&, const bfloat16*, bfloat16*, int64_t*);
template void max_pool2d_backward<bfloat16>(const Pool2dDesc&, const bfloat16*, const int64_t*, bfloat16*);
template void max_pool2d_forward<half>(const Pool2dDesc&, const half*, half*, int64_t*);
template void max_pool2d_backward<half>(const Pool2dDesc&, const half*, const int64_t*, half*);

}  // namespace kiln::cpu
