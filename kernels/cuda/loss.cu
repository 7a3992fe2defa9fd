// CUDA losses with PyTorch 1.13 semantics, as kernels/cpu/loss.h: cross_entropy over class-index
// targets (class weights, label smoothing, ignore_index, none/mean/sum), nll_loss, mse_loss.
// Sums run in f64 and are deterministic (per-block partial sums in a fixed order, then one block
// sums those; no floating-point atomics).
// Targets are validated on the device without a host sync: a grid-stride kernel over all N (many
// blocks, per-block partial sums) and a one-block finish compute D = sum of w_t over non-ignored
// samples (and the label-smoothing mass), find the first out-of-range position with an integer atomicMin and records it in the device's deferred-error slot (deferred_error.h);
// the next synchronizing call (to_device to the host, synchronize) throws kiln::Error naming the
// op, the position, the target and K like the CPU. Bad samples get NaN losses and NaN gradients, so
// nothing computed from them looks valid.
// Scratch (stats, per-sample sums) comes from kiln's allocator (workspace.h).
#include <math_constants.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/workspace.h"
#include "kernels/common/workspace_limit.h"

namespace kiln::cuda {
namespace {

constexpr int kStatThreads = 1024;

struct TargetStats {
  double D;                     // sum of w_t over non-ignored samples
  double smooth_mass;           // sum_c (ls / K) * w_c (0 without smoothing)
  unsigned long long bad_pos;   // first out-of-range position, ULLONG_MAX when none
  unsigned long long pad_;
};

template <typename T>
__device__ __forceinline__ double wt(const T* weight, int64_t c) {
  return weight ? (double)weight[c] : 1.0;
}

// Pass 1 of the target check, grid-stride over all N with many blocks (N is B*H*W for
// segmentation): parts[block] = the block's sum of w_t over live samples; the first out-of-range
// position goes to st->bad_pos by integer atomicMin (order-free, so the result is deterministic).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) target_stats_kernel(int64_t N, int64_t K, const int64_t* __restrict__ targets,
                                    const T* __restrict__ weight, int64_t ignore_index, TargetStats* st,
                                    double* __restrict__ parts) {
  KILN_SHARED(double, scratch, 32);
  double d = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = targets[i];
    if (t == ignore_index) continue;
    if (t < 0 || t >= K) {
      atomicMin(&st->bad_pos, (unsigned long long)i);
      continue;
    }
    d += wt(weight, t);
  }
  d = block_sum(d, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = d;
}

// Pass 2, one block: D = sum of the parts in a fixed order, the label-smoothing mass, and the first
// bad position (pass 1 finished on the stream before this starts) into the deferred-error slot.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kStatThreads) target_stats_finish_kernel(int64_t nparts, int64_t K, const int64_t* __restrict__ targets,
                                    const T* __restrict__ weight, int64_t ignore_index, double ls,
                                    const double* __restrict__ parts, TargetStats* st,
                                    DeferredTargetError* slot, int32_t op) {
  KILN_SHARED(double, scratch, 32);
  double d = 0;
  for (int64_t b = threadIdx.x; b < nparts; b += blockDim.x) d += parts[b];
  d = block_sum(d, scratch);
  double sm = 0;
  if (ls > 0)
    for (int64_t c = threadIdx.x; c < K; c += blockDim.x) sm += ls / (double)K * wt(weight, c);
  sm = block_sum(sm, scratch);
  if (threadIdx.x == 0) {
    st->D = d;
    st->smooth_mass = sm;
    const unsigned long long bad = st->bad_pos;
    if (bad != ULLONG_MAX && slot->pos < 0) {  // keep the first error until the host reports it
      slot->target = targets[bad];
      slot->K = K;
      slot->ignore_index = ignore_index;
      slot->op = op;
      __threadfence_system();
      slot->pos = (int64_t)bad;
    }
  }
}

// Is target t a real class of sample i? (ignored targets contribute nothing; out-of-range ones
// give NaN and are reported at the next sync.)
__device__ __forceinline__ bool live(int64_t t, int64_t K, int64_t ignore_index) {
  return t != ignore_index && t >= 0 && t < K;
}
__device__ __forceinline__ bool out_of_range(int64_t t, int64_t K, int64_t ignore_index) {
  return t != ignore_index && (t < 0 || t >= K);
}

