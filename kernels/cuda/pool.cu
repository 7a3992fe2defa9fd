// CUDA pooling (NCHW, contiguous), as kernels/cpu/pool.h: max (with PyTorch's flat h*W + w argmax
// per plane, first max wins, NaN propagates), average (count_include_pad, ceil_mode) and adaptive
// average, forward and backward. Forward: one thread per output element. Backward uses a GATHER
// formulation, not atomics: one thread per input element visits the output windows that can
// contain it and sums their contributions in (oh, ow) order, the CPU's order, so dx is
// deterministic and needs no zero-fill. Window rules come from kernels/common/nn_desc.h.
#include "kernels/common/nn_check.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {
namespace {

// Output range [lo, hi) along one axis whose windows [o*stride - pad, o*stride - pad + span) may
// contain input position p (span = dil*(k-1) + 1), clipped to [0, out).
__device__ __forceinline__ void out_range(int64_t p, int64_t stride, int64_t pad, int64_t span, int64_t out,
                                          int64_t* lo, int64_t* hi) {
  const int64_t a = p + pad - span + 1;  // o*stride >= a
  int64_t l = a <= 0 ? 0 : (a + stride - 1) / stride;
  int64_t h = (p + pad) / stride + 1;  // o*stride <= p + pad
  *lo = l;
  *hi = h < out ? h : out;
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) max_pool_fwd_kernel(Pool2dDesc d, int64_t OH, int64_t OW, const T* __restrict__ x,
                                    T* __restrict__ y, int64_t* __restrict__ indices, int64_t total) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, pl = o / (OW * OH);
    const T* xp = x + pl * d.H * d.W;
    const int64_t h0 = oh * d.stride_h - d.pad_h, w0 = ow * d.stride_w - d.pad_w;
    T best = -INFINITY;
    int64_t best_i = -1;
    for (int64_t i = 0; i < d.kh; ++i) {
      const int64_t h = h0 + i * d.dil_h;
      if (h < 0 || h >= d.H) continue;
      for (int64_t j = 0; j < d.kw; ++j) {
        const int64_t w = w0 + j * d.dil_w;
        if (w < 0 || w >= d.W) continue;
        const T v = xp[h * d.W + w];
        if (best_i < 0) best_i = h * d.W + w;  // PyTorch: the first tap if all are -inf
        if (v > best || v != v) {             // NaN propagates (the last NaN wins, like the CPU)
          best = v;
          best_i = h * d.W + w;
        }
      }
    }
    y[o] = best;
    if (indices) indices[o] = best_i;
  }
}

// One thread per input element (n, c, h, w): sums dy over the outputs whose argmax is this element.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) max_pool_bwd_kernel(Pool2dDesc d, int64_t OH, int64_t OW, const T* __restrict__ dy,
                                    const int64_t* __restrict__ indices, T* __restrict__ dx, int64_t total) {
  const int64_t span_h = d.dil_h * (d.kh - 1) + 1, span_w = d.dil_w * (d.kw - 1) + 1;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t w = e % d.W, h = (e / d.W) % d.H, pl = e / (d.W * d.H);
    const int64_t self = h * d.W + w;
    int64_t oh0, oh1, ow0, ow1;
    out_range(h, d.stride_h, d.pad_h, span_h, OH, &oh0, &oh1);
    out_range(w, d.stride_w, d.pad_w, span_w, OW, &ow0, &ow1);
    const T* g = dy + pl * OH * OW;
    const int64_t* id = indices + pl * OH * OW;
    T acc = T(0);
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow)
        if (id[oh * OW + ow] == self) acc += g[oh * OW + ow];
    dx[e] = acc;
  }
}

