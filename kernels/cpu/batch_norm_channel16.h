// The per-channel arithmetic of the CPU's 16-bit training batch norm (batch_norm_forward_train_16 /
// batch_norm_backward_train_16, X = bfloat16 or half; parameters and statistics f32), in f32 vector lanes:
// 32 lanes (two AVX-512 registers: two independent add chains), the same GCC vector code on every
// instruction set (lane-wise IEEE operations, no contraction: -ffp-contract=off), so the same bits at every
// cpu_isa() level and thread count. The f32 kernels keep batch_norm_channel.h's double arithmetic (they are
// the reference of the CUDA differential tests); this file exists because the 16-bit data's results are
// rounded to 8 (bf16) or 11 (f16) bits, so f32 arithmetic whose error is far below that changes a result
// only on a rounding boundary, at a quarter of the double loops' cost per value (docs/cpu-bf16.md).
//
// Accumulation and its bound: each channel sum runs in 32 f32 lanes; a lane takes at most kFlush (64)
// values before the lanes are added into 32 double lanes (exact), which are folded in a fixed order at the
// end. A sum over M values therefore has |error| <= (kFlush - 1) * 2^-24 * sum|terms| + (M-sized double
// error, ~M * 2^-53 * sum|terms|): ~3.8e-6 of sum|terms| for any M this engine meets (tests/unit/
// test_batch_norm_16.cpp derives its bounds from this). The variance is the second pass over
// d = x - mean_f32 with the shift's residue removed: var = (sum d^2 - (sum d)^2 / M) / M.
// The tail of a run (HW not a multiple of 32) is padded with values that add nothing (0, or the mean for
// d = x - mean). Private to kernels/cpu; no allocation, no threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/core/half.h"

namespace kiln::cpu::bn16 {

constexpr int kLanes = 32;       // f32 lanes per vector (two AVX-512 registers)
constexpr int64_t kFlush = 64;   // vectors added into the f32 lanes before they go to the double lanes
typedef float F32v __attribute__((vector_size(kLanes * sizeof(float))));
typedef double F64v __attribute__((vector_size(kLanes * sizeof(double))));
typedef uint32_t U32v __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef int32_t I32v __attribute__((vector_size(kLanes * sizeof(int32_t))));
typedef uint16_t U16v __attribute__((vector_size(kLanes * sizeof(uint16_t))));

#define KILN_BN16_INLINE inline __attribute__((always_inline))

KILN_BN16_INLINE F32v splat(float v) { return F32v{} + v; }

// 32 values p[0, 32) widened to f32 (exact)
template <typename X>
KILN_BN16_INLINE F32v load(const X* p) {
  F32v f;
  if constexpr (std::is_same_v<X, bfloat16>) {  // the bits shifted up 16
    U16v b;
    std::memcpy(&b, p, sizeof b);
    const U32v w = __builtin_convertvector(b, U32v) << 16;
    std::memcpy(&f, &w, sizeof f);
  } else {
    for (int j = 0; j < kLanes; ++j) f[j] = (float)p[j];
  }
  return f;
}

// the first n < 32 values of p widened, the other lanes `pad`
template <typename X>
KILN_BN16_INLINE F32v load_tail(const X* p, int64_t n, float pad) {
  float buf[kLanes];
  for (int64_t j = 0; j < n; ++j) buf[j] = (float)p[j];
  for (int64_t j = n; j < kLanes; ++j) buf[j] = pad;
  F32v f;
  std::memcpy(&f, buf, sizeof f);
  return f;
}

// v rounded to X (round to nearest even, NaN quieted: half.h's float_to_bf16_bits lane-wise) into o[0, n)
template <typename X>
KILN_BN16_INLINE void store(X* o, const F32v& v, int64_t n) {
  if constexpr (std::is_same_v<X, bfloat16>) {
    U32v u;
    std::memcpy(&u, &v, sizeof u);
    const U32v rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const U32v quiet = (u >> 16) | 0x40u;
    const I32v nan = (u & 0x7fffffffu) > 0x7f800000u;  // all ones where NaN
    const U32v r = (quiet & (U32v)nan) | (rounded & ~(U32v)nan);
    const U16v h = __builtin_convertvector(r, U16v);
    std::memcpy(static_cast<void*>(o), &h, (size_t)n * sizeof(uint16_t));
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = X(v[j]);
  }
}

// f32 lanes flushed into double lanes every kFlush vectors; total() folds the double lanes in a fixed order.
struct Sum {
  F32v f = {};
  F64v d = {};
  int64_t n = 0;
  KILN_BN16_INLINE void add(const F32v& v) {
    f += v;
    if (++n == kFlush) flush();
  }
  KILN_BN16_INLINE void flush() {
    d += __builtin_convertvector(f, F64v);
    f = F32v{};
    n = 0;
  }
  KILN_BN16_INLINE double total() {
    flush();
    double h[kLanes / 2];  // pairwise: lane j with lane j + 16, then halves again
    for (int j = 0; j < kLanes / 2; ++j) h[j] = d[j] + d[j + kLanes / 2];
    for (int w = kLanes / 4; w >= 1; w /= 2)
      for (int j = 0; j < w; ++j) h[j] = h[j] + h[j + w];
    return h[0];
  }
};

// sum of x over channel c
template <typename X>
KILN_BN16_INLINE double sum(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c) {
  Sum s;
  for (int64_t n = 0; n < N; ++n) {
    const X* p = x + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) s.add(load(p + i));
    if (i < HW) s.add(load_tail(p + i, HW - i, 0.0f));
  }
  return s.total();
}