// Cross-entropy per sample, one warp per row: loss_i = -(1 - ls) w_t logp[t] - ls/K sum_c w_c logp[c].
// none: out[i] = loss_i. sum/mean: parts[block] = the block's sum (its warps' rows in grid-stride
// order, then a fixed tree), so the scratch is one double per block, not per sample (a
// 2 x 2048 x 2048 segmentation batch would otherwise need 64 MiB the memory predictor never sees).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) ce_sample_kernel(int64_t N, int64_t K, const T* __restrict__ logp, const int64_t* __restrict__ targets,
                                 const T* __restrict__ weight, double ls, int64_t ignore_index, Reduction r,
                                 T* __restrict__ out, double* __restrict__ parts) {
  KILN_SHARED(double, scratch, 32);
  const int wpb = blockDim.x >> 5, lane = threadIdx.x & 31;
  double acc = 0;
  for (int64_t i = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5); i < N; i += (int64_t)gridDim.x * wpb) {
    const int64_t t = targets[i];
    double li = out_of_range(t, K, ignore_index) ? CUDART_NAN : 0.0;
    if (live(t, K, ignore_index)) {
      const T* lp = logp + i * K;
      li = -(1.0 - ls) * wt(weight, t) * (double)lp[t];
      if (ls > 0) {
        double s = 0;
        for (int64_t c = lane; c < K; c += 32) s += wt(weight, c) * (double)lp[c];
        li -= ls / (double)K * warp_sum(s);
      }
    }
    if (lane == 0) {
      if (r == Reduction::none) out[i] = (T)li;
      else acc += li;
    }
  }
  if (r == Reduction::none) return;  // uniform across the block
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = acc;
}

// nll per sample, one thread per row; none: out[i], sum/mean: per-block sums as ce_sample_kernel.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) nll_sample_kernel(int64_t N, int64_t K, const T* __restrict__ logp, const int64_t* __restrict__ targets,
                                  const T* __restrict__ weight, int64_t ignore_index, Reduction r, T* __restrict__ out,
                                  double* __restrict__ parts) {
  KILN_SHARED(double, scratch, 32);
  double acc = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < N; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = targets[i];
    const double li = live(t, K, ignore_index)           ? -wt(weight, t) * (double)logp[i * K + t]
                      : out_of_range(t, K, ignore_index) ? CUDART_NAN
                                                         : 0.0;
    if (r == Reduction::none) out[i] = (T)li;
    else acc += li;
  }
  if (r == Reduction::none) return;  // uniform across the block
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = acc;
}

