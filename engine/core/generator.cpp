#include "engine/core/generator.h"

#include "engine/core/philox.h"

namespace kiln {

RngState& global_rng() {
  static RngState s;
  return s;
}

void manual_seed(uint64_t seed) {
  global_rng().seed = seed;
  global_rng().offset = 0;
}

uint64_t rng_reserve(uint64_t n) {
  uint64_t off = global_rng().offset;
  global_rng().offset += philox_counters_for(n);
  return off;
}

}  // namespace kiln
