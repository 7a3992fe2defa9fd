// Batch normalization over (N, C, HW) contiguous data on the CPU: training forward (batch stats,
// running-stat update with momentum and the unbiased variance, like PyTorch), eval forward, and
// both backwards. Channels run in parallel; statistics accumulate in double. Never allocates.
#pragma once
#include <cstdint>

#include "engine/core/half.h"

namespace kiln::cpu {

#include "kernels/common/api/batch_norm.inc"

// CPU only: the training forward and backward on 16-bit data (X = half or bfloat16: x, y, dy, dx) with
// f32 parameters and statistics, the same bits as copying the data to f32, running the f32 kernels and
// rounding y / dx to X (no f32 copies: the autocast step's batch norms read and write bf16 directly).
template <typename X>
void batch_norm_forward_train_16(int64_t N, int64_t C, int64_t HW, const X* x, const float* gamma, const float* beta,
                                 double eps, X* y, float* save_mean, float* save_invstd, float* running_mean,
                                 float* running_var, double momentum);
template <typename X>
void batch_norm_backward_train_16(int64_t N, int64_t C, int64_t HW, const X* dy, const X* x, const float* gamma,
                                  const float* save_mean, const float* save_invstd, X* dx, float* dgamma,
                                  float* dbeta);

}  // namespace kiln::cpu
