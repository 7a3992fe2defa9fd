// CUDA transposed convolution (NCHW, contiguous), kiln's own direct kernels; the sums are the
// KILN_HOST_DEVICE functions of kernels/common/upsample_math.h (tested on the CPU against the GEMM
// kernels). Forward and input gradient: one thread per output element, a gather with no atomics.
// Weight gradient: one block per weight element, its threads split the (n, ih, iw) sum and
// block_sum combines it; bias gradient: one block per output channel. Deterministic; accumulates in
// f32 for f32, f64 for f64. Correct before fast: cuDNN's backward-data would be faster.
#include "kernels/common/upsample_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/upsampling_backend.h"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) convt_fwd_kernel(ConvTranspose2dDesc d, const T* __restrict__ x, const T* __restrict__ w,
                                 const T* __restrict__ bias, T* __restrict__ y, int64_t total) {
  using A = typename Compute<T>::type;
  const int64_t OH = d.out_h(), OW = d.out_w();
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = e % OW, oh = (e / OW) % OH, k = (e / (OW * OH)) % d.K, n = e / (OW * OH * d.K);
    A acc = convt_output_at<A>(d, x, w, n, k, oh, ow);
    if (bias) acc += (A)bias[k];
    y[e] = (T)acc;
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) convt_bwd_input_kernel(ConvTranspose2dDesc d, const T* __restrict__ dy, const T* __restrict__ w,
                                       T* __restrict__ dx, int64_t total) {
  using A = typename Compute<T>::type;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t iw = e % d.W, ih = (e / d.W) % d.H, c = (e / (d.W * d.H)) % d.C, n = e / (d.W * d.H * d.C);
    dx[e] = (T)convt_input_grad_at<A>(d, dy, w, n, c, ih, iw);
  }
}

// Block b (grid-stride) owns weight element b = ((c * Kg + kk) * R + r) * S + s.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) convt_bwd_weight_kernel(ConvTranspose2dDesc d, const T* __restrict__ x, const T* __restrict__ dy,
                                        T* __restrict__ dw, int64_t nweights) {
  using A = typename Compute<T>::type;
  KILN_SHARED(A, scratch, 32);
  const int64_t Kg = d.K / d.groups, HW = d.H * d.W, terms = d.N * HW;
  for (int64_t b = blockIdx.x; b < nweights; b += gridDim.x) {
    const int64_t s = b % d.S, r = (b / d.S) % d.R, kk = (b / (d.S * d.R)) % Kg, c = b / (d.S * d.R * Kg);
    A acc = A(0);
    for (int64_t t = threadIdx.x; t < terms; t += blockDim.x) {
      const int64_t iw = t % d.W, ih = (t / d.W) % d.H, n = t / HW;
      acc += convt_weight_term<A>(d, x, dy, c, kk, r, s, n, ih, iw);
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) dw[b] = (T)acc;
  }
}

// Block k (grid-stride) sums dy over (n, oh, ow) of channel k.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) convt_bwd_bias_kernel(ConvTranspose2dDesc d, const T* __restrict__ dy, T* __restrict__ db) {
  using A = typename Compute<T>::type;
  KILN_SHARED(A, scratch, 32);
  const int64_t P = d.out_h() * d.out_w(), terms = d.N * P;
  for (int64_t k = blockIdx.x; k < d.K; k += gridDim.x) {
    A acc = A(0);
    for (int64_t t = threadIdx.x; t < terms; t += blockDim.x) acc += (A)dy[((t / P) * d.K + k) * P + t % P];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) db[k] = (T)acc;
  }
}

unsigned blocks_for(int64_t items) { return (unsigned)(items < 65535 ? (items < 1 ? 1 : items) : 65535); }

}  // namespace

size_t conv_transpose2d_workspace_bytes(const ConvTranspose2dDesc& d, size_t) {
  conv_transpose2d_check(d, "conv_transpose2d_workspace_bytes (cuda)");
  return 0;
}

template <typename T>
void conv_transpose2d_forward(const ConvTranspose2dDesc& d, const T* x, const T* w, const T* bias, T* y, void*) {
  conv_transpose2d_check(d, "conv_transpose2d_forward (cuda)");
  const int64_t total = d.N * d.K * d.out_h() * d.out_w();
  if (total == 0) return;
  launch_kernel("convt_fwd_kernel", convt_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, x, w, bias, y, total);
  KILN_CUDA_LAUNCH_CHECK("conv_transpose2d_forward (cuda)");
}

template <typename T>
void conv_transpose2d_backward_input(const ConvTranspose2dDesc& d, const T* dy, const T* w, T* dx, void*) {
  conv_transpose2d_check(d, "conv_transpose2d_backward_input (cuda)");
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total == 0) return;
  launch_kernel("convt_bwd_input_kernel", convt_bwd_input_kernel<T>, grid_for(total), kThreads, 0, stream(), d, dy, w, dx, total);
  KILN_CUDA_LAUNCH_CHECK("conv_transpose2d_backward_input (cuda)");
}

template <typename T>
void conv_transpose2d_backward_weight(const ConvTranspose2dDesc& d, const T* x, const T* dy, T* dw, T* dbias,
                                      void*) {
  conv_transpose2d_check(d, "conv_transpose2d_backward_weight (cuda)");
  const int64_t nweights = d.C * (d.K / d.groups) * d.R * d.S;
  // With N == 0 every sum is empty: the kernels still run and write zeros.
  launch_kernel("convt_bwd_weight_kernel", convt_bwd_weight_kernel<T>, blocks_for(nweights), kThreads, 0, stream(), d, x, dy, dw, nweights);
  KILN_CUDA_LAUNCH_CHECK("conv_transpose2d_backward_weight (cuda)");
  if (dbias) {
    launch_kernel("convt_bwd_bias_kernel", convt_bwd_bias_kernel<T>, blocks_for(d.K), kThreads, 0, stream(), d, dy, dbias);
    KILN_CUDA_LAUNCH_CHECK("conv_transpose2d_backward_weight (cuda, bias)");
  }
}

#define KILN_INSTANTIATE_CONVT(T)                                                                         \
  template void conv_transpose2d_forward<T>(const ConvTranspose2dDesc&, const T*, const T*, const T*, T*, void*); \
  template void conv_transpose2d_backward_input<T>(const ConvTranspose2dDesc&, const T*, const T*, T*, void*);   \
  template void conv_transpose2d_backward_weight<T>(const ConvTranspose2dDesc&, const T*, const T*, T*, T*, void*);
KILN_INSTANTIATE_CONVT(float)
KILN_INSTANTIATE_CONVT(double)
#undef KILN_INSTANTIATE_CONVT

}  // namespace kiln::cuda
