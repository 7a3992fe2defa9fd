// kiln's own FP16 Tensor Core GEMM (the `--kernels kiln` alternative to cublasGemmEx):
// C = alpha * op(A) op(B) + beta * C, row-major, f16 inputs, f32 accumulation, f16 or f32 C.
// Runs on sm_80 and later (mma.sync m16n8k16, ldmatrix, cp.async pipeline; kernels/cuda/hgemm_tile.h).
// Any M, N, K >= 0 (ragged edges predicated); 16-byte vector copies are used when a matrix's row
// stride is a multiple of 8 halves and its pointer is 16-byte aligned, element copies otherwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "engine/core/dtype.h"

namespace kiln::cuda {

// op(A) is M x K: A stored M x K (lda >= K), or K x M when trans_a (lda >= M).
// op(B) is K x N: B stored K x N (ldb >= N), or N x K when trans_b (ldb >= K).
// C: M x N, ldc >= N, dtype f16 or f32. A, B: f16 device pointers. Throws kiln::Error on bad
// arguments, a device below sm_80, or a CUDA failure.
void hgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int64_t lda,
           const void* B, int64_t ldb, float beta, void* C, int64_t ldc, DType c_dtype, cudaStream_t stream);

}  // namespace kiln::cuda
