// Batch normalization over (N, C, HW) contiguous data on the CPU: training forward (batch stats,
// running-stat update with momentum and the unbiased variance, like PyTorch), eval forward, and
// both backwards. Channels run in parallel; statistics accumulate in double. Never allocates.
#pragma once
#include <cstdint>

namespace kiln::cpu {

// x, y: (N, C, HW); gamma, beta, running_*: (C) or null (gamma = 1, beta = 0, no running update).
// save_mean, save_invstd: (C) outputs, invstd = 1 / sqrt(biased var + eps), kept for backward.
// running_mean = (1 - momentum) * running_mean + momentum * mean; running_var likewise with the
// unbiased variance (var * M / (M - 1), M = N * HW). Throws kiln::Error when M < 2.
template <typename T>
void batch_norm_forward_train(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                              double eps, T* y, T* save_mean, T* save_invstd, T* running_mean,
                              T* running_var, double momentum);

// y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
template <typename T>
void batch_norm_forward_eval(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y);

// Backward of the training forward (batch statistics depend on x):
//   xhat = (x - mean) * invstd, dbeta = sum dy, dgamma = sum dy * xhat,
//   dx = gamma * invstd / M * (M * dy - dbeta - xhat * dgamma).
// dx, dgamma, dbeta may each be null (not computed); all are overwritten.
template <typename T>
void batch_norm_backward_train(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                               const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta);

// Backward of the eval forward (statistics are constants): dx = dy * gamma / sqrt(running_var + eps).
template <typename T>
void batch_norm_backward_eval(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                              const T* running_mean, const T* running_var, double eps, T* dx, T* dgamma,
                              T* dbeta);

}  // namespace kiln::cpu
