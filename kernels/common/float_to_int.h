// The one float -> integer conversion of kiln's kernels, called by the CPU backend and the CUDA
// kernels alike (casts, fill, random fill into an integer tensor, index math from a float).
// Rule (PTX cvt.rzi.sat, what a GPU's conversion does): truncate toward zero; saturate to the
// integer type's range (+inf and values above -> max, -inf and values below -> min, so -1.5 -> 0 for
// u8); NaN -> 0; -0 -> 0. In C++ a cast of a NaN or out-of-range value is undefined behaviour (x86
// gives INT_MIN, and u8 went through i64 and wrapped), so kernel sources never convert a float to
// an integer with a cast: tests/cuda_cpu/test_cuda_cpu_sources.cpp rejects one outside this file.
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"

namespace kiln {

template <typename I> struct IntRange;
template <> struct IntRange<int32_t> { static constexpr int32_t lo = INT32_MIN, hi = INT32_MAX; };
template <> struct IntRange<int64_t> { static constexpr int64_t lo = INT64_MIN, hi = INT64_MAX; };
template <> struct IntRange<uint8_t> { static constexpr uint8_t lo = 0, hi = UINT8_MAX; };
template <> struct IntRange<uint32_t> { static constexpr uint32_t lo = 0, hi = UINT32_MAX; };
template <> struct IntRange<uint64_t> { static constexpr uint64_t lo = 0, hi = UINT64_MAX; };

template <typename I>
KILN_HOST_DEVICE I float_to_int(double v) {
  // 2^bits (unsigned) or 2^(bits-1) (signed): exactly representable, the first value past hi.
  constexpr double past_hi = (double)(IntRange<I>::hi / 2 + 1) * 2.0;
  if (!(v == v)) return 0;
  if (v <= (double)IntRange<I>::lo) return IntRange<I>::lo;
  if (v >= past_hi) return IntRange<I>::hi;
  return static_cast<I>(v);  // in range: truncation toward zero is defined
}

}  // namespace kiln
