#include "kernels/cpu/matmul.h"

#include <vector>

#include "engine/core/error.h"
#include "engine/core/half.h"
#include "kernels/cpu/gemm.h"

namespace kiln::cpu {
namespace {

// Copies a strided 16-bit matrix block (rows x cols with leading dim ld) to dense f32.
template <typename H>
void widen(const H* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = (float)src[r * ld + c];
}

template <typename H>
void gemm_half(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const H* A, int64_t lda, int64_t sa,
               const H* B, int64_t ldb, int64_t sb, float beta, H* C, int64_t ldc, int64_t sc, int64_t batch) {
  int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  std::vector<float> a(ar * ac), b(br * bc), c(M * N);
  for (int64_t i = 0; i < batch; ++i) {
    widen(A + i * sa, ar, ac, lda, a.data());
    widen(B + i * sb, br, bc, ldb, b.data());
    H* cp = C + i * sc;
    if (beta != 0.0f) widen(cp, M, N, ldc, c.data());
    gemm<float>(ta, tb, M, N, K, alpha, a.data(), ac, b.data(), bc, beta, c.data(), N);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t q = 0; q < N; ++q) cp[r * ldc + q] = H(c[r * N + q]);
  }
}

}  // namespace

void gemm_strided(DType dt, bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                  int64_t lda, int64_t sa, const void* B, int64_t ldb, int64_t sb, double beta, void* C, int64_t ldc,
                  int64_t sc, int64_t batch) {
  switch (dt) {
    case DType::f32:
      gemm_batched<float>(ta, tb, M, N, K, (float)alpha, (const float*)A, lda, sa, (const float*)B, ldb, sb,
                          (float)beta, (float*)C, ldc, sc, batch);
      break;
    case DType::f64:
      gemm_batched<double>(ta, tb, M, N, K, alpha, (const double*)A, lda, sa, (const double*)B, ldb, sb, beta,
                           (double*)C, ldc, sc, batch);
      break;
    case DType::f16:
      gemm_half<half>(ta, tb, M, N, K, (float)alpha, (const half*)A, lda, sa, (const half*)B, ldb, sb, (float)beta,
                      (half*)C, ldc, sc, batch);
      break;
    case DType::bf16:
      gemm_half<bfloat16>(ta, tb, M, N, K, (float)alpha, (const bfloat16*)A, lda, sa, (const bfloat16*)B, ldb, sb,
                          (float)beta, (bfloat16*)C, ldc, sc, batch);
      break;
    default: throw Error(str_cat("matmul: dtype ", dtype_name(dt), " not supported"));
  }
}

}  // namespace kiln::cpu
