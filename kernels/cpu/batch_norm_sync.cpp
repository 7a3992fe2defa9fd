// Staged batch norm kernels for statistics summed over ranks (see batch_norm_sync.h). One OpenMP
// task per channel, as the fused kernels; the per-channel math is kernels/cpu/batch_norm_channel.h.
#include "kernels/cpu/batch_norm_sync.h"

#include "engine/core/error.h"
#include "kernels/cpu/batch_norm_channel.h"

namespace kiln::cpu {

namespace {
void check_sizes(int64_t N, int64_t C, int64_t HW, const char* op) {
  KILN_CHECK(N >= 0 && C >= 1 && HW >= 0, op, ": bad sizes N=", N, " C=", C, " HW=", HW);
}
}  // namespace

template <typename T>
void batch_norm_channel_sums(int64_t N, int64_t C, int64_t HW, const T* x, double* sum) {
  check_sizes(N, C, HW, "batch_norm_channel_sums");
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) sum[c] = bn_channel::sum(N, C, HW, x, c);
}

template <typename T>
void batch_norm_channel_centered_squares(int64_t N, int64_t C, int64_t HW, const T* x, const double* mean,
                                         double* ss) {
  check_sizes(N, C, HW, "batch_norm_channel_centered_squares");
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) ss[c] = bn_channel::centered_squares(N, C, HW, x, c, mean[c]);
}

template <typename T>
void batch_norm_forward_with_stats(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                                   double eps, const double* mean, const double* var, int64_t M, T* y,
                                   T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum) {
  check_sizes(N, C, HW, "batch_norm_forward_with_stats");
  KILN_CHECK(M > 1, "batch_norm_forward_with_stats: expected more than 1 value per channel over the ranks, got ", M);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c)
    bn_channel::normalize(N, C, HW, x, gamma, beta, eps, c, mean[c], var[c], M, y, save_mean, save_invstd,
                          running_mean, running_var, momentum);
}

template <typename T>
void batch_norm_grad_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* save_mean,
                          double* sums) {
  check_sizes(N, C, HW, "batch_norm_grad_sums");
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c)
    bn_channel::grad_sums(N, C, HW, dy, x, c, (double)save_mean[c], &sums[c], &sums[C + c]);
}

template <typename T>
void batch_norm_backward_with_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                                   const T* save_mean, const T* save_invstd, const double* global,
                                   const double* local, int64_t M, T* dx, T* dgamma, T* dbeta) {
  check_sizes(N, C, HW, "batch_norm_backward_with_sums");
  KILN_CHECK(M > 1, "batch_norm_backward_with_sums: expected more than 1 value per channel over the ranks, got ", M);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    const double mean = (double)save_mean[c], invstd = (double)save_invstd[c];
    if (dbeta) dbeta[c] = (T)local[c];
    if (dgamma) dgamma[c] = (T)(local[C + c] * invstd);
    if (dx) bn_channel::input_grad(N, C, HW, dy, x, gamma, c, mean, invstd, global[c], global[C + c], M, dx);
  }
}

#define KILN_INSTANTIATE_BN_SYNC(T)                                                                              \
  template void batch_norm_channel_sums<T>(int64_t, int64_t, int64_t, const T*, double*);                       \
  template void batch_norm_channel_centered_squares<T>(int64_t, int64_t, int64_t, const T*, const double*,     \
                                                       double*);                                                \
  template void batch_norm_forward_with_stats<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, double, \
                                                 const double*, const double*, int64_t, T*, T*, T*, T*, T*,      \
                                                 double);                                                       \
  template void batch_norm_grad_sums<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, double*);       \
  template void batch_norm_backward_with_sums<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,        \
                                                 const T*, const T*, const double*, const double*, int64_t, T*,  \
                                                 T*, T*);
KILN_INSTANTIATE_BN_SYNC(float)
KILN_INSTANTIATE_BN_SYNC(double)
#undef KILN_INSTANTIATE_BN_SYNC

}  // namespace kiln::cpu