// The divisor of an average window (avg_win, kernels/common/nn_desc.h).
__device__ __forceinline__ int64_t avg_divisor(const AvgWin& a, const AvgWin& b, bool include_pad) {
  return include_pad ? a.padded_len * b.padded_len : (a.end - a.start) * (b.end - b.start);
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) avg_pool_fwd_kernel(Pool2dDesc d, bool include_pad, int64_t OH, int64_t OW, const T* __restrict__ x,
                                    T* __restrict__ y, int64_t total) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, pl = o / (OW * OH);
    const T* xp = x + pl * d.H * d.W;
    const AvgWin wh = avg_win(oh, d.stride_h, d.pad_h, d.kh, d.H), ww = avg_win(ow, d.stride_w, d.pad_w, d.kw, d.W);
    T sum = T(0);
    for (int64_t h = wh.start; h < wh.end; ++h)
      for (int64_t w = ww.start; w < ww.end; ++w) sum += xp[h * d.W + w];
    const int64_t div = avg_divisor(wh, ww, include_pad);
    y[o] = div > 0 ? sum / (T)div : T(0);
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) avg_pool_bwd_kernel(Pool2dDesc d, bool include_pad, int64_t OH, int64_t OW, const T* __restrict__ dy,
                                    T* __restrict__ dx, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t w = e % d.W, h = (e / d.W) % d.H, pl = e / (d.W * d.H);
    int64_t oh0, oh1, ow0, ow1;
    out_range(h, d.stride_h, d.pad_h, d.kh, OH, &oh0, &oh1);
    out_range(w, d.stride_w, d.pad_w, d.kw, OW, &ow0, &ow1);
    const T* g = dy + pl * OH * OW;
    T acc = T(0);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const AvgWin wh = avg_win(oh, d.stride_h, d.pad_h, d.kh, d.H);
      if (h < wh.start || h >= wh.end) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const AvgWin ww = avg_win(ow, d.stride_w, d.pad_w, d.kw, d.W);
        if (w < ww.start || w >= ww.end) continue;
        const int64_t div = avg_divisor(wh, ww, include_pad);
        if (div > 0) acc += g[oh * OW + ow] / (T)div;
      }
    }
    dx[e] = acc;
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) adaptive_avg_fwd_kernel(int64_t H, int64_t W, int64_t OH, int64_t OW, const T* __restrict__ x,
                                        T* __restrict__ y, int64_t total) {
  for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < total; o += (int64_t)gridDim.x * blockDim.x) {
    const int64_t ow = o % OW, oh = (o / OW) % OH, pl = o / (OW * OH);
    const T* xp = x + pl * H * W;
    const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
    const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
    T sum = T(0);
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum += xp[h * W + w];
    y[o] = sum / (T)((h1 - h0) * (w1 - w0));
  }
}

// The adaptive windows containing input row h are oh in [start(h, OH, H), end(h, OH, H)) (the same
// floor/ceil formulas with in and out swapped); each is re-checked against its own window.
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) adaptive_avg_bwd_kernel(int64_t H, int64_t W, int64_t OH, int64_t OW, const T* __restrict__ dy,
                                        T* __restrict__ dx, int64_t total) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t w = e % W, h = (e / W) % H, pl = e / (W * H);
    const int64_t oh0 = adaptive_start(h, OH, H), oh1 = min(adaptive_end(h, OH, H), OH);
    const int64_t ow0 = adaptive_start(w, OW, W), ow1 = min(adaptive_end(w, OW, W), OW);
    const T* g = dy + pl * OH * OW;
    T acc = T(0);
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const int64_t h0 = adaptive_start(oh, H, OH), h1 = adaptive_end(oh, H, OH);
      if (h < h0 || h >= h1) continue;
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t w0 = adaptive_start(ow, W, OW), w1 = adaptive_end(ow, W, OW);
        if (w < w0 || w >= w1) continue;
        acc += g[oh * OW + ow] / (T)((h1 - h0) * (w1 - w0));
      }
    }
    dx[e] = acc;
  }
}

void check_adaptive(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, const char* op) {
  KILN_CHECK(N >= 0 && C >= 1 && H >= 1 && W >= 1 && OH >= 1 && OW >= 1, op, ": sizes must be positive: x (", N,
             ", ", C, ", ", H, ", ", W, "), output (", OH, ", ", OW, ")");
}

}  // namespace

template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices) {
  pool2d_check(d, "max_pool2d_forward (cuda)");
  const int64_t OH = d.out_h(), OW = d.out_w(), total = d.N * d.C * OH * OW;
  if (total == 0) return;
  launch_kernel("max_pool_fwd_kernel", max_pool_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, OH, OW, x, y, indices, total);
  KILN_CUDA_LAUNCH_CHECK("max_pool2d_forward (cuda)");
}

