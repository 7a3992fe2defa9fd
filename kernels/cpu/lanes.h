// Double sums in 8 independent lanes, shared by the CPU kernels that sum long runs (batch norm's channel
// sums, the row reductions, the conv bias gradient). Value i of a run goes to lane i % 8 and the lanes are
// added in a fixed order at the end: one dependency chain per lane instead of one for the whole run, so
// the adds pipeline and vectorize (a single chain costs one add per ~4 cycles: measured 10-16% of a
// small-CNN step in batch norm, 18 ms of a ResNet18 step in the f32 finite check). The order is fixed,
// so a sum does not depend on the thread count; it differs from a left-to-right sum by rounding only.
// The lanes are one GCC vector, loaded and converted 8 values at a time: written as an array of 8
// scalars, GCC built each vector from scalar loads and inserts. Vector extensions are lane-wise IEEE
// operations on every instruction set (SSE2 gets four 2-wide ops), so the bits do not depend on the
// instruction set either. Header-only, no allocation, no threads.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/core/half.h"

namespace kiln::cpu::lanes {

constexpr int kLanes = 8;
typedef double Lanes __attribute__((vector_size(kLanes * sizeof(double))));

inline double fold(const Lanes& acc) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// v = the 8 values p[0, 8) as doubles
template <typename T>
inline void load(const T* p, Lanes& v) {
  if constexpr (std::is_same_v<T, float>) {
    typedef float F8 __attribute__((vector_size(kLanes * sizeof(float))));
    F8 f;
    std::memcpy(&f, p, sizeof f);
    v = __builtin_convertvector(f, Lanes);
  } else if constexpr (std::is_same_v<T, double>) {
    std::memcpy(&v, p, sizeof v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {  // bf16 -> f32 is the bits shifted up: exact
    typedef uint16_t U16x8 __attribute__((vector_size(kLanes * sizeof(uint16_t))));
    typedef uint32_t U32x8 __attribute__((vector_size(kLanes * sizeof(uint32_t))));
    typedef float F8 __attribute__((vector_size(kLanes * sizeof(float))));
    U16x8 b;
    std::memcpy(&b, p, sizeof b);
    const U32x8 w = __builtin_convertvector(b, U32x8) << 16;
    F8 f;
    std::memcpy(&f, &w, sizeof f);
    v = __builtin_convertvector(f, Lanes);
  } else {  // f16: one conversion per value
    for (int j = 0; j < kLanes; ++j) v[j] = (double)p[j];
  }
}

// acc += p[0, n), value i to lane i % 8
template <typename T>
inline void add_run(const T* p, int64_t n, Lanes& acc) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    load(p + i, v);
    acc += v;
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += (double)p[i];
}

// acc += (p[i] - shift)^2 over p[0, n), value i to lane i % 8
template <typename T>
inline void add_centered_squares(const T* p, int64_t n, double shift, Lanes& acc) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    load(p + i, v);
    const Lanes d = v - shift;
    acc += d * d;
  }
  for (int j = 0; i < n; ++i, ++j) {
    const double d = (double)p[i] - shift;
    acc[j] += d * d;
  }
}

}  // namespace kiln::cpu::lanes
