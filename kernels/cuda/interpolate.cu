// CUDA interpolation (NCHW, contiguous), nearest and bilinear, with the index rules of
// kernels/common/upsample_math.h (the CPU kernels use the same functions). Forward: one thread per
// output element, the four bilinear taps in torch's order. Backward: dx zeroed, then one thread per
// output element adds its gradient to the taps it read with atomicAdd (double atomics need sm_60+;
// kiln builds sm_80/sm_90), so the summation order, and the last bits of dx, are not deterministic.
#include "kernels/common/upsample_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/upsampling_backend.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) interp_fwd_kernel(Interp2dDesc d, const T* __restrict__ x, T* __restrict__ y, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = e % d.OW, oh = (e / d.OW) % d.OH, pl = e / (d.OW * d.OH);
    const T* xp = x + pl * d.H * d.W;
    if (d.mode == InterpMode::nearest) {
      y[e] = xp[nearest_source_index(oh, d.H, d.OH, d.scale_h) * d.W + nearest_source_index(ow, d.W, d.OW, d.scale_w)];
    } else {
      const LinearTaps<T> th = linear_source<T>(oh, d.H, d.OH, d.align_corners, d.scale_h);
      const LinearTaps<T> tw = linear_source<T>(ow, d.W, d.OW, d.align_corners, d.scale_w);
      const T* r0 = xp + th.i0 * d.W;
      const T* r1 = xp + th.i1 * d.W;
      y[e] = th.l0 * (tw.l0 * r0[tw.i0] + tw.l1 * r0[tw.i1]) + th.l1 * (tw.l0 * r1[tw.i0] + tw.l1 * r1[tw.i1]);
    }
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) interp_bwd_kernel(Interp2dDesc d, const T* __restrict__ dy, T* __restrict__ dx, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = e % d.OW, oh = (e / d.OW) % d.OH, pl = e / (d.OW * d.OH);
    T* xp = dx + pl * d.H * d.W;
    const T g = dy[e];
    if (d.mode == InterpMode::nearest) {
      atomicAdd(xp + nearest_source_index(oh, d.H, d.OH, d.scale_h) * d.W +
                    nearest_source_index(ow, d.W, d.OW, d.scale_w),
                g);
    } else {
      const LinearTaps<T> th = linear_source<T>(oh, d.H, d.OH, d.align_corners, d.scale_h);
      const LinearTaps<T> tw = linear_source<T>(ow, d.W, d.OW, d.align_corners, d.scale_w);
      atomicAdd(xp + th.i0 * d.W + tw.i0, th.l0 * tw.l0 * g);
      atomicAdd(xp + th.i0 * d.W + tw.i1, th.l0 * tw.l1 * g);
      atomicAdd(xp + th.i1 * d.W + tw.i0, th.l1 * tw.l0 * g);
      atomicAdd(xp + th.i1 * d.W + tw.i1, th.l1 * tw.l1 * g);
    }
  }
}

}  // namespace

template <typename T>
void interpolate2d_forward(const Interp2dDesc& d, const T* x, T* y) {
  interp2d_check(d, "interpolate2d_forward (cuda)");
  const int64_t total = d.N * d.C * d.OH * d.OW;
  if (total == 0) return;
  launch_kernel("interp_fwd_kernel", interp_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, x, y, total);
  KILN_CUDA_LAUNCH_CHECK("interpolate2d_forward (cuda)");
}

template <typename T>
void interpolate2d_backward(const Interp2dDesc& d, const T* dy, T* dx) {
  interp2d_check(d, "interpolate2d_backward (cuda)");
  const int64_t in_total = d.N * d.C * d.H * d.W, total = d.N * d.C * d.OH * d.OW;
  if (in_total == 0) return;
  KILN_CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)in_total * sizeof(T), stream()), "interpolate2d_backward (cuda)");
  if (total == 0) return;
  launch_kernel("interp_bwd_kernel", interp_bwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, dy, dx, total);
  KILN_CUDA_LAUNCH_CHECK("interpolate2d_backward (cuda)");
}

#define KILN_INSTANTIATE_INTERP(T)                                           \
  template void interpolate2d_forward<T>(const Interp2dDesc&, const T*, T*); \
  template void interpolate2d_backward<T>(const Interp2dDesc&, const T*, T*);
KILN_INSTANTIATE_INTERP(float)
KILN_INSTANTIATE_INTERP(double)
#undef KILN_INSTANTIATE_INTERP

}  // namespace kiln::cuda
