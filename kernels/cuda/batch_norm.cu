// CUDA batch normalization over (N, C, HW) contiguous data, as kernels/cpu/batch_norm.h: training
// forward (batch statistics, two-pass variance in f64, running-stat update with momentum and the
// unbiased variance M / (M - 1)), eval forward, and both backwards.
// Precision, as the CPU kernel: every output is computed as (x - mean) * (gamma * invstd) + beta
// (training dx: k * (dy - mean_dy - (x - mean) * proj)) with x - mean in f64 and rounded once on
// store, never as x * scale + shift in T: with a channel mean large against its std (mean 1e3,
// std 0.21) the f32 product x * scale carries an error near ulp(1e3 * 4.8) ~ 2e-4 that subtracting
// the shift cannot remove (tests/parity/test_parity_bn_precision.cpp, tests/cuda/test_cuda_bn_precision.cpp).
// Geometry: the per-channel reductions run one block per channel (grid-stride over channels),
// each block reducing the channel's M = N * HW values with block_sum in f64; the elementwise parts
// (eval forward, eval dx) are flat grid-stride loops. Limitation: few channels with a huge M use
// only C blocks (a split-M two-stage reduction would fill the GPU better).
#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {
namespace {

constexpr int kBnThreads = 512;

// Element j (0 <= j < M) of channel c: x[n, c, i] with n = j / HW, i = j % HW.
__device__ __forceinline__ int64_t chan_offset(int64_t j, int64_t c, int64_t C, int64_t HW) {
  return ((j / HW) * C + c) * HW + j % HW;
}

// Thread 0 of channel c's block: the saved statistics and the running-stat update (momentum; the unbiased
// variance var * count / (count - 1) over the count values the statistics describe).
template <typename T>
__device__ __forceinline__ void store_channel_stats(int64_t c, double mean, double var, double invstd, int64_t count,
                                                    T* save_mean, T* save_invstd, T* running_mean, T* running_var,
                                                    double momentum) {
  save_mean[c] = (T)mean;
  save_invstd[c] = (T)invstd;
  if (running_mean) running_mean[c] = (T)((1.0 - momentum) * (double)running_mean[c] + momentum * mean);
  if (running_var)
    running_var[c] =
        (T)((1.0 - momentum) * (double)running_var[c] + momentum * var * (double)count / (double)(count - 1));
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_train_fwd_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ x,
                                    const T* __restrict__ gamma, const T* __restrict__ beta, double eps,
                                    T* __restrict__ y, T* __restrict__ save_mean, T* __restrict__ save_invstd,
                                    T* __restrict__ running_mean, T* __restrict__ running_var, double momentum) {
  KILN_SHARED(double, scratch, 32);
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double s = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += (double)x[chan_offset(j, c, C, HW)];
    const double mean = block_sum(s, scratch) / (double)M;
    double ss = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const double dlt = (double)x[chan_offset(j, c, C, HW)] - mean;
      ss += dlt * dlt;
    }
    const double var = block_sum(ss, scratch) / (double)M;
    const double invstd = 1.0 / sqrt(var + eps);
    if (threadIdx.x == 0)
      store_channel_stats(c, mean, var, invstd, M, save_mean, save_invstd, running_mean, running_var, momentum);
    const double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
    const double k = g * invstd;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t o = chan_offset(j, c, C, HW);
      y[o] = (T)(((double)x[o] - mean) * k + b);
    }
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) bn_eval_fwd_kernel(int64_t C, int64_t HW, const T* __restrict__ x, const T* __restrict__ gamma,
                                   const T* __restrict__ beta, const T* __restrict__ running_mean,
                                   const T* __restrict__ running_var, double eps, T* __restrict__ y, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (e / HW) % C;
    const double invstd = 1.0 / sqrt((double)running_var[c] + eps);
    const double g = gamma ? (double)gamma[c] : 1.0, b = beta ? (double)beta[c] : 0.0;
    y[e] = (T)(((double)x[e] - (double)running_mean[c]) * (g * invstd) + b);
  }
}

