// Interpolation (F.interpolate, modes nearest and bilinear) on the CPU, NCHW contiguous, forward and
// backward. Index rules come from kernels/common/upsample_math.h (the CUDA kernels use the same).
// OpenMP over (n, c) planes; the backward accumulates within a plane in output order, so results are
// deterministic. No tensor allocation (the per-axis index tables are small host vectors).
#pragma once
#include <cstdint>

#include "kernels/common/upsample_math.h"

namespace kiln::cpu {

#include "kernels/common/api/interpolate.inc"

}  // namespace kiln::cpu
