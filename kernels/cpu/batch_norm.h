// Batch normalization over (N, C, HW) contiguous data on the CPU: training forward (batch stats,
// running-stat update with momentum and the unbiased variance, like PyTorch), eval forward, and
// both backwards. Channels run in parallel; statistics accumulate in double. Never allocates.
#pragma once
#include <cstdint>

namespace kiln::cpu {

#include "kernels/common/api/batch_norm.inc"

}  // namespace kiln::cpu
