// dtype-dispatching batched GEMM for the op layer: f32/f64 through OpenBLAS, f16/bf16 computed
// in f32 and rounded on store (kiln's CPU rule for 16-bit types).
#pragma once
#include <cstdint>

#include "engine/core/dtype.h"

namespace kiln::cpu {

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], row-major, for b < batch.
void gemm_strided(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                  int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, double beta, void* C,
                  int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace kiln::cpu