// Per channel: sum dy and sum dy * (x - mean) in f64 (mean from save_mean, or the running mean in
// eval mode), then dgamma / dbeta, and in training mode dx (all optional).
// TRAIN: dx = k * (dy - mean_dy - (x - mean) * proj), k = gamma * invstd,
//        proj = sum(dy * (x - mean)) * invstd^2 / M.  invstd = save_invstd.
// eval:  invstd = 1 / sqrt(running_var + eps); dx is done by bn_eval_dx_kernel.
template <typename T, bool TRAIN>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_bwd_reduce_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ dy,
                                     const T* __restrict__ x, const T* __restrict__ gamma,
                                     const T* __restrict__ mean_in, const T* __restrict__ stat_in, double eps,
                                     T* __restrict__ dx, T* __restrict__ dgamma, T* __restrict__ dbeta) {
  KILN_SHARED(double, scratch, 32);
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double mean = (double)mean_in[c];
    const double invstd = TRAIN ? (double)stat_in[c] : 1.0 / sqrt((double)stat_in[c] + eps);
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t o = chan_offset(j, c, C, HW);
      const double g = (double)dy[o];
      a += g;
      b += g * ((double)x[o] - mean);
    }
    const double sum_dy = block_sum(a, scratch);
    const double sum_dy_xmu = block_sum(b, scratch);
    if (threadIdx.x == 0) {
      if (dbeta) dbeta[c] = (T)sum_dy;
      if (dgamma) dgamma[c] = (T)(sum_dy_xmu * invstd);
    }
    if (TRAIN && dx) {
      const double k = (gamma ? (double)gamma[c] : 1.0) * invstd;
      const double mean_dy = sum_dy / (double)M;
      const double proj = sum_dy_xmu * invstd * invstd / (double)M;
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
        const int64_t o = chan_offset(j, c, C, HW);
        dx[o] = (T)(k * ((double)dy[o] - mean_dy - ((double)x[o] - mean) * proj));
      }
    }
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) bn_eval_dx_kernel(int64_t C, int64_t HW, const T* __restrict__ dy, const T* __restrict__ gamma,
                                  const T* __restrict__ running_var, double eps, T* __restrict__ dx, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t c = (e / HW) % C;
    const T k = (T)((gamma ? (double)gamma[c] : 1.0) / sqrt((double)running_var[c] + eps));
    dx[e] = dy[e] * k;
  }
}

// ---- staged kernels of SyncBatchNorm (kernels/common/api/batch_norm_sync.inc) ----
// One block per channel, as the fused kernels; the per-channel double sums stay on the device and
// only they cross to the host for the ranks' all-reduce (engine/ops/nn_norm_sync.cpp).

// sums[c] = sum x; with `mean`, sums[c] = sum (x - mean[c])^2 (the second pass of the variance).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_sync_sums_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ x,
                                                         const double* __restrict__ mean, double* __restrict__ sums) {
  KILN_SHARED(double, scratch, 32);
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double s = 0;
    if (mean) {
      const double m = mean[c];
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
        const double d = (double)x[chan_offset(j, c, C, HW)] - m;
        s += d * d;
      }
    } else {
      for (int64_t j = threadIdx.x; j < M; j += blockDim.x) s += (double)x[chan_offset(j, c, C, HW)];
    }
    s = block_sum(s, scratch);
    if (threadIdx.x == 0) sums[c] = s;
  }
}

// y, save_mean, save_invstd and the running stats from the global mean and biased var over Mg values.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_sync_fwd_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ x,
                                    const T* __restrict__ gamma, const T* __restrict__ beta, double eps,
                                    const double* __restrict__ gmean, const double* __restrict__ gvar, int64_t Mg,
                                    T* __restrict__ y, T* __restrict__ save_mean, T* __restrict__ save_invstd,
                                    T* __restrict__ running_mean, T* __restrict__ running_var, double momentum) {
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double mean = gmean[c], var = gvar[c];
    const double invstd = 1.0 / sqrt(var + eps);
    if (threadIdx.x == 0)
      store_channel_stats(c, mean, var, invstd, Mg, save_mean, save_invstd, running_mean, running_var, momentum);
    const double k = (gamma ? (double)gamma[c] : 1.0) * invstd, b = beta ? (double)beta[c] : 0.0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t o = chan_offset(j, c, C, HW);
      y[o] = (T)(((double)x[o] - mean) * k + b);
    }
  }
}

// sums[c] = sum dy, sums[C + c] = sum dy * (x - save_mean[c]).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_sync_grad_sums_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ dy,
                                          const T* __restrict__ x, const T* __restrict__ save_mean,
                                          double* __restrict__ sums) {
  KILN_SHARED(double, scratch, 32);
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double mean = (double)save_mean[c];
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t o = chan_offset(j, c, C, HW);
      a += (double)dy[o];
      b += (double)dy[o] * ((double)x[o] - mean);
    }
    a = block_sum(a, scratch);
    b = block_sum(b, scratch);
    if (threadIdx.x == 0) {
      sums[c] = a;
      sums[C + c] = b;
    }
  }
}