// out[0] = sum(parts) for sum, sum(parts) / divisor for mean (divisor = *dev_div when given, else
// host_div; 0 / 0 -> NaN like PyTorch). One block, fixed order: deterministic.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kStatThreads) finish_sum_kernel(const double* __restrict__ parts, int64_t n, Reduction r,
                                  const TargetStats* __restrict__ st, double host_div, T* __restrict__ out) {
  KILN_SHARED(double, scratch, 32);
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += parts[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[0] = (T)(r == Reduction::sum ? s : s / (st ? st->D : host_div));
}

// Upstream gradient of sample i, divided by D for mean.
template <typename T>
__device__ __forceinline__ double grad_scale(Reduction r, const T* grad_out, int64_t i, double D) {
  if (r == Reduction::none) return (double)grad_out[i];
  if (r == Reduction::sum) return (double)grad_out[0];
  return (double)grad_out[0] / D;
}

// dlogits[i, c] = g_i * (p_c * sum(q) - q_c), q_c = (ls/K) w_c + (1 - ls) w_t [c == t]; 0 when ignored
// (NaN where logp is NaN, as PyTorch).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) ce_bwd_kernel(int64_t N, int64_t K, const T* __restrict__ grad_out, const T* __restrict__ logp,
                              const int64_t* __restrict__ targets, const T* __restrict__ weight, double ls,
                              int64_t ignore_index, Reduction r, const TargetStats* __restrict__ st,
                              T* __restrict__ dlogits) {
  const int64_t total = N * K;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / K, c = e % K, t = targets[i];
    if (!live(t, K, ignore_index)) {
      // ignored: 0, but NaN where logp is NaN (PyTorch's log_softmax backward of a zero gradient).
      dlogits[e] = out_of_range(t, K, ignore_index) ? T(CUDART_NAN) : (T)(0.0 - exp((double)logp[e]) * 0.0);
      continue;
    }
    const double g = grad_scale(r, grad_out, i, st->D);
    const double w_t = wt(weight, t);
    const double qsum = (1.0 - ls) * w_t + st->smooth_mass;
    const double qc = (ls > 0 ? ls / (double)K * wt(weight, c) : 0.0) + (c == t ? (1.0 - ls) * w_t : 0.0);
    dlogits[e] = (T)(g * (exp((double)logp[e]) * qsum - qc));
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) nll_bwd_kernel(int64_t N, int64_t K, const T* __restrict__ grad_out,
                               const int64_t* __restrict__ targets, const T* __restrict__ weight,
                               int64_t ignore_index, Reduction r, const TargetStats* __restrict__ st,
                               T* __restrict__ dlogp) {
  const int64_t total = N * K;
  // sum / mean: one scale for every i, divided once here: an f64 division inside the loop made ptxas spill
  // (its slow path is a call; tests/unit/test_cuda_ptx_resources.cpp checks the stack frame is 0).
  const double g0 = r == Reduction::none ? 0.0 : grad_scale(r, grad_out, 0, st->D);
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t i = e / K, c = e % K, t = targets[i];
    dlogp[e] = out_of_range(t, K, ignore_index)  ? T(CUDART_NAN)
               : live(t, K, ignore_index) && c == t ? (T)(-(r == Reduction::none ? (double)grad_out[i] : g0) * wt(weight, t))
                                                    : T(0);
  }
}

// mse: none writes (x - t)^2 per element; otherwise each block writes its f64 partial sum.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) mse_fwd_kernel(int64_t n, const T* __restrict__ x, const T* __restrict__ target, Reduction r,
                               T* __restrict__ out, double* __restrict__ parts) {
  KILN_SHARED(double, scratch, 32);
  double s = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const double d = (double)x[i] - (double)target[i];
    if (r == Reduction::none) out[i] = (T)(d * d);
    s += d * d;
  }
  if (r == Reduction::none) return;  // uniform across the block
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) parts[blockIdx.x] = s;
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) mse_bwd_kernel(int64_t n, const T* __restrict__ grad_out, const T* __restrict__ x,
                               const T* __restrict__ target, Reduction r, T* __restrict__ dx) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const T g = r == Reduction::none ? grad_out[i]
                : r == Reduction::sum ? grad_out[0]
                                      : (T)((double)grad_out[0] / (double)n);
    dx[i] = T(2) * (x[i] - target[i]) * g;
  }
}

void check_sizes(int64_t N, int64_t K, const char* op) {
  KILN_CHECK(N >= 0 && K >= 1, op, ": bad sizes (N ", N, ", K ", K, ")");
}

// Device scratch of one classification-loss call: the TargetStats header, then one double per
// block of the per-sample kernel (its partial sums).
struct ClassScratch {
  Workspace ws;
  TargetStats* st;
  double* per;
  explicit ClassScratch(int64_t blocks)
      : ws(current_device(), sizeof(TargetStats) + sizeof(double) * (size_t)(blocks > 0 ? blocks : 1)) {
    st = static_cast<TargetStats*>(ws.get());
    per = reinterpret_cast<double*>(st + 1);
  }
};

// Blocks of the target check's first pass (its per-block parts live in ClassScratch::per).
inline unsigned target_stats_blocks(int64_t N) { return grid_for(N); }
static_assert(sizeof(TargetStats) + sizeof(double) * 132 * 32 <= kKernelScratchMax,
              "loss scratch (grid_for's cap of per-block sums): raise kKernelScratchMax");