// sum of d and of d^2 over channel c, d = x - m (f32)
template <typename X>
KILN_BN16_INLINE void centered_sums(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c, float m, double* s1,
                                    double* s2) {
  Sum a, b;
  const F32v mv = splat(m);
  for (int64_t n = 0; n < N; ++n) {
    const X* p = x + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) {
      const F32v d = load(p + i) - mv;
      a.add(d);
      b.add(d * d);
    }
    if (i < HW) {
      const F32v d = load_tail(p + i, HW - i, m) - mv;  // the pad gives d = 0
      a.add(d);
      b.add(d * d);
    }
  }
  *s1 = a.total();
  *s2 = b.total();
}

// y = (x - m) * k + b in f32 lanes, rounded once to X
template <typename X>
KILN_BN16_INLINE void normalize(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c, float m, float k, float b,
                                X* y) {
  const F32v mv = splat(m), kv = splat(k), bv = splat(b);
  for (int64_t n = 0; n < N; ++n) {
    const X* p = x + (n * C + c) * HW;
    X* o = y + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) store(o + i, (load(p + i) - mv) * kv + bv, kLanes);
    if (i < HW) store(o + i, (load_tail(p + i, HW - i, m) - mv) * kv + bv, HW - i);
  }
}

// sums of dy and of dy * (x - m) over channel c
template <typename X>
KILN_BN16_INLINE void grad_sums(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, int64_t c, float m,
                                double* sum_dy, double* sum_dy_xmu) {
  Sum a, b;
  const F32v mv = splat(m);
  for (int64_t n = 0; n < N; ++n) {
    const X* g = dy + (n * C + c) * HW;
    const X* p = x + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) {
      const F32v gv = load(g + i);
      a.add(gv);
      b.add(gv * (load(p + i) - mv));
    }
    if (i < HW) {  // pads: dy 0, x the mean: both add 0
      const F32v gv = load_tail(g + i, HW - i, 0.0f);
      a.add(gv);
      b.add(gv * (load_tail(p + i, HW - i, m) - mv));
    }
  }
  *sum_dy = a.total();
  *sum_dy_xmu = b.total();
}

// dx = k * ((dy - mean_dy) - (x - m) * proj) in f32 lanes, rounded once to X
template <typename X>
KILN_BN16_INLINE void input_grad(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, int64_t c, float m,
                                 float k, float mean_dy, float proj, X* dx) {
  const F32v mv = splat(m), kv = splat(k), gm = splat(mean_dy), pv = splat(proj);
  for (int64_t n = 0; n < N; ++n) {
    const X* g = dy + (n * C + c) * HW;
    const X* p = x + (n * C + c) * HW;
    X* o = dx + (n * C + c) * HW;
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes)
      store(o + i, kv * ((load(g + i) - gm) - (load(p + i) - mv) * pv), kLanes);
    if (i < HW)
      store(o + i, kv * ((load_tail(g + i, HW - i, 0.0f) - gm) - (load_tail(p + i, HW - i, m) - mv) * pv), HW - i);
  }
}

#undef KILN_BN16_INLINE

}  // namespace kiln::cpu::bn16
