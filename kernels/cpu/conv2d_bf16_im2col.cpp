// bf16 weight gradient as im2col + one oneDNN matmul (see conv2d_bf16_im2col.h).
// dw (K, C*R*S) = dy^T (K, N*OH*OW) x col^T: col (C*R*S, N*OH*OW) is kiln's im2col of x (image n's columns at
// n*OH*OW; bf16 moved as its bit patterns), dy^T dy's (K, OH*OW) planes side by side. The workspace, 64-byte
// aligned pieces: [col][dy^T][the matmul's workspace] + kAlign. NHWC: dw = dy^T col with dy (npq, K) read in
// place (trans_a) and col (npq, C*R*S) row-major: [col][the matmul's workspace] + kAlign. The NHWC rows
// interleave the taps' channel runs (column c*R*S + t); with AVX-512 32 channels at a time by vector permutes.
#include "kernels/cpu/conv2d_bf16_im2col.h"

#include <cstdint>
#include <cstring>

#include "engine/core/error.h"
#include "kernels/cpu/cpu_isa.h"
#if KILN_CPU_ISA_CLONES
#include <immintrin.h>
#endif
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/matmul_bf16.h"

namespace kiln::cpu {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Im2colPlan {
  MatmulBf16Desc mm;
  size_t dyt_offset = 0, mm_offset = 0, total = 0;
};

Im2colPlan im2col_plan_of(const Conv2dDesc& d, Bf16Layout layout) {
  Im2colPlan p;
  const int64_t npq = d.N * d.out_h() * d.out_w(), crs = d.C * d.R * d.S;
  p.mm.M = d.K, p.mm.N = crs, p.mm.K = npq;
  if (layout == Bf16Layout::nhwc) {
    p.mm.trans_a = true, p.mm.lda = d.K;    // A = dy^T: dy stored (npq, K)
    p.mm.trans_b = false, p.mm.ldb = crs;  // B = col (npq, crs), row-major
    p.dyt_offset = 0;                      // no dy^T piece
    p.mm_offset = align_up((size_t)(crs * npq) * sizeof(bfloat16));
    p.total = p.mm_offset + matmul_bf16_workspace_bytes(p.mm) + kAlign;
    return p;
  }
  p.mm.lda = npq;  // A = dy^T (K, npq), row-major
  p.mm.trans_b = true, p.mm.ldb = npq;  // B = col^T: col stored (crs, npq)
  p.dyt_offset = align_up((size_t)(crs * npq) * sizeof(bfloat16));
  p.mm_offset = p.dyt_offset + align_up((size_t)(d.K * npq) * sizeof(bfloat16));
  p.total = p.mm_offset + matmul_bf16_workspace_bytes(p.mm) + kAlign;
  return p;
}

}  // namespace

size_t conv2d_bf16_wgrad_im2col_bytes(const Conv2dDesc& d, Bf16Layout layout) {
  return im2col_plan_of(d, layout).total;
}

std::string conv2d_bf16_wgrad_im2col_impl(const Conv2dDesc& d, Bf16Layout layout) {
  return matmul_bf16_impl_name(im2col_plan_of(d, layout).mm);
}

namespace {

// One NHWC col row, channels [c0, C): o[c*rs + t] = src[t][c], 0 where src[t] is null (tap t outside x).
void nhwc_row_scalar(const uint16_t* const* src, int64_t rs, int64_t c0, int64_t C, uint16_t* o) {
  for (int64_t t = 0; t < rs; ++t) {
    uint16_t* ot = o + t;
    if (!src[t]) {
      for (int64_t c = c0; c < C; ++c) ot[c * rs] = 0;
      continue;
    }
    const uint16_t* xr = src[t];
    for (int64_t c = c0; c < C; ++c) ot[c * rs] = xr[c];
  }
}

// The AVX-512 row: per 32 channels the rs taps' runs as rs vectors, then the 32*rs interleaved values as rs
// output vectors, output vector j lane l = value e = 32j + l = (channel e / rs, tap e % rs): one index vector
// per j (the channel) and one lane mask per (j, tap), rs masked vpermw per output vector. The scalar loop
// writes the last C % 32 channels. Pure data movement: the scalar row's values at every ISA.
#if KILN_CPU_ISA_CLONES
constexpr int64_t kMaxVectorTaps = 16;
struct Interleave {
  uint16_t idx[kMaxVectorTaps][32];
  uint32_t mask[kMaxVectorTaps][kMaxVectorTaps];
};

Interleave interleave_of(int64_t rs) {
  Interleave il{};
  for (int64_t j = 0; j < rs; ++j)
    for (int64_t l = 0; l < 32; ++l) {
      const int64_t e = 32 * j + l;
      il.idx[j][l] = (uint16_t)(e / rs);
      il.mask[j][e % rs] |= 1u << l;
    }
  return il;
}

KILN_TARGET_AVX512 __attribute__((noinline)) void nhwc_row_avx512(const uint16_t* const* src, int64_t rs, int64_t C,
                                                                 uint16_t* o, const Interleave& il) {
  __m512i tap[kMaxVectorTaps];
  int64_t c0 = 0;
  for (; c0 + 32 <= C; c0 += 32) {
    for (int64_t t = 0; t < rs; ++t) tap[t] = src[t] ? _mm512_loadu_si512(src[t] + c0) : _mm512_setzero_si512();
    uint16_t* oc = o + c0 * rs;
    for (int64_t j = 0; j < rs; ++j) {
      const __m512i idx = _mm512_loadu_si512(il.idx[j]);
      __m512i v = _mm512_setzero_si512();
      for (int64_t t = 0; t < rs; ++t) v = _mm512_mask_permutexvar_epi16(v, (__mmask32)il.mask[j][t], idx, tap[t]);
      _mm512_storeu_si512(oc + 32 * j, v);
    }
  }
  if (c0 < C) nhwc_row_scalar(src, rs, c0, C, o);
}
#endif

}  // namespace

