// Batch normalization over (N, C, HW) contiguous data on the CPU: training forward (batch stats,
// running-stat update with momentum and the unbiased variance, like PyTorch), eval forward, and
// both backwards. Channels run in parallel; statistics accumulate in double. Never allocates.
#pragma once
#include <cstdint>

#include "engine/core/half.h"

namespace kiln::cpu {

#include "kernels/common/api/batch_norm.inc"

// CPU only: the training forward and backward on 16-bit data (X = half or bfloat16: x, y, dy, dx) with
// f32 parameters and statistics, no f32 copies (the autocast step's batch norms read and write bf16
// directly). With HW >= 32 the sums and outputs run in f32 lanes (batch_norm_channel16.h): within a stated
// bound of the f64 result (y, dx: the exact value's rounding to X or a neighbour of it), not the bits of the
// f32 kernels; so do runs of one value (HW = 1: channels-last data, (N*H*W, C) in memory), walking the rows
// with one f32 lane per channel (batch_norm_rows16.inc, the same bound); other short runs take the arithmetic
// of the f32 kernels' double loops channel by channel (the bits of f32 copies rounded back).
template <typename X>
void batch_norm_forward_train_16(int64_t N, int64_t C, int64_t HW, const X* x, const float* gamma, const float* beta,
                                 double eps, X* y, float* save_mean, float* save_invstd, float* running_mean,
                                 float* running_var, double momentum);
template <typename X>
void batch_norm_backward_train_16(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, const float* gamma,
                                  const float* save_mean, const float* save_invstd, X* dx, float* dgamma,
                                  float* dbeta);

}  // namespace kiln::cpu
