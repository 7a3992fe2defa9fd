// kiln's FP16 Tensor Core GEMM (kernels/cuda/hgemm.cu + hgemm_tile.h: cp.async pipeline, ldmatrix,
// mma.sync m16n8k16) run in the CPU execution mode, its PTX by the ISA's tables (ptx_host.h), against
// an f64 reference on the same f16 inputs: every transpose pair, f16 and f32 outputs, M, N or K = 0,
// sizes off the 128x128x32 tile and the k16 step, unaligned leading dimensions (the element-copy
// path), and f16 overflow chosen far from the edge (results >= 2 x 65504), so order cannot decide it.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/core/half.h"
#include "cuda_cpu/adversarial.h"
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/hgemm.h"

namespace gpu = kiln::cuda_on_cpu;
using kiln::DType;
using kiln::half;

namespace {

// C (M x N, ldc) = alpha op(A) op(B) + beta C in f64 from the f16 values; `mag` gets sum |a b|.
void reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const std::vector<half>& A, int64_t lda,
               const std::vector<half>& B, int64_t ldb, double beta, std::vector<double>& C, int64_t ldc,
               std::vector<double>& mag) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, a_abs = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = (float)A[(size_t)(ta ? k * lda + m : m * lda + k)];
        const double b = (float)B[(size_t)(tb ? n * ldb + k : k * ldb + n)];
        s += a * b;
        a_abs += std::fabs(a * b);
      }
      double& c = C[(size_t)(m * ldc + n)];
      c = alpha * s + (beta != 0 ? beta * c : 0.0);
      mag[(size_t)(m * ldc + n)] = std::fabs(alpha) * a_abs + std::fabs(beta * c);
    }
}

template <typename OutT>
int gemm_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad, float alpha, float beta, uint64_t seed,
              double fill = 0.0) {
  const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  const int64_t arows = ta ? K : M, brows = tb ? N : K;
  std::vector<half> A((size_t)(arows * lda + 1)), B((size_t)(brows * ldb + 1));
  const std::vector<float> av = kiln_test::moderate<float>(A.size(), seed, 1.0), bv = kiln_test::moderate<float>(B.size(), seed + 1, 1.0);
  for (size_t i = 0; i < A.size(); ++i) A[i] = half(fill != 0 ? (float)fill : av[i]);
  for (size_t i = 0; i < B.size(); ++i) B[i] = half(fill != 0 ? (float)fill : bv[i]);
  const std::vector<float> cv = kiln_test::moderate<float>((size_t)(M * ldc + 1), seed + 2, 1.0);
  std::vector<OutT> C(cv.size());
  std::vector<double> R(cv.size()), mag(cv.size(), 0.0);
  for (size_t i = 0; i < C.size(); ++i) C[i] = OutT(cv[i]), R[i] = (double)(float)C[i];
  gpu::hgemm(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc,
             sizeof(OutT) == 2 ? DType::f16 : DType::f32, nullptr);
  reference(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc, mag);
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const size_t i = (size_t)(m * ldc + n);
      const double got = (float)C[i], want = R[i];
      double tol = 1e-5 * mag[i] + 1e-6;
      if (sizeof(OutT) == 2) {
        if (std::fabs(want) >= 2 * 65504.0) {  // far past the f16 range: inf, whatever the order
          if (got != (want > 0 ? INFINITY : -INFINITY) && ++bad <= 3) MESSAGE("expected inf at ", m, ",", n, ": ", got);
          continue;
        }
        tol += std::fabs(want) * 1e-3;  // one f16 rounding of the output
      }
      if (!(std::fabs(got - want) <= tol) && ++bad <= 3)
        MESSAGE("hgemm ", ta ? "T" : "N", tb ? "T" : "N", " M ", M, " N ", N, " K ", K, " at (", m, ", ", n, "): ", got,
                " vs ", want);
    }
  // Padding columns of C are not touched.
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = N; n < ldc; ++n)
      if ((float)C[(size_t)(m * ldc + n)] != (float)OutT(cv[(size_t)(m * ldc + n)])) ++bad;
  return bad;
}

}  // namespace

TEST_CASE("CPU mode: Tensor Core hgemm (cp.async, ldmatrix, mma.sync) against an f64 reference") {
  const int64_t launches = gpu::run_stats().launches;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CHECK(gemm_case<float>(ta, tb, 17, 9, 33, 0, 1.f, 0.f, 1) == 0);
      CHECK(gemm_case<float>(ta, tb, 130, 70, 50, 0, 1.5f, 0.5f, 2) == 0);  // two M tiles, K not a multiple of 16
      CHECK(gemm_case<half>(ta, tb, 31, 136, 16, 0, 1.f, 0.f, 3) == 0);
      CHECK(gemm_case<float>(ta, tb, 9, 11, 40, 3, 1.f, 1.f, 4) == 0);  // odd leading dimensions: element copies
      CHECK(gemm_case<float>(ta, tb, 1, 1, 1, 0, 2.f, 0.f, 5) == 0);
    }
  CHECK(gpu::run_stats().launches > launches);
  // K = 0: C = beta C; M or N = 0: nothing.
  CHECK(gemm_case<float>(false, false, 5, 7, 0, 0, 1.f, 0.5f, 6) == 0);
  CHECK(gemm_case<float>(false, false, 0, 7, 5, 0, 1.f, 0.5f, 7) == 0);
  CHECK(gemm_case<float>(false, false, 5, 0, 5, 0, 1.f, 0.5f, 8) == 0);
  // f16 overflow: 16 * 16 * 512 = 131072 >= 2 x 65504 in every element.
  CHECK(gemm_case<half>(false, true, 20, 24, 512, 0, 1.f, 0.f, 9, 16.0) == 0);
}