// Queues target validation and D on the stream (two launches: many blocks over N, then one block
// over their parts); a bad target lands in the deferred-error slot. `parts` holds
// target_stats_blocks(N) doubles; the caller may reuse it after this (stream order).
template <typename T>
void launch_target_stats(int64_t N, int64_t K, const int64_t* targets, const T* weight, int64_t ignore_index,
                         double ls, TargetStats* st, double* parts, DeferredOp dop, const char* op) {
  cudaStream_t s = stream();
  KILN_CUDA_CHECK(cudaMemsetAsync(st, 0xff, sizeof(TargetStats), s), op);
  const unsigned blocks = target_stats_blocks(N);
  launch_kernel("target_stats_kernel", target_stats_kernel<T>, blocks, kThreads, 0, s, N, K, targets, weight, ignore_index, st, parts);
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) target check, N ", N, ", K ", K));
  launch_kernel("target_stats_finish_kernel", target_stats_finish_kernel<T>, 1, kStatThreads, 0, s, (int64_t)blocks, K, targets, weight,
                ignore_index, ls, parts, st, deferred_error_slot(current_device()), (int32_t)dop);
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) target check finish, N ", N, ", K ", K));
}

template <typename T>
void launch_finish(const double* parts, int64_t n, Reduction r, const TargetStats* st, double host_div, T* out,
                   const char* op) {
  launch_kernel("finish_sum_kernel", finish_sum_kernel<T>, 1, kStatThreads, 0, stream(), parts, n, r, st, host_div, out);
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) reduction over ", n));
}

}  // namespace

template <typename T>
void cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* targets, const T* weight,
                           double label_smoothing, int64_t ignore_index, Reduction reduction, T* out, T* logp) {
  const char* op = "cross_entropy_forward";
  check_sizes(N, K, op);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op, ": label_smoothing must be in [0, 1], got ",
             label_smoothing);
  const unsigned blocks = grid_for(N * 32);
  ClassScratch sc(std::max(blocks, target_stats_blocks(N)));
  launch_target_stats(N, K, targets, weight, ignore_index, label_smoothing, sc.st, sc.per,
                      DeferredOp::cross_entropy_forward, op);
  log_softmax_forward<T>(N, K, logits, logp);
  if (N > 0) {
    launch_kernel("ce_sample_kernel", ce_sample_kernel<T>, blocks, kThreads, 0, stream(), N, K, logp, targets, weight, label_smoothing,
                                                           ignore_index, reduction, out, sc.per);
    KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) N ", N, ", K ", K));
  }
  // N == 0: no partial was written; the finish sums none of them (0, or 0 / 0 = NaN for mean).
  if (reduction != Reduction::none) launch_finish(sc.per, N > 0 ? (int64_t)blocks : 0, reduction, sc.st, 0.0, out, op);
}

template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* grad_out, const T* logp, const int64_t* targets,
                            const T* weight, double label_smoothing, int64_t ignore_index, Reduction reduction,
                            T* dlogits) {
  const char* op = "cross_entropy_backward";
  check_sizes(N, K, op);
  ClassScratch sc(target_stats_blocks(N));
  launch_target_stats(N, K, targets, weight, ignore_index, label_smoothing, sc.st, sc.per,
                      DeferredOp::cross_entropy_backward, op);
  if (N > 0) {
    launch_kernel("ce_bwd_kernel", ce_bwd_kernel<T>, grid_for(N * K), kThreads, 0, stream(), N, K, grad_out, logp, targets, weight,
                                                                 label_smoothing, ignore_index, reduction, sc.st,
                                                                 dlogits);
    KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) N ", N, ", K ", K));
  }
}

