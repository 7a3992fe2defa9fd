// Row-major GEMM over OpenBLAS's cblas (see gemm.h).
#include "kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>

#include "engine/core/error.h"

namespace kiln::cpu {

namespace {

// OpenBLAS (Debian build) takes 32-bit ints.
int to_blas_int(int64_t v, const char* what) {
  KILN_CHECK(v >= 0 && v <= INT_MAX, "gemm: ", what, " = ", v, " does not fit OpenBLAS's 32-bit int");
  return (int)v;
}

// Below this many multiply-adds a GEMM runs on the calling thread (an OpenMP fork costs more).
constexpr double kSmallGemmMacs = 1 << 20;

// Threading: OpenBLAS is kept at one thread and kiln splits each GEMM over OpenMP threads itself.
// Two thread pools on the same cores (OpenMP's spinning workers and OpenBLAS's pthreads) starve
// each other: measured 2-3x slower conv2d on 2 cores than a single pool (bench_conv_cpu).
void blas_single_threaded_once() {
  static const bool done = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

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

// Splits C's columns (or rows, whichever is longer) across OpenMP threads, one BLAS call each.
template <typename T>
void gemm_parallel(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  blas_single_threaded_once();
  int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  double macs = (double)M * (double)N * (double)K;
  if (nt <= 1 || macs < kSmallGemmMacs) {
    gemm_one(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const bool split_n = N >= M;
  const int64_t len = split_n ? N : M, align = split_n ? 16 : 8;
  int64_t chunk = (len + nt - 1) / nt;
  chunk = (chunk + align - 1) / align * align;
  const int64_t parts = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
  for (int64_t t = 0; t < parts; ++t) {
    const int64_t lo = t * chunk, n = std::min(chunk, len - lo);
    if (split_n)  // columns [lo, lo+n) of op(B) and C
      gemm_one(ta, tb, M, n, K, alpha, A, lda, tb ? B + lo * ldb : B + lo, ldb, beta, C + lo, ldc);
    else  // rows [lo, lo+n) of op(A) and C
      gemm_one(ta, tb, n, N, K, alpha, ta ? A + lo : A + lo * lda, lda, B, ldb, beta, C + lo * ldc, ldc);
  }
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  gemm_parallel(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                  int64_t lda, int64_t stride_a, const T* B, int64_t ldb, int64_t stride_b, T beta,
                  T* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  check_args(trans_a, trans_b, M, N, K, lda, ldb, ldc);
  KILN_CHECK(batch >= 0, "gemm_batched: negative batch ", batch);
  blas_single_threaded_once();
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  const double macs = (double)M * (double)N * (double)K;
  // One GEMM per thread when they are small or plentiful; otherwise each GEMM is split.
  if (nt > 1 && batch > 1 && (macs <= kSmallGemmMacs || batch >= 4 * nt)) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < batch; ++i)
      gemm_one(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
               C + i * stride_c, ldc);
  } else {
    for (int64_t i = 0; i < batch; ++i)
      gemm_parallel(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta,
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
