// CUDA row reductions (sum, mean, var, max/min with argmax) over a contiguous (rows, cols) buffer,
// as kernels/cpu/reduce.h: sums accumulate in f64 like the CPU; max/min return the first extreme
// and propagate NaN (the first NaN wins). A warp reduces a row when rows are short, a block when
// they are long; a few long rows (rows == 1: a full-tensor sum or max) are cut into chunks reduced by
// the whole grid, then combined per row (two launches, the grid-wide path below).
// The combine rule and the tree (which lane folds which column, the butterfly, the block's second
// level, the empty value) come from kernels/common/reduce_tree.h and are tested on the CPU there;
// this file holds only the shuffles, shared memory and launch geometry.
#include <math_constants.h>

#include "kernels/common/reduce_tree.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/workspace.h"
#include "kernels/common/workspace_limit.h"

namespace kiln::cuda {
namespace {

namespace rt = kiln::reduce_tree;
using rt::ArgBest;

__device__ __forceinline__ ArgBest shfl_best(const ArgBest& b, int o) {
  return ArgBest{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
}

__device__ __forceinline__ ArgBest warp_best(ArgBest b, bool is_max) {
  for (int o = rt::butterfly_first_offset(); o > 0; o = rt::butterfly_next_offset(o))
    b = rt::arg_combine(b, shfl_best(b, o), is_max);  // the partner is lane ^ o (rt::butterfly_partner)
  return b;
}

__device__ __forceinline__ double warp_sum_tree(double v) {
  for (int o = rt::butterfly_first_offset(); o > 0; o = rt::butterfly_next_offset(o))
    v = rt::sum_combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's second level (blockDim.x a multiple of 32, <= 1024): warp w's lane 0 writes slot w,
// then every warp reduces the slots again (lanes past the warp count take the empty value).
__device__ __forceinline__ double block_sum_tree(double v, double* scratch) {
  const int lane = rt::lane_of(threadIdx.x), w = rt::warp_of(threadIdx.x), nw = rt::warps_in_block(blockDim.x);
  v = warp_sum_tree(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[w] = v;
  __syncthreads();
  v = rt::block_slot_read(lane, nw) ? scratch[lane] : 0.0;
  return warp_sum_tree(v);
}

__device__ __forceinline__ ArgBest block_best(ArgBest b, bool is_max, ArgBest* scratch) {
  const int lane = rt::lane_of(threadIdx.x), w = rt::warp_of(threadIdx.x), nw = rt::warps_in_block(blockDim.x);
  b = warp_best(b, is_max);
  __syncthreads();
  if (lane == 0) scratch[w] = b;
  __syncthreads();
  b = rt::block_slot_read(lane, nw) ? scratch[lane] : rt::arg_empty();
  return warp_best(b, is_max);
}

// One row reduced by a group of G threads (G = 32: a warp; G = blockDim.x: the block). `lane` is
// the thread's index in the group. Results are written by lane 0.
template <typename T, bool BLOCK>
__device__ void reduce_row(ReduceOp op, const T* p, int64_t cols, int lane, int G, T* out, int64_t* idx,
                           double* scratch, ArgBest* bscratch) {
  auto sum = [&](double v) { return BLOCK ? block_sum_tree(v, scratch) : warp_sum_tree(v); };
  const int64_t c0 = rt::thread_first_col(lane), step = rt::thread_col_step(G);
  if (op == ReduceOp::max || op == ReduceOp::min) {
    const bool is_max = op == ReduceOp::max;
    ArgBest b = rt::arg_empty();
    for (int64_t c = c0; c < cols; c += step) b = rt::arg_fold(b, (double)(typename Compute<T>::type)p[c], c, is_max);
    b = BLOCK ? block_best(b, is_max, bscratch) : warp_best(b, is_max);
    const int64_t rc = rt::result_col(b, cols);
    if (lane == 0 && rc >= 0) {  // an empty result (cols == 0) is never read
      *out = p[rc];
      if (idx) *idx = rc;
    }
    return;
  }
  double acc = 0;
  for (int64_t c = c0; c < cols; c += step) acc += (double)(typename Compute<T>::type)p[c];
  acc = sum(acc);
  if (op == ReduceOp::sum || op == ReduceOp::mean) {
    if (lane == 0) *out = T((typename Compute<T>::type)(op == ReduceOp::mean ? acc / (double)cols : acc));
    return;
  }
  const double m = acc / (double)cols;
  double s = 0;
  for (int64_t c = c0; c < cols; c += step) {
    double d = (double)(typename Compute<T>::type)p[c] - m;
    s += d * d;
  }
  s = sum(s);
  const double den = op == ReduceOp::var_unbiased ? (double)(cols - 1) : (double)cols;
  if (lane == 0) *out = T((typename Compute<T>::type)(den > 0 ? s / den : CUDART_NAN));
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) reduce_warp_rows(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  const int64_t r = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (r >= rows) return;  // whole warps exit together: no block-level sync in the warp path
  reduce_row<T, false>(op, x + r * cols, cols, threadIdx.x & 31, 32, out + r, idx ? idx + r : nullptr, nullptr,
                       nullptr);
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(rt::kBlockRowThreads) reduce_block_rows(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  KILN_SHARED(double, scratch, 32);
  KILN_SHARED(ArgBest, bscratch, 32);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x)
    reduce_row<T, true>(op, x + r * cols, cols, threadIdx.x, blockDim.x, out + r, idx ? idx + r : nullptr, scratch,
                        bscratch);
}

// ---- grid-wide path: few long rows (rows == 1 is a full-tensor sum or max) ----
// One block per row would leave all but `rows` SMs idle (and the AMP found-inf check and every
// full-tensor reduction ran in a single block), so each row is cut into chunks: pass 1 reduces one
// (row, chunk) per block into a ChunkPartial, pass 2 (one block per row) combines the row's chunks
// in a fixed order. Two launches and no inter-block waiting, so it is deterministic and runs in the
// CPU mode (blocks one after another). max/min carry absolute columns, so the first extreme and the
// first NaN win as in one pass. var: each chunk's own mean and M2, combined with the row's mean
// (Chan et al.): M2 = sum_k m2_k + n_k (mean_k - mean)^2.
struct ChunkPartial {
  double sum;      // sum of the chunk's values
  double m2;       // var only: sum of (x - chunk mean)^2
  ArgBest best;    // max/min only: the chunk's first extreme (absolute column)
};

constexpr int64_t kChunkMinCols = 8 * rt::kBlockRowThreads;  // each thread of pass 1 reads >= 8 values
constexpr int64_t kMaxChunkParts = 132 * 32;                  // as grid_for's cap: the GPU filled a few times

struct ChunkPlan {
  int64_t chunks = 1, chunk_len = 0;
};

// Split when the block-per-row path would launch too few blocks to fill the GPU.
inline ChunkPlan chunk_plan(int64_t rows, int64_t cols) {
  ChunkPlan p;
  p.chunk_len = cols;
  if (!rt::use_block_rows(cols) || rows >= 2 * 132) return p;
  int64_t chunks = (cols + kChunkMinCols - 1) / kChunkMinCols;
  const int64_t most = kMaxChunkParts / rows;
  if (chunks > most) chunks = most;
  if (chunks < 2) return p;
  p.chunk_len = (cols + chunks - 1) / chunks;
  p.chunks = (cols + p.chunk_len - 1) / p.chunk_len;  // no empty chunk
  return p;
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(rt::kBlockRowThreads) reduce_row_chunks(ReduceOp op, const T* x, int64_t rows, int64_t cols,
                                                                  int64_t chunks, int64_t chunk_len, ChunkPartial* parts) {
  KILN_SHARED(double, scratch, 32);
  KILN_SHARED(ArgBest, bscratch, 32);
  for (int64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
    const int64_t r = b / chunks, k = b % chunks;
    const int64_t c0 = k * chunk_len, c1 = c0 + chunk_len < cols ? c0 + chunk_len : cols;
    const T* p = x + r * cols;
    ChunkPartial out{0.0, 0.0, rt::arg_empty()};
    if (op == ReduceOp::max || op == ReduceOp::min) {
      const bool is_max = op == ReduceOp::max;
      ArgBest best = rt::arg_empty();
      for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x)
        best = rt::arg_fold(best, (double)(typename Compute<T>::type)p[c], c, is_max);
      out.best = block_best(best, is_max, bscratch);
    } else {
      double acc = 0;
      for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) acc += (double)(typename Compute<T>::type)p[c];
      out.sum = block_sum_tree(acc, scratch);
      if (op == ReduceOp::var || op == ReduceOp::var_unbiased) {
        const double m = out.sum / (double)(c1 - c0);
        double q = 0;
        for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
          const double d = (double)(typename Compute<T>::type)p[c] - m;
          q += d * d;
        }
        out.m2 = block_sum_tree(q, scratch);
      }
    }
    if (threadIdx.x == 0) parts[b] = out;
  }
}

template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) reduce_chunks_finish(ReduceOp op, const T* x, const ChunkPartial* parts, int64_t rows, int64_t cols,
                                                       int64_t chunks, int64_t chunk_len, T* out, int64_t* idx) {
  KILN_SHARED(double, scratch, 32);
  KILN_SHARED(ArgBest, bscratch, 32);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const ChunkPartial* pr = parts + r * chunks;
    if (op == ReduceOp::max || op == ReduceOp::min) {
      const bool is_max = op == ReduceOp::max;
      ArgBest best = rt::arg_empty();
      for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) best = rt::arg_combine(best, pr[k].best, is_max);
      best = block_best(best, is_max, bscratch);
      const int64_t rc = rt::result_col(best, cols);
      if (threadIdx.x == 0 && rc >= 0) {
        out[r] = x[r * cols + rc];
        if (idx) idx[r] = rc;
      }
      continue;
    }
    double s = 0;
    for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) s += pr[k].sum;
    s = block_sum_tree(s, scratch);
    if (op == ReduceOp::sum || op == ReduceOp::mean) {
      if (threadIdx.x == 0) out[r] = T((typename Compute<T>::type)(op == ReduceOp::mean ? s / (double)cols : s));
      continue;
    }
    const double m = s / (double)cols;
    double q = 0;
    for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) {
      const int64_t n = (k + 1) * chunk_len < cols ? chunk_len : cols - k * chunk_len;
      const double d = pr[k].sum / (double)n - m;
      q += pr[k].m2 + (double)n * d * d;
    }
    q = block_sum_tree(q, scratch);
    const double den = op == ReduceOp::var_unbiased ? (double)(cols - 1) : (double)cols;
    if (threadIdx.x == 0) out[r] = T((typename Compute<T>::type)(den > 0 ? q / den : CUDART_NAN));
  }
}

