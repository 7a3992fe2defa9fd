// Host/device 16-bit float types: IEEE binary16 (half) and bfloat16, with exact
// round-to-nearest-even conversion from f32 (NaN stays NaN, overflow goes to inf).
// Pure bit manipulation so CPU and GPU round identically.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/core/host_device.h"

namespace kiln {

KILN_HOST_DEVICE uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
KILN_HOST_DEVICE float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// binary16 -> f32: exact (every half is representable in f32).
KILN_HOST_DEVICE float half_bits_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (mant << 13));  // inf / NaN (payload kept)
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: mant * 2^-24
    float v = (float)mant * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

// f32 -> binary16, round to nearest even.
KILN_HOST_DEVICE uint16_t float_to_half_bits(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) {  // inf or NaN
    if (a == 0x7f800000u) return sign | 0x7c00u;
    uint16_t m = (uint16_t)((a >> 13) & 0x3ffu);
    return sign | 0x7c00u | (m ? m : 0x200u);  // keep NaN a NaN
  }
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (a < 0x38800000u) {
    // result is subnormal or zero: value = a * 2^-(-14) in units of 2^-24
    if (a < 0x33000000u) return sign;  // < 2^-25: rounds to 0 (exactly 2^-25 is a tie -> even 0)
    uint32_t exp = a >> 23;
    uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 14 + (127-exp) - 1 ... shift so that result is in 2^-24 units
    // value = mant * 2^(exp-150); in units of 2^-24: mant * 2^(exp-126) = mant >> (126-exp)
    uint32_t q = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return sign | (uint16_t)q;
  }
  // normal
  uint32_t q = a >> 13;
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  q -= (112u << 10);
  return sign | (uint16_t)q;
}

KILN_HOST_DEVICE float bf16_bits_to_float(uint16_t b) { return bits_f32((uint32_t)b << 16); }

KILN_HOST_DEVICE uint16_t float_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return (uint16_t)(u >> 16);
}

struct half {
  uint16_t bits = 0;
  half() = default;
  KILN_HOST_DEVICE explicit half(float f) : bits(float_to_half_bits(f)) {}
  KILN_HOST_DEVICE operator float() const { return half_bits_to_float(bits); }
  KILN_HOST_DEVICE static half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  KILN_HOST_DEVICE explicit bfloat16(float f) : bits(float_to_bf16_bits(f)) {}
  KILN_HOST_DEVICE operator float() const { return bf16_bits_to_float(bits); }
  KILN_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2, "16-bit types must be 2 bytes");

}  // namespace kiln
