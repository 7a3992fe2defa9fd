// CPU execution mode (kernels/cuda_cpu): CUDA's device built-ins for kiln's kernels compiled as host
// C++: the qualifiers, threadIdx / blockIdx / blockDim / gridDim, __syncthreads, the warp collectives
// over the 32 lanes of a warp, atomics (the block's fibres never run at once, so a plain
// read-modify-write is atomic), fences and the math intrinsics the kernels call. Included through the
// shim's <cuda_runtime.h>; nothing here is compiled into the real CUDA build.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda_cpu/grid_runner.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

#define threadIdx (::kiln::cuda_on_cpu::g_pos->tid)
#define blockIdx (::kiln::cuda_on_cpu::g_pos->bid)
#define blockDim (::kiln::cuda_on_cpu::g_pos->block)
#define gridDim (::kiln::cuda_on_cpu::g_pos->grid)
#define warpSize 32

#define __syncthreads() ::kiln::cuda_on_cpu::sync_block(__FILE__, __LINE__)

namespace kiln::cuda_on_cpu {

inline int lane_id() { return g_pos->linear & 31; }

template <typename T>
T shfl_from(unsigned mask, T v, int src, const char* what) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 16, "warp shuffle of a large type");
  T r;
  std::memcpy(&r, warp_exchange(mask, &v, sizeof(T), src, what), sizeof(T));
  return r;
}

}  // namespace kiln::cuda_on_cpu

inline void __syncwarp(unsigned mask = 0xffffffffu) { ::kiln::cuda_on_cpu::sync_warp(mask, "__syncwarp"); }

// Lane arithmetic as the PTX ISA's shfl.sync: a source outside [0, width) segment or outside the
// mask returns the caller's own value (up/down); xor and idx wrap within the width segment.
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = ::kiln::cuda_on_cpu::lane_id();
  const int s = (lane & ~(width - 1)) + (src & (width - 1));
  return ::kiln::cuda_on_cpu::shfl_from(mask, v, s, "__shfl_sync");
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::kiln::cuda_on_cpu::lane_id();
  int s = lane ^ lane_mask;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return ::kiln::cuda_on_cpu::shfl_from(mask, v, s, "__shfl_xor_sync");
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::kiln::cuda_on_cpu::lane_id();
  int s = lane + (int)delta;
  if ((s & ~(width - 1)) != (lane & ~(width - 1))) s = lane;
  return ::kiln::cuda_on_cpu::shfl_from(mask, v, s, "__shfl_down_sync");
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::kiln::cuda_on_cpu::lane_id();
  int s = lane - (int)delta;
  if (s < (lane & ~(width - 1))) s = lane;
  return ::kiln::cuda_on_cpu::shfl_from(mask, v, s, "__shfl_up_sync");
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  unsigned r = 0;
  for (int l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    const int p = ::kiln::cuda_on_cpu::shfl_from(mask, pred ? 1 : 0, l, "__ballot_sync");
    if (p) r |= 1u << l;
  }
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, !pred) == 0; }

// ---- atomics (fibres never run at once: a read-modify-write is atomic) ----
// Not instrumented for the shared-memory race check (shadow.h): atomics from several threads are no race.
#define KILN_CPU_ATOMIC __attribute__((no_sanitize("thread")))
template <typename T>
KILN_CPU_ATOMIC T atomicAdd(T* p, T v) {
  ::kiln::cuda_on_cpu::count_spin("atomicAdd");
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
KILN_CPU_ATOMIC T atomicMin(T* p, T v) {
  ::kiln::cuda_on_cpu::count_spin("atomicMin");
  const T old = *p;
  if (v < old) *p = v;
  return old;
}
template <typename T>
KILN_CPU_ATOMIC T atomicMax(T* p, T v) {
  ::kiln::cuda_on_cpu::count_spin("atomicMax");
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T>
KILN_CPU_ATOMIC T atomicExch(T* p, T v) {
  ::kiln::cuda_on_cpu::count_spin("atomicExch");
  const T old = *p;
  *p = v;
  return old;
}
template <typename T>
KILN_CPU_ATOMIC T atomicCAS(T* p, T cmp, T v) {
  ::kiln::cuda_on_cpu::count_spin("atomicCAS");
  const T old = *p;
  if (old == cmp) *p = v;
  return old;
}

// ---- fences, sleeps, traps ----
inline void __threadfence() { ::kiln::cuda_on_cpu::count_spin("__threadfence"); }
inline void __threadfence_block() { ::kiln::cuda_on_cpu::count_spin("__threadfence_block"); }
inline void __threadfence_system() { ::kiln::cuda_on_cpu::count_spin("__threadfence_system"); }
inline void __nanosleep(unsigned) { ::kiln::cuda_on_cpu::count_spin("__nanosleep"); }
[[noreturn]] inline void __trap() { ::kiln::cuda_on_cpu::fault("__trap() executed"); }

// ---- math intrinsics (host libm; no FMA contraction: compare with tolerances) ----
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// CUDA's global min / max overloads (mixed integer types promote as the usual arithmetic conversions).
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
  return (std::common_type_t<A, B>)b < (std::common_type_t<A, B>)a ? (std::common_type_t<A, B>)b
                                                                     : (std::common_type_t<A, B>)a;
}
template <typename A, typename B, typename = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
  return (std::common_type_t<A, B>)a < (std::common_type_t<A, B>)b ? (std::common_type_t<A, B>)b
                                                                     : (std::common_type_t<A, B>)a;
}
