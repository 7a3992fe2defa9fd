// CPU row reductions: x contiguous (rows, cols) -> out (rows); indices (rows) for max/min when
// given. Accumulates in f64 so f32 sums match PyTorch to ~1e-7 whatever the length.
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/common/reduce_op.h"

namespace kiln::cpu {

void reduce_rows(ReduceOp op, DType dt, const void* x, int64_t rows, int64_t cols, void* out, int64_t* indices);

}  // namespace kiln::cpu