template <typename T>
void nll_loss_forward(int64_t N, int64_t K, const T* logp, const int64_t* targets, const T* weight,
                      int64_t ignore_index, Reduction reduction, T* out) {
  const char* op = "nll_loss_forward";
  check_sizes(N, K, op);
  const unsigned blocks = grid_for(N);
  ClassScratch sc(std::max(blocks, target_stats_blocks(N)));
  launch_target_stats(N, K, targets, weight, ignore_index, 0.0, sc.st, sc.per, DeferredOp::nll_loss_forward, op);
  if (N > 0) {
    launch_kernel("nll_sample_kernel", nll_sample_kernel<T>, blocks, kThreads, 0, stream(), N, K, logp, targets, weight, ignore_index, reduction,
                                                            out, sc.per);
    KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) N ", N, ", K ", K));
  }
  if (reduction != Reduction::none) launch_finish(sc.per, N > 0 ? (int64_t)blocks : 0, reduction, sc.st, 0.0, out, op);
}

template <typename T>
void nll_loss_backward(int64_t N, int64_t K, const T* grad_out, const int64_t* targets, const T* weight,
                       int64_t ignore_index, Reduction reduction, T* dlogp) {
  const char* op = "nll_loss_backward";
  check_sizes(N, K, op);
  ClassScratch sc(target_stats_blocks(N));
  launch_target_stats(N, K, targets, weight, ignore_index, 0.0, sc.st, sc.per, DeferredOp::nll_loss_backward, op);
  if (N > 0) {
    launch_kernel("nll_bwd_kernel", nll_bwd_kernel<T>, grid_for(N * K), kThreads, 0, stream(), N, K, grad_out, targets, weight, ignore_index,
                                                                  reduction, sc.st, dlogp);
    KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) N ", N, ", K ", K));
  }
}

template <typename T>
void mse_loss_forward(int64_t n, const T* x, const T* target, Reduction reduction, T* out) {
  KILN_CHECK(n >= 0, "mse_loss_forward (cuda): bad size ", n);
  const unsigned blocks = grid_for(n);
  if (reduction == Reduction::none) {
    if (n == 0) return;
    launch_kernel("mse_fwd_kernel", mse_fwd_kernel<T>, blocks, kThreads, 0, stream(), n, x, target, reduction, out, nullptr);
    KILN_CUDA_LAUNCH_CHECK(str_cat("mse_loss_forward (cuda) n ", n));
    return;
  }
  Workspace ws(current_device(), sizeof(double) * blocks);
  double* parts = static_cast<double*>(ws.get());
  launch_kernel("mse_fwd_kernel", mse_fwd_kernel<T>, blocks, kThreads, 0, stream(), n, x, target, reduction, out, parts);
  KILN_CUDA_LAUNCH_CHECK(str_cat("mse_loss_forward (cuda) n ", n));
  launch_finish(parts, (int64_t)blocks, reduction, nullptr, (double)n, out, "mse_loss_forward");
}

template <typename T>
void mse_loss_backward(int64_t n, const T* grad_out, const T* x, const T* target, Reduction reduction, T* dx) {
  KILN_CHECK(n >= 0, "mse_loss_backward (cuda): bad size ", n);
  if (n == 0) return;
  launch_kernel("mse_bwd_kernel", mse_bwd_kernel<T>, grid_for(n), kThreads, 0, stream(), n, grad_out, x, target, reduction, dx);
  KILN_CUDA_LAUNCH_CHECK(str_cat("mse_loss_backward (cuda) n ", n));
}

#define KILN_INSTANTIATE_LOSS(T)                                                                              \
  template void cross_entropy_forward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, double,       \
                                         int64_t, Reduction, T*, T*);                                        \
  template void cross_entropy_backward<T>(int64_t, int64_t, const T*, const T*, const int64_t*, const T*,    \
                                          double, int64_t, Reduction, T*);                                   \
  template void nll_loss_forward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, int64_t, Reduction, \
                                    T*);                                                                     \
  template void nll_loss_backward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, int64_t,          \
                                     Reduction, T*);                                                         \
  template void mse_loss_forward<T>(int64_t, const T*, const T*, Reduction, T*);                             \
  template void mse_loss_backward<T>(int64_t, const T*, const T*, const T*, Reduction, T*);
KILN_INSTANTIATE_LOSS(float)
KILN_INSTANTIATE_LOSS(double)
#undef KILN_INSTANTIATE_LOSS

}  // namespace kiln::cuda
