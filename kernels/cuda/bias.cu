// kiln's per-channel bias kernels on the GPU (kernels/common/api/bias.inc), used under `--kernels kiln`
// for the conv bias (kernels/cuda/conv2d.cpp's f32/f64 passes, engine/ops/nn_conv.cpp's 16-bit path)
// instead of cuDNN's cudnnAddTensor / cudnnConvolutionBackwardBias. A tensor is (outer, K, inner)
// (kernels/common/bias_math.h: index math and chunking, shared with the CPU twin kernels/cpu/bias.cpp).
//   bias_add_kernel: grid-stride, y += b[k] in the compute type (f32 for 16-bit).
//   bias_grad: a grid-wide reduction in two launches. bias_grad_chunks: one block per (channel, chunk)
//   sums its chunk (f32 accumulation; f64 for f64) with a block tree; with one chunk per channel it
//   stores db[k] itself, else a partial sum into a scratch buffer (<= kKernelScratchMax) that
//   bias_grad_finish (one block per channel) adds up and rounds to the data type.
// Not tuned: with inner == 1 (channels-last, linear) a block's reads stride by K (uncoalesced); never
// timed on a GPU. Launch geometry and data movement only; the scratch comes from kiln's allocator.
#include "kernels/common/bias_math.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/workspace.h"

namespace kiln::cuda {
namespace {

namespace bm = kiln::bias_math;

// y: (outer, K, inner) = total elements, b: (K).
template <typename T>
__global__ void KILN_KERNEL_BOUNDS(kThreads) bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t total,
                                                             int64_t K, int64_t inner) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t k = (i / inner) % K;
    st(y + i, ld(y + i) + ld(b + k));
  }
}

// Block `c` of channel k (c < chunks) sums the channel's elements [c * chunk_len, min(count, ...)).
// chunks == 1: db[k] = the sum (rounded to T); else parts[k * chunks + c] = the sum (type A).
template <typename T, typename A>
__global__ void KILN_KERNEL_BOUNDS(kThreads) bias_grad_chunks(const T* __restrict__ dy, int64_t K, int64_t inner,
                                                              int64_t count, int64_t chunks, int64_t chunk_len,
                                                              A* __restrict__ parts, T* __restrict__ db) {
  KILN_SHARED(A, scratch, 32);
  for (int64_t blk = blockIdx.x; blk < K * chunks; blk += gridDim.x) {
    const int64_t k = blk / chunks, c = blk - k * chunks;
    const int64_t j0 = c * chunk_len, j1 = j0 + chunk_len < count ? j0 + chunk_len : count;
    A acc = A(0);
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) acc += (A)ld(dy + bm::elem_offset(j, k, K, inner));
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
      if (chunks == 1) db[k] = T(acc);
      else parts[blk] = acc;
    }
  }
}

// db[k] = sum of parts[k * chunks .. k * chunks + chunks), rounded to T.
template <typename T, typename A>
__global__ void KILN_KERNEL_BOUNDS(kThreads) bias_grad_finish(const A* __restrict__ parts, int64_t K, int64_t chunks,
                                                              T* __restrict__ db) {
  KILN_SHARED(A, scratch, 32);
  for (int64_t k = blockIdx.x; k < K; k += gridDim.x) {
    A acc = A(0);
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) acc += parts[k * chunks + c];
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) db[k] = T(acc);
  }
}

unsigned blocks_for(int64_t n) { return (unsigned)(n < 65535 ? (n < 1 ? 1 : n) : 65535); }

template <typename T>
void add_t(int64_t outer, int64_t K, int64_t inner, T* y, const T* b) {
  const int64_t total = outer * K * inner;
  if (total == 0) return;
  launch_kernel("bias_add_kernel", bias_add_kernel<T>, grid_for(total), kThreads, 0, stream(), y, b, total, K, inner);
}

template <typename T>
void grad_t(int64_t outer, int64_t K, int64_t inner, const T* dy, T* db) {
  using A = typename Compute<T>::type;  // f32, f64 for f64
  if (K == 0) return;
  const int64_t count = outer * inner;
  const bm::ChunkPlan p = bm::chunk_plan(K, count, (int64_t)sizeof(A));
  if (p.chunks == 1) {
    launch_kernel("bias_grad_chunks", bias_grad_chunks<T, A>, blocks_for(K), kThreads, 0, stream(), dy, K, inner, count,
                  int64_t(1), count, (A*)nullptr, db);
    return;
  }
  Workspace ws(current_device(), sizeof(A) * (size_t)(K * p.chunks));  // <= kKernelScratchMax (chunk_plan)
  A* parts = static_cast<A*>(ws.get());
  launch_kernel("bias_grad_chunks", bias_grad_chunks<T, A>, blocks_for(K * p.chunks), kThreads, 0, stream(), dy, K,
                inner, count, p.chunks, p.chunk_len, parts, db);
  launch_kernel("bias_grad_finish", bias_grad_finish<T, A>, blocks_for(K), kThreads, 0, stream(), (const A*)parts, K,
                p.chunks, db);
}

void check_args(const char* op, DType dt, int64_t outer, int64_t K, int64_t inner) {
  KILN_CHECK(outer >= 0 && K >= 0 && inner >= 0, op, " on cuda: negative size (outer ", outer, ", K ", K, ", inner ",
             inner, ")");
  KILN_CHECK(dt == DType::f16 || dt == DType::bf16 || dt == DType::f32 || dt == DType::f64, op, " on cuda: dtype ",
             dtype_name(dt), " not supported (f16, bf16, f32, f64)");
}

}  // namespace

void bias_add(DType dt, int64_t outer, int64_t K, int64_t inner, void* y, const void* b) {
  check_args("bias_add", dt, outer, K, inner);
  switch (dt) {
    case DType::f16: add_t(outer, K, inner, (half*)y, (const half*)b); break;
    case DType::bf16: add_t(outer, K, inner, (bfloat16*)y, (const bfloat16*)b); break;
    case DType::f32: add_t(outer, K, inner, (float*)y, (const float*)b); break;
    default: add_t(outer, K, inner, (double*)y, (const double*)b); break;
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("bias_add ", dtype_name(dt), " (", outer, ", ", K, ", ", inner, ")"));
}

void bias_grad(DType dt, int64_t outer, int64_t K, int64_t inner, const void* dy, void* db) {
  check_args("bias_grad", dt, outer, K, inner);
  switch (dt) {
    case DType::f16: grad_t(outer, K, inner, (const half*)dy, (half*)db); break;
    case DType::bf16: grad_t(outer, K, inner, (const bfloat16*)dy, (bfloat16*)db); break;
    case DType::f32: grad_t(outer, K, inner, (const float*)dy, (float*)db); break;
    default: grad_t(outer, K, inner, (const double*)dy, (double*)db); break;
  }
  KILN_CUDA_LAUNCH_CHECK(str_cat("bias_grad ", dtype_name(dt), " (", outer, ", ", K, ", ", inner, ")"));
}

}  // namespace kiln::cuda