// dx from the global sums over Mg values; dgamma, dbeta from this rank's `local` sums.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kBnThreads) bn_sync_bwd_kernel(int64_t N, int64_t C, int64_t HW, const T* __restrict__ dy,
                                    const T* __restrict__ x, const T* __restrict__ gamma,
                                    const T* __restrict__ save_mean, const T* __restrict__ save_invstd,
                                    const double* __restrict__ global, const double* __restrict__ local, int64_t Mg,
                                    T* __restrict__ dx, T* __restrict__ dgamma, T* __restrict__ dbeta) {
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const double mean = (double)save_mean[c], invstd = (double)save_invstd[c];
    if (threadIdx.x == 0) {
      if (dbeta) dbeta[c] = (T)local[c];
      if (dgamma) dgamma[c] = (T)(local[C + c] * invstd);
    }
    if (!dx) continue;
    const double k = (gamma ? (double)gamma[c] : 1.0) * invstd;
    const double mean_dy = global[c] / (double)Mg;
    const double proj = global[C + c] * invstd * invstd / (double)Mg;
    for (int64_t j = threadIdx.x; j < M; j += blockDim.x) {
      const int64_t o = chan_offset(j, c, C, HW);
      dx[o] = (T)(k * ((double)dy[o] - mean_dy - ((double)x[o] - mean) * proj));
    }
  }
}

void check_sizes(int64_t N, int64_t C, int64_t HW, const char* op) {
  KILN_CHECK(N >= 0 && C >= 1 && HW >= 0, op, ": bad sizes N=", N, " C=", C, " HW=", HW);
}

unsigned channel_grid(int64_t C) { return (unsigned)(C < 65535 ? C : 65535); }

}  // namespace

