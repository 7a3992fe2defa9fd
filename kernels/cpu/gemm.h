// Dense matrix multiply for the CPU backend: row-major GEMM through OpenBLAS (cblas).
// Used by matmul/linear and by conv2d (im2col + GEMM). Must not allocate, must not touch
// tensors or autograd: raw pointers, leading dimensions and strides only.
#pragma once
#include <cstdint>

namespace kiln::cpu {

// Row-major C = alpha * op(A) * op(B) + beta * C, where op(X) = X or X^T.
//   op(A): (M, K), op(B): (K, N), C: (M, N).
//   A is stored (M, K) with leading dim lda when !trans_a, else (K, M).
//   B is stored (K, N) with leading dim ldb when !trans_b, else (N, K).
// beta == 0 overwrites C (NaNs in C are not propagated). K == 0 gives C = beta * C.
// T is float or double. Throws kiln::Error when a dimension does not fit OpenBLAS's 32-bit ints
// or a leading dimension is too small. Large GEMMs are split over OpenMP threads (kiln's thread
// count, see threads.h); inside an OpenMP parallel region the call runs on the calling thread.
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// `batch` independent GEMMs; matrix i uses A + i*stride_a, B + i*stride_b, C + i*stride_c
// (strides in elements; a stride of 0 broadcasts that operand over the batch, except for C).
// Small or many matrices are spread over threads (one GEMM per thread); otherwise each is split.
template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, int64_t stride_a, const T* B, int64_t ldb, int64_t stride_b, T beta,
                  T* C, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace kiln::cpu
