// Exhaustive checks of the host half / bfloat16 conversions against a reference written
// independently with long double arithmetic (all 65,536 bit patterns; NaN, inf, subnormals).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/core/half.h"

using namespace kiln;

namespace {

// Reference: value of a half bit pattern computed with ldexp.
double ref_half_value(uint16_t h) {
  int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 0) v = std::ldexp((double)m, -24);
  else if (e == 31) v = m ? NAN : INFINITY;
  else v = std::ldexp((double)(1024 + m), e - 25);
  return s ? -v : v;
}

// Reference f32 -> half: pick the nearest representable half by scanning neighbours
// (ties to the even mantissa), overflow to inf at >= 65520.
uint16_t ref_float_to_half(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00;
  // candidates: binary search over positive finite halves (monotonic in bit pattern)
  uint16_t lo = 0, hi = 0x7bff;
  while (lo < hi) {  // first pattern with value >= a
    uint16_t mid = (uint16_t)((lo + hi) / 2);
    if (ref_half_value(mid) >= a) hi = mid; else lo = (uint16_t)(mid + 1);
  }
  uint16_t best = lo;
  if (lo > 0) {
    double up = ref_half_value(lo) - a, down = a - ref_half_value((uint16_t)(lo - 1));
    if (down < up || (down == up && ((lo - 1) & 1) == 0)) best = (uint16_t)(lo - 1);
  }
  return sign | best;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("half -> float is exact for all 65536 patterns") {
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = half_bits_to_float((uint16_t)b);
    double r = ref_half_value((uint16_t)b);
    if (std::isnan(r)) {
      CHECK(std::isnan(f));
    } else {
      CHECK(f == r);
      CHECK(std::signbit(f) == ((b >> 15) != 0));
    }
  }
}

TEST_CASE("float -> half round-trips every half and rounds midpoints to even") {
  int bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    uint16_t h = (uint16_t)b;
    float f = half_bits_to_float(h);
    uint16_t back = float_to_half_bits(f);
    if (std::isnan(f)) {
      if ((back & 0x7c00) != 0x7c00 || (back & 0x3ff) == 0) ++bad;
      continue;
    }
    if (back != h) ++bad;
    // midpoint to the next half (ties to even) and points just around it
    if ((h & 0x7fff) < 0x7bff) {
      double next = ref_half_value((uint16_t)(h + 1));
      double mid = (ref_half_value(h) + next) / 2;
      float fm = (float)mid;  // exact: midpoints of halves are representable in f32
      if (float_to_half_bits(fm) != ref_float_to_half(fm)) ++bad;
      float below = std::nextafter(fm, 0.0f), above = std::nextafter(fm, INFINITY);
      if (float_to_half_bits(below) != ref_float_to_half(below)) ++bad;
      if (float_to_half_bits(above) != ref_float_to_half(above)) ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("float -> half on a sweep of f32 patterns matches the reference") {
  int bad = 0;
  for (uint64_t u = 0; u < 0x100000000ULL; u += 4099) {
    float f = from_bits((uint32_t)u);
    uint16_t got = float_to_half_bits(f), want = ref_float_to_half(f);
    if (std::isnan(f)) {
      if ((got & 0x7c00) != 0x7c00 || (got & 0x3ff) == 0) ++bad;
    } else if (got != want) {
      ++bad;
    }
  }
  CHECK(bad == 0);
  CHECK(float_to_half_bits(65519.99f) == 0x7bff);
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);
  CHECK(float_to_half_bits(-INFINITY) == 0xfc00);
  CHECK(float_to_half_bits(5.9604644775390625e-08f) == 0x0001);
  CHECK(float_to_half_bits(2.98023223876953125e-08f) == 0x0000);  // 2^-25 tie -> even (0)
}

TEST_CASE("bfloat16 conversions: all 65536 patterns exact, rounding to nearest even") {
  int bad = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    float f = bf16_bits_to_float((uint16_t)b);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (u != (b << 16)) ++bad;
    if (std::isnan(f)) {
      if (!std::isnan(bf16_bits_to_float(float_to_bf16_bits(f)))) ++bad;
      continue;
    }
    if (float_to_bf16_bits(f) != b) ++bad;
    if ((b & 0x7fff) < 0x7f7f) {  // the midpoint between b and b+1, and around it
      uint32_t mid = (b << 16) | 0x8000u;
      uint16_t even = (b & 1) ? (uint16_t)(b + 1) : (uint16_t)b;
      if (float_to_bf16_bits(from_bits(mid)) != even) ++bad;
      if (float_to_bf16_bits(from_bits(mid - 1)) != b) ++bad;
      if (float_to_bf16_bits(from_bits(mid + 1)) != (uint16_t)(b + 1)) ++bad;
    }
  }
  CHECK(bad == 0);
}