template <typename T>
void batch_norm_forward_train(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                              double eps, T* y, T* save_mean, T* save_invstd, T* running_mean, T* running_var,
                              double momentum) {
  check_sizes(N, C, HW, "batch_norm_forward_train (cuda)");
  KILN_CHECK(N * HW > 1, "batch_norm_forward_train (cuda): expected more than 1 value per channel when training, ",
             "got input (", N, ", ", C, ", ", HW, ")");
  launch_kernel("bn_train_fwd_kernel", bn_train_fwd_kernel<T>, channel_grid(C), kBnThreads, 0, stream(),
      N, C, HW, x, gamma, beta, eps, y, save_mean, save_invstd, running_mean, running_var, momentum);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_forward_train (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_forward_eval(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y) {
  check_sizes(N, C, HW, "batch_norm_forward_eval (cuda)");
  KILN_CHECK(running_mean && running_var,
             "batch_norm_forward_eval (cuda): running_mean and running_var are required");
  const int64_t total = N * C * HW;
  if (total == 0) return;
  launch_kernel("bn_eval_fwd_kernel", bn_eval_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), C, HW, x, gamma, beta, running_mean,
                                                                    running_var, eps, y, total);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_forward_eval (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_backward_train(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                               const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  check_sizes(N, C, HW, "batch_norm_backward_train (cuda)");
  if (!dx && !dgamma && !dbeta) return;
  launch_kernel("bn_bwd_reduce_kernel", bn_bwd_reduce_kernel<T, true>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, dy, x, gamma, save_mean,
                                                                             save_invstd, 0.0, dx, dgamma, dbeta);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_backward_train (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_backward_eval(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                              const T* running_mean, const T* running_var, double eps, T* dx, T* dgamma, T* dbeta) {
  check_sizes(N, C, HW, "batch_norm_backward_eval (cuda)");
  KILN_CHECK(running_mean && running_var,
             "batch_norm_backward_eval (cuda): running_mean and running_var are required");
  if (dgamma || dbeta) {
    launch_kernel("bn_bwd_reduce_kernel", bn_bwd_reduce_kernel<T, false>, channel_grid(C), kBnThreads, 0, stream(),
        N, C, HW, dy, x, gamma, running_mean, running_var, eps, nullptr, dgamma, dbeta);
    KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_backward_eval (cuda) x (", N, ", ", C, ", ", HW, ")"));
  }
  const int64_t total = N * C * HW;
  if (dx && total > 0) {
    launch_kernel("bn_eval_dx_kernel", bn_eval_dx_kernel<T>, grid_for(total), kThreads, 0, stream(), C, HW, dy, gamma, running_var, eps, dx, total);
    KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_backward_eval (cuda) dx, x (", N, ", ", C, ", ", HW, ")"));
  }
}

template <typename T>
void batch_norm_channel_sums(int64_t N, int64_t C, int64_t HW, const T* x, double* sum) {
  check_sizes(N, C, HW, "batch_norm_channel_sums (cuda)");
  launch_kernel("bn_sync_sums_kernel", bn_sync_sums_kernel<T>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, x,
                (const double*)nullptr, sum);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_channel_sums (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_channel_centered_squares(int64_t N, int64_t C, int64_t HW, const T* x, const double* mean,
                                         double* ss) {
  check_sizes(N, C, HW, "batch_norm_channel_centered_squares (cuda)");
  launch_kernel("bn_sync_sums_kernel", bn_sync_sums_kernel<T>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, x, mean, ss);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_channel_centered_squares (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_forward_with_stats(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                                   double eps, const double* mean, const double* var, int64_t M, T* y,
                                   T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum) {
  check_sizes(N, C, HW, "batch_norm_forward_with_stats (cuda)");
  KILN_CHECK(M > 1, "batch_norm_forward_with_stats (cuda): expected more than 1 value per channel over the ranks, got ", M);
  launch_kernel("bn_sync_fwd_kernel", bn_sync_fwd_kernel<T>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, x, gamma, beta,
                eps, mean, var, M, y, save_mean, save_invstd, running_mean, running_var, momentum);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_forward_with_stats (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_grad_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* save_mean,
                          double* sums) {
  check_sizes(N, C, HW, "batch_norm_grad_sums (cuda)");
  launch_kernel("bn_sync_grad_sums_kernel", bn_sync_grad_sums_kernel<T>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, dy, x,
                save_mean, sums);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_grad_sums (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

template <typename T>
void batch_norm_backward_with_sums(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                                   const T* save_mean, const T* save_invstd, const double* global,
                                   const double* local, int64_t M, T* dx, T* dgamma, T* dbeta) {
  check_sizes(N, C, HW, "batch_norm_backward_with_sums (cuda)");
  KILN_CHECK(M > 1, "batch_norm_backward_with_sums (cuda): expected more than 1 value per channel over the ranks, got ", M);
  launch_kernel("bn_sync_bwd_kernel", bn_sync_bwd_kernel<T>, channel_grid(C), kBnThreads, 0, stream(), N, C, HW, dy, x, gamma,
                save_mean, save_invstd, global, local, M, dx, dgamma, dbeta);
  KILN_CUDA_LAUNCH_CHECK(str_cat("batch_norm_backward_with_sums (cuda) x (", N, ", ", C, ", ", HW, ")"));
}

#define KILN_INSTANTIATE_BN(T)                                                                               \
  template void batch_norm_forward_train<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, double,  \
                                            T*, T*, T*, T*, T*, double);                                     \
  template void batch_norm_forward_eval<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, const T*, \
                                           const T*, double, T*);                                            \
  template void batch_norm_backward_train<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,         \
                                             const T*, const T*, T*, T*, T*);                                \
  template void batch_norm_backward_eval<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,          \
                                            const T*, const T*, double, T*, T*, T*);                         \
  template void batch_norm_channel_sums<T>(int64_t, int64_t, int64_t, const T*, double*);                    \
  template void batch_norm_channel_centered_squares<T>(int64_t, int64_t, int64_t, const T*, const double*,  \
                                                       double*);                                             \
  template void batch_norm_forward_with_stats<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,    \
                                                 double, const double*, const double*, int64_t, T*, T*, T*,  \
                                                 T*, T*, double);                                            \
  template void batch_norm_grad_sums<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*, double*);    \
  template void batch_norm_backward_with_sums<T>(int64_t, int64_t, int64_t, const T*, const T*, const T*,     \
                                                 const T*, const T*, const double*, const double*, int64_t,  \
                                                 T*, T*, T*);
KILN_INSTANTIATE_BN(float)
KILN_INSTANTIATE_BN(double)
#undef KILN_INSTANTIATE_BN

}  // namespace kiln::cuda
