// sleep_on_stream (runtime.h): one thread that spins on the GPU's global nanosecond timer, so a
// stream stays busy for a known time. Test support only (cross-stream allocator reuse needs work
// that is certainly still queued when the host asks); nothing in a training run launches it.
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/runtime.h"

namespace kiln::cuda {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void KILN_KERNEL_BOUNDS(1) sleep_kernel(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);  // sm_70+; the timer, not the sleep, bounds it
}

}  // namespace

void sleep_on_stream(cudaStream_t stream, int64_t microseconds) {
  if (microseconds <= 0) return;
  launch_kernel("sleep_kernel", sleep_kernel, 1, 1, 0, stream, (unsigned long long)microseconds * 1000ull);
  KILN_CUDA_LAUNCH_CHECK(str_cat("sleep_on_stream: ", microseconds, " us"));
}

}  // namespace kiln::cuda
