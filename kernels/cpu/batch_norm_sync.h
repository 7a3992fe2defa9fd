// Batch normalization in stages, for statistics summed over data-parallel ranks (SyncBatchNorm,
// engine/ops/nn_norm_sync.cpp): each stage is one pass over this rank's (N, C, HW) rows, and the
// caller sums the per-channel doubles over the ranks between the stages. The arithmetic is the
// fused kernels' (kernels/cpu/batch_norm.cpp): a two-pass variance (the global mean first, then the
// sum of squares centred on it, never E[x^2] - E[x]^2), (x - mean) in double, one rounding on store;
// with the sums of one process the stages give the fused kernels' bits. N may be 0 (a rank without
// rows: zero sums). CPU only: a GPU tensor goes through host copies. Never allocates, never communicates.
#pragma once
#include <cstdint>

namespace kiln::cpu {

// sum[c] = sum over n, i of x[n, c, i] (double).
template <typename T>
void batch_norm_channel_sums(int64_t N, int64_t C, int64_t HW, const T* x, double* sum);

// ss[c] = sum over n, i of (x[n, c, i] - mean[c])^2 (double).
template <typename T>
void batch_norm_channel_centered_squares(int64_t N, int64_t C, int64_t HW, const T* x, const double* mean,
                                         double* ss);

// With the global mean[c] and biased var[c] over M values per channel (M > 1): y, save_mean,
// save_invstd (as the fused forward writes them) and the running stats (unbiased var * M / (M - 1)).
template <typename T>
void batch_norm_forward_with_stats(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                                   double eps, const double* mean, const double* var, int64_t M, T* y,
                                   T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum);

// sums[c] = sum dy, sums[C + c] = sum dy * (x - save_mean[c]) (double), as the fused backward sums them.
template <typename T>
void batch_norm_grad_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* save_mean,
                          double* sums);

// dx from the global sums (layout of batch_norm_grad_sums) over M values per channel; dgamma and dbeta
// (each may be null) from this rank's own sums `local`, since the data-parallel gradient buckets add
// the ranks' parameter gradients afterwards.
template <typename T>
void batch_norm_backward_with_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                                   const T* save_mean, const T* save_invstd, const double* global,
                                   const double* local, int64_t M, T* dx, T* dgamma, T* dbeta);

}  // namespace kiln::cpu
