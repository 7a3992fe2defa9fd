// CUDA softmax / log_softmax over the last dim of a contiguous (rows, cols) buffer, forward and
// backward, as kernels/cpu/softmax.h: max-subtracted, row sums in f64, a NaN anywhere in a row
// makes the whole row NaN. Geometry: a warp per row when cols <= 1024 (classification heads), a
// block of 512 threads per row otherwise; rows are grid-strided, and every thread of a group runs
// the same rows so the warp/block reductions are uniform.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {
namespace {

constexpr int kRowBlockThreads = 512;
constexpr int64_t kWarpRowMaxCols = 1024;

// Max that keeps NaN (unlike fmax): NaN wins whichever side it is on.
template <typename T>
__device__ __forceinline__ T nan_max(T a, T b) {
  return (b != b || b > a) ? b : a;
}

// Sum / NaN-max over the group that owns a row: a warp, or the whole block. `scratch` is the
// block's shared scratch (32 entries), unused for warps.
template <bool BLOCK>
__device__ __forceinline__ double group_sum(double v, double* scratch) {
  return BLOCK ? block_sum(v, scratch) : warp_sum(v);
}
template <bool BLOCK, typename T>
__device__ __forceinline__ T group_max(T v, T* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (!BLOCK) return v;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : (T)-INFINITY;
  for (int o = 16; o > 0; o >>= 1) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Row indexing of a group: first row, row stride, lane within the group, group size.
template <bool BLOCK>
struct RowGroup {
  int64_t first, step;
  int lane, size;
  __device__ RowGroup() {
    if (BLOCK) {
      first = blockIdx.x, step = gridDim.x, lane = threadIdx.x, size = blockDim.x;
    } else {
      const int wpb = blockDim.x >> 5;
      first = (int64_t)blockIdx.x * wpb + (threadIdx.x >> 5), step = (int64_t)gridDim.x * wpb;
      lane = threadIdx.x & 31, size = 32;
    }
  }
};

template <typename T, bool BLOCK, bool LOG>
__global__ void KILN_KERNEL_BOUNDS(kRowBlockThreads) softmax_fwd_kernel(int64_t rows, int64_t cols, const T* __restrict__ x, T* __restrict__ y) {
  KILN_SHARED(double, dscratch, 32);
  KILN_SHARED(T, tscratch, 32);
  const RowGroup<BLOCK> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T m = (T)-INFINITY;
    for (int64_t j = g.lane; j < cols; j += g.size) m = nan_max(m, xr[j]);
    m = group_max<BLOCK>(m, tscratch);
    double s = 0;
    for (int64_t j = g.lane; j < cols; j += g.size) s += (double)exp(xr[j] - m);
    s = group_sum<BLOCK>(s, dscratch);
    if (LOG) {
      const T lse = m + (T)log(s);
      for (int64_t j = g.lane; j < cols; j += g.size) yr[j] = xr[j] - lse;
    } else {
      const T inv = (T)(1.0 / s);
      for (int64_t j = g.lane; j < cols; j += g.size) yr[j] = exp(xr[j] - m) * inv;
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
template <typename T, bool BLOCK, bool LOG>
__global__ void KILN_KERNEL_BOUNDS(kRowBlockThreads) softmax_bwd_kernel(int64_t rows, int64_t cols, const T* __restrict__ y, const T* __restrict__ dy,
                                   T* __restrict__ dx) {
  KILN_SHARED(double, dscratch, 32);
  const RowGroup<BLOCK> g;
  for (int64_t r = g.first; r < rows; r += g.step) {
    const T* yr = y + r * cols;
    const T* gr = dy + r * cols;
    T* o = dx + r * cols;
    double s = 0;
    for (int64_t j = g.lane; j < cols; j += g.size) s += LOG ? (double)gr[j] : (double)gr[j] * (double)yr[j];
    const T d = (T)group_sum<BLOCK>(s, dscratch);
    for (int64_t j = g.lane; j < cols; j += g.size) o[j] = LOG ? gr[j] - exp(yr[j]) * d : yr[j] * (gr[j] - d);
  }
}

void check(int64_t rows, int64_t cols, const char* op) {
  KILN_CHECK(rows >= 0 && cols >= 1, op, ": bad sizes (rows ", rows, ", cols ", cols, ")");
}

template <typename T, bool LOG>
void launch_fwd(int64_t rows, int64_t cols, const T* x, T* y, const char* op) {
  check(rows, cols, op);
  if (rows == 0) return;
  if (cols <= kWarpRowMaxCols) {
    launch_kernel("softmax_fwd_kernel", softmax_fwd_kernel<T, false, LOG>, grid_for(rows * 32), kThreads, 0, stream(), rows, cols, x, y);
  } else {
    launch_kernel("softmax_fwd_kernel", softmax_fwd_kernel<T, true, LOG>, grid_for(rows, 1), kRowBlockThreads, 0, stream(), rows, cols, x, y);
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) rows ", rows, ", cols ", cols));
}

template <typename T, bool LOG>
void launch_bwd(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx, const char* op) {
  check(rows, cols, op);
  if (rows == 0) return;
  if (cols <= kWarpRowMaxCols) {
    launch_kernel("softmax_bwd_kernel", softmax_bwd_kernel<T, false, LOG>, grid_for(rows * 32), kThreads, 0, stream(), rows, cols, y, dy, dx);
  } else {
    launch_kernel("softmax_bwd_kernel", softmax_bwd_kernel<T, true, LOG>, grid_for(rows, 1), kRowBlockThreads, 0, stream(), rows, cols, y, dy, dx);
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat(op, " (cuda) rows ", rows, ", cols ", cols));
}

}  // namespace

template <typename T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  launch_fwd<T, false>(rows, cols, x, y, "softmax_forward");
}
template <typename T>
void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y) {
  launch_fwd<T, true>(rows, cols, x, y, "log_softmax_forward");
}
template <typename T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  launch_bwd<T, false>(rows, cols, y, dy, dx, "softmax_backward");
}
template <typename T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx) {
  launch_bwd<T, true>(rows, cols, y, dy, dx, "log_softmax_backward");
}

#define KILN_INSTANTIATE_SOFTMAX(T)                                                 \
  template void softmax_forward<T>(int64_t, int64_t, const T*, T*);                \
  template void log_softmax_forward<T>(int64_t, int64_t, const T*, T*);            \
  template void softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);     \
  template void log_softmax_backward<T>(int64_t, int64_t, const T*, const T*, T*);
KILN_INSTANTIATE_SOFTMAX(float)
KILN_INSTANTIATE_SOFTMAX(double)
#undef KILN_INSTANTIATE_SOFTMAX

}  // namespace kiln::cuda