void conv2d_bf16_im2col_nhwc(const Conv2dDesc& d, const bfloat16* x, bfloat16* col_out, CpuIsa isa) {
  const int64_t OH = d.out_h(), OW = d.out_w(), npq = d.N * OH * OW, rs = d.R * d.S, crs = d.C * rs;
  KILN_CHECK(rs <= 1024, "conv2d bf16 im2col (NHWC): a ", d.R, "x", d.S, " window has more than 1024 taps");
  const uint16_t* xb = (const uint16_t*)x;
  uint16_t* col = (uint16_t*)col_out;
#if KILN_CPU_ISA_CLONES
  const bool vector = cpu_isa_vector(isa) == CpuIsa::avx512 && rs <= kMaxVectorTaps && d.C >= 32;
  const Interleave il = vector ? interleave_of(rs) : Interleave{};
#else
  (void)isa;
  const bool vector = false;
#endif
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < npq; ++row) {
    const int64_t n = row / (OH * OW), oh = (row / OW) % OH, ow = row % OW;
    const uint16_t* src[1024];  // tap r*S + s: its channel run in x, or null outside x
    for (int64_t r = 0; r < d.R; ++r)
      for (int64_t s = 0; s < d.S; ++s) {
        const int64_t ih = oh * d.stride_h - d.pad_h + r * d.dil_h, iw = ow * d.stride_w - d.pad_w + s * d.dil_w;
        const bool inside = ih >= 0 && ih < d.H && iw >= 0 && iw < d.W;
        src[r * d.S + s] = inside ? xb + ((n * d.H + ih) * d.W + iw) * d.C : nullptr;
      }
#if KILN_CPU_ISA_CLONES
    if (vector) {
      nhwc_row_avx512(src, rs, d.C, col + row * crs, il);
      continue;
    }
#endif
    nhwc_row_scalar(src, rs, 0, d.C, col + row * crs);
  }
}

namespace {

// NHWC: col row (n, oh, ow) = the window's taps, column c*R*S + r*S + s = x[n, ih, iw, c] (0 outside x);
// dy (npq, K) is the matmul's transposed A as it lies; dbias sums dy's column k over the rows in row order
// (the NCHW path's order over dy^T's row k).
void wgrad_im2col_nhwc(const Conv2dDesc& d, const Im2colPlan& p, const bfloat16* x, const bfloat16* dy, bfloat16* dw,
                       void* dbias, Bf16Bias bt, char* base) {
  const int64_t npq = d.N * d.out_h() * d.out_w();
  conv2d_bf16_im2col_nhwc(d, x, (bfloat16*)base, cpu_isa());
  matmul_bf16(p.mm, dy, (const bfloat16*)base, dw, base + p.mm_offset);
  if (bt == Bf16Bias::none) return;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) {
    float acc = 0.f;
    for (int64_t j = 0; j < npq; ++j) acc += (float)dy[j * d.K + k];
    if (bt == Bf16Bias::f32) ((float*)dbias)[k] = acc;
    else ((bfloat16*)dbias)[k] = bfloat16(acc);
  }
}

}  // namespace

void conv2d_bf16_wgrad_im2col(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                              Bf16Bias bt, void* workspace, Bf16Layout layout) {
  KILN_CHECK(workspace != nullptr, "conv2d bf16 backward_weight (im2col): workspace is null");
  const Im2colPlan p = im2col_plan_of(d, layout);
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  if (layout == Bf16Layout::nhwc) return wgrad_im2col_nhwc(d, p, x, dy, dw, dbias, bt, base);
  const int64_t pq = d.out_h() * d.out_w(), npq = d.N * pq, rs = d.R * d.S;
  uint16_t* col = (uint16_t*)base;
  bfloat16* dyt = (bfloat16*)(base + p.dyt_offset);
  const Im2colGeom g{d.H, d.W, d.R, d.S, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dil_h, d.dil_w, d.out_h(), d.out_w()};
  const int64_t planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; ++i) {  // plane (n, c): rows c*R*S.., columns n*pq..
    const int64_t n = i / d.C, c = i % d.C;
    im2col_plane<uint16_t>(g, (const uint16_t*)(x + i * d.H * d.W), col + c * rs * npq + n * pq, npq);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < d.N * d.K; ++i) {  // dy plane (n, k) -> dy^T row k, columns n*pq..
    const int64_t n = i / d.K, k = i % d.K;
    std::memcpy(static_cast<void*>(dyt + k * npq + n * pq), dy + i * pq, (size_t)pq * sizeof(bfloat16));
  }
  matmul_bf16(p.mm, dyt, (const bfloat16*)col, dw, base + p.mm_offset);
  if (bt == Bf16Bias::none) return;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) {
    float acc = 0.f;
    for (int64_t j = 0; j < npq; ++j) acc += (float)dyt[k * npq + j];
    if (bt == Bf16Bias::f32) ((float*)dbias)[k] = acc;
    else ((bfloat16*)dbias)[k] = bfloat16(acc);
  }
}

}  // namespace kiln::cpu
