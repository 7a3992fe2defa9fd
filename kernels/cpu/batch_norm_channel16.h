// The per-channel arithmetic of the CPU's 16-bit training batch norm (batch_norm_forward_train_16 /
// batch_norm_backward_train_16, X = bfloat16 or half; parameters and statistics f32), in f32 vector lanes:
// 16 lanes (one AVX-512 register; wider GCC vectors were lowered through the stack), two accumulators per
// sum (values [32j, 32j+16) of a run and [32j+16, 32j+32): two add chains), the same GCC vector code on every
// instruction set (lane-wise IEEE operations, no contraction: -ffp-contract=off), so the same bits at every
// cpu_isa() level and thread count. The f32 kernels keep batch_norm_channel.h's double arithmetic (they are
// the reference of the CUDA differential tests); this file exists because the 16-bit data's results are
// rounded to 8 (bf16) or 11 (f16) bits, so f32 arithmetic whose error is far below that changes a result
// only on a rounding boundary, at a quarter of the double loops' cost per value (docs/cpu-bf16.md).
//
// Accumulation and its bound: each channel sum runs in 2 x 16 f32 lanes; a lane takes at most kFlush (64)
// values before the lanes are added into 32 double lanes (exact), which are folded in a fixed order at the
// end. A sum over M values therefore has |error| <= (kFlush - 1) * 2^-24 * sum|terms| + (M-sized double
// error, ~M * 2^-53 * sum|terms|): ~3.8e-6 of sum|terms| for any M this engine meets (tests/unit/
// test_batch_norm_16.cpp derives its bounds from this). The variance is the second pass over
// d = x - mean_f32 with the shift's residue removed: var = (sum d^2 - (sum d)^2 / M) / M.
// The tail of a run (HW not a multiple of 16) is padded with values that add nothing (0, or the mean for
// d = x - mean). Private to kernels/cpu; no allocation, no threads.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/core/half.h"

// The helpers below pass 64-byte vectors by value; they are always inlined, so the ABI note GCC gives for
// that without AVX-512 enabled (-Wpsabi) concerns no call that exists.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::cpu::bn16 {

constexpr int kLanes = 16;       // f32 lanes per vector (one AVX-512 register)
constexpr int64_t kMinRun = 32;  // runs shorter than this take the double loops (batch_norm.cpp)
constexpr int64_t kFlush = 64;   // steps (at most one add per lane each) before the f32 lanes go to double
typedef float F32v __attribute__((vector_size(kLanes * sizeof(float))));
typedef float F32h __attribute__((vector_size(kLanes / 2 * sizeof(float))));
typedef double F64h __attribute__((vector_size(kLanes / 2 * sizeof(double))));
typedef uint32_t U32v __attribute__((vector_size(kLanes * sizeof(uint32_t))));
typedef uint16_t U16v __attribute__((vector_size(kLanes * sizeof(uint16_t))));
typedef uint16_t U16x32 __attribute__((vector_size(2 * kLanes * sizeof(uint16_t))));

#define KILN_BN16_INLINE inline __attribute__((always_inline))
// Software prefetch of a cache line the next run will read (bit-neutral: no value depends on it). A channel's
// runs are N strided pieces of HW values (784 at 28x28: 25 lines), too short for the hardware prefetcher to
// follow from one to the next, and the first pass over a channel reads it from L3 / memory.
#define KILN_BN16_PF1(off) __builtin_prefetch(x + (off), 0, 3)
#define KILN_BN16_PF2(off) (__builtin_prefetch(x + (off), 0, 3), __builtin_prefetch(dy + (off), 0, 3))

KILN_BN16_INLINE F32v splat(float v) { return F32v{} + v; }

