// The process-wide random generator: a seed and a running Philox counter offset. Each random
// op reserves philox_counters_for(n) counters and passes (seed, offset) to its kernel, so
// replaying an op with the same (seed, offset) reproduces it exactly.
#pragma once
#include <cstdint>

namespace kiln {

struct RngState {
  uint64_t seed = 0x5eedULL;
  uint64_t offset = 0;
};

RngState& global_rng();
void manual_seed(uint64_t seed);
// Returns the offset to use for n elements and advances the generator.
uint64_t rng_reserve(uint64_t n_elements);

}  // namespace kiln