template <typename T>
void max_pool2d_backward(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx) {
  pool2d_check(d, "max_pool2d_backward (cuda)");
  KILN_CHECK(indices != nullptr, "max_pool2d_backward (cuda): indices from the forward are required");
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total == 0) return;
  launch_kernel("max_pool_bwd_kernel", max_pool_bwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, d.out_h(), d.out_w(), dy, indices, dx, total);
  KILN_CUDA_LAUNCH_CHECK("max_pool2d_backward (cuda)");
}

template <typename T>
void avg_pool2d_forward(const Pool2dDesc& d, bool count_include_pad, const T* x, T* y) {
  pool2d_check(d, "avg_pool2d_forward (cuda)");
  KILN_CHECK(d.dil_h == 1 && d.dil_w == 1, "avg_pool2d_forward (cuda): dilation must be 1");
  const int64_t OH = d.out_h(), OW = d.out_w(), total = d.N * d.C * OH * OW;
  if (total == 0) return;
  launch_kernel("avg_pool_fwd_kernel", avg_pool_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, count_include_pad, OH, OW, x, y, total);
  KILN_CUDA_LAUNCH_CHECK("avg_pool2d_forward (cuda)");
}

template <typename T>
void avg_pool2d_backward(const Pool2dDesc& d, bool count_include_pad, const T* dy, T* dx) {
  pool2d_check(d, "avg_pool2d_backward (cuda)");
  KILN_CHECK(d.dil_h == 1 && d.dil_w == 1, "avg_pool2d_backward (cuda): dilation must be 1");
  const int64_t total = d.N * d.C * d.H * d.W;
  if (total == 0) return;
  launch_kernel("avg_pool_bwd_kernel", avg_pool_bwd_kernel<T>, grid_for(total), kThreads, 0, stream(), d, count_include_pad, d.out_h(), d.out_w(), dy,
                                                                     dx, total);
  KILN_CUDA_LAUNCH_CHECK("avg_pool2d_backward (cuda)");
}

template <typename T>
void adaptive_avg_pool2d_forward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, const T* x,
                                 T* y) {
  check_adaptive(N, C, H, W, OH, OW, "adaptive_avg_pool2d_forward (cuda)");
  const int64_t total = N * C * OH * OW;
  if (total == 0) return;
  launch_kernel("adaptive_avg_fwd_kernel", adaptive_avg_fwd_kernel<T>, grid_for(total), kThreads, 0, stream(), H, W, OH, OW, x, y, total);
  KILN_CUDA_LAUNCH_CHECK("adaptive_avg_pool2d_forward (cuda)");
}

template <typename T>
void adaptive_avg_pool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, const T* dy,
                                  T* dx) {
  check_adaptive(N, C, H, W, OH, OW, "adaptive_avg_pool2d_backward (cuda)");
  const int64_t total = N * C * H * W;
  if (total == 0) return;
  launch_kernel("adaptive_avg_bwd_kernel", adaptive_avg_bwd_kernel<T>, grid_for(total), kThreads, 0, stream(), H, W, OH, OW, dy, dx, total);
  KILN_CUDA_LAUNCH_CHECK("adaptive_avg_pool2d_backward (cuda)");
}

#define KILN_INSTANTIATE_POOL(T)                                                                                 \
  template void max_pool2d_forward<T>(const Pool2dDesc&, const T*, T*, int64_t*);                              \
  template void max_pool2d_backward<T>(const Pool2dDesc&, const T*, const int64_t*, T*);                       \
  template void avg_pool2d_forward<T>(const Pool2dDesc&, bool, const T*, T*);                                  \
  template void avg_pool2d_backward<T>(const Pool2dDesc&, bool, const T*, T*);                                 \
  template void adaptive_avg_pool2d_forward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*,  \
                                               T*);                                                            \
  template void adaptive_avg_pool2d_backward<T>(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const T*, \
                                                T*);
KILN_INSTANTIATE_POOL(float)
KILN_INSTANTIATE_POOL(double)
#undef KILN_INSTANTIATE_POOL

}  // namespace kiln::cuda
