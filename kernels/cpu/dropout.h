// Dropout on the CPU with kiln's Philox stream (engine/core/philox.h), so the CUDA backend and a
// recomputed forward draw the same mask: element i is kept iff philox_uniform(seed, offset, i) >= p.
// Kept values are scaled by 1 / (1 - p) (by 0 when p == 1: everything is dropped).
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/dropout.inc"

}  // namespace kiln::cpu
