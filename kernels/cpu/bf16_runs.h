// Contiguous f32 <-> bf16 runs written over the bit patterns with no branch, so GCC vectorizes them
// (the scalar conversions ran one value at a time: the autocast step's weight casts). The same
// formulas as engine/core/half.h's bf16_bits_to_float / float_to_bf16_bits (NaN quieted, round to
// nearest even), so the same bits. always_inline: each caller's instruction set (cpu_isa.h's targets)
// compiles them (elementwise.cpp's bf16 rows, conv2d_bf16_direct.inc). Header-only; no allocation, no threads.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/core/half.h"

namespace kiln::cpu {

inline __attribute__((always_inline)) void bf16_run_to_f32(float* o, const bfloat16* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t hbits;
    std::memcpy(&hbits, x + i, sizeof hbits);
    const uint32_t u = (uint32_t)hbits << 16;
    std::memcpy(o + i, &u, sizeof u);
  }
}

inline __attribute__((always_inline)) void f32_run_to_bf16(bfloat16* o, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t fbits;
    std::memcpy(&fbits, x + i, sizeof fbits);
    const uint32_t rounded = (fbits + 0x7fffu + ((fbits >> 16) & 1u)) >> 16;
    const uint32_t quiet = (fbits >> 16) | 0x40u;
    const uint16_t hbits = (uint16_t)((fbits & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    std::memcpy(static_cast<void*>(o + i), &hbits, sizeof hbits);
  }
}

}  // namespace kiln::cpu
