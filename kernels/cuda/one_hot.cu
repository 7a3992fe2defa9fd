// CUDA one-hot of class-index targets, as kernels/cpu/one_hot.h: (N, S) i64 -> (N, K, S), one
// thread per output element. An out-of-range target (not ignore_index) writes NaN into its column
// and records the first bad position in the device's deferred-error slot, thrown at the next host
// synchronization (kernels/cuda/deferred_error.h): no stream sync per call. The first bad position
// is found with an integer atomicMin in 8 bytes of scratch (workspace.h); a one-thread kernel then
// fills the slot, so its fields always describe the same element.
#include <math_constants.h>

#include <climits>

#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn_backend.h"
#include "kernels/cuda/workspace.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) one_hot_kernel(int64_t N, int64_t K, int64_t S, const int64_t* __restrict__ target,
                               int64_t ignore_index, T* __restrict__ out, unsigned long long* bad_pos) {
  const int64_t total = N * K * S;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t s = e % S, k = (e / S) % K, n = e / (S * K);
    const int64_t pos = n * S + s, t = target[pos];
    if (t != ignore_index && (t < 0 || t >= K)) {
      out[e] = T(CUDART_NAN);
      if (k == 0) atomicMin(bad_pos, (unsigned long long)pos);
      continue;
    }
    out[e] = t == k ? T(1) : T(0);
  }
}

// One thread: records the first bad position (if any) in the deferred-error slot, unless the slot
// already holds an unreported error.
__global__ void KILN_KERNEL_BOUNDS(1) one_hot_report_kernel(const unsigned long long* bad_pos, const int64_t* target, int64_t K,
                                      int64_t ignore_index, DeferredTargetError* slot) {
  const unsigned long long bad = *bad_pos;
  if (bad == ULLONG_MAX || slot->pos >= 0) return;
  slot->target = target[bad];
  slot->K = K;
  slot->ignore_index = ignore_index;
  slot->op = (int32_t)DeferredOp::one_hot_forward;
  __threadfence_system();
  slot->pos = (int64_t)bad;
}

}  // namespace

template <typename T>
void one_hot_forward(int64_t N, int64_t K, int64_t S, const int64_t* target, int64_t ignore_index, T* out,
                     const char* target_desc) {
  KILN_CHECK(N >= 0 && K >= 1 && S >= 0, "one_hot (cuda): bad sizes (N ", N, ", K ", K, ", S ", S, ") for target ",
             target_desc ? target_desc : "");
  const int64_t total = N * K * S;
  if (total == 0) return;
  cudaStream_t st = stream();
  Workspace ws(current_device(), sizeof(unsigned long long));
  auto* bad = static_cast<unsigned long long*>(ws.get());
  KILN_CUDA_CHECK(cudaMemsetAsync(bad, 0xff, sizeof(unsigned long long), st), "one_hot (cuda) scratch");
  launch_kernel("one_hot_kernel", one_hot_kernel<T>, grid_for(total), kThreads, 0, st, N, K, S, target, ignore_index, out, bad);
  KILN_CUDA_LAUNCH_CHECK(str_cat("one_hot (cuda) N ", N, ", K ", K, ", S ", S));
  launch_kernel("one_hot_report_kernel", one_hot_report_kernel, 1, 1, 0, st, bad, target, K, ignore_index, deferred_error_slot(current_device()));
  KILN_CUDA_LAUNCH_CHECK("one_hot (cuda) error report");
}

template void one_hot_forward<float>(int64_t, int64_t, int64_t, const int64_t*, int64_t, float*, const char*);
template void one_hot_forward<double>(int64_t, int64_t, int64_t, const int64_t*, int64_t, double*, const char*);

}  // namespace kiln::cuda
