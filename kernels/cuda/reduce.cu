// CUDA row reductions (sum, mean, var, max/min with argmax) over a contiguous (rows, cols) buffer,
// as kernels/cpu/reduce.h: sums accumulate in f64 like the CPU; max/min return the first extreme
// and propagate NaN (the first NaN wins). A warp reduces a row when rows are short, a block when
// they are long. Limitation: one very long row (rows == 1) is reduced by a single block.
#include <math_constants.h>

#include <cfloat>

#include "kernels/cuda/backend.h"
#include "kernels/cuda/launch.cuh"

namespace kiln::cuda {
namespace {

struct Best {  // running max/min: value (as double) and its column
  double v;
  int64_t i;
};

// Is (v, i) a better max/min candidate than b? NaN beats numbers; ties go to the lower column.
__device__ __forceinline__ bool better(double v, int64_t i, const Best& b, bool is_max) {
  const bool vn = v != v, bn = b.v != b.v;
  if (vn || bn) return vn && (!bn || i < b.i);
  if (v != b.v) return is_max ? v > b.v : v < b.v;
  return i < b.i;
}

__device__ __forceinline__ Best shfl_best(const Best& b, int o) {
  return Best{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
}

__device__ __forceinline__ Best warp_best(Best b, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    Best u = shfl_best(b, o);
    if (better(u.v, u.i, b, is_max)) b = u;
  }
  return b;
}

// One row reduced by a group of G threads (G = 32: a warp; G = blockDim.x: the block). `lane` is
// the thread's index in the group. Results are written by lane 0.
template <typename T, bool BLOCK>
__device__ void reduce_row(ReduceOp op, const T* p, int64_t cols, int lane, int G, T* out, int64_t* idx,
                           double* scratch, Best* bscratch) {
  auto sum = [&](double v) { return BLOCK ? block_sum(v, scratch) : warp_sum(v); };
  if (op == ReduceOp::max || op == ReduceOp::min) {
    const bool is_max = op == ReduceOp::max;
    Best b{0.0, INT64_MAX};
    for (int64_t c = lane; c < cols; c += G) {
      double v = (double)(typename Compute<T>::type)p[c];
      if (better(v, c, b, is_max)) b = Best{v, c};
    }
    b = warp_best(b, is_max);
    if (BLOCK) {
      const int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
      __syncthreads();
      if ((threadIdx.x & 31) == 0) bscratch[w] = b;
      __syncthreads();
      b = (threadIdx.x & 31) < nw ? bscratch[threadIdx.x & 31] : Best{0.0, INT64_MAX};
      b = warp_best(b, is_max);
    }
    if (lane == 0 && cols > 0) {
      *out = p[b.i];
      if (idx) *idx = b.i;
    }
    return;
  }
  double acc = 0;
  for (int64_t c = lane; c < cols; c += G) acc += (double)(typename Compute<T>::type)p[c];
  acc = sum(acc);
  if (op == ReduceOp::sum || op == ReduceOp::mean) {
    if (lane == 0) *out = T((typename Compute<T>::type)(op == ReduceOp::mean ? acc / (double)cols : acc));
    return;
  }
  const double m = acc / (double)cols;
  double s = 0;
  for (int64_t c = lane; c < cols; c += G) {
    double d = (double)(typename Compute<T>::type)p[c] - m;
    s += d * d;
  }
  s = sum(s);
  const double den = op == ReduceOp::var_unbiased ? (double)(cols - 1) : (double)cols;
  if (lane == 0) *out = T((typename Compute<T>::type)(den > 0 ? s / den : CUDART_NAN));
}

template <typename T>
__global__ void reduce_warp_rows(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps exit together: no block-level sync in the warp path
  reduce_row<T, false>(op, x + r * cols, cols, threadIdx.x & 31, 32, out + r, idx ? idx + r : nullptr, nullptr,
                       nullptr);
}

template <typename T>
__global__ void reduce_block_rows(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  __shared__ double scratch[32];
  __shared__ Best bscratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    reduce_row<T, true>(op, x + r * cols, cols, threadIdx.x, blockDim.x, out + r, idx ? idx + r : nullptr, scratch,
                        bscratch);
}

template <typename T>
void reduce_t(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  if (cols <= 4096) {
    const int warps = kThreads / 32;
    reduce_warp_rows<T><<<(unsigned)((rows + warps - 1) / warps), kThreads, 0, stream()>>>(op, x, rows, cols, out, idx);
  } else {
    unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    reduce_block_rows<T><<<blocks, 1024, 0, stream()>>>(op, x, rows, cols, out, idx);
  }
}

}  // namespace

void reduce_rows(ReduceOp op, DType dt, const void* x, int64_t rows, int64_t cols, void* out, int64_t* idx) {
  if (rows == 0) return;
  switch (dt) {
    case DType::f32: reduce_t(op, (const float*)x, rows, cols, (float*)out, idx); break;
    case DType::f64: reduce_t(op, (const double*)x, rows, cols, (double*)out, idx); break;
    case DType::f16: reduce_t(op, (const half*)x, rows, cols, (half*)out, idx); break;
    case DType::bf16: reduce_t(op, (const bfloat16*)x, rows, cols, (bfloat16*)out, idx); break;
    default: throw Error(str_cat("reduce: dtype ", dtype_name(dt), " not supported on cuda"));
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("reduce_rows op ", (int)op, " ", dtype_name(dt), " (", rows, ", ", cols, ")"));
}

}  // namespace kiln::cuda
