// CPU row reductions: x contiguous (rows, cols) -> out (rows); indices (rows) for max/min when
// given. Accumulates in f64 so f32 sums match PyTorch to ~1e-7 whatever the length.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/common/reduce_op.h"

namespace kiln::cpu {

#include "kernels/common/api/reduce.inc"

}  // namespace kiln::cpu
