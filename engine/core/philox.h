// Philox4x32-10 counter-based RNG (Salmon et al., SC'11). A random number depends only on
// (seed, counter), so the CPU and CUDA backends produce the same stream and a recomputed
// forward (checkpointing) replays the same dropout mask.
//
// kiln's convention: element i of a random op that starts at stream offset `offset` uses
// counter = offset + i / 4 (as a 64-bit value in words 0-1; words 2-3 = 0) and takes output word
// i % 4. Key = seed (low, high words).
#pragma once
#include <cstdint>

#include "engine/core/host_device.h"

namespace kiln {

struct Philox4 {
  uint32_t v[4];
};

KILN_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  *lo = (uint32_t)p;
}

KILN_HOST_DEVICE Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c.v[0], &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1, &lo1);
    Philox4 n = {{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    c = n;
  }
  return c;
}

// The 32-bit random word for element `i` of a draw starting at `offset`.
KILN_HOST_DEVICE uint32_t philox_word(uint64_t seed, uint64_t offset, uint64_t i) {
  uint64_t ctr = offset + i / 4;
  Philox4 c = {{(uint32_t)ctr, (uint32_t)(ctr >> 32), 0u, 0u}};
  Philox4 r = philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
  return r.v[i % 4];
}

// Uniform in [0, 1) with 24 random bits (exactly representable in f32).
KILN_HOST_DEVICE float philox_uniform(uint64_t seed, uint64_t offset, uint64_t i) {
  return (float)(philox_word(seed, offset, i) >> 8) * (1.0f / 16777216.0f);
}

// Counters consumed by a draw of n elements (advance the generator's offset by this).
KILN_HOST_DEVICE uint64_t philox_counters_for(uint64_t n) { return (n + 3) / 4; }

}  // namespace kiln
