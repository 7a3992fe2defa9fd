// CUDA segmentation confusion matrix (see confusion_backend.h). One thread per pixel: its argmax
// over K (kernels/common/confusion_math.h, the CPU's function) and its cell. With K * K <= 4096
// each block counts into a shared-memory matrix first and adds it to the global one with one
// atomicAdd per non-zero cell; larger matrices count straight into global memory. Integer counts,
// so the result is deterministic. A bad target: the first one (lowest pixel index, atomicMin into a
// scratch word) is written to the device's deferred-error slot by a one-thread kernel after the count.
#include <climits>

#include "kernels/common/confusion_math.h"
#include "kernels/cuda/confusion_backend.h"
#include "kernels/cuda/deferred_error.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/workspace.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kSharedCells = 4096;  // 32 KiB of u64 counters per block

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) confusion_kernel(int64_t N, int64_t K, int64_t HW, const T* __restrict__ scores,
                                 const int64_t* __restrict__ target, int64_t ignore_index,
                                 unsigned long long* __restrict__ counts, unsigned long long* __restrict__ first_bad,
                                 bool shared_counts) {
  KILN_SHARED(unsigned long long, local, kSharedCells);
  const int64_t KK = K * K;
  if (shared_counts) {
    for (int64_t c = threadIdx.x; c < KK; c += blockDim.x) local[c] = 0;
    __syncthreads();
  }
  const int64_t total = N * HW;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t n = e / HW, p = e % HW;
    const int64_t cell = confusion_cell(target[e], pixel_argmax(scores + n * K * HW + p, K, HW), K, ignore_index);
    if (cell == kConfusionBadTarget) atomicMin(first_bad, (unsigned long long)e);
    if (cell < 0) continue;
    if (shared_counts) atomicAdd(&local[cell], 1ull);
    else atomicAdd(&counts[cell], 1ull);
  }
  if (shared_counts) {
    __syncthreads();
    for (int64_t c = threadIdx.x; c < KK; c += blockDim.x)
      if (local[c]) atomicAdd(&counts[c], local[c]);
  }
}

__global__ void KILN_KERNEL_BOUNDS(1) confusion_report_kernel(const unsigned long long* first_bad, const int64_t* target, int64_t K,
                                        int64_t ignore_index, DeferredTargetError* slot) {
  const unsigned long long bad = *first_bad;
  if (bad == ULLONG_MAX || slot->pos >= 0) return;  // none, or an earlier error not yet reported
  slot->target = target[bad];
  slot->K = K;
  slot->ignore_index = ignore_index;
  slot->op = (int32_t)DeferredOp::confusion_matrix;
  __threadfence_system();
  slot->pos = (int64_t)bad;
}

}  // namespace

template <typename T>
void confusion_matrix_accumulate(int64_t N, int64_t K, int64_t HW, const T* scores, const int64_t* target,
                                 int64_t ignore_index, int64_t* counts) {
  const char* op = "confusion_matrix (cuda)";
  KILN_CHECK(N >= 0 && K >= 1 && HW >= 0, op, ": bad sizes (N ", N, ", K ", K, ", HW ", HW, ")");
  const int64_t total = N * HW;
  if (total == 0) return;
  static_assert(sizeof(unsigned long long) == sizeof(int64_t), "64-bit counters");
  Workspace ws(current_device(), sizeof(unsigned long long));
  auto* first_bad = static_cast<unsigned long long*>(ws.get());
  cudaStream_t s = stream();
  KILN_CUDA_CHECK(cudaMemsetAsync(first_bad, 0xff, sizeof(unsigned long long), s), op);
  launch_kernel("confusion_kernel", confusion_kernel<T>, grid_for(total), kThreads, 0, s, N, K, HW, scores, target, ignore_index,
                                                           reinterpret_cast<unsigned long long*>(counts), first_bad,
                                                           K * K <= kSharedCells);
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " N ", N, ", K ", K, ", HW ", HW));
  launch_kernel("confusion_report_kernel", confusion_report_kernel, 1, 1, 0, s, first_bad, target, K, ignore_index, deferred_error_slot(current_device()));
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " target check"));
}

#define KILN_INSTANTIATE_CONFUSION(T)                                                                          \
  template void confusion_matrix_accumulate<T>(int64_t, int64_t, int64_t, const T*, const int64_t*, int64_t, \
                                               int64_t*);
KILN_INSTANTIATE_CONFUSION(float)
KILN_INSTANTIATE_CONFUSION(double)
#undef KILN_INSTANTIATE_CONFUSION

}  // namespace kiln::cuda
