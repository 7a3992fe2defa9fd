// Fused optimizer updates on the GPU: one grid-stride kernel per parameter tensor applies SGD or
// AdamW to every element in place (parameter, gradient and state read once, written once). The
// math is kernels/common/update_rules.h, the same functions the CPU loop of engine/optim runs, so
// the two devices differ only by the compiler's float contraction (see tests/cuda/test_cuda_optim.cpp).
// Launch geometry only; nothing here allocates.
#include "kernels/common/update_rules.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/launch.cuh"

namespace kiln::cuda {
namespace {

// p, g, buf: (n,) contiguous f32. buf is nullptr when momentum is 0 (the rule never touches it).
__global__ void KILN_KERNEL_BOUNDS(kThreads) sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ buf, int64_t n,
                           bool first_step, optim::SgdParams h) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float pi = p[i], bi = buf ? buf[i] : 0.f;
    optim::sgd_update(pi, g[i], bi, first_step, h);
    p[i] = pi;
    if (buf) buf[i] = bi;
  }
}

// p, g, m, v: (n,) contiguous f32.
__global__ void KILN_KERNEL_BOUNDS(kThreads) adamw_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t n, optim::AdamWParams h) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    float pi = p[i], mi = m[i], vi = v[i];
    optim::adamw_update(pi, g[i], mi, vi, h);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void sgd_fused(float* p, const float* g, float* momentum_buffer, int64_t n, bool first_step,
               const optim::SgdParams& h) {
  if (n <= 0) return;
  launch_kernel("sgd_kernel", sgd_kernel, grid_for(n), kThreads, 0, stream(), p, g, momentum_buffer, n, first_step, h);
  KILN_CUDA_LAUNCH_CHECK(str_cat("sgd_fused: ", n, " f32 elements, momentum ", h.momentum,
                                 momentum_buffer ? " (with buffer)" : " (no buffer)"));
}

void adamw_fused(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const optim::AdamWParams& h) {
  if (n <= 0) return;
  launch_kernel("adamw_kernel", adamw_kernel, grid_for(n), kThreads, 0, stream(), p, g, exp_avg, exp_avg_sq, n, h);
  KILN_CUDA_LAUNCH_CHECK(str_cat("adamw_fused: ", n, " f32 elements"));
}

}  // namespace kiln::cuda
