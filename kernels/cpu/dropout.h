// Dropout on the CPU with kiln's Philox stream (engine/core/philox.h), so the CUDA backend and a
// recomputed forward draw the same mask: element i is kept iff philox_uniform(seed, offset, i) >= p.
// Kept values are scaled by 1 / (1 - p) (by 0 when p == 1: everything is dropped).
#pragma once
#include <cstdint>

namespace kiln::cpu {

// x, y: (n); mask: (n) bytes, 1 = kept (may be null). The caller advances its generator by
// philox_counters_for(n).
template <typename T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t offset, T* y, uint8_t* mask);
// dx = dy * mask / (1 - p).
template <typename T>
void dropout_backward(int64_t n, const T* dy, const uint8_t* mask, double p, T* dx);

}  // namespace kiln::cpu