template <typename T>
void reduce_t(ReduceOp op, const T* x, int64_t rows, int64_t cols, T* out, int64_t* idx) {
  if (!rt::use_block_rows(cols)) {
    const int warps = kThreads / rt::kWarp;
    launch_kernel("reduce_warp_rows", reduce_warp_rows<T>, (unsigned)((rows + warps - 1) / warps), kThreads, 0, stream(), op, x, rows, cols, out, idx);
  } else if (const ChunkPlan cp = chunk_plan(rows, cols); cp.chunks > 1) {
    static_assert(sizeof(ChunkPartial) * kMaxChunkParts <= kKernelScratchMax, "reduce partials: raise the bound");
    Workspace ws(current_device(), sizeof(ChunkPartial) * (size_t)(rows * cp.chunks));
    ChunkPartial* parts = static_cast<ChunkPartial*>(ws.get());
    launch_kernel("reduce_row_chunks", reduce_row_chunks<T>, (unsigned)(rows * cp.chunks), rt::kBlockRowThreads, 0, stream(), op, x,
                  rows, cols, cp.chunks, cp.chunk_len, parts);
    launch_kernel("reduce_chunks_finish", reduce_chunks_finish<T>, (unsigned)rows, kThreads, 0, stream(), op, x, parts, rows, cols,
                  cp.chunks, cp.chunk_len, out, idx);
  } else {
    unsigned blocks = (unsigned)(rows < 65535 ? rows : 65535);
    launch_kernel("reduce_block_rows", reduce_block_rows<T>, blocks, rt::kBlockRowThreads, 0, stream(), op, x, rows, cols, out, idx);
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
