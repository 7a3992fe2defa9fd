// Row-major GEMM over OpenBLAS's cblas (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>

#include <climits>

#include "engine/core/error.h"

namespace kiln::cpu {

namespace {

// OpenBLAS (Debian build) takes 32-bit ints.
int to_blas_int(int64_t v, const char* what) {
  KILN_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " does not fit OpenBLAS's 32-bit int");
  return (int)v;
}

// OpenBLAS runs a GEMM of at most this many multiply-adds on the calling thread alone, so several
// of them may run concurrently from OpenMP threads without fighting over its thread pool.
constexpr double kSmallGemmMacs = 262144.0;

template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

void check_args(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, int64_t lda,
                int64_t ldb, int64_t ldc) {
  KILN_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M=", M, " N=", N, " K=", K);
  int64_t a_cols = trans_a ? M : K, b_cols = trans_b ? K : N;
  KILN_CHECK(lda >= (a_cols > 1 ? a_cols : 1), "gemm: lda=", lda, " < ", a_cols, " (M=", M, " K=", K,
             trans_a ? ", A transposed)" : ")");
  KILN_CHECK(ldb >= (b_cols > 1 ? b_cols : 1), "gemm: ldb=", ldb, " < ", b_cols, " (K=", K, " N=", N,
             trans_b ? ", B transposed)" : ")");
  KILN_CHECK(ldc >= (N > 1 ? N : 1), "gemm: ldc=", ldc, " < N=", N);
}

void blas_call(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
               const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}
void blas_call(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
               const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
              alpha, A, lda, B, ldb, beta, C, ldc);
}

// One GEMM after validation; handles the degenerate sizes OpenBLAS would reject or mis-handle.
template <typename T>
void gemm_one(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
              const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == T(0)) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  blas_call(ta, tb, to_blas_int(M, "M"), to_blas_int(N, "N"), to_blas_int(K, "K"), alpha, A,
            to_blas_int(lda, "lda"), B, to_blas_int(ldb, "ldb"), beta, C, to_blas_int(ldc, "ldc"));
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  gemm_one(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, int64_t stride_a, const T* B, int64_t ldb, int64_t stride_b, T beta,
                  T* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  KILN_CHECK(batch >= 0, "gemm_batched: negative batch ", batch);
  double macs = (double)M * (double)N * (double)K;
  if (batch > 1 && macs <= kSmallGemmMacs) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < batch; ++i)
      gemm_one(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
               C + i * stride_c, ldc);
  } else {
    for (int64_t i = 0; i < batch; ++i)
      gemm_one(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
               C + i * stride_c, ldc);
  }
}

#define KILN_INSTANTIATE_GEMM(T)                                                                    \
  template void gemm<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*,     \
                        int64_t, T, T*, int64_t);                                                   \
  template void gemm_batched<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t,       \
                                int64_t, const T*, int64_t, int64_t, T, T*, int64_t, int64_t,       \
                                int64_t);
KILN_INSTANTIATE_GEMM(float)
KILN_INSTANTIATE_GEMM(double)
#undef KILN_INSTANTIATE_GEMM

}  // namespace kiln::cpu