// 16 values p[0, 16) widened to f32 (exact)
template <typename X>
KILN_BN16_INLINE F32v load(const X* p) {
  F32v f;
  if constexpr (std::is_same_v<X, bfloat16>) {  // the bits shifted up 16: each bf16 the high half of its f32
    U16v b;
    std::memcpy(&b, p, sizeof b);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    // interleaved with zero halves: one vpermi2w on AVX-512 (GCC 12 splits the zero-extending convert below
    // into 256-bit halves, 5 instructions), the same bits
    const U16v z = {};
    const U16x32 w = __builtin_shufflevector(z, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9,
                                             25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#else
    const U32v w = __builtin_convertvector(b, U32v) << 16;
#endif
    std::memcpy(&f, &w, sizeof f);
  } else {
    for (int j = 0; j < kLanes; ++j) f[j] = (float)p[j];
  }
  return f;
}

// the first n < 16 values of p widened, the other lanes `pad`; `end`: the end of p's tensor. Where 16 values can
// be read below it, they are loaded whole and the lanes from n on replaced (the same lanes as value by value).
template <typename X>
KILN_BN16_INLINE F32v load_tail(const X* p, int64_t n, float pad, const X* end) {
  if (end - p >= kLanes) {
    const U32v lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return lane < (uint32_t)n ? load(p) : splat(pad);
  }
  F32v f = splat(pad);
  for (int64_t j = 0; j < n; ++j) f[j] = (float)p[j];
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
    const U32v r = v != v ? quiet : rounded;  // NaN: half.h's test on the bits, as a compare
    const U16v h = __builtin_convertvector(r, U16v);
    std::memcpy(static_cast<void*>(o), &h, (size_t)n * sizeof(uint16_t));
  } else {
    for (int64_t j = 0; j < n; ++j) o[j] = X(v[j]);
  }
}

// One channel sum: two f32 accumulators (a0: the first 16 values of each 32, a1: the second 16 and the
// tails) and their double lanes (4 x 8), flushed every kFlush steps; locals, so they stay in registers.
struct Acc {
  F32v a0 = {}, a1 = {};
  F64h d[4] = {};
};
KILN_BN16_INLINE void flush(Acc& s) {
  F32h h[4];
  std::memcpy(h, &s.a0, sizeof s.a0);
  std::memcpy(h + 2, &s.a1, sizeof s.a1);
  for (int j = 0; j < 4; ++j) s.d[j] += __builtin_convertvector(h[j], F64h);
  s.a0 = F32v{}, s.a1 = F32v{};
}
// the double lanes folded in a fixed order
KILN_BN16_INLINE double fold(Acc& s) {
  flush(s);
  const F64h t = (s.d[0] + s.d[2]) + (s.d[1] + s.d[3]);
  return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
}

// Runs the channel's values in steps: f(i0, i1, tail) per run of HW values at offset `base`, where lanes
// i0 (16 values at i0, or none when i0 < 0) go to a0 and i1 (16 values, or the tail's `tail` values) to a1.
// Each step adds at most one vector to each accumulator; flush every kFlush steps.
// `next` is the offset of the next run (the next image's run of the channel; this one's for the last): each
// step of 32 values (64 bytes of 16-bit data: one cache line) prefetches the same place of the next run, PF(off).
#define KILN_BN16_RUNS(HW, STEP2, STEP1, TAIL, FLUSH, PF)             \
  do {                                                              \
    int64_t k_ = 0;                                                 \
    for (int64_t n = 0; n < N; ++n) {                               \
      const int64_t base = (n * C + c) * (HW);                      \
      const int64_t next = n + 1 < N ? base + C * (HW) : base;      \
      int64_t i = 0;                                                \
      for (; i + 2 * kLanes <= (HW); i += 2 * kLanes) {             \
        PF(next + i);                                               \
        STEP2;                                                      \
        if (++k_ == kFlush) FLUSH, k_ = 0;                          \
      }                                                             \
      if (i < (HW)) PF(next + i);                                   \
      if (i + kLanes <= (HW)) {                                     \
        STEP1;                                                      \
        i += kLanes;                                                \
      }                                                             \
      if (i < (HW)) TAIL;                                           \
      if (++k_ == kFlush) FLUSH, k_ = 0;                            \
    }                                                               \
  } while (0)

// sum of x over channel c
template <typename X>
KILN_BN16_INLINE double sum(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c) {
  Acc s;
  const X* x_end = x + N * C * HW;
  KILN_BN16_RUNS(HW, (s.a0 += load(x + base + i), s.a1 += load(x + base + i + kLanes)),
                 (s.a0 += load(x + base + i)), (s.a1 += load_tail(x + base + i, HW - i, 0.0f, x_end)), flush(s),
                 KILN_BN16_PF1);
  return fold(s);
}

// sum of d and of d^2 over channel c, d = x - m (f32); the pad gives d = 0
template <typename X>
KILN_BN16_INLINE void centered_sums(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c, float m, double* s1,
                                    double* s2) {
  Acc a, b;
  const X* x_end = x + N * C * HW;
  const F32v mv = splat(m);
  auto add0 = [&](const F32v& d) { a.a0 += d, b.a0 += d * d; };
  auto add1 = [&](const F32v& d) { a.a1 += d, b.a1 += d * d; };
  KILN_BN16_RUNS(HW, (add0(load(x + base + i) - mv), add1(load(x + base + i + kLanes) - mv)),
                 (add0(load(x + base + i) - mv)), (add1(load_tail(x + base + i, HW - i, m, x_end) - mv)),
                 (flush(a), flush(b)), KILN_BN16_PF1);
  *s1 = fold(a);
  *s2 = fold(b);
}

// sums of dy and of dy * (x - m) over channel c; pads: dy 0, x the mean (both add 0)
template <typename X>
KILN_BN16_INLINE void grad_sums(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, int64_t c, float m,
                                double* sum_dy, double* sum_dy_xmu) {
  Acc a, b;
  const X* x_end = x + N * C * HW;
  const X* dy_end = dy + N * C * HW;
  const F32v mv = splat(m);
  auto add0 = [&](const F32v& g, const F32v& xv) { a.a0 += g, b.a0 += g * (xv - mv); };
  auto add1 = [&](const F32v& g, const F32v& xv) { a.a1 += g, b.a1 += g * (xv - mv); };
  KILN_BN16_RUNS(HW,
                 (add0(load(dy + base + i), load(x + base + i)),
                  add1(load(dy + base + i + kLanes), load(x + base + i + kLanes))),
                 (add0(load(dy + base + i), load(x + base + i))),
                 (add1(load_tail(dy + base + i, HW - i, 0.0f, dy_end), load_tail(x + base + i, HW - i, m, x_end))),
                 (flush(a), flush(b)), KILN_BN16_PF2);
  *sum_dy = fold(a);
  *sum_dy_xmu = fold(b);
}

// y = (x - m) * k + b in f32 lanes, rounded once to X
template <typename X>
KILN_BN16_INLINE void normalize(int64_t N, int64_t C, int64_t HW, const X* x, int64_t c, float m, float k, float b,
                                X* y) {
  const F32v mv = splat(m), kv = splat(k), bv = splat(b);
  const X* x_end = x + N * C * HW;
  for (int64_t n = 0; n < N; ++n) {
    const X* p = x + (n * C + c) * HW;
    X* o = y + (n * C + c) * HW;
    const int64_t next = n + 1 < N ? C * HW : 0;  // the next run's lines: x read, y written
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) {
      __builtin_prefetch(p + next + i, 0, 3), __builtin_prefetch(o + next + i, 1, 3);
      store(o + i, (load(p + i) - mv) * kv + bv, kLanes);
    }
    if (i < HW) store(o + i, (load_tail(p + i, HW - i, m, x_end) - mv) * kv + bv, HW - i);
  }
}

// dx = k * ((dy - mean_dy) - (x - m) * proj) in f32 lanes, rounded once to X
template <typename X>
KILN_BN16_INLINE void input_grad(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, int64_t c, float m,
                                 float k, float mean_dy, float proj, X* dx) {
  const F32v mv = splat(m), kv = splat(k), gm = splat(mean_dy), pv = splat(proj);
  const X *x_end = x + N * C * HW, *dy_end = dy + N * C * HW;
  for (int64_t n = 0; n < N; ++n) {
    const X* g = dy + (n * C + c) * HW;
    const X* p = x + (n * C + c) * HW;
    X* o = dx + (n * C + c) * HW;
    const int64_t next = n + 1 < N ? C * HW : 0;  // the next run's lines: dy, x read, dx written
    int64_t i = 0;
    for (; i + kLanes <= HW; i += kLanes) {
      __builtin_prefetch(g + next + i, 0, 3), __builtin_prefetch(p + next + i, 0, 3);
      __builtin_prefetch(o + next + i, 1, 3);
      store(o + i, kv * ((load(g + i) - gm) - (load(p + i) - mv) * pv), kLanes);
    }
    if (i < HW) {
      const F32v gt = load_tail(g + i, HW - i, 0.0f, dy_end), xt = load_tail(p + i, HW - i, m, x_end);
      store(o + i, kv * ((gt - gm) - (xt - mv) * pv), HW - i);
    }
  }
}

#undef KILN_BN16_RUNS
#undef KILN_BN16_PF1
#undef KILN_BN16_PF2
#undef KILN_BN16_INLINE

}  // namespace kiln::cpu::bn16

#pragma GCC diagnostic pop
